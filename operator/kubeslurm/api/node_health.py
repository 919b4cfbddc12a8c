"""spec.nodeHealth of a SlurmCluster: Slurm's own health check on every slurmd pod.

The check is Slurm's HealthCheckProgram: slurmd runs the image's
`kubeslurm-health-check` (images/slurm/health-check.sh) every `intervalSeconds`. It
compares the node's GPU device files with the GPUs the node registered (its gres), runs
`nvidia-smi` where the image has it, then the site's own script if one is named. Slurm
does nothing with a failing program's exit code: the check drains its own node with
its message (`Reason=kubeslurm: health check: ...`) and resumes it once it passes again.
"""

from typing import Literal

from pydantic import Field

from .base import KubeModel
from .names import DNS_SUBDOMAIN_PATTERN, LABEL_KEY_PATTERN, MAX_DNS_SUBDOMAIN, MAX_LABEL_KEY, SECRET_KEY_PATTERN

# Where the slurmd pod mounts spec.nodeHealth.check.siteScript and the image's check finds it.
SITE_CHECK_DIR = "/etc/kubeslurm-health"
SITE_CHECK_FILE = "site-check"
# What images/slurm/setup.sh installs.
HEALTH_CHECK_PROGRAM = "/usr/local/sbin/kubeslurm-health-check"
# Slurm kills the program after 60 s; a shorter interval than the check itself makes no sense.
MIN_INTERVAL = 10
MAX_INTERVAL = 86400


class SiteScript(KubeModel):
    config_map: str = Field(
        min_length=1, max_length=MAX_DNS_SUBDOMAIN, pattern=DNS_SUBDOMAIN_PATTERN,
        description=(
            "A ConfigMap in the SlurmCluster's namespace holding an executable script (it needs its #! line). "
            "It runs as root in every slurmd pod: whoever may edit the ConfigMap may run code there, so grant "
            "that as you grant editing the SlurmCluster."
        ),
    )
    key: str = Field(
        default="check", min_length=1, max_length=MAX_DNS_SUBDOMAIN, pattern=SECRET_KEY_PATTERN,
        description="The ConfigMap's key holding the script.",
    )


class HealthCheck(KubeModel):
    enabled: bool = Field(
        default=True,
        description="Run kubeslurm-health-check as Slurm's HealthCheckProgram on every slurmd pod.",
    )
    interval_seconds: int = Field(
        default=60, ge=MIN_INTERVAL, le=MAX_INTERVAL,
        description="HealthCheckInterval: seconds between runs (slurmd also runs it once as it starts).",
    )
    node_states: list[Literal["ANY", "IDLE", "ALLOC", "MIXED", "NONDRAINED_IDLE"]] = Field(
        default_factory=lambda: ["ANY"], min_length=1, max_length=4, json_schema_extra={"x-kubernetes-list-type": "set"},
        description=(
            "HealthCheckNodeState: the node states in which the check runs. A check that does not run on "
            "drained nodes (NONDRAINED_IDLE, or ALLOC/MIXED alone) cannot resume a node once it is healthy again."
        ),
    )
    cycle: bool = Field(
        default=False,
        description="HealthCheckNodeState CYCLE: spread the runs over the interval instead of all nodes at once.",
    )
    site_script: SiteScript | None = Field(
        default=None,
        description=(
            "Your own check, run after kubeslurm's when those pass: exit status 0 is healthy; otherwise the node "
            "is drained with the first line it printed. It has 25 seconds."
        ),
    )


class NodeCondition(KubeModel):
    type: str = Field(
        min_length=1, max_length=MAX_LABEL_KEY, pattern=LABEL_KEY_PATTERN,
        description="A Kubernetes node condition type, e.g. GPUProblem (set by node-problem-detector or a GPU health tool).",
    )
    status: Literal["True", "False", "Unknown"] = Field(default="True", description="The status that means trouble.")


class NodeHealthSpec(KubeModel):
    check: HealthCheck = Field(default_factory=HealthCheck, description="Slurm's HealthCheckProgram on every slurmd pod.")
    drain_on_node_conditions: list[NodeCondition] = Field(
        default_factory=list, max_length=32,
        description=(
            "Kubernetes node conditions that drain the Slurm nodes on that Kubernetes node (Reason=kubeslurm: "
            "kubernetes node N has TYPE=STATUS: message); they are resumed when the condition clears. A NotReady or "
            "cordoned node drains them always."
        ),
    )
