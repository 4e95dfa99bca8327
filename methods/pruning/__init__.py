"""Pruning methods, one file each; the family contract is in :mod:`.base` (that of dst).
The registry discovers the modules."""
