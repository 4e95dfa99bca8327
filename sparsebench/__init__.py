"""sparsebench: a declarative benchmark and reproducibility suite for sparse neural networks.

The code lives in three top-level folders installed as subpackages:
``suite/`` -> ``sparsebench.suite``, ``methods/`` -> ``sparsebench.methods``,
``kernels/`` -> ``sparsebench.kernels``.
"""

__version__ = "0.1.0"
