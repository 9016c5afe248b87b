"""The scheduling core: cluster state, pod cache and decisions, plain data only (no I/O)."""
