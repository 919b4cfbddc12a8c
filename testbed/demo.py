"""`make demo`: kubeslurm end to end, from nothing to sbatch/srun in a login pod.

    python -m testbed.demo up      # make demo
    python -m testbed.demo down    # make demo-down

Uses $KUBECONFIG when it is set and that cluster answers; otherwise starts the local cluster
(testbed/local_cluster, four nodes, fake GPUs) and remembers that it did, so `down` stops it again.
Every step prints how long it took.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from testbed import deployment
from testbed.deployment import LOCAL_KUBECONFIG, OPERATOR_NAMESPACE, OPERATOR_RELEASE, ROOT
from testbed.kubectl import CACHE, Kube, KubectlError

STATE = CACHE / "demo-state.json"
MANIFEST = ROOT / "examples" / "demo.yaml"
NAMESPACE = "hpc"
CLUSTER = "research"
LOGIN_POD = f"{CLUSTER}-login-0"
READY_TIMEOUT = int(os.environ.get("KUBESLURM_DEMO_TIMEOUT", "900"))
# Four nodes: the e2e suite's size, so `make test` can reuse a cluster `make demo` left running.
NODES = os.environ.get("KUBESLURM_CLUSTER_NODES", "4")

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


def run(cmd: list[str], *, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, text=True, env=env)


def kube() -> Kube:
    return Kube(os.environ["KUBECONFIG"])


def load_state() -> dict:
    return json.loads(STATE.read_text()) if STATE.exists() else {}


def save_state(state: dict) -> None:
    STATE.parent.mkdir(parents=True, exist_ok=True)
    STATE.write_text(json.dumps(state))


def ensure_cluster() -> bool:
    """Returns whether the cluster is the local one (images can be loaded into it)."""
    user = os.environ.get("KUBECONFIG")
    if user and user != LOCAL_KUBECONFIG and Kube(user).reachable():
        say(f"using your cluster (KUBECONFIG={user})")
        return False
    os.environ["KUBECONFIG"] = LOCAL_KUBECONFIG
    if Path(LOCAL_KUBECONFIG).exists() and kube().reachable():
        say("the local cluster is already running; using it")
        return True
    env = dict(os.environ, KUBESLURM_CLUSTER_NODES=NODES)
    run(["bash", str(ROOT / "testbed/local_cluster/install-deps.sh")], env=env)
    run([sys.executable, "-m", "testbed.local_cluster", "up"], env=env)
    save_state({**load_state(), "started_cluster": True})
    return True


def build_and_load(local: bool) -> list[dict]:
    images = deployment.build_images()
    for image in images:
        say(f"{' '.join(image['tags'])}: {'cached' if image['cached'] else 'built'}")
    if local:
        deployment.load_into_local_cluster(images)
    else:
        say("not loading images into your cluster: push them to a registry your nodes pull from and set "
            "image.repository (operator chart) and spec.slurm.image (SlurmCluster)")
    return images


def apply_cluster() -> None:
    kube().ensure_namespace(NAMESPACE)
    kube().apply(MANIFEST)


def wait_ready() -> None:
    try:
        deployment.wait_usable(kube(), NAMESPACE, CLUSTER, READY_TIMEOUT, report=say)
    except (deployment.DeploymentError, KubectlError) as error:
        kube().run("get", "slurmcluster,nodeset,statefulset,pods", "-n", NAMESPACE, "-o", "wide",
                   check=False, capture=False)
        sys.exit(f"demo: {error}")


def in_login(script: str, user: str | None = None) -> None:
    # runuser, not su: the accounts' users have no password (no /etc/shadow line), and
    # su's PAM account check refuses them even for root.
    command = ["runuser", "-l", user, "-c", script] if user else ["/bin/sh", "-c", script]
    print(f"$ {script}" if not user else f"{user}$ {script}", flush=True)
    kube().exec(NAMESPACE, LOGIN_POD, "login", command, capture=False)


def jobs() -> None:
    in_login("sinfo")
    # A step's GPUs are SLURM_STEP_GPUS (SLURM_JOB_GPUS is a batch script's, empty in an srun step).
    in_login("srun --gres=gpu:2 -N1 bash -c 'echo \"$(hostname): CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
             " SLURM_STEP_GPUS=$SLURM_STEP_GPUS\"; ls /dev/nvidia*'", user="alice")
    script = "sbatch --parsable --wait -p cpu -o ~/hello-%j.out --wrap 'hostname; id; pwd; sleep 2; echo done'"
    print(f"alice$ {script}", flush=True)
    job = kube().exec(NAMESPACE, LOGIN_POD, "login", ["runuser", "-l", "alice", "-c", script]
                      ).stdout.strip().splitlines()[-1]
    print(job)
    # The job ran on cpu-0 and wrote into alice's home there; the home is shared (spec.storage),
    # so she reads it where she submitted it.
    in_login(f"cat ~/hello-{job}.out; ls -ld ~", user="alice")
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
        deployment.install_operator(os.environ["KUBECONFIG"], images, local=local)
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
    if state.get("started_cluster") or not os.environ.get("KUBECONFIG") or not kube().reachable():
        # the same choice as `up`: the user's cluster if it answers, else the local one
        os.environ["KUBECONFIG"] = LOCAL_KUBECONFIG
    if kube().reachable():
        with step(f"delete SlurmCluster {NAMESPACE}/{CLUSTER}"):
            kube().run("delete", "-f", str(MANIFEST), "--ignore-not-found", "--wait=true", "--timeout=180s",
                       check=False, capture=False)
            kube().run("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=180s",
                       check=False, capture=False)
        with step("helm uninstall the operator"):
            deployment.uninstall_operator(os.environ["KUBECONFIG"])
    if state.get("started_cluster"):
        with step("local cluster down"):
            run([sys.executable, "-m", "testbed.local_cluster", "down"])
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
