"""What kubeslurm asks of Slurm for a Kubernetes pod that Slurm schedules (spec.bridge)."""
