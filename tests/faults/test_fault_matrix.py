"""The fault matrix (issue 17): each test injects one fault a site will meet while a stream of jobs
runs, and ends when every job the test submitted is in a final state in sacct: none lost. The
cheap faults first. Each prints how long recovery took (measured, for the README's "Failure
behaviour" table) and the ledger's one-line summary.

Numbers refer to the issue's matrix: 6 a slurmd container killed, 3 MariaDB and slurmdbd pods
deleted, 8 the controller's state volume full, 1 the operator killed mid-scale-down and
mid-reconcile, 2 the operator upgraded with helm, 4 the API server and etcd stopped, 5 slurmctld's
node lost, 7 a slurmd pod's node lost while the slurmctld pod is deleted.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time

import pytest

from testbed import deployment
from testbed.job_ledger import JobStream
from testbed.waiting import wait_for
from tests.faults.conftest import (CLUSTER, CONTROLLER, LOGIN, NAMESPACE, SLURM_NODES, STATE_CLAIM, operator_pod,
                                  pod_ready)
from tests.faults.injectors import kill_operator

pytestmark = pytest.mark.faults

# The stream: short jobs on whichever node is free (the GPU node takes CPU jobs too).
STREAM = ["-p gpu,cpu --wrap 'sleep 3'", "-p cpu,gpu --wrap 'sleep 5'"]


def took(what: str, seconds: float) -> None:
    print(f"\n{what}: {seconds:.0f} s", flush=True)


# -- before any fault: slurmdbd's first start on the fresh database of this run --------------


def test_slurmdbd_first_start_on_a_fresh_database(bed):
    """The SlurmCluster of this run was made in a fresh namespace, so MariaDB initialised an empty
    claim and slurmdbd met that database first: it started once (no restart by its startup probe)
    and sacct answers. slurmdbd 24.11 dies in _check_mysql_concat_is_sane (5027) only when it
    has to create its database itself (see images/mariadb/entrypoint.sh); the entrypoint makes it first."""
    pod = bed.pod(f"{CLUSTER}-accounting-0")
    assert bed.restarts(pod["metadata"]["name"], "slurmdbd") == 0, deployment.pods_summary(bed.kube, NAMESPACE)
    log = bed.kube.run("logs", "-n", NAMESPACE, pod["metadata"]["name"], "-c", "slurmdbd").stdout
    assert "fatal" not in log and "slurmdbd version" in log, log[-2000:]
    assert bed.sh(f"sacct -a -n -X -o JobID -S {bed.ledger.started}") is not None


# -- 6. a slurmd container killed, not its pod -----------------------------------------------


def test_slurmd_container_killed(bed, local_cluster):
    """slurmd (the container's main process) SIGKILLed on two nodes at once, as a crash or the OOM
    killer would: the kubelet restarts the container in the same pod; the job steps died with the
    container, so Slurm ends each running job as it says: the --requeue job runs again and
    completes; the --no-requeue job is not run again."""
    requeue = bed.sbatch("-p cpu -w cpu-0 --requeue --wrap 'sleep 20'")
    # It ends as Slurm says, not COMPLETED: checked on its own below.
    once = bed.sbatch("-p cpu -w cpu-1 --no-requeue --wrap 'sleep 20'", must_complete=False)
    pods = {name: bed.pod(name) for name in ("cpu-0", "cpu-1")}
    restarts = {name: bed.restarts(name, "slurmd") for name in pods}
    with JobStream(bed.ledger, STREAM, every=6, submit=bed.sbatch):
        bed.wait_running(requeue)
        bed.wait_running(once)
        t0 = time.monotonic()
        for name, pod in pods.items():
            container = next(c for c in pod["status"]["containerStatuses"] if c["name"] == "slurmd")
            local_cluster.kill_container(container["containerID"])
        wait_for(lambda: all(bed.restarts(n, "slurmd") > restarts[n] and pod_ready(bed.pod(n)) for n in pods),
                 180, "slurmd restarted in place and Ready", interval=2)
        took("slurmd container killed -> restarted and Ready", time.monotonic() - t0)
        bed.wait_nodes_usable(set(pods), 180)
        took("slurmd container killed -> node usable in sinfo", time.monotonic() - t0)
        assert {n: bed.pod(n)["metadata"]["uid"] for n in pods} == {n: p["metadata"]["uid"] for n, p in pods.items()}
        wait_for(lambda: bed.job_state(requeue) == "COMPLETED", 420, f"the --requeue job {requeue} completed", interval=3)
        took("slurmd container killed -> the requeued job completed", time.monotonic() - t0)
    runs = bed.job_runs(requeue)
    assert len(runs) >= 2 and runs[-1] == "COMPLETED", runs
    # The requeue hold (BeginTime = requeue + cred_expire + 1 s): the gap between the runs.
    print("\nruns of the --requeue job (state, start, end):\n"
          + bed.sh(f"sacct -n -X -P -D -j {requeue} -o State,Start,End"), flush=True)
    wait_for(lambda: bed.job_runs(once) and bed.job_runs(once)[-1] not in ("RUNNING", "PENDING", "REQUEUED"),
             120, f"the --no-requeue job {once} ended")
    once_runs = bed.job_runs(once)
    assert len(once_runs) == 1 and once_runs[0] in ("NODE_FAIL", "FAILED", "CANCELLED"), once_runs
    print(f"\nthe --no-requeue job ended {once_runs[0]}; the --requeue one ran {len(runs)} times", flush=True)
    bed.settle_and_report("slurmd container killed")


# -- 3. the accounting database and slurmdbd replaced while jobs start and finish -----------


@pytest.mark.parametrize("pod", [f"{CLUSTER}-mariadb-0", f"{CLUSTER}-accounting-0"],
                         ids=["mariadb_pod_deleted", "slurmdbd_pod_deleted"])
def test_accounting_pod_deleted(bed, pod):
    """The MariaDB pod, or slurmdbd's, deleted while jobs start and finish: slurmctld queues the
    accounting records meanwhile and sends them when slurmdbd is back; sacct has every job."""
    with JobStream(bed.ledger, STREAM, every=4, submit=bed.sbatch) as stream:
        time.sleep(15)
        old = bed.pod(pod)["metadata"]["uid"]
        t0 = time.monotonic()
        bed.kube.run("delete", "pod", pod, "-n", NAMESPACE, "--wait=false")
        took(f"{pod} deleted -> a new one Ready", bed.wait_ready(pod, 600, old_uid=old))

        def sacct_answers():
            try:
                return bed.sh(f"sacct -a -n -X -o JobID -S {bed.ledger.started}", timeout=30) is not None
            except AssertionError:
                return False
        wait_for(sacct_answers, 300, "sacct answering", interval=2)
        took(f"{pod} deleted -> sacct answers", time.monotonic() - t0)
        time.sleep(20)  # jobs that start and end with the new pod, too
    assert len(bed.ledger.submitted) >= 10, f"the stream submitted {len(bed.ledger.submitted)}, refused {stream.refused}"
    bed.settle_and_report(f"{pod} deleted")


# -- 8. the controller's state volume full -----------------------------------------------------


def condition(bed, kind: str) -> dict:
    obj = bed.kube.get("slurmcluster", CLUSTER, "-n", NAMESPACE) or {}
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), {})


def events(bed, reason: str) -> list[str]:
    out = bed.kube.run("get", "events", "-n", NAMESPACE, "--field-selector",
                       f"involvedObject.kind=SlurmCluster,reason={reason}", "-o", "json").stdout
    return [f"{e['type']} {e['message']}" for e in json.loads(out)["items"]]


def test_controller_state_volume_full(bed, local_cluster):
    """slurmctld's state volume (the fault tier's 64 MiB tmpfs, see conftest) filled to the last
    block by a file written in the controller pod while jobs are submitted: the operator reports
    Degraded ControllerStateVolumeFull naming the claim and the fix, with a Warning Event; Slurm
    refuses new jobs meanwhile (it cannot write their scripts) and the jobs it had go on. The
    file removed, the condition clears with a Normal Event, sbatch works, and no job is lost."""
    from kubeslurm.render.controller.statefulset import STATE_SAVE_LOCATION

    filler = f"{STATE_SAVE_LOCATION}/kubeslurm-faults-filler"

    def in_controller(*argv: str, check: bool = True):
        return bed.kube.exec(NAMESPACE, CONTROLLER, "slurmctld", list(argv), check=check, timeout=120)
    queued = [bed.sbatch(f"-p {p} --wrap 'sleep 25'") for p in ("cpu", "cpu", "gpu", "cpu", "gpu")]
    with JobStream(bed.ledger, STREAM, every=5, submit=bed.sbatch) as stream:
        time.sleep(10)
        t0 = time.monotonic()
        # Bounded by the volume: dd stops at ENOSPC, at most 64 MiB.
        fill = in_controller("dd", "if=/dev/zero", f"of={filler}", "bs=1M", "count=64", check=False)
        assert "No space left on device" in fill.stderr, fill.stderr
        print("\n" + in_controller("df", "-h", STATE_SAVE_LOCATION).stdout, flush=True)
        wait_for(lambda: condition(bed, "Degraded").get("reason") == "ControllerStateVolumeFull", 120,
                 "Degraded ControllerStateVolumeFull", interval=2, details=lambda: str(condition(bed, "Degraded")))
        took("state volume filled -> Degraded ControllerStateVolumeFull", time.monotonic() - t0)
        message = condition(bed, "Degraded")["message"]
        print(f"Degraded: {message}", flush=True)
        assert f"PersistentVolumeClaim {NAMESPACE}/{STATE_CLAIM}" in message and "spec.controller.persistence.size" in message
        wait_for(lambda: any(e.startswith("Warning ") for e in events(bed, "ControllerStateVolumeFull")), 60,
                 "a Warning Event ControllerStateVolumeFull")
        tried = bed.kube.exec(NAMESPACE, LOGIN, "login", ["runuser", "-l", "alice", "-c",
                              "sbatch --parsable -o /dev/null -p cpu --wrap true"], check=False, timeout=60)
        if tried.returncode == 0:
            bed.ledger.record(tried.stdout.strip().splitlines()[-1].split(";")[0])
        print(f"sbatch while full: exit {tried.returncode} {(tried.stdout + tried.stderr).strip()}; "
              f"the stream's submissions refused so far: {stream.refused}", flush=True)
        log = bed.kube.run("logs", "-n", NAMESPACE, CONTROLLER, "-c", "slurmctld", "--since=2m").stdout
        said = sorted({line.split("error: ", 1)[-1][:120] for line in log.splitlines() if "No space left" in line})
        print("slurmctld said:\n  " + "\n  ".join(said or ["(nothing about space)"]), flush=True)
        time.sleep(20)  # queued jobs run and end while the volume is full
        t1 = time.monotonic()
        in_controller("rm", "-f", filler)
        wait_for(lambda: condition(bed, "Degraded").get("status") == "False", 120, "Degraded cleared", interval=2,
                 details=lambda: str(condition(bed, "Degraded")))
        took("space freed -> Degraded cleared", time.monotonic() - t1)
        assert any(e.startswith("Normal ") for e in events(bed, "ControllerStateVolumeRecovered"))
        before = len(bed.ledger.submitted)
        wait_for(lambda: len(bed.ledger.submitted) > before, 60, "sbatch accepted again", interval=2)
        took("space freed -> sbatch accepted again", time.monotonic() - t1)
        time.sleep(15)
    assert all(j in bed.ledger.submitted for j in queued)
    print(f"stream: {len(bed.ledger.submitted)} jobs accepted, {stream.refused} submissions refused", flush=True)
    bed.settle_and_report("controller state volume full")


# -- 1. the operator killed mid-scale-down and mid-reconcile ---------------------------------


def wait_new_operator(bed, old_uid: str, timeout: float = 180) -> float:
    t0 = time.monotonic()
    wait_for(lambda: (p := operator_pod(bed.kube)) and p["metadata"]["uid"] != old_uid and pod_ready(p),
             timeout, "a new operator pod Ready", interval=2, ignore=(AssertionError,))
    return time.monotonic() - t0


def scale_cpu(bed, replicas: int) -> None:
    bed.kube.run("scale", "nodeset", "cpu", "-n", NAMESPACE, f"--replicas={replicas}")


def test_operator_killed_mid_scale_down(bed):
    """cpu scaled from 2 to 1 while cpu-1 runs a job; the operator is killed after it drained cpu-1
    and before it lowered the StatefulSet's replicas. The new operator finishes the protocol: the
    job completes, then cpu-1 goes; nothing else is drained. (cpu is scaled back to 2 at the end:
    each test starts with every node.)"""
    job = bed.sbatch("-p cpu -w cpu-1 --wrap 'sleep 45'")
    try:
        with JobStream(bed.ledger, ["-p gpu --wrap 'sleep 3'"], every=6, submit=bed.sbatch):
            bed.wait_running(job)
            scale_cpu(bed, 1)
            wait_for(lambda: bed.node_states().get("cpu-1", "").startswith("drng"), 90, "cpu-1 draining", interval=1)
            sts = bed.kube.get("statefulset", "cpu", "-n", NAMESPACE)
            assert sts["spec"]["replicas"] == 2, "replicas were lowered before the job ended"
            old = kill_operator(bed)
            took("operator killed mid-scale-down -> a new one Ready", wait_new_operator(bed, old))
            assert bed.job_state(job) == "RUNNING"
            states = bed.node_states()
            assert not any("drain" in s or s.startswith("drng") for n, s in states.items() if n != "cpu-1"), states
            wait_for(lambda: bed.job_state(job) == "COMPLETED", 120, f"job {job} completed", interval=2)
            wait_for(lambda: bed.pod("cpu-1") is None, 240, "pod cpu-1 gone", interval=2)
            wait_for(lambda: "cpu-1" not in bed.node_states(), 120, "cpu-1 gone from sinfo", interval=2)
        states = bed.node_states()
        assert set(states) == {"cpu-0", "h100-0"} and all(s.startswith(("idle", "alloc", "mix")) for s in states.values()), states
        bed.settle_and_report("operator killed mid-scale-down")
    finally:
        scale_cpu(bed, 2)
        bed.wait_nodes_usable(SLURM_NODES, 300)


def test_operator_killed_mid_reconcile(bed):
    """cpu scaled down to 1 (cpu-1 idle, so it goes at once), then back up to 2 and the operator
    killed at once, within the reconcile that acts on it: the new operator finishes it (cpu-1
    back and usable); no job lost, nothing drained."""
    try:
        with JobStream(bed.ledger, STREAM, every=6, submit=bed.sbatch):
            scale_cpu(bed, 1)
            wait_for(lambda: "cpu-1" not in bed.node_states() and bed.pod("cpu-1") is None, 240,
                     "cpu-1 gone from sinfo and its pod deleted", interval=2)
            scale_cpu(bed, 2)
            t0 = time.monotonic()
            old = kill_operator(bed)
            took("operator killed mid-reconcile -> a new one Ready", wait_new_operator(bed, old))
            bed.wait_nodes_usable(SLURM_NODES, 300)
            took("operator killed mid-reconcile -> cpu-1 usable", time.monotonic() - t0)
            states = bed.node_states()
            assert not any("drain" in s or s.startswith("drng") for s in states.values()), states
            time.sleep(10)
        bed.settle_and_report("operator killed mid-reconcile")
    finally:
        scale_cpu(bed, 2)


# -- 4. the API server and etcd stopped for a minute ------------------------------------------


def test_api_server_and_etcd_stopped_for_a_minute(bed, local_cluster):
    """etcd and kube-apiserver stopped for 60 s and started again. Slurm does not need Kubernetes
    to run jobs: the jobs queued before run and complete meanwhile (their start and end times fall
    in the outage). The operator resumes (its lists failed, then came back): it deletes nothing and
    the SlurmCluster is Ready again."""
    from testbed.control_plane.audit import AuditLog
    from testbed.local_cluster.layout import CONTROL_PLANE_DIR

    # Jobs that start in the outage whatever the machine's speed: nine wait on a held one
    # (afterok), released just before the API server stops, which runs 20 s.
    first = bed.sbatch("-H -p cpu --wrap 'sleep 20'")
    jobs = [first] + [bed.sbatch(f"-p {'gpu' if i % 3 == 0 else 'cpu'} -d afterok:{first} --wrap 'sleep 8'")
                      for i in range(8)]
    audit = AuditLog(CONTROL_PLANE_DIR / "logs" / "audit.log")
    operator_user = f"system:serviceaccount:{deployment.OPERATOR_NAMESPACE}:{deployment.OPERATOR_RELEASE}"
    # The operator's user name is right: it has written before (a check of none would pass on a typo).
    assert audit.writes(0, operator_user), f"no write by {operator_user} in the audit log"
    mark = audit.mark()
    controller_uid = bed.pod(CONTROLLER)["metadata"]["uid"]
    bed.sh(f"scontrol release {first}")
    stopped_at = dt.datetime.now(dt.timezone.utc)
    with local_cluster.api_server_stopped():
        time.sleep(60)
    started_at = dt.datetime.now(dt.timezone.utc)
    t0 = time.monotonic()
    bed.settle_and_report("API server and etcd stopped for a minute")
    rows = [line.split("|") for line in bed.sh(f"sacct -n -X -P -j {','.join(jobs)} -o JobID,Start,End").split()]
    during = [job for job, start, end in rows
              if stopped_at.replace(tzinfo=None) <= dt.datetime.fromisoformat(start) <= started_at.replace(tzinfo=None)]
    print(f"\njobs that started while the API server was down: {len(during)} of {len(jobs)}", flush=True)
    assert during, rows
    deployment.wait_usable(bed.kube, NAMESPACE, CLUSTER, 300, report=lambda line: None)
    took("API server back -> SlurmCluster usable", time.monotonic() - t0)
    time.sleep(30)  # a reconcile or two after the relist
    deletes = [f"{e['objectRef'].get('resource')}/{e['objectRef'].get('name')}"
               for e in audit.writes(mark, operator_user, verbs=("delete", "deletecollection"))]
    assert deletes == [], deletes
    # The same controller pod, Ready again: after a minute without heartbeats the node lifecycle
    # controller marks every node NotReady, and with it every pod's Ready condition, until the
    # kubelets report again (seconds later).
    wait_for(lambda: pod_ready(bed.pod(CONTROLLER)), 120, "the controller pod Ready again", interval=2,
             details=lambda: deployment.pods_summary(bed.kube, NAMESPACE))
    assert bed.pod(CONTROLLER)["metadata"]["uid"] == controller_uid, "the controller pod was replaced"
    print(f"operator writes after the restart: {len(audit.writes(mark, operator_user))}, deletes: 0", flush=True)
    print(json.dumps(bed.node_states()), flush=True)


# -- 2. the operator upgraded with helm while jobs run -----------------------------------------

# What a new operator has no reason to write to a running cluster (a pod's busy label it may
# patch, as jobs come and go; deleting anything it may not).
ROLLING_RESOURCES = ("statefulsets", "configmaps", "secrets", "services", "poddisruptionbudgets",
                     "persistentvolumeclaims")


def slurm_pods(bed) -> dict[str, str]:
    """name -> uid of every pod of the SlurmCluster."""
    items = bed.kube.get("pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/instance={CLUSTER}")["items"]
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in items}


def stateful_set_generations(bed) -> dict[str, int]:
    items = bed.kube.get("statefulsets", "-n", NAMESPACE)["items"]
    return {s["metadata"]["name"]: s["metadata"]["generation"] for s in items}


def test_operator_upgraded_with_helm_while_jobs_run(bed, local_cluster, operator):
    """`helm upgrade` of the operator to a new image tag (the same image tagged anew on every node,
    as a registry serves a release) while a long job and a stream of jobs run: the operator pod
    is replaced, and the new operator rolls nothing: every Slurm pod keeps its UID, every
    StatefulSet its generation, and the audit log has no write of the new operator to a
    StatefulSet, ConfigMap, Secret, Service, disruption budget or claim, and no delete. No job
    lost. Then back to the tag it had."""
    from testbed.control_plane.audit import AuditLog
    from testbed.local_cluster.layout import CONTROL_PLANE_DIR

    # The chart's full name is the release's, which contains the chart's name.
    live = bed.kube.get("deployment", deployment.OPERATOR_RELEASE, "-n", deployment.OPERATOR_NAMESPACE)
    image = live["spec"]["template"]["spec"]["containers"][0]["image"]
    repository, tag = image.rsplit(":", 1)
    new_tag = f"{tag}-faults-upgrade"
    local_cluster.tag_image(image, f"{repository}:{new_tag}")
    audit = AuditLog(CONTROL_PLANE_DIR / "logs" / "audit.log")
    operator_user = f"system:serviceaccount:{deployment.OPERATOR_NAMESPACE}:{deployment.OPERATOR_RELEASE}"
    long_job = bed.sbatch("-p cpu -w cpu-0 --wrap 'sleep 120'")  # runs across the upgrade
    try:
        with JobStream(bed.ledger, STREAM, every=5, submit=bed.sbatch):
            bed.wait_running(long_job)
            pods, generations = slurm_pods(bed), stateful_set_generations(bed)
            old = operator_pod(bed.kube)["metadata"]["uid"]
            mark = audit.mark()
            t0 = time.monotonic()
            deployment.install_operator(bed.kube.kubeconfig, operator, local=True,
                                        extra_values=[*deployment.local_cluster_operator_values(), "--set", f"image.tag={new_tag}"])
            took("helm upgrade (--wait) returned", time.monotonic() - t0)
            new = operator_pod(bed.kube)
            assert new["metadata"]["uid"] != old and new["spec"]["containers"][0]["image"].endswith(f":{new_tag}"), new["spec"]
            wait_for(lambda: pod_ready(operator_pod(bed.kube)), 120, "the upgraded operator Ready", interval=2)
            took("helm upgrade -> the new operator Ready", time.monotonic() - t0)
            assert bed.job_state(long_job) == "RUNNING"
            time.sleep(45)  # a resync (30 s) and more: the new operator has reconciled the cluster
            deployment.wait_usable(bed.kube, NAMESPACE, CLUSTER, 120, report=lambda line: None)
            assert slurm_pods(bed) == pods, "Slurm pods replaced by the upgrade"
            assert stateful_set_generations(bed) == generations
            writes = [f"{e['verb']} {e['objectRef'].get('resource')}/{e['objectRef'].get('name')}"
                      f"{'/' + e['objectRef']['subresource'] if e['objectRef'].get('subresource') else ''}"
                      for e in audit.writes(mark, operator_user)]
            print(f"the new operator's writes: {writes}", flush=True)
            rolled = [w for w in writes if w.split()[1].split("/")[0] in ROLLING_RESOURCES or w.startswith("delete")]
            assert rolled == [], rolled
        wait_for(lambda: bed.job_state(long_job) == "COMPLETED", 180, f"job {long_job} completed", interval=3)
    finally:
        deployment.install_operator(bed.kube.kubeconfig, operator, local=True,
                                    extra_values=deployment.local_cluster_operator_values())
        local_cluster.untag_image(f"{repository}:{new_tag}")
    bed.settle_and_report("operator upgraded with helm")


# -- 5. slurmctld's node lost; 7. a slurmd pod's node lost while slurmctld restarts -----------


def pods_on(bed, node: str) -> list[str]:
    items = bed.kube.get("pods", "-A", "--field-selector", f"spec.nodeName={node}")["items"]
    return sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in items)


def lose_node(bed, local_cluster, node: str) -> None:
    """The machine dies, and the Node object goes as a cloud's node controller removes it: the pod
    garbage collector then deletes the pods bound to it, so their controllers make them anew."""
    print(f"\npowering off {node}, which runs {pods_on(bed, node)}", flush=True)
    local_cluster.power_off(node)
    bed.kube.run("delete", "node", node)


def wait_moved(bed, name: str, lost: str, old_uid: str, timeout: float) -> str:
    """Until pod `name` is a new pod, Ready, on a node other than `lost`; returns that node."""
    def moved():
        pod = bed.pod(name)
        node = pod and pod["spec"].get("nodeName")
        return node if pod and pod["metadata"]["uid"] != old_uid and node != lost and pod_ready(pod) else None
    wait_for(moved, timeout, f"{name} Ready on a node other than {lost}", interval=2,
             details=lambda: deployment.pods_summary(bed.kube, NAMESPACE))
    return bed.pod(name)["spec"]["nodeName"]


def slurmctld_answers(bed) -> bool:
    try:
        return "UP" in bed.sh("scontrol ping", timeout=30)
    except AssertionError:
        return False


def wait_job_state_saved(bed, job: str) -> None:
    """Until slurmctld has written its job state after this moment. It writes the state a moment
    after a change, not with it: a controller lost before that write comes back without the
    jobs' start, launches them again on nodes where they still run, and Slurm drains those nodes
    "Duplicate jobid" (seen in CI, 2026-12-05; README, fault matrix). This fault is a controller
    lost with its jobs recorded. Each try changes `job`'s comment, a change slurmctld saves."""
    from kubeslurm.render.controller.statefulset import STATE_SAVE_LOCATION

    after = int(time.time()) + 1  # the file's time has whole seconds: a write in a later second

    def saved() -> bool:
        bed.sh(f"scontrol update JobId={job} Comment=state-save-{time.monotonic_ns()}")
        out = bed.kube.exec(NAMESPACE, CONTROLLER, "slurmctld", ["stat", "-c", "%Y", f"{STATE_SAVE_LOCATION}/job_state"],
                            check=False, timeout=60)
        return out.returncode == 0 and int(out.stdout.strip() or 0) >= after
    wait_for(saved, 60, "slurmctld's job state written after the jobs started", interval=1)


def test_slurmctld_node_lost(bed, local_cluster):
    """The Kubernetes node under slurmctld's pod is lost (powered off, its Node deleted): the
    StatefulSet makes the controller pod on another node, where it finds its state on the claim:
    a held job submitted before is still queued under its id and runs once released, running
    jobs are still known. sbatch is refused while no slurmctld runs (the stream retries). The
    machine then comes back (power_on) and every Slurm node is usable; no job lost."""
    held = bed.sbatch("-H -p cpu,gpu --wrap 'sleep 2'")
    running = [bed.sbatch(f"-p {p} --wrap 'sleep 30'") for p in ("cpu", "gpu")]
    for job in running:
        bed.wait_running(job)
    wait_job_state_saved(bed, held)
    controller = bed.pod(CONTROLLER)
    lost = controller["spec"]["nodeName"]
    t0 = time.monotonic()
    with JobStream(bed.ledger, STREAM, every=6, submit=bed.sbatch) as stream:
        try:
            lose_node(bed, local_cluster, lost)
            elsewhere = wait_moved(bed, CONTROLLER, lost, controller["metadata"]["uid"], 420)
            took(f"node {lost} lost -> slurmctld's pod Ready on {elsewhere}", time.monotonic() - t0)
            wait_for(lambda: slurmctld_answers(bed), 180, "slurmctld answering", interval=2)
            took(f"node {lost} lost -> slurmctld answers", time.monotonic() - t0)
            shown = bed.sh(f"scontrol show job {held} --oneliner")
            assert "JobState=PENDING" in shown and "JobHeldUser" in shown, shown
            # sacct (for a job slurmctld already forgot) fails while slurmdbd or MariaDB, which may
            # have been on the lost node too, move: not yet.
            states = wait_for(lambda: {job: bed.job_state(job) for job in running}, 180, "the running jobs' states",
                              interval=3, ignore=(AssertionError,))
            print(f"after the move: held job {held} PENDING (JobHeldUser); running before: {states}", flush=True)
            assert all(state != "MISSING" for state in states.values()), states
            bed.sh(f"scontrol release {held}")
        finally:
            local_cluster.power_on(lost)
        bed.wait_nodes_usable(SLURM_NODES, 420)
        took(f"node {lost} lost -> every Slurm node usable (after power_on)", time.monotonic() - t0)
    print(f"the stream's submissions refused while slurmctld was away: {stream.refused}", flush=True)
    bed.settle_and_report(f"slurmctld's node {lost} lost")


def test_slurmd_node_lost_while_slurmctld_pod_deleted(bed, local_cluster):
    """Two faults at once: the Kubernetes node under a slurmd pod with a running job is lost (the
    operator and slurmctld elsewhere) and, at the same moment, slurmctld's pod is deleted. The
    controller comes back with its state; the operator, once slurmctld answers, sees the slurmd
    pod lost and marks its Slurm node DOWN (Event SlurmdLost), so the job is requeued at once and
    completes; the slurmd pod comes back on another node; no job lost."""
    controller = bed.pod(CONTROLLER)
    spared = {controller["spec"]["nodeName"], operator_pod(bed.kube)["spec"]["nodeName"]}
    slurmd = next((n for n in ("cpu-1", "cpu-0", "h100-0") if bed.pod(n)["spec"]["nodeName"] not in spared), None)
    assert slurmd, "every slurmd pod shares its node with the operator or slurmctld"
    job = bed.sbatch(f"-p {'gpu' if slurmd.startswith('h100') else 'cpu'} -w {slurmd} --wrap 'sleep 30'")
    bed.wait_running(job)
    old_slurmd = bed.pod(slurmd)["metadata"]["uid"]
    lost = bed.pod(slurmd)["spec"]["nodeName"]
    t0 = time.monotonic()
    with JobStream(bed.ledger, STREAM, every=6, submit=bed.sbatch):
        try:
            bed.kube.run("delete", "pod", CONTROLLER, "-n", NAMESPACE, "--wait=false")
            lose_node(bed, local_cluster, lost)
            bed.wait_ready(CONTROLLER, 300, old_uid=controller["metadata"]["uid"])
            wait_for(lambda: slurmctld_answers(bed), 180, "slurmctld answering", interval=2)
            took("both faults -> slurmctld answers", time.monotonic() - t0)

            def requeued():
                restarts = re.search(r"Restarts=(\d+)", bed.sh(f"scontrol show job {job} --oneliner", check=False))
                return bool(restarts and int(restarts.group(1)) >= 1)
            wait_for(requeued, 180, f"job {job} requeued", interval=2)
            took(f"both faults -> job {job} requeued", time.monotonic() - t0)
            wait_moved(bed, slurmd, lost, old_slurmd, 300)
            bed.wait_nodes_usable({slurmd}, 180)
            took(f"both faults -> {slurmd} usable on another node", time.monotonic() - t0)
            wait_for(lambda: bed.job_state(job) == "COMPLETED", 420, f"job {job} completed", interval=3)
            took(f"both faults -> job {job} completed", time.monotonic() - t0)
            lost_events = bed.kube.run("get", "events", "-n", NAMESPACE, "--field-selector", "reason=SlurmdLost",
                                       "-o", "jsonpath={.items[*].message}").stdout
            assert f"{slurmd} marked DOWN" in lost_events, lost_events
        finally:
            local_cluster.power_on(lost)
        bed.wait_nodes_usable(SLURM_NODES, 300)
    bed.settle_and_report(f"{slurmd}'s node lost while slurmctld restarted")
