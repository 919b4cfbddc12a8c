"""kubeslurm's fake GPU device plugin (see plugin.py)."""
