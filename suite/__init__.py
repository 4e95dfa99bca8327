"""sparsebench suite."""
