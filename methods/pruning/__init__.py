"""sparsebench methods/pruning."""
