"""sparsebench methods/dst."""
