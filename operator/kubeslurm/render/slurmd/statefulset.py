"""slurmd: the StatefulSet of one NodeSet; pod `<nodeset>-<ordinal>` is Slurm node of that name.

Pod layout:
- init `install-config`: copies only the key into /etc/slurm (slurm.conf comes from
  slurmctld: configless).
- `slurmd -D -Z -N <pod name> --conf-server <slurmctld...> --conf '<CPUs=... RealMemory=...>'`:
  a dynamic node that registers the pod's share of the machine, not the host's.
  It runs as root: it starts every job as the job's user. A short sh (SLURMD_START) execs it
  once slurmctld listens, and on a rerun of the container first marks the node DOWN.
- requests = limits = spec.resources (+ the GPUs under gpus.resourceName): Guaranteed
  QoS, so the CPU manager can pin whole cores and nothing evicts a node for memory.
  A bridged NodeSet (spec.bridged) requests only slurmd's overhead instead, on the nodes
  dedicated to the bridge (render/bridge/bridged_nodes.py): Slurm shares them out there.
- emptyDirs: /var/spool/slurmd (job scripts, per node by SlurmdSpoolDir=%n),
  /run/slurm (the fetched configs and the auth socket the client commands use) and
  /dev/shm in memory (the container default of 64Mi breaks NCCL and MPI).

No config-hash annotation: slurmd gets slurm.conf from slurmctld and reloads it on
`scontrol reconfigure`, while restarting its pod would kill the jobs in it. With the
default OnDelete strategy even an image change waits until the operator or an admin
deletes the pod.
"""

from collections.abc import Collection
from copy import deepcopy

from kubeslurm.api import NodeSet, SlurmCluster
from kubeslurm.api.node_health import SITE_CHECK_DIR, SITE_CHECK_FILE
from kubeslurm.render import slurm_pod
from kubeslurm.render.conf_server import WAIT_FOR_CONTROLLER
from kubeslurm.render.bridge.bridged_nodes import bridged_slurmd_requests, place_on_bridged_nodes
from kubeslurm.render.k8s import labels, naming, pods
from kubeslurm.render.k8s.secrets import AUTH_KEY_FILE
from kubeslurm.render.k8s.pod_template_merge import merge_pod_template
from kubeslurm.render.k8s.statefulset import stateful_set
from kubeslurm.render.slurmd.node import slurmd_conf_line
from kubeslurm.render.sssd_pods import add_sssd

SLURMD_CONTAINER = "slurmd"
SPOOL_DIR = "/var/spool/slurmd"
SPOOL_VOLUME = "spool"
SHM_VOLUME = "shm"
SITE_CHECK_VOLUME = "health-site-check"
AVOIDED_NODES_ANNOTATION = "kubeslurm.io/avoided-nodes"
# The preStop hook (at most 20 s) and slurmd's own shutdown fit well within it.
TERMINATION_GRACE_SECONDS = 120

# Marking the node DOWN as its pod goes makes slurmctld requeue its jobs now rather
# than after SlurmdTimeout; the pod comes back under the same name and
# ReturnToService=2 makes it usable again once it registers. ReturnToService lifts the
# DOWN only, never a DRAIN, so a drained node keeps its drain's reason through the DOWN
# (Slurm wants a reason with it): whoever drained it, a person, the health check or the
# operator replacing an unhealthy pod, still recognises the drain and lifts it, or not,
# after the new pod registers. `|| true`: a stopping pod must not hang on an unreachable
# slurmctld.
def down_keeping_drain(default_reason: str) -> str:
    """sh: this pod's Slurm node DOWN, with its drain's reason if it has one, else default_reason."""
    return (
        'reason=$(timeout 10 scontrol --oneliner show node "$POD_NAME" 2>/dev/null'
        " | sed -n 's/.* State=[^ ]*DRAIN[^ ]* .* Reason=\\(.*\\) \\[[^]]*\\]$/\\1/p'); "
        f'timeout 20 scontrol update NodeName="$POD_NAME" State=DOWN Reason="${{reason:-{default_reason}}}" || true'
    )


PRE_STOP = down_keeping_drain("kubeslurm: pod terminating")

# The reason the operator's own lost-slurmd verdicts start with (reconcile/lost_slurmd.py):
# it gives such a node back once nothing is lost any more, whoever marked it.
LOST_REASON = "slurmd pod lost"
# slurmd restarted in its pod (crashed, OOM-killed: the kubelet reruns the container) lost
# every job step with it: they ran in the container's PID namespace, which died with slurmd,
# its PID 1. Slurm cannot tell: the new slurmd registers with the host's boot time, and
# slurmctld then ends a batch job it no longer hears of as NODE_FAIL without requeueing it,
# even with --requeue (it requeues only when the node rebooted). So before slurmd starts
# again, the container marks its own node DOWN: slurmctld requeues (or ends, per --requeue)
# the node's jobs at once, before the new slurmd can register, and ReturnToService=2 takes
# the node back as soon as it does. The marker lives in the pod's /run/slurm emptyDir, which
# outlives a container and not the pod: its presence means an earlier slurmd ran in this pod.
RESTART_MARKER = f"{slurm_pod.SLURM_RUN}/kubeslurm-slurmd-ran"
RESTART_REASON = f"kubeslurm: {LOST_REASON}: slurmd restarted in pod $POD_NAME, its job steps died with it"
# With auth/slurm a client command gets its credential from the sack socket of the pod's
# slurmd (/run/slurm/sack.socket), which died with it. So the rerun container first starts
# sackd, the daemon that serves that socket on login nodes, on the configuration the old
# slurmd left in /run/slurm/conf (the key from /etc/slurm, not beside that file: SLURM_SACK_KEY),
# marks the node DOWN through it, and stops it before slurmd starts and takes the socket over.
SACK_SOCKET = f"{slurm_pod.SLURM_RUN}/sack.socket"
CREDENTIALS_WHILE_SLURMD_IS_DOWN = (
    f'rm -f {SACK_SOCKET}; SLURM_SACK_KEY={slurm_pod.SLURM_ETC}/{AUTH_KEY_FILE} sackd -D -f {slurm_pod.SLURM_RUN}/conf/slurm.conf & sack=$!; '
    f'tries=0; until [ -S {SACK_SOCKET} ] || [ $tries -ge 50 ]; do sleep 0.1; tries=$((tries + 1)); done'
)
# WAIT_FOR_CONTROLLER (render/conf_server.py): slurmd's first configless fetch would fail
# while slurmctld does not listen yet, and slurmd would then wait 10 s before it asks again.
SLURMD_START = (
    f'{WAIT_FOR_CONTROLLER}; '
    f'if [ -e {RESTART_MARKER} ]; then {CREDENTIALS_WHILE_SLURMD_IS_DOWN}; '
    f'{down_keeping_drain(RESTART_REASON)}; kill $sack 2>/dev/null; wait $sack; fi; '
    f': > {RESTART_MARKER}; exec slurmd "$@"'
)

# Peers by Slurm node name: MPI and NCCL exchange out-of-band addresses by host name (a job's
# `scontrol show hostnames`, MASTER_ADDR=h100-1), but a pod's DNS search path holds only its
# namespace's domains, so `h100-1` resolves nowhere except in h100-1 itself, while
# `h100-1.h100` (pod.headless Service) does. The kubelet writes the pod's full name into its
# /etc/hosts (`IP h100-0.h100.<ns>.svc.<cluster domain> h100-0`), so the pod's own
# Service domain, in whatever cluster domain, is what follows the first dot: it goes first in
# the search path of /etc/resolv.conf, which every container of the pod shares (written in
# place: it is a bind mount, and a rerun of this container must not add it twice). Nodes of
# the same NodeSet then resolve by their bare names; of another NodeSet as `<pod>.<nodeset>`.
PEER_NAMES_SCRIPT = (
    'set -- $(getent hosts "$(cat /proc/sys/kernel/hostname)")',
    'fqdn=${2:-}',
    'subdomain=${fqdn#*.}',
    'if [ "$fqdn" != "$subdomain" ] && ! grep -q "^search $subdomain " /etc/resolv.conf; then',
    '  sed "s/^search /search $subdomain /" /etc/resolv.conf > /tmp/resolv.conf && cat /tmp/resolv.conf > /etc/resolv.conf',
    'fi',
)


# `scontrol show slurmd` is an authenticated RPC to this pod's slurmd: it passes once
# slurmd has fetched its config (scontrol reads it from /run/slurm/conf) and answers
# RPCs, and fails when slurmd is gone or wedged. It does not ask slurmctld, so a
# controller restart does not turn every node unready (and unprotected by the
# running-jobs PodDisruptionBudget). A TCP check would pass for a wedged slurmd.
# No liveness probe: restarting the container kills its jobs; a hung slurmd is
# Slurm's to handle (the node goes NOT_RESPONDING, then DOWN, and jobs requeue).
def readiness_probe() -> dict:
    """A new dict each time: callers may change the templates they get."""
    return {
        "exec": {"command": ["scontrol", "show", "slurmd"]},
        "periodSeconds": 15,
        "timeoutSeconds": 10,
        "failureThreshold": 3,
    }


def slurmd_resources(node_set: NodeSet) -> dict[str, str]:
    resources = node_set.spec.resources
    quantities = {"cpu": str(resources.cpus), "memory": str(resources.memory)}
    gpus = node_set.spec.gpus
    if gpus is not None and gpus.count > 0:
        quantities[gpus.resource_name] = str(gpus.count)
    return quantities


def _slurmd_container(cluster: SlurmCluster, node_set: NodeSet) -> dict:
    quantities = slurmd_resources(node_set)
    security = {"runAsUser": 0}
    if cluster.spec.slurm.constrain_with_cgroups:
        # cgroup confinement needs a writable cgroup tree and device control.
        security["privileged"] = True
    elif cluster.spec.slurm.containers:
        # Rootless crun (oci.conf) creates a user namespace as the job's user; the runtime's
        # default seccomp profile refuses clone/unshare of namespaces without CAP_SYS_ADMIN.
        # No capability is added: the kernel lets any user create a user namespace.
        security["seccompProfile"] = {"type": "Unconfined"}
    return {
        "name": SLURMD_CONTAINER,
        **slurm_pod.image_fields(cluster),
        # sh execs slurmd: slurmd stays the container's PID 1, whose death ends every step.
        "command": ["/bin/sh", "-c", SLURMD_START, "slurmd"],
        "args": [
            "-D", "-Z",
            "-N", "$(POD_NAME)",
            "--conf-server", naming.conf_server(cluster.metadata.name, cluster.spec.controller.backup),
            "--conf", slurmd_conf_line(node_set),
        ],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "ports": [{"name": "slurmd", "containerPort": naming.SLURMD_PORT, "protocol": "TCP"}],
        "resources": {"requests": dict(quantities), "limits": dict(quantities)},
        "readinessProbe": readiness_probe(),
        # Until the first start, TCP: slurmd listens once it has its config and serves RPCs, and
        # the readiness check runs as soon as this passes. The kubelet connects itself, where an
        # exec check starts scontrol in the container every second while slurmd waits for
        # slurmctld: on a new cluster, CPU taken from the start chain it waits for.
        "startupProbe": pods.tcp_startup(naming.SLURMD_PORT),
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", PRE_STOP]}}},
        "securityContext": security,
        "volumeMounts": [
            slurm_pod.slurm_etc_mount(),
            {"name": SPOOL_VOLUME, "mountPath": SPOOL_DIR},
            {"name": slurm_pod.SLURM_RUN_VOLUME, "mountPath": slurm_pod.SLURM_RUN},
            {"name": SHM_VOLUME, "mountPath": "/dev/shm"},
            *slurm_pod.user_mounts(cluster, shared=True),
            *([{"name": SITE_CHECK_VOLUME, "mountPath": SITE_CHECK_DIR, "readOnly": True}] if _site_script(cluster) else []),
        ],
    }


def _site_script(cluster: SlurmCluster):
    check = cluster.spec.node_health.check
    return check.site_script if check.enabled else None


def _site_check_volumes(cluster: SlurmCluster) -> list[dict]:
    """The site's health check script, executable, where kubeslurm-health-check looks for it.
    Not optional: a pod whose ConfigMap is missing waits (and its NodeSet says why) rather
    than run without the check the site asked for."""
    script = _site_script(cluster)
    if script is None:
        return []
    return [{
        "name": SITE_CHECK_VOLUME,
        "configMap": {"name": script.config_map, "items": [{"key": script.key, "path": SITE_CHECK_FILE}], "defaultMode": 0o555},
    }]


def slurmd_pod_template(
    cluster: SlurmCluster, node_set: NodeSet, *, users: slurm_pod.UnixUsers, avoided_nodes: Collection[str] = (),
    sssd_hash: str | None = None,
) -> dict:
    """Our template with spec.podTemplate merged over it; the operator's labels always win.

    The template shares no mutable object with the NodeSet or this module (callers may
    change it), so it is built from copies rather than merged (a deep copy) when there
    is no podTemplate: that copy was most of the render time of a large cluster.
    """
    spec = node_set.spec
    pod_labels = labels.object_labels(cluster.metadata.name, labels.SLURMD, node_set.metadata.name)
    pod_spec = pods.pod_spec(
        init_containers=[slurm_pod.install_config_container(
            cluster, config_mode=None, users=users, prepare=PEER_NAMES_SCRIPT, shared=True)],
        containers=[_slurmd_container(cluster, node_set)],
        volumes=[
            pods.empty_dir(slurm_pod.SLURM_ETC_VOLUME),
            slurm_pod.key_volume(cluster),
            pods.empty_dir(SPOOL_VOLUME),
            pods.empty_dir(slurm_pod.SLURM_RUN_VOLUME),
            pods.empty_dir(SHM_VOLUME, medium="Memory"),
            *slurm_pod.user_volumes(cluster, shared=True),
            *_site_check_volumes(cluster),
        ],
        termination_grace_seconds=TERMINATION_GRACE_SECONDS,
    )
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod_spec["tolerations"] = deepcopy(spec.tolerations)
    if spec.affinity is not None:
        pod_spec["affinity"] = deepcopy(spec.affinity)
    template = add_sssd(cluster, pods.pod_template(pod_labels, {}, pod_spec), (SLURMD_CONTAINER,), sssd_hash)
    if spec.pod_template is not None:
        template = merge_pod_template(template, spec.pod_template.overlay())
    # The StatefulSet selects pods by these labels and the operator finds them by them.
    template.setdefault("metadata", {}).setdefault("labels", {}).update(pod_labels)
    if spec.bridged:
        # After the podTemplate: its nodeSelector or tolerations cannot move a bridged node's
        # slurmd off the dedicated nodes, nor its resources make the kubelet count Slurm's share.
        place_on_bridged_nodes(template["spec"], cluster.metadata.name)
        for container in template["spec"]["containers"]:
            if container["name"] == SLURMD_CONTAINER:
                container["resources"] = bridged_slurmd_requests(container["resources"])
    if node_set.spec.replace_unhealthy:
        # Always there with replaceUnhealthy, "" without avoided nodes: the apply step writes only
        # when a desired field differs from the live object, and the exclusion leaving the
        # template is no such field, but this value changing is.
        template["metadata"].setdefault("annotations", {})[AVOIDED_NODES_ANNOTATION] = ",".join(sorted(avoided_nodes))
    if avoided_nodes:
        _avoid_nodes(template["spec"], sorted(avoided_nodes))
    return template


def _avoid_nodes(pod_spec: dict, nodes: list[str]) -> None:
    """Keep new pods off these Kubernetes nodes (replaceUnhealthy): a term that excludes them by
    name is ANDed into every required node selector term (the terms are ORed), or is the only one."""
    exclusion = {"key": "metadata.name", "operator": "NotIn", "values": nodes}
    required = (pod_spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
                .setdefault("requiredDuringSchedulingIgnoredDuringExecution", {}))
    terms = required.setdefault("nodeSelectorTerms", [])
    if not terms:
        terms.append({})
    for term in terms:
        term["matchFields"] = [*term.get("matchFields", []), exclusion]


def slurmd_stateful_set(
    cluster: SlurmCluster, node_set: NodeSet, *, users: slurm_pod.UnixUsers, replicas: int | None = None,
    avoided_nodes: Collection[str] = (),
    sssd_hash: str | None = None,
) -> dict:
    """`replicas` overrides spec.replicas while the operator drains the nodes a scale-down removes;
    `users`: the cluster's account users and their uids (slurm_pod.unix_users); `sssd_hash`: see add_sssd."""
    name = node_set.metadata.name
    return stateful_set(
        name=naming.node_set_statefulset(name),
        owner=node_set,
        object_labels=labels.object_labels(cluster.metadata.name, labels.SLURMD, name),
        selector=labels.selector_labels(cluster.metadata.name, labels.SLURMD, name),
        service_name=naming.node_set_service(name),
        replicas=node_set.spec.replicas if replicas is None else replicas,
        template=slurmd_pod_template(cluster, node_set, users=users, avoided_nodes=avoided_nodes, sssd_hash=sssd_hash),
        update_strategy=node_set.spec.update_strategy.type,
    )
