"""Reading slurm.conf and slurmdbd.conf: which host is the controller, and the values
of KEY=VALUE lines."""

from __future__ import annotations

import re

from testbed.native_slurm.hosts import NativeSlurmError


def conf_value(text: str, key: str) -> str | None:
    """First value of KEY=VALUE in a slurm-style config (case-insensitive key)."""
    m = re.search(rf"^\s*{key}\s*=\s*(\S+)", text, re.M | re.I)
    return m.group(1) if m else None


def slurmctld_host(slurm_conf: str) -> str:
    v = conf_value(slurm_conf, "SlurmctldHost") or conf_value(slurm_conf, "ControlMachine")
    if not v:
        raise NativeSlurmError("slurm.conf has no SlurmctldHost= line")
    return v.split("(", 1)[0]

