"""The method contract of the ``pruning`` family: the same as ``dst``'s (a pruning method is a
mask-editing Lightning callback that never regrows), defined once in ``methods/dst/base.py``."""

from sparsebench.methods.dst.base import MaskMethod, RunContext

__all__ = ["MaskMethod", "RunContext"]
