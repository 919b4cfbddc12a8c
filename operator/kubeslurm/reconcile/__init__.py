"""Make it so: apply what render/ says should exist, observe Slurm, report status."""
