"""slurm.conf: the one file every Slurm daemon reads (slurmd gets it from slurmctld)."""

import re

from kubeslurm.api import NodeSet, SlurmCluster
from kubeslurm.api.bridge import BRIDGE_EPILOG
from kubeslurm.api.node_health import HEALTH_CHECK_PROGRAM
from kubeslurm.render.config.templates import render_template
from kubeslurm.render.errors import RenderError
from kubeslurm.render.k8s import naming

# Keys the operator derives from the spec; a user setting them would break the
# cluster or fight the operator. Each maps to what to change instead.
OWNED_KEYS: dict[str, str] = {
    "ClusterName": "metadata.name",
    "SlurmctldHost": "spec.controller.backup",
    "ControlMachine": "spec.controller.backup",
    "ControlAddr": "spec.controller.backup",
    "BackupController": "spec.controller.backup",
    "BackupAddr": "spec.controller.backup",
    "SlurmctldParameters": "nothing: configless operation needs enable_configless",
    "AuthType": "nothing: the cluster authenticates with auth/slurm and the key Secret",
    "AuthAltTypes": "nothing: the cluster authenticates with auth/slurm and the key Secret",
    "CredType": "nothing: the cluster authenticates with auth/slurm and the key Secret",
    "SlurmUser": "nothing: the images run Slurm as user slurm",
    "SlurmdUser": "nothing: slurmd runs as root to start jobs as their users",
    "SlurmctldPort": "nothing: the Services expose port 6817",
    "SlurmdPort": "nothing: the pods expose port 6818",
    "StateSaveLocation": "spec.controller.persistence",
    "SlurmdSpoolDir": "nothing: each pod has its own spool directory",
    "SlurmctldPidFile": "nothing",
    "SlurmdPidFile": "nothing",
    "SlurmctldLogFile": "nothing: logs go to the container's stderr (kubectl logs)",
    "SlurmdLogFile": "nothing: logs go to the container's stderr (kubectl logs)",
    "TreeWidth": "nothing: dynamic nodes need TreeWidth=65533",
    "MaxNodeCount": "spec.maxReplicas of the NodeSets",
    "SlurmdParameters": "nothing: nodes register the pod's resources (config_overrides)",
    "ProctrackType": "spec.slurm.constrainWithCgroups",
    "TaskPlugin": "spec.slurm.constrainWithCgroups",
    "SelectType": "nothing: GPUs need select/cons_tres",
    "GresTypes": "spec.gpus of the NodeSets",
    "SchedulerType": "spec.scheduling.backfill",
    "PriorityType": "spec.scheduling.fairShare.enabled",
    "PriorityDecayHalfLife": "spec.scheduling.fairShare.decayHalfLife",
    "PreemptType": "spec.scheduling.preemption",
    "AccountingStorageType": "spec.accounting.enabled",
    "AccountingStorageHost": "spec.accounting",
    "AccountingStoragePort": "spec.accounting",
    "TopologyPlugin": "spec.topology.plugin",
    "NodeName": "the NodeSets (nodes register themselves)",
    "NodeSet": "the NodeSets",
    "PartitionName": "spec.partitions",
    "DownNodes": "the NodeSets",
    "Include": "nothing: one rendered file is the whole configuration",
    "HealthCheckProgram": "spec.nodeHealth.check (siteScript runs your own check)",
    "HealthCheckInterval": "spec.nodeHealth.check.intervalSeconds",
    "HealthCheckNodeState": "spec.nodeHealth.check.nodeStates and cycle",
}

# Defaults that suit most clusters; spec.slurmConf may replace any of them.
DEFAULT_TUNABLES: dict[str, str] = {
    "SlurmctldDebug": "info",
    "SlurmdDebug": "info",
    "ReturnToService": "2",
    "JobRequeue": "1",
    # A requeued job waits cred_expire seconds before it may start again (so that no
    # step of its previous run can still launch with an old credential); Slurm's
    # default of 120 s doubles the outage of every job on a lost node. 60 s still
    # covers a step launch with prolog and a directory lookup of the user.
    "AuthInfo": "cred_expire=60",
    # Jobs never run as root: a researcher who became root in a login pod still cannot
    # take every node with it. Sites that need root jobs set DisableRootJobs=NO in spec.slurmConf.
    "DisableRootJobs": "YES",
    # The image carries Open MPI and PMIx: `srun prog` starts an MPI program without --mpi.
    # Jobs that are not MPI pay nothing for it beyond a PMIx server per step.
    "MpiDefault": "pmix",
    # Containers have no mail transfer agent; Slurm refuses a MailProg that does not exist.
    "MailProg": "/bin/true",
    "JobAcctGatherType": "jobacct_gather/linux",
    "JobAcctGatherFrequency": "30",
    "SelectTypeParameters": "CR_Core_Memory",
}
FAIR_SHARE_TUNABLES = {
    "PriorityWeightFairshare": "10000",
    "PriorityWeightAge": "1000",
    "PriorityWeightPartition": "1000",
    "PriorityWeightQOS": "1000",
    "PriorityMaxAge": "7-0",
}
ACCOUNTING_TUNABLES = {
    "AccountingStorageTRES": "gres/gpu",
    "AccountingStorageEnforce": "associations,limits,qos",
}
# Only with a backup slurmctld. SlurmctldTimeout is how long the backup waits for the
# primary to answer before it takes over (Slurm 24.11 backup.c: it pings every
# SlurmctldTimeout/3 and takes over once neither a ping has been answered nor the heartbeat
# file, written by the primary every SlurmctldTimeout/4 on the shared StateSaveLocation, has
# changed for longer than SlurmctldTimeout: 30-44 s here). Slurm's 120 s default keeps
# every submission waiting up to 3 minutes when the primary's Kubernetes node is lost, and a
# StatefulSet does not replace a pod on a lost node until the node is deleted. 30 s, not
# less: a slurmctld pod that is merely replaced (config roll, eviction) is usually back
# sooner and causes no takeover. Clients retry a standby backup for 1.5 x SlurmctldTimeout
# (45 s), so a command sent in the first seconds after the primary died can still give up
# before the takeover; later ones wait for it and succeed.
BACKUP_TUNABLES = {"SlurmctldTimeout": "30"}
PREEMPT_TYPES = {"off": "preempt/none", "qos": "preempt/qos", "partition": "preempt/partition_prio"}

_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
_OWNED_LOWER = {key.lower(): key for key in OWNED_KEYS}


def _object_name(cluster: SlurmCluster) -> str:
    return f"SlurmCluster {cluster.metadata.namespace}/{cluster.metadata.name}"


def _user_overrides(cluster: SlurmCluster, tunables: dict[str, str]) -> dict[str, str]:
    """Merge spec.slurmConf over our defaults, matching keys the way Slurm does (case-insensitively)."""
    merged = dict(tunables)
    by_lower = {key.lower(): key for key in merged}
    for key, value in cluster.spec.slurm_conf.items():
        field = f"spec.slurmConf.{key}"
        if not _KEY.match(key):
            raise RenderError(_object_name(cluster), field, "a slurm.conf key is letters and digits only, e.g. MaxJobCount")
        owned = _OWNED_LOWER.get(key.lower())
        if owned:
            raise RenderError(
                _object_name(cluster),
                field,
                f"{owned} is set by the operator; change {OWNED_KEYS[owned]} instead, and remove this key",
            )
        if key.lower() in {k.lower() for k in bridge_settings(cluster)}:
            raise RenderError(
                _object_name(cluster), field,
                f"{key} is set by the operator while spec.bridge is enabled (it holds a bridged pod's GPUs "
                "until the pod is gone); remove this key or turn the bridge off",
            )
        if "\n" in value or "\r" in value or not value.strip():
            raise RenderError(_object_name(cluster), field, "the value must be one non-empty line")
        merged.pop(by_lower.get(key.lower(), key), None)
        merged[key] = value.strip()
    return merged


def _partitions(cluster: SlurmCluster, node_sets: dict[str, NodeSet]) -> list[dict]:
    partitions = []
    for index, partition in enumerate(cluster.spec.partitions):
        members = []
        for name in partition.node_sets:
            if name not in node_sets:
                known = ", ".join(sorted(node_sets)) or "none"
                raise RenderError(
                    _object_name(cluster),
                    f"spec.partitions[{index}].nodeSets",
                    f"NodeSet {name!r} does not exist in namespace {cluster.metadata.namespace} "
                    f"for cluster {cluster.metadata.name} (NodeSets: {known}); create it or remove it from the partition",
                )
            members.append(node_sets[name])
        # Without DefMemPerCPU a job that gives no --mem takes a whole node's memory,
        # so a node would run one job at a time.
        def_mem_per_cpu = min(
            slurmd_real_memory(ns) // ns.spec.resources.cpus for ns in members
        )
        partitions.append(
            {
                "name": partition.name,
                "nodes": ",".join(partition.node_sets),
                "default": partition.default,
                "max_time": partition.max_time,
                "default_time": partition.default_time,
                "priority_tier": partition.priority_tier,
                "def_mem_per_cpu": max(def_mem_per_cpu, 1),
            }
        )
    return partitions


def slurmd_real_memory(node_set: NodeSet) -> int:
    """RealMemory in MiB: the pod's memory less 5% kept for slurmd and the container's own processes."""
    return node_set.spec.resources.memory_mib * 95 // 100


def fair_share_active(cluster: SlurmCluster) -> bool:
    return cluster.spec.scheduling.fair_share.enabled and cluster.spec.accounting.enabled


def health_check_settings(cluster: SlurmCluster) -> dict[str, str]:
    """HealthCheckProgram and its schedule; none when spec.nodeHealth.check is off."""
    check = cluster.spec.node_health.check
    if not check.enabled:
        return {}
    states = [*check.node_states, *(["CYCLE"] if check.cycle else [])]
    return {
        "HealthCheckProgram": HEALTH_CHECK_PROGRAM,
        "HealthCheckInterval": str(check.interval_seconds),
        "HealthCheckNodeState": ",".join(states),
    }


def bridge_settings(cluster: SlurmCluster) -> dict[str, str]:
    """The Epilog that holds a placeholder job's resources until its pod is gone; none when
    spec.bridge is off (a site's own Epilog in spec.slurmConf then stays possible)."""
    return {"Epilog": BRIDGE_EPILOG} if cluster.spec.bridge.enabled else {}


def render_slurm_conf(cluster: SlurmCluster, node_sets: list[NodeSet]) -> str:
    spec = cluster.spec
    by_name = {ns.metadata.name: ns for ns in node_sets}
    tunables = dict(DEFAULT_TUNABLES)
    if fair_share_active(cluster):
        tunables.update(FAIR_SHARE_TUNABLES)
    if spec.scheduling.preemption != "off":
        tunables["PreemptMode"] = "REQUEUE"
    else:
        tunables["PreemptMode"] = "OFF"
    if spec.controller.backup:
        tunables.update(BACKUP_TUNABLES)
    if spec.accounting.enabled:
        tunables.update(ACCOUNTING_TUNABLES)
        # sacct reports GPU-hours per GPU type only for types listed here.
        gpu_types = sorted({ns.spec.gpus.type for ns in node_sets if ns.spec.gpus and ns.spec.gpus.type})
        tunables["AccountingStorageTRES"] = ",".join(["gres/gpu", *(f"gres/gpu:{t}" for t in gpu_types)])
    constrain = spec.slurm.constrain_with_cgroups
    return render_template(
        "slurm.conf.j2",
        namespace=cluster.metadata.namespace,
        cluster_name=cluster.metadata.name,
        controller_hosts=naming.controller_hosts(cluster.metadata.name, spec.controller.backup),
        ports={"slurmctld": naming.SLURMCTLD_PORT, "slurmd": naming.SLURMD_PORT, "slurmdbd": naming.SLURMDBD_PORT},
        max_node_count=max(1, sum(ns.spec.max_replicas for ns in node_sets)),
        proctrack="proctrack/cgroup" if constrain else "proctrack/linuxproc",
        task_plugin="task/cgroup,task/affinity" if constrain else "task/none",
        scheduler="sched/backfill" if spec.scheduling.backfill else "sched/builtin",
        priority_type="priority/multifactor" if fair_share_active(cluster) else "priority/basic",
        decay_half_life=spec.scheduling.fair_share.decay_half_life if fair_share_active(cluster) else None,
        preempt_type=PREEMPT_TYPES[spec.scheduling.preemption],
        accounting_host=naming.accounting_address(cluster.metadata.name) if spec.accounting.enabled else None,
        topology_plugin=None if spec.topology is None else f"topology/{spec.topology.plugin}",
        health_check=health_check_settings(cluster),
        bridge=bridge_settings(cluster),
        tunables=_user_overrides(cluster, tunables),
        node_sets=[
            {"name": ns.metadata.name, "max_replicas": ns.spec.max_replicas}
            for ns in sorted(node_sets, key=lambda ns: ns.metadata.name)
        ],
        partitions=_partitions(cluster, by_name),
    )
