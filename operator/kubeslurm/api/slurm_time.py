"""Slurm's time-limit syntax (man sbatch, --time), validated before Slurm sees it."""

SLURM_DURATION_PATTERN = (
    r"^(UNLIMITED|INFINITE|[0-9]+|[0-9]+:[0-5]?[0-9]|[0-9]+:[0-5]?[0-9]:[0-5]?[0-9]"
    r"|[0-9]+-[0-9]+|[0-9]+-[0-9]+:[0-5]?[0-9]|[0-9]+-[0-9]+:[0-5]?[0-9]:[0-5]?[0-9])$"
)
SLURM_DURATION_HELP = (
    "a Slurm duration: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED"
)
