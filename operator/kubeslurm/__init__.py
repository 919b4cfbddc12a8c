"""kubeslurm: a Kubernetes operator that hosts real Slurm clusters."""

__version__ = "0.1.0"
