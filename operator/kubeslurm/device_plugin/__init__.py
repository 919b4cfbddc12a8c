"""The kubeslurm device plugin: `kubeslurm.io/gpu`, handed out only as Slurm allocated it."""
