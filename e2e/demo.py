"""`make demo`: kubeslurm end to end, from nothing to sbatch/srun in a login pod.

    python -m e2e.demo up      # make demo
    python -m e2e.demo down    # make demo-down

Uses $KUBECONFIG when it is set and that cluster answers; otherwise starts the local cluster
(e2e/cluster, two nodes, fake GPUs) and remembers that it did, so `down` stops it again.
Every step prints how long it took.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("KUBESLURM_CACHE", Path.home() / ".cache" / "kubeslurm"))
STATE = CACHE / "demo-state.json"
LOCAL_KUBECONFIG = "/var/lib/kubeslurm-cluster/admin.kubeconfig"
MANIFEST = ROOT / "examples" / "demo.yaml"
NAMESPACE = "hpc"
CLUSTER = "research"
OPERATOR_NAMESPACE = "kubeslurm-system"
OPERATOR_RELEASE = "kubeslurm-operator"
LOGIN_POD = f"{CLUSTER}-login-0"
READY_TIMEOUT = int(os.environ.get("KUBESLURM_DEMO_TIMEOUT", "900"))

timings: list[tuple[str, float]] = []


def say(msg: str) -> None:
    print(f"demo: {msg}", flush=True)


class step:
    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        print(f"\n=== {self.name}", flush=True)
        self.t0 = time.monotonic()

    def __exit__(self, *exc):
        seconds = time.monotonic() - self.t0
        timings.append((self.name, seconds))
        print(f"=== {self.name}: {seconds:.1f} s{' (failed)' if exc[0] else ''}", flush=True)


def run(cmd: list[str], *, check: bool = True, capture: bool = False, env: dict | None = None,
        input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, text=True, input=input, env=env,
                          stdout=subprocess.PIPE if capture else None,
                          stderr=subprocess.PIPE if capture else None)


def kubectl_bin() -> str:
    found = sorted(CACHE.glob("kubernetes/*/bin/kubectl"))
    if found:
        return str(found[-1])
    from shutil import which
    path = which("kubectl")
    if not path:
        sys.exit("demo: no kubectl: run `make cluster-up` once (it builds one) or install kubectl")
    return path


def helm_bin() -> str:
    out = run(["bash", str(ROOT / "e2e/helm/build.sh")], capture=True).stdout.strip().splitlines()
    return str(Path(out[-1]) / "helm")


def kubectl(*args: str, check: bool = True, capture: bool = False, input: str | None = None):
    return run([kubectl_bin(), *args], check=check, capture=capture, input=input)


def reachable() -> bool:
    return run([kubectl_bin(), "--request-timeout=5s", "get", "--raw", "/readyz"],
               check=False, capture=True).returncode == 0


def load_state() -> dict:
    return json.loads(STATE.read_text()) if STATE.exists() else {}


def save_state(state: dict) -> None:
    STATE.parent.mkdir(parents=True, exist_ok=True)
    STATE.write_text(json.dumps(state))


def ensure_cluster() -> bool:
    """Returns whether the cluster is the local one (images can be loaded into it)."""
    user = os.environ.get("KUBECONFIG")
    if user and user != LOCAL_KUBECONFIG and reachable():
        say(f"using your cluster (KUBECONFIG={user})")
        return False
    os.environ["KUBECONFIG"] = LOCAL_KUBECONFIG
    if Path(LOCAL_KUBECONFIG).exists() and reachable():
        say("the local cluster is already running; using it")
        return True
    env = dict(os.environ, KUBESLURM_CLUSTER_NODES=os.environ.get("KUBESLURM_CLUSTER_NODES", "2"))
    run(["bash", str(ROOT / "e2e/cluster/install-deps.sh")], env=env)
    run([sys.executable, "-m", "e2e.cluster", "up"], env=env)
    save_state({**load_state(), "started_cluster": True})
    return True


def build_and_load(local: bool) -> list[dict]:
    out = run([sys.executable, str(ROOT / "images/build.py"), "--json"], capture=True).stdout
    images = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    for image in images:
        say(f"{' '.join(image['tags'])}: {'cached' if image['cached'] else 'built'}")
    if local:
        run([sys.executable, "-m", "e2e.cluster", "load", *[image["path"] for image in images]])
    else:
        say("not loading images into your cluster: push them to a registry your nodes pull from and set "
            "image.repository (operator chart) and spec.slurm.image (SlurmCluster)")
    return images


def install_operator(local: bool, images: list[dict]) -> None:
    pull = "Never" if local else "IfNotPresent"
    # The tag stays 0.1.0 while the code changes: an annotation with the tar's content hash
    # (images/build.py names tars by content) rolls the operator pod when its image changed.
    [operator] = [image for image in images if image["name"] == "operator"]
    image_id = Path(operator["path"]).stem.rsplit("-", 1)[-1]
    run([helm_bin(), "upgrade", "--install", OPERATOR_RELEASE, str(ROOT / "charts/kubeslurm-operator"),
         "--namespace", OPERATOR_NAMESPACE, "--create-namespace",
         "--set", f"image.pullPolicy={pull}", "--set", "logFormat=plain",
         "--set-string", f"podAnnotations.kubeslurm\\.io/image-content={image_id}",
         "--wait", "--timeout", "5m"])


def apply_cluster() -> None:
    namespace = kubectl("create", "namespace", NAMESPACE, "--dry-run=client", "-o", "yaml", capture=True).stdout
    kubectl("apply", "-f", "-", input=namespace)
    kubectl("apply", "-f", str(MANIFEST))


def pods_summary() -> str:
    out = kubectl("get", "pods", "-n", NAMESPACE, "-o", "json", check=False, capture=True).stdout
    try:
        pods = json.loads(out)["items"]
    except (ValueError, KeyError):
        return "(no pods yet)"
    parts = []
    for pod in pods:
        statuses = pod.get("status", {}).get("containerStatuses", []) + []
        init = pod.get("status", {}).get("initContainerStatuses", [])
        state = pod.get("status", {}).get("phase", "?")
        for status in init + statuses:
            waiting = status.get("state", {}).get("waiting")
            if waiting and waiting.get("reason") not in (None, "PodInitializing"):
                state = waiting["reason"]
        ready = sum(1 for s in statuses if s.get("ready"))
        restarts = sum(s.get("restartCount", 0) for s in statuses)
        parts.append(f"{pod['metadata']['name']}={state}{' ready' if statuses and ready == len(statuses) else ''}"
                     f"{f' restarts={restarts}' if restarts else ''}")
    return ", ".join(parts) or "(no pods yet)"


def cluster_condition() -> tuple[str, str]:
    out = kubectl("get", "slurmcluster", CLUSTER, "-n", NAMESPACE, "-o", "json", check=False, capture=True).stdout
    try:
        conditions = json.loads(out).get("status", {}).get("conditions", [])
    except ValueError:
        return "Unknown", ""
    for condition in conditions:
        if condition.get("type") == "Ready":
            return condition.get("status", "Unknown"), condition.get("message", "")
    return "Unknown", "no Ready condition yet"


def node_sets_ready() -> tuple[bool, str]:
    out = kubectl("get", "nodesets", "-n", NAMESPACE, "-o", "json", check=False, capture=True).stdout
    try:
        items = json.loads(out)["items"]
    except (ValueError, KeyError):
        return False, ""
    states = []
    for item in items:
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in item.get("status", {}).get("conditions", []))
        states.append((item["metadata"]["name"], ready))
    return bool(states) and all(r for _, r in states), " ".join(f"{n}={'Ready' if r else 'NotReady'}" for n, r in states)


def login_ready() -> bool:
    out = kubectl("get", "pod", LOGIN_POD, "-n", NAMESPACE, "-o", "json", check=False, capture=True).stdout
    try:
        conditions = json.loads(out).get("status", {}).get("conditions", [])
    except ValueError:
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


ACCOUNTING_POD = f"{CLUSTER}-accounting-0"
SLURMDBD_HANG_SECONDS = 90


def hung_slurmdbd() -> bool:
    """slurmdbd running for SLURMDBD_HANG_SECONDS, never restarted, still not Ready."""
    out = kubectl("get", "pod", ACCOUNTING_POD, "-n", NAMESPACE, "-o", "json", check=False, capture=True).stdout
    try:
        [status] = json.loads(out).get("status", {}).get("containerStatuses", [])
    except ValueError:
        return False
    started = status.get("state", {}).get("running", {}).get("startedAt")
    if not started or status.get("ready") or status.get("restartCount", 0):
        return False
    from datetime import datetime, timezone
    age = (datetime.now(timezone.utc) - datetime.fromisoformat(started.replace("Z", "+00:00"))).total_seconds()
    return age > SLURMDBD_HANG_SECONDS


def wait_ready() -> None:
    """The SlurmCluster's Ready means slurmctld answers and every object is applied; jobs also
    need the login pod (sackd fetched the config) and the NodeSets' slurmd pods registered."""
    deadline = time.monotonic() + READY_TIMEOUT
    t0 = time.monotonic()
    last = None
    kicked = False
    while True:
        status, message = cluster_condition()
        sets_ready, sets = node_sets_ready()
        login = login_ready()
        line = f"SlurmCluster Ready={status} {message} | NodeSets {sets} | {pods_summary()}"
        if line != last:
            say(f"[{time.monotonic() - t0:5.0f} s] {line}")
            last = line
        if status == "True" and sets_ready and login:
            return
        if not kicked and time.monotonic() - t0 > SLURMDBD_HANG_SECONDS and hung_slurmdbd():
            # Open bug (render/accounting_statefulset.py): the first slurmdbd on a fresh
            # database sometimes never listens and ignores SIGTERM; a new one starts at once.
            say(f"{ACCOUNTING_POD} has not listened for {SLURMDBD_HANG_SECONDS} s (known slurmdbd first-start hang): "
                "force-deleting it once")
            kubectl("delete", "pod", "-n", NAMESPACE, ACCOUNTING_POD, "--grace-period=0", "--force", check=False)
            kicked = True
        if time.monotonic() > deadline:
            kubectl("get", "slurmcluster,nodeset,statefulset,pods", "-n", NAMESPACE, "-o", "wide", check=False)
            sys.exit(f"demo: the SlurmCluster is not Ready after {READY_TIMEOUT} s; see "
                     f"`kubectl describe slurmcluster -n {NAMESPACE} {CLUSTER}` and "
                     f"`kubectl logs -n {OPERATOR_NAMESPACE} deploy/{OPERATOR_RELEASE}`")
        time.sleep(3)


def in_login(script: str, user: str | None = None) -> None:
    # runuser, not su: the accounts' users have no password (no /etc/shadow line), and
    # su's PAM account check refuses them even for root.
    command = ["runuser", "-l", user, "-c", script] if user else ["/bin/sh", "-c", script]
    print(f"$ {script}" if not user else f"{user}$ {script}", flush=True)
    kubectl("exec", "-n", NAMESPACE, LOGIN_POD, "-c", "login", "--", *command)


def jobs() -> None:
    in_login("sinfo")
    in_login("srun --gres=gpu:2 -N1 bash -c 'echo \"$(hostname): CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
             " SLURM_JOB_GPUS=$SLURM_JOB_GPUS\"; ls /dev/nvidia*'", user="alice")
    script = "sbatch --parsable --wait -p cpu -o /tmp/hello-%j.out --wrap 'hostname; id; sleep 2; echo done'"
    print(f"alice$ {script}", flush=True)
    job = kubectl("exec", "-n", NAMESPACE, LOGIN_POD, "-c", "login", "--", "runuser", "-l", "alice", "-c", script,
                  capture=True).stdout.strip().splitlines()[-1]
    print(job)
    # No shared file system in the demo: the output stays on the node that ran the job.
    print(f"$ kubectl exec -n {NAMESPACE} cpu-0 -- cat /tmp/hello-{job}.out", flush=True)
    kubectl("exec", "-n", NAMESPACE, "cpu-0", "-c", "slurmd", "--", "cat", f"/tmp/hello-{job}.out")
    in_login("sbatch --parsable --gres=gpu:1 --wrap 'sleep 60'", user="alice")
    in_login("squeue")
    in_login("sacct -a -X --format=JobID,User,Account,Partition,AllocTRES%60,State,Elapsed")


NEXT = f"""
What to try next (export KUBECONFIG={{kubeconfig}}):
  kubectl exec -it -n {NAMESPACE} {LOGIN_POD} -- runuser -l alice   # a shell as alice: sbatch, srun, squeue
  kubectl get slurmcluster,nodesets,pods -n {NAMESPACE}
  kubectl scale nodeset cpu -n {NAMESPACE} --replicas=0              # drained, then removed (and back with =1)
  kubectl delete pod -n {NAMESPACE} h100-0                          # it comes back as the same Slurm node
  kubectl delete pod -n {NAMESPACE} {CLUSTER}-controller-0            # slurmctld restarts from its state
  kubectl logs -n {OPERATOR_NAMESPACE} deploy/{OPERATOR_RELEASE}
  make demo-down                                                   # remove it all
"""


def up() -> None:
    t0 = time.monotonic()
    with step("cluster"):
        local = ensure_cluster()
    with step("images: build and load"):
        images = build_and_load(local)
    with step("operator: helm upgrade --install"):
        install_operator(local, images)
    with step(f"SlurmCluster {NAMESPACE}/{CLUSTER}: apply {MANIFEST.relative_to(ROOT)}"):
        apply_cluster()
    with step("wait for Ready"):
        wait_ready()
    with step("jobs in the login pod"):
        jobs()
    print("\ntimings:")
    for name, seconds in timings:
        print(f"  {seconds:7.1f} s  {name}")
    print(f"  {time.monotonic() - t0:7.1f} s  total")
    print(NEXT.format(kubeconfig=os.environ["KUBECONFIG"]))


def down() -> None:
    state = load_state()
    if state.get("started_cluster") or not os.environ.get("KUBECONFIG") or not reachable():
        # the same choice as `up`: the user's cluster if it answers, else the local one
        os.environ["KUBECONFIG"] = LOCAL_KUBECONFIG
    if reachable():
        with step(f"delete SlurmCluster {NAMESPACE}/{CLUSTER}"):
            kubectl("delete", "-f", str(MANIFEST), "--ignore-not-found", "--wait=true", "--timeout=180s", check=False)
            kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=180s", check=False)
        with step("helm uninstall the operator"):
            run([helm_bin(), "uninstall", OPERATOR_RELEASE, "--namespace", OPERATOR_NAMESPACE,
                 "--ignore-not-found", "--wait"], check=False)
    if state.get("started_cluster"):
        with step("local cluster down"):
            run([sys.executable, "-m", "e2e.cluster", "down"])
    STATE.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["up", "down"])
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    up() if args.action == "up" else down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
