"""The built-in pillars, one folder each (see docs/architecture.md): ``classification``
(dst and pruning), ``hessian`` and ``kernels``."""
