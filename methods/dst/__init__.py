"""Dynamic sparse training methods, one file each; the family contract is in :mod:`.base`.
The registry discovers the modules."""
