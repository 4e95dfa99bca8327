"""Our methods against published peers, timed in one process (see docs/performance.md)."""
