"""sparsebench methods."""
