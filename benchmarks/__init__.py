"""Benchmarks of the suite's own code against published peers, run from a checkout (not part
of the installed package): ``python -m benchmarks.peers`` (``make bench-peers``)."""
