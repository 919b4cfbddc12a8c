"""The user story, end to end on real Kubernetes: a platform engineer applies a SlurmCluster,
researchers submit from the login pod, and the cluster scales, fails over and replaces nodes
underneath them without losing a job.

One SlurmCluster (examples/demo.yaml: a GPU NodeSet `h100` with 2 fake GPUs, a CPU NodeSet
`cpu`, a shared home; here with `controller.backup: true`, a second slurmctld) in its own namespace,
walked through in file order: each test is one chapter and
leaves the cluster as the next one expects it. Every Slurm command runs in the login pod
(`kubectl exec`), as the account users of the manifest where a researcher would. The last
chapters count the jobs: every job submitted in the story must end COMPLETED in sacct.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import time
from datetime import datetime, timezone

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kubeslurm.reconcile.slurm_control import parse_node_line
from kubeslurm.reconcile.ssh_host_key import public_host_key
from testbed import deployment
from testbed.deployment import ROOT, DeploymentError
from testbed.job_ledger import JobLedger
from testbed.kubectl import Kube, KubectlError
from testbed.ssh_client import Ssh, key_pair
from testbed.waiting import WaitTimeout
from testbed.waiting import wait_for as poll

pytestmark = pytest.mark.e2e

NAMESPACE = "e2e-story"
CLUSTER = "research"
LOGIN = f"{CLUSTER}-login-0"
CONTROLLER = f"{CLUSTER}-controller-0"  # the primary slurmctld
BACKUP_CONTROLLER = f"{CLUSTER}-controller-1"
MANIFEST = ROOT / "examples" / "demo.yaml"
READY_TIMEOUT = 900
REQUEUE_TIMEOUT = 420  # slurmctld holds a requeued batch job for a while before it is eligible again


class Story:
    """The namespace, the Slurm commands of the login pod, and the count of submitted jobs."""

    def __init__(self, kube: Kube):
        self.kube = kube
        # Every job of the story, and what sacct says became of it (the fault tests keep the same).
        self.ledger = JobLedger(self.sh)
        self.started = self.ledger.started

    def sh(self, script: str, user: str | None = None, check: bool = True) -> str:
        # runuser, not su: the accounts' users have no password, and su's PAM account check refuses them.
        command = ["runuser", "-l", user, "-c", script] if user else ["/bin/sh", "-c", script]
        result = self.kube.exec(NAMESPACE, LOGIN, "login", command, check=False, timeout=600)
        if check and result.returncode != 0:
            raise AssertionError(f"{user or 'root'}$ {script}\nexit {result.returncode}\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result.stdout

    def write(self, path: str, content: str, user: str = "alice") -> None:
        """Writes content to path as user in the login pod (as data: base64, never shell text)."""
        encoded = base64.b64encode(content.encode()).decode()
        self.sh(f"mkdir -p $(dirname {path}) && echo {encoded} | base64 -d > {path}", user=user)

    def sbatch_to(self, args: str, user: str = "alice") -> str:
        """sbatch whose output the caller chose (args holds -o), the job recorded like sbatch's."""
        return self.ledger.sbatch(args, user, run_as=self.sh)

    def sbatch(self, args: str, user: str = "alice") -> str:
        return self.ledger.sbatch(f"-o /dev/null {args}", user, run_as=self.sh)

    def srun(self, args: str, user: str = "alice") -> str:
        """srun as user; the job's id is recorded (srun prints it first with --verbose, so ask Slurm)."""
        out = self.sh(f"srun {args} bash -c 'echo JOB=$SLURM_JOB_ID; {{ {SRUN_BODY}; }}'", user=user)
        self.ledger.record(re.search(r"^JOB=(\d+)$", out, re.M).group(1))
        return out

    def nodes(self) -> dict[str, dict]:
        """sinfo per node: state, CPUs, memory (MB), features, gres."""
        out = self.sh("sinfo -N -h -o '%N|%t|%c|%m|%f|%G'")
        nodes = {}
        for line in out.split():
            name, state, cpus, memory, features, gres = line.split("|")
            nodes[name] = {"state": state, "cpus": int(cpus), "memory": int(memory),
                           "features": set(features.split(",")), "gres": gres}
        return nodes

    def job_state(self, job: str) -> str:
        out = self.sh(f"scontrol show job {job} --oneliner", check=False)
        match = re.search(r"JobState=(\S+)", out)
        if match:
            return match.group(1)
        # Gone from slurmctld's memory (MinJobAge): sacct has it.
        return self.sh(f"sacct -n -X -P -j {job} -o State").strip().splitlines()[-1]

    def wait_jobs(self, jobs: list[str], state: str = "COMPLETED", timeout: float = 300) -> None:
        def done():
            states = {job: self.job_state(job) for job in jobs}
            failed = {j: s for j, s in states.items() if s in ("FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY")}
            assert not failed, f"jobs ended badly: {failed}"
            return all(s == state for s in states.values()), states
        wait_for(done, timeout, f"jobs {jobs} {state}")

    def wait_running(self, job: str, timeout: float = 120) -> None:
        def running():
            state = self.job_state(job)
            return state == "RUNNING", state
        wait_for(running, timeout, f"job {job} running")

    def wait_nodes(self, names: set[str], states: tuple[str, ...], timeout: float, what: str) -> dict[str, dict]:
        """Waits until every node in names is in sinfo with a state starting with one of states."""
        def there():
            nodes = self.nodes()
            return all(n in nodes and nodes[n]["state"].startswith(states) for n in names), nodes
        return wait_for(there, timeout, what)

    def pod(self, name: str) -> dict | None:
        return self.kube.get("pod", name, "-n", NAMESPACE)

    def wait_reason(self, node: str, ok, timeout: float, what: str) -> str:
        """Waits until the Slurm node's reason (`scontrol show node`, "" when it has none and is
        not drained) passes ok; returns it."""
        def check():
            line = self.sh(f"scontrol --oneliner show node {node}").strip()
            slurm = parse_node_line(line)
            reason = slurm.reason if slurm.drained or slurm.down else ""
            return ok(reason), f"{sorted(slurm.states)} {slurm.reason!r}"
        wait_for(check, timeout, what)
        slurm = parse_node_line(self.sh(f"scontrol --oneliner show node {node}").strip())
        return slurm.reason if slurm.drained or slurm.down else ""

    def events(self, node_set: str, reason: str) -> list[str]:
        out = self.kube.run("get", "events", "-n", NAMESPACE, "--field-selector",
                            f"involvedObject.kind=NodeSet,involvedObject.name={node_set},reason={reason}",
                            "-o", "jsonpath={.items[*].message}").stdout
        return [m for m in out.split("Slurm node ") if m]

    def replace_pod(self, name: str, timeout: float = 300) -> None:
        """Deletes a pod and waits for its StatefulSet's new pod, under the same name, to be Ready."""
        old_uid = self.pod(name)["metadata"]["uid"]
        self.kube.run("delete", "pod", name, "-n", NAMESPACE, "--wait=false")

        def replaced():
            pod = self.pod(name)
            return (pod is not None and pod["metadata"]["uid"] != old_uid and pod_ready(pod),
                    pod and pod.get("status", {}).get("phase"))
        wait_for(replaced, timeout, f"a new pod {name} Ready")


USABLE = ("idle", "alloc", "mix")
SRUN_BODY = "echo HOST=$(hostname) CUDA=$CUDA_VISIBLE_DEVICES; ls /dev | grep -E \"^nvidia[0-9]+$\" | sed s/^/DEV=/ || true"


def wait_for(check, timeout: float, what: str, interval: float = 2):
    """Polls check() -> (ok, detail) until ok; fails with the last detail. A command that fails
    meanwhile (the login pod or slurmctld being replaced) counts as not yet."""
    last = {"detail": None}

    def attempt():
        try:
            ok, detail = check()
        except (AssertionError, DeploymentError, KubectlError, subprocess.TimeoutExpired) as error:
            if isinstance(error, AssertionError) and str(error).startswith("jobs ended badly"):
                raise
            ok, detail = False, str(error)[-500:]
        last["detail"] = detail
        return (True, detail) if ok else None

    try:
        return poll(attempt, timeout, what, interval=interval)[1]
    except WaitTimeout:
        pytest.fail(f"{what}: not within {timeout:.0f} s; last: {last['detail']}")


def pod_ready(pod: dict | None) -> bool:
    return bool(pod) and not pod["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


@pytest.fixture(scope="module")
def story(kube, operator):
    client, _local = kube

    def with_backup_controller(document):
        if document["kind"] == "SlurmCluster":
            # A backup slurmctld, so the failover chapter proves Slurm's own HA on the shared state
            # claim (ReadWriteMany). It requests no CPU: the 4 slurmd pods still fit.
            document["spec"]["controller"]["backup"] = True
            # The node health chapter: the image's check every 10 s, and a node-problem-detector's condition.
            document["spec"]["nodeHealth"] = {"check": {"intervalSeconds": 10}, "drainOnNodeConditions": [{"type": "GPUProblem"}]}
        if document["kind"] == "NodeSet" and document["metadata"]["name"] == "h100":
            document["spec"]["replaceUnhealthy"] = True

    deployment.apply_in_fresh_namespace(client, MANIFEST, NAMESPACE, with_backup_controller)
    deployment.wait_usable(client, NAMESPACE, CLUSTER, READY_TIMEOUT, report=lambda line: print(line, flush=True))
    yield Story(client)
    client.run("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false", check=False)


# -- 1. apply: Ready, every node idle with its resources ----------------------------


def test_applied_cluster_is_ready_with_every_node_idle(story):
    nodes = story.wait_nodes({"h100-0", "cpu-0"}, ("idle",), 120, "every node idle")
    assert set(nodes) == {"h100-0", "cpu-0"}, nodes
    # The pods' limits are what Slurm sees (config_overrides): 1 CPU, 2 GiB, the 2 GPUs the device plugin gave.
    gpu, cpu = nodes["h100-0"], nodes["cpu-0"]
    assert (gpu["cpus"], cpu["cpus"]) == (1, 1), nodes
    assert gpu["memory"] <= 2048 and gpu["memory"] >= 1536, nodes
    assert {"h100", "nvlink"} <= gpu["features"] and "cpu" in cpu["features"], nodes
    assert gpu["gres"].startswith("gpu:h100:2"), nodes
    assert cpu["gres"] == "(null)", nodes
    at_a_glance = story.kube.run("get", "slurmclusters,nodesets", "-n", NAMESPACE).stdout
    assert re.search(rf"^slurmcluster\S*/{CLUSTER}\s+True\b", at_a_glance, re.M), at_a_glance
    assert re.search(rf"^nodeset\S*/h100\s+{CLUSTER}\s+1\s+1\b", at_a_glance, re.M), at_a_glance


# -- 2. jobs as a researcher --------------------------------------------------------


def test_jobs_run_as_a_researcher_with_their_gpus(story):
    assert story.sh("id -un", user="alice").strip() == "alice"
    out = story.srun("-p gpu --gres=gpu:2 -N1")
    assert "HOST=h100-0 CUDA=0,1" in out, out
    devices = re.findall(r"^DEV=(nvidia\d+)$", out, re.M)
    assert len(devices) == 2 == len(set(devices)), out
    job = story.sbatch("--wait -p cpu --wrap 'test $(id -un) = alice'")
    assert story.job_state(job) == "COMPLETED"
    # bob charges nlp, his account; his job runs too.
    story.wait_jobs([story.sbatch("-p cpu --wrap true", user="bob")])


# -- 3. scale up while jobs are submitted ------------------------------------------


def test_a_researcher_in_the_login_pod_cannot_become_root_or_read_the_key(story):
    def as_user(user, script):
        command = ["runuser", "-l", user, "-c", script] if user else ["/bin/sh", "-c", script]
        return story.kube.exec(NAMESPACE, LOGIN, "login", command, check=False)
    # The key is in the sackd container only: not even root of the sessions container has it.
    for user in ("alice", None):
        result = as_user(user, "cat /etc/slurm/slurm.key")
        assert result.returncode != 0 and not result.stdout, (user, result.stdout[:40])
    # no_new_privs: setuid programs (su) give alice nothing
    assert as_user("alice", "grep NoNewPrivs /proc/self/status").stdout.split() == ["NoNewPrivs:", "1"]
    su = as_user("alice", "su -c id root < /dev/null")
    assert su.returncode != 0 and "uid=0" not in su.stdout, su.stdout
    # Slurm refuses a job as root (DisableRootJobs) and alice's job as bob
    root_job = as_user(None, "sbatch -p cpu --wrap true")
    assert root_job.returncode != 0, root_job.stdout
    as_bob = as_user("alice", "sbatch -p cpu --uid=bob --wrap true")
    assert as_bob.returncode != 0 and "--uid only permitted by root" in as_bob.stderr, as_bob.stderr


def test_scale_up_while_submitting_new_nodes_take_jobs(story):
    queued = [story.sbatch("-p cpu --wrap 'sleep 10'", user=user) for user in ["alice", "bob"] * 4]
    t0 = time.monotonic()
    story.kube.run("scale", "nodeset", "cpu", "-n", NAMESPACE, "--replicas=3")
    queued += [story.sbatch("-p cpu --wrap 'sleep 10'") for _ in range(2)]
    story.wait_nodes({"cpu-1", "cpu-2"}, USABLE, 300, "cpu-1 and cpu-2 join")
    print(f"scale-up 1 -> 3: new nodes in sinfo after {time.monotonic() - t0:.0f} s", flush=True)
    story.wait_jobs(queued, timeout=300)
    ran_on = story.sh(f"sacct -n -X -P -j {','.join(queued)} -o NodeList").split()
    assert {"cpu-1", "cpu-2"} & set(ran_on), ran_on
    # A 3-node job starts on all of them together (gang start).
    out = story.srun("-p cpu -N3")
    assert sorted(re.findall(r"^HOST=(\S+)", out, re.M)) == ["cpu-0", "cpu-1", "cpu-2"], out


# -- MPI across slurmd pods ---------------------------------------------------------

# Every rank adds its rank + 1; with n ranks each prints n(n+1)/2.
ALLREDUCE = """import os
from mpi4py import MPI
c = MPI.COMM_WORLD
total = c.allreduce(c.rank + 1)
print(f"rank={c.rank} size={c.size} host={MPI.Get_processor_name()} sum={total} job={os.environ['SLURM_JOB_ID']}", flush=True)
"""


def test_an_mpi_job_reduces_across_slurmd_pods(story):
    """Open MPI ranks in three pods on different Kubernetes nodes, started by srun through PMIx
    (MpiDefault=pmix), reduce over the pod network. The program is in alice's shared home."""
    story.write("~/mpi/allreduce.py", ALLREDUCE)
    out = story.sh("srun -p cpu -N3 -n3 python3 ~/mpi/allreduce.py", user="alice")
    ranks = sorted(re.findall(r"^rank=(\d) size=3 host=(\S+) sum=6 job=(\d+)$", out, re.M))
    assert [rank for rank, _, _ in ranks] == ["0", "1", "2"], out
    assert sorted(host for _, host, _ in ranks) == ["cpu-0", "cpu-1", "cpu-2"], out
    story.ledger.record(ranks[0][2])


def test_a_batch_mpi_job_with_tasks_per_node_reduces_across_slurmd_pods(story):
    """The same reduction submitted with sbatch, one task per node on two nodes: the batch
    script's srun starts the ranks through PMIx; the output lands in alice's shared home."""
    job = story.sbatch_to("-p cpu -N2 --ntasks-per-node=1 -o mpi/batch-%j.out --wrap 'srun python3 mpi/allreduce.py'")
    story.wait_jobs([job], timeout=300)
    out = story.sh(f"cat mpi/batch-{job}.out", user="alice")
    ranks = sorted(re.findall(rf"^rank=(\d) size=2 host=(\S+) sum=3 job={job}$", out, re.M))
    assert [rank for rank, _ in ranks] == ["0", "1"], out
    assert len({host for _, host in ranks}) == 2, out


def test_an_exclusive_job_gets_its_whole_node_with_every_gpu(story):
    """--exclusive allocates the whole node, its GPUs included, though the job asked for none;
    the same job without it gets no GPU (sacct's AllocTRES)."""
    exclusive = story.sbatch("-p gpu -N1 --exclusive --wrap 'sleep 1'")
    shared = story.sbatch("-p gpu -N1 --wrap 'sleep 1'")
    story.wait_jobs([exclusive, shared], timeout=300)
    tres = {job: story.sh(f"sacct -n -X -P -j {job} -o AllocTRES").strip() for job in (exclusive, shared)}
    assert "gres/gpu=2" in tres[exclusive], tres
    assert "gres/gpu" not in tres[shared], tres


# -- shared storage: one home on the login pod and every node ----------------------------

WHERE_SCRIPT = "#!/bin/bash\necho host=$(hostname) uid=$(id -u) cwd=$(pwd)\n"
# Each node of a 2-node job writes its own file into one directory of the shared home.
TWO_NODE_SCRIPT = """#!/bin/bash
dir=$HOME/runs/two-$SLURM_JOB_ID
mkdir -p "$dir"
srun -N2 --ntasks-per-node=1 bash -c 'echo "$(id -u)" > "$0/$(hostname)"' "$dir"
"""


def test_a_researcher_reads_every_node_s_output_in_her_shared_home(story):
    uid = story.sh("id -u", user="alice").strip()
    assert story.sh("stat -c '%a %u' $HOME", user="alice").split() == ["700", uid]  # made once, mode 0700
    story.write("~/runs/where.sh", WHERE_SCRIPT)
    jobs = {partition: story.sbatch_to(f"-p {partition} -o ~/runs/out-%j.txt ~/runs/where.sh") for partition in ("gpu", "cpu")}
    story.write("~/runs/two.sh", TWO_NODE_SCRIPT)
    two = story.sbatch_to("-p cpu -N2 -o ~/runs/two-%j.log ~/runs/two.sh")
    story.wait_jobs([*jobs.values(), two], timeout=300)
    for partition, job in jobs.items():
        out = story.sh(f"cat ~/runs/out-{job}.txt", user="alice").strip()
        ran_on = story.sh(f"sacct -n -X -P -j {job} -o NodeList").strip()
        assert out == f"host={ran_on} uid={uid} cwd=/home/alice", (partition, out)
        # written on the compute node as alice, read in the login pod as alice's
        assert story.sh(f"stat -c %u ~/runs/out-{job}.txt", user="alice").strip() == uid
    files = story.sh(f"cd ~/runs/two-{two} && grep -H . *", user="alice").split()
    hosts = sorted(line.split(":")[0] for line in files)
    assert len(hosts) == 2 and all(h.startswith("cpu-") for h in hosts), files
    assert all(line.split(":")[1] == uid for line in files), files
    owners = story.sh(f"stat -c %u ~/runs/two-{two}/*", user="alice").split()
    assert owners == [uid, uid], owners


def test_another_researcher_cannot_read_her_home(story):
    for command in ("ls /home/alice", "cat /home/alice/runs/where.sh"):
        result = story.kube.exec(NAMESPACE, LOGIN, "login", ["runuser", "-l", "bob", "-c", command], check=False)
        assert result.returncode != 0 and "Permission denied" in result.stderr, (command, result.stdout, result.stderr)
    # nor from a job of his on a compute node: the job fails if it can list her home
    job = story.sbatch_to("-p cpu -o /dev/null --wrap 'if ls /home/alice; then exit 1; fi'", user="bob")
    story.wait_jobs([job], timeout=120)


# -- ssh: researchers log in as themselves, from outside every pod -----------------------


def test_a_researcher_logs_in_with_ssh_as_herself_and_submits(story, tmp_path):
    alice_key, stranger_key = key_pair(tmp_path, "alice"), key_pair(tmp_path, "stranger")
    # the site's keys Secret: alice's key, and the same key offered for root (which must still be refused)
    story.kube.run("create", "secret", "generic", "research-keys", "-n", NAMESPACE,
                   f"--from-file=alice={tmp_path / 'alice.pub'}", f"--from-file=root={tmp_path / 'alice.pub'}")
    patch = {"spec": {"login": {"ssh": {"authorizedKeysSecret": "research-keys", "service": {"type": "NodePort"}}}}}
    story.kube.run("patch", "slurmcluster", CLUSTER, "-n", NAMESPACE, "--type=merge", "-p", json.dumps(patch))

    def rolled():
        pod = story.pod(LOGIN)
        volumes = {v["name"]: v for v in (pod or {}).get("spec", {}).get("volumes", [])}
        keys = volumes.get("authorized-keys", {}).get("secret", {}).get("secretName")
        return keys == "research-keys" and pod_ready(pod), keys
    wait_for(rolled, 300, "the login pod with the keys Secret, Ready")
    service = wait_for(lambda: ((svc := story.kube.get("service", f"{CLUSTER}-ssh", "-n", NAMESPACE))
                                and svc["spec"]["type"] == "NodePort", svc), 120, "the ssh Service as NodePort")
    node_port = service["spec"]["ports"][0]["nodePort"]
    node = story.kube.get("nodes")["items"][0]
    address = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
    ssh = Ssh(tmp_path, address, node_port)
    first = wait_for(lambda: ((r := ssh.run("alice", alice_key, "id -un; pwd; sinfo -h -o %P", first=True)).returncode == 0,
                              r.stdout + r.stderr), 120, f"ssh alice@{address}:{node_port}")
    assert first.split()[:2] == ["alice", "/home/alice"] and "cpu" in first, first
    # the host key the operator generated, nothing else, is what the client now trusts
    secret = story.kube.get("secret", f"{CLUSTER}-ssh-host-keys", "-n", NAMESPACE)
    host_key = base64.b64decode(secret["data"]["ssh_host_ed25519_key"])
    assert public_host_key(host_key).split()[1] in ssh.known_hosts.read_text()
    job = ssh.run("alice", alice_key, "sbatch --parsable --wait -p cpu -o ~/ssh-%j.out --wrap 'id -un'")
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip().splitlines()[-1]
    story.ledger.record(job_id)
    listed = ssh.run("alice", alice_key, f"cat ~/ssh-{job_id}.out; squeue -h -j {job_id}; sacct -n -X -j {job_id} -o User,State -P")
    assert listed.stdout.split() == ["alice", "alice|COMPLETED"], listed.stdout + listed.stderr
    # refused: a key nobody registered, root (even with a registered key), a password, a user without keys
    for user, key in (("alice", stranger_key), ("root", alice_key), ("bob", alice_key)):
        refused = ssh.run(user, key, "id")
        assert refused.returncode == 255 and "Permission denied" in refused.stderr, (user, refused.stderr)
    password = ssh.password_login("alice")
    assert password.returncode == 255 and "Permission denied (publickey)" in password.stderr, password.stderr
    # a new login pod presents the same host key: strict checking passes without a warning
    story.replace_pod(LOGIN)
    again = wait_for(lambda: ((r := ssh.run("alice", alice_key, "id -un")).returncode == 0, r.stdout + r.stderr),
                     120, "ssh to the new login pod with strict host-key checking")
    assert again.strip() == "alice"


# -- a researcher's own Python tooling: submitit ---------------------------------------

# submitit pickles the function into a folder on the shared home, submits it with sbatch and
# polls sacct; the result comes back through the same folder.
SUBMITIT_PROGRAM = """import socket
import submitit


def square(x):
    return x * x, socket.gethostname()


executor = submitit.AutoExecutor(folder="/home/alice/submitit/%j")
executor.update_parameters(slurm_partition="cpu", timeout_min=5)
job = executor.submit(square, 7)
print("single", job.job_id, job.result())
array = executor.map_array(square, [1, 2, 3])
print("array", " ".join(j.job_id for j in array), [j.result()[0] for j in array], sorted({j.result()[1] for j in array}))
"""
SUBMITIT_WHEELS = ("submitit", "cloudpickle", "typing_extensions")


def test_submitit_runs_a_function_and_an_array_on_the_nodes_from_the_login_pod(story, tmp_path):
    """The wheels come from PyPI on the host (the pods need no internet) into alice's shared home."""
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(tmp_path), *SUBMITIT_WHEELS],
                   check=True, timeout=300)
    for wheel in sorted(tmp_path.glob("*.whl")):
        story.kube.run("exec", "-i", "-n", NAMESPACE, LOGIN, "-c", "login", "--", "runuser", "-u", "alice", "--",
                       "sh", "-c", f"mkdir -p ~/wheels && base64 -d > ~/wheels/{wheel.name}",
                       input=base64.b64encode(wheel.read_bytes()).decode())
    story.sh("cd ~/wheels && for w in *.whl; do python3 -m zipfile -e $w ~/pylib; done", user="alice")
    story.write("~/run_submitit.py", SUBMITIT_PROGRAM)
    out = story.sh("PYTHONPATH=~/pylib python3 ~/run_submitit.py", user="alice")
    single = re.search(r"^single (\d+) \(49, '(cpu-\d)'\)$", out, re.M)
    array = re.search(r"^array (\S+) (\S+) (\S+) \[1, 4, 9\] \[(.*)\]$", out, re.M)
    assert single and array, out
    for job in (single.group(1), *array.group(1, 2, 3)):
        story.ledger.record(job)


# -- accounting: sacct and fair-share ------------------------------------------------


def test_sacct_and_sshare_account_for_the_jobs(story):
    rows = [line.split("|") for line in story.sh(
        f"sacct -a -n -X -P -S {story.started} -o JobID,User,Account,AllocTRES,State").split("\n") if line]
    by_id = {row[0]: row for row in rows}
    gpu_job = story.ledger.submitted[0]
    assert by_id[gpu_job][1:3] == ["alice", "vision"], by_id.get(gpu_job)
    assert "gres/gpu=2" in by_id[gpu_job][3], by_id[gpu_job]
    assert {row[2] for row in rows if row[1] == "bob"} == {"nlp"}, rows
    shares = story.sh("sshare -a -n -P -o Account,User,RawShares,RawUsage")
    assert re.search(r"^\s*vision\|alice\|", shares, re.M) and re.search(r"^\s*nlp\|bob\|", shares, re.M), shares
    usage = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*(\w+)\|\|\d+\|(\d+)$", shares, re.M)}
    assert usage.get("vision", 0) > 0 and usage.get("nlp", 0) > 0, shares


# -- metrics: the operator's /metrics against sinfo and squeue while jobs run ----------

METRICS_URL = "http://kubeslurm-operator-metrics.kubeslurm-system:9090/metrics"
SCRAPE = f"import urllib.request; print(urllib.request.urlopen({METRICS_URL!r}, timeout=20).read().decode())"


def test_metrics_match_sinfo_and_squeue_while_jobs_run(story):
    """Scraped the way Prometheus would (the chart's metrics Service, from inside the cluster),
    parsed with prometheus_client, each scrape followed at once by sinfo and squeue. The samples
    are as fresh as the last reconcile, so the test waits (while the jobs run) for one that agrees."""
    jobs = [story.sbatch("-p cpu -N1 --wrap 'sleep 75'"), story.sbatch("-p gpu --gres=gpu:1 --wrap 'sleep 75'")]
    for job in jobs:
        story.wait_running(job)

    def agree():
        text = story.kube.exec(NAMESPACE, LOGIN, "login", ["python3", "-c", SCRAPE], timeout=60).stdout
        running = len(story.sh("squeue -h -t R -o %i").split())
        nodes = story.nodes()
        gres_used = story.sh("sinfo -N -h -O NodeHost:40,GresUsed:60")
        ours = {"namespace": NAMESPACE, "cluster": CLUSTER}
        values: dict[tuple, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if all(s.labels.get(k) == v for k, v in ours.items()):
                    values[(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in ours)))] = s.value

        def total(name, **labels):
            return sum(v for (n, lbls), v in values.items() if n == name and all(dict(lbls).get(k) == x for k, x in labels.items()))

        used_gpus = sum(int(m.group(1)) for m in re.finditer(r"gpu:(?:[^:\s(]+:)?(\d+)", gres_used))
        seen = {
            "running jobs": (total("kubeslurm_slurm_jobs", state="running"), running),
            "nodes": (total("kubeslurm_slurm_nodes"), len(nodes)),
            "busy nodes": (total("kubeslurm_slurm_nodes", state="mixed") + total("kubeslurm_slurm_nodes", state="allocated"),
                           sum(1 for n in nodes.values() if n["state"].startswith(("mix", "alloc")))),
            "allocated GPUs": (total("kubeslurm_slurm_allocated_gpus"), used_gpus),
            "slurmctld up": (total("kubeslurm_slurmctld_up"), 1),
        }
        return running >= 2 and all(a == b for a, b in seen.values()), seen

    wait_for(agree, 70, "the operator's metrics to agree with sinfo/squeue while 2 jobs run", interval=5)
    story.wait_jobs(jobs, timeout=180)


# -- node health: the image's check, node conditions, drain-reason annotations ----------


def test_a_gpu_gone_from_its_pod_drains_the_node_which_is_replaced_and_takes_jobs_again(story):
    """What a GPU that falls off the bus looks like to the pod: its device file is gone. The check
    drains the node with its message; h100 has replaceUnhealthy, so the idle node's pod is
    replaced, and the new pod (its GPUs whole) comes back as h100-0, resumed by its own check."""
    old_uid = story.pod("h100-0")["metadata"]["uid"]
    story.kube.exec(NAMESPACE, "h100-0", "slurmd", ["mv", "/dev/nvidia1", "/dev/.nvidia1-gone"])
    reason = story.wait_reason("h100-0", lambda r: r.startswith("kubeslurm: health check:"), 120, "h100-0 drained by its check")
    assert reason.startswith("kubeslurm: health check: 1 GPU device files (/dev/nvidia0) but the node registered 2 GPUs"), reason
    wait_for(lambda: ((story.pod("h100-0") or {}).get("metadata", {}).get("uid") not in (None, old_uid), "old pod"),
             180, "h100-0 replaced")
    assert story.events("h100", "NodeReplaced"), "no NodeReplaced Event on NodeSet h100"
    story.wait_reason("h100-0", lambda r: r == "", 300, "the new h100-0 resumed by its check")
    assert "DEV=nvidia1" in story.srun("-p gpu -w h100-0 --gres=gpu:2")


def test_a_node_condition_drains_its_slurm_nodes_until_it_clears(story):
    node = story.pod("cpu-0")["spec"]["nodeName"]

    def gpu_problem(status: str) -> None:
        condition = {"type": "GPUProblem", "status": status, "reason": "XidError" if status == "True" else "NoProblem",
                     "message": "Xid 79 on GPU 1" if status == "True" else "ok",
                     "lastHeartbeatTime": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                     "lastTransitionTime": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
        # As node-problem-detector does: a strategic merge of status.conditions (keyed by type).
        story.kube.run("patch", "node", node, "--subresource=status", "--type=strategic",
                       "-p", json.dumps({"status": {"conditions": [condition]}}))

    gpu_problem("True")
    try:
        reason = story.wait_reason("cpu-0", lambda r: r != "", 90, "cpu-0 drained for GPUProblem")
        assert reason == f"kubeslurm: kubernetes node {node} has GPUProblem=True: Xid 79 on GPU 1", reason
        assert story.events("cpu", "NodeDrained"), "no NodeDrained Event on NodeSet cpu"
    finally:
        gpu_problem("False")
    story.wait_reason("cpu-0", lambda r: r == "", 90, "cpu-0 resumed once GPUProblem cleared")
    assert story.events("cpu", "NodeResumed"), "no NodeResumed Event on NodeSet cpu"


@pytest.mark.parametrize("kind", ["pod", "node"])
def test_the_drain_reason_annotation_drains_and_its_removal_resumes(story, kind):
    name = "cpu-0" if kind == "pod" else story.pod("cpu-0")["spec"]["nodeName"]
    where = ["-n", NAMESPACE] if kind == "pod" else []
    story.kube.run("annotate", "--overwrite", kind, name, *where, "kubeslurm.io/drain-reason=NVLink errors, RMA ticket 4711")
    try:
        reason = story.wait_reason("cpu-0", lambda r: r != "", 90, f"cpu-0 drained by the {kind}'s annotation")
        what = "pod cpu-0" if kind == "pod" else f"kubernetes node {name}"
        assert reason == f"kubeslurm: {what} kubeslurm.io/drain-reason: NVLink errors, RMA ticket 4711", reason
    finally:
        story.kube.run("annotate", kind, name, *where, "kubeslurm.io/drain-reason-")
    story.wait_reason("cpu-0", lambda r: r == "", 90, f"cpu-0 resumed once the {kind}'s annotation was removed")


# -- 4. controller failover ----------------------------------------------------------


HOLD_TAINT = "kubeslurm.io/e2e-hold-primary-slurmctld"


def test_controller_pod_deleted_no_job_lost(story):
    """The primary slurmctld's pod is deleted under a running 3-node job with others queued, and
    Kubernetes cannot place its new pod for now (every node tainted NoSchedule: as when its node is
    lost and no other has room; a deleted pod alone is back sooner than SlurmctldTimeout and takes
    no failover). The backup takes over, researchers keep submitting, no job is lost. Once the pod
    can be placed, the primary takes control back: what Slurm 24.11 does (a starting primary asks
    the backup to save state and return to standby), so the backup is standby again, not restarted."""
    kube = story.kube
    config = story.sh("scontrol show config")
    slurmctld_timeout = int(re.search(r"^SlurmctldTimeout\s*=\s*(\d+)", config, re.M).group(1))
    assert slurmctld_timeout < 120, "a backup takes over after 120 s (Slurm's default) without the operator's default"
    wait_for(lambda: (controller_pings(story) == {"primary": "UP", "backup": "UP"}, controller_pings(story)),
             120, "primary and backup slurmctld answering")
    primary, backup = story.pod(CONTROLLER), story.pod(BACKUP_CONTROLLER)
    assert primary["spec"]["nodeName"] != backup["spec"]["nodeName"], "primary and backup slurmctld share a node"
    backup_restarts = container_restarts(backup, "slurmctld")

    running = story.sbatch("-p cpu -N3 --wrap 'sleep 60'")
    story.wait_running(running)
    queued = [story.sbatch("-p cpu --wrap 'sleep 2'") for _ in range(3)]
    before = squeue_states(story)
    assert before.get(running) == "RUNNING" and all(before.get(j) == "PENDING" for j in queued), before

    kube.run("taint", "nodes", "--all", "--overwrite", f"{HOLD_TAINT}=true:NoSchedule")
    try:
        deleted_at = datetime.now(timezone.utc)
        t0 = time.monotonic()
        kube.run("delete", "pod", CONTROLLER, "-n", NAMESPACE, "--wait=false")

        def backup_in_control():
            pings = controller_pings(story)
            if pings != {"primary": "DOWN", "backup": "UP"}:
                return False, pings
            # A standby backup answers pings but refuses squeue (the client retries it for 1.5 x
            # SlurmctldTimeout); with the primary gone, an answer comes from the backup in control.
            result = kube.exec(NAMESPACE, LOGIN, "login", ["squeue", "-h", "-o", "%i %T"], check=False)
            return result.returncode == 0, (pings, result.stderr.strip()[-200:])
        wait_for(backup_in_control, 4 * slurmctld_timeout + 120, "the backup slurmctld in control")
        seen_after = time.monotonic() - t0
        log = kube.run("logs", "-n", NAMESPACE, BACKUP_CONTROLLER, "-c", "slurmctld", "--timestamps").stdout
        took_over = [line for line in log.splitlines() if "taking over" in line]
        assert took_over, log[-3000:]
        took_over_at = datetime.fromisoformat(took_over[-1].split()[0].replace("Z", "+00:00"))
        print(f"\nbackup slurmctld took over {(took_over_at - deleted_at).total_seconds():.0f} s after the "
              f"primary's pod was deleted (its log; SlurmctldTimeout={slurmctld_timeout}); squeue answered "
              f"from the login pod after {seen_after:.0f} s", flush=True)

        # Under the backup: every job is still there, and a researcher's sbatch works.
        states = {job: story.job_state(job) for job in [running, *queued]}
        assert all(state in ("RUNNING", "PENDING", "CONFIGURING", "COMPLETING", "COMPLETED") for state in states.values()), states
        during = story.sbatch("-p cpu --wrap 'sleep 30'")
        assert story.job_state(during) in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETED"), during
        # The operator reaches Slurm through the backup's pod: the cluster is Ready without the primary.
        def cluster_ready():
            conditions = kube.get("slurmcluster", CLUSTER, "-n", NAMESPACE)["status"].get("conditions", [])
            ready = next((c for c in conditions if c["type"] == "Ready"), {})
            return ready.get("status") == "True", ready
        wait_for(cluster_ready, 180, "the SlurmCluster Ready while the backup is in control")
        # The backup schedules: the running job ends and the queued ones run, all while the primary is away.
        story.wait_jobs([running, *queued], timeout=300)
        assert not pod_ready(story.pod(CONTROLLER)), "the primary came back before the backup was seen working"
        boot_of_backup = controller_boot_time(story)
    finally:
        released = time.monotonic()
        untainted = kube.run("taint", "nodes", "--all", f"{HOLD_TAINT}-", check=False)
        if untainted.returncode != 0:
            print(f"removing taint {HOLD_TAINT}: {untainted.stderr.strip()}", flush=True)

    wait_for(lambda: (pod_ready(story.pod(CONTROLLER)), "not Ready"), 300, f"a new pod {CONTROLLER} Ready")

    def primary_in_control():
        pings, boot = controller_pings(story), controller_boot_time(story)
        # BOOT_TIME is that of the slurmctld that answered: the backup's until the new primary rules.
        return pings == {"primary": "UP", "backup": "UP"} and boot > boot_of_backup, (pings, boot, boot_of_backup)
    wait_for(primary_in_control, 300, "the primary slurmctld in control again, the backup standing by")
    print(f"primary slurmctld back in control {time.monotonic() - released:.0f} s after its pod could be placed again",
          flush=True)
    log = kube.run("logs", "-n", NAMESPACE, BACKUP_CONTROLLER, "-c", "slurmctld").stdout
    assert "REQUEST_CONTROL" in log.split("taking over")[-1], log[-3000:]
    assert container_restarts(story.pod(BACKUP_CONTROLLER), "slurmctld") == backup_restarts
    # sbatch works with the primary back; every job of the chapter completes.
    after = story.sbatch("-p cpu --wrap true")
    story.wait_jobs([running, *queued, during, after], timeout=300)


def controller_pings(story) -> dict[str, str]:
    """`scontrol ping` from the login pod: {"primary": "UP"|"DOWN", "backup": ...}."""
    out = story.sh("scontrol ping", check=False)
    return dict(re.findall(r"^Slurmctld\((\w+)\) at \S+ is (UP|DOWN)$", out, re.M))


def controller_boot_time(story) -> str:
    """BOOT_TIME of the slurmctld in control (ISO 8601: compares as text)."""
    match = re.search(r"^BOOT_TIME\s*=\s*(\S+)", story.sh("scontrol show config"), re.M)
    return match.group(1) if match else ""


def squeue_states(story) -> dict[str, str]:
    """squeue: job id -> state."""
    return dict(line.split() for line in story.sh("squeue -h -o '%i %T'").splitlines() if line.strip())


def container_restarts(pod: dict, container: str) -> int:
    return next(c["restartCount"] for c in pod["status"]["containerStatuses"] if c["name"] == container)


# -- 5. node replacement -------------------------------------------------------------


def test_slurmd_pod_deleted_comes_back_and_its_job_is_requeued(story):
    job = story.sbatch("-p cpu -w cpu-1 --wrap 'sleep 30'")
    story.wait_running(job)
    story.replace_pod("cpu-1")
    story.wait_nodes({"cpu-1"}, USABLE, 120, "cpu-1 usable again in sinfo")
    story.wait_jobs([job], timeout=REQUEUE_TIMEOUT)
    history = story.sh(f"sacct -n -D -X -P -j {job} -o State,NodeList").split()
    # The first run ended with its node; the requeued one completed on the same Slurm node name.
    assert history[-1] == "COMPLETED|cpu-1" and len(history) >= 2, history


def test_the_files_outlive_the_login_pod_and_a_replaced_slurmd_pod(story):
    """cpu-1 was replaced in the chapter above; now the login pod too. The files are still there,
    the same on both sides."""
    before = story.sh("cd ~/runs && md5sum * | sort", user="alice")
    story.replace_pod(LOGIN)
    wait_for(lambda: (story.sh("cd ~/runs && md5sum * | sort", user="alice", check=False) == before, "files"),
             120, "the same files in the new login pod")
    job = story.sbatch_to("-p cpu -w cpu-1 -o ~/runs/check-%j.txt --wrap 'md5sum ~/runs/where.sh'")
    story.wait_jobs([job], timeout=120)
    seen_on_node = story.sh(f"cat ~/runs/check-{job}.txt", user="alice").split()[0]
    assert f"{seen_on_node}  where.sh" in before, (seen_on_node, before)


# -- 6. scale down while the node to be removed runs a job ---------------------------


def test_scale_down_lets_the_running_job_finish_first(story):
    job = story.sbatch("-p cpu -w cpu-2 --wrap 'sleep 40'")
    story.wait_running(job)
    story.kube.run("scale", "nodeset", "cpu", "-n", NAMESPACE, "--replicas=2")
    story.wait_nodes({"cpu-2"}, ("drng",), 60, "cpu-2 draining")
    assert story.pod("cpu-2") is not None and story.job_state(job) == "RUNNING"
    story.wait_jobs([job], timeout=120)
    wait_for(lambda: (story.pod("cpu-2") is None, "pod cpu-2 still there"), 180, "pod cpu-2 gone")
    wait_for(lambda: ("cpu-2" not in story.nodes(), "cpu-2 still in sinfo"), 120, "cpu-2 gone from sinfo")


def test_lost_node_its_slurmd_pod_returns_on_another_and_the_job_completes(story, kube):
    """A Kubernetes node with a slurmd pod is lost (the operator and slurmctld elsewhere: losing
    them at the same time is the fault matrix's double fault). The operator sees the Node gone and
    marks the Slurm node DOWN, so Slurm requeues its job now instead of after SlurmdTimeout."""
    client, local = kube
    if not local:
        pytest.skip("powers off a node of the local cluster")
    from testbed.local_cluster import LocalCluster

    def pods_on(node):
        return sorted(p["metadata"]["name"] for p in client.get("pods", "-A", "--field-selector", f"spec.nodeName={node}")["items"])
    slurmd = None
    for name in ("cpu-1", "cpu-0", "h100-0"):
        node = story.pod(name)["spec"]["nodeName"]
        if not any(p.startswith((deployment.OPERATOR_RELEASE, CONTROLLER)) for p in pods_on(node)):
            slurmd = name
            break
    assert slurmd, "every slurmd pod shares its node with the operator or slurmctld"
    partition = "gpu" if slurmd.startswith("h100") else "cpu"
    job = story.sbatch(f"-p {partition} -w {slurmd} --wrap 'sleep 30'")
    story.wait_running(job)
    lost = story.pod(slurmd)["spec"]["nodeName"]
    print(f"\npowering off {lost}, which runs {pods_on(lost)}", flush=True)
    LocalCluster().power_off(lost)
    try:
        # What a cloud provider's node controller does once the machine is gone: the Node object goes,
        # and the pod garbage collector deletes the pods bound to it, so the StatefulSet makes the pod anew.
        client.run("delete", "node", lost)

        def requeued():
            out = story.sh(f"scontrol show job {job} --oneliner", check=False)
            restarts = re.search(r"Restarts=(\d+)", out)
            return bool(restarts and int(restarts.group(1)) >= 1), out.strip()[:300]
        wait_for(requeued, 120, f"job {job} requeued once {lost} is gone")

        def moved():
            pod = story.pod(slurmd)
            node = pod and pod["spec"].get("nodeName")
            return node not in (None, lost) and pod_ready(pod), node
        wait_for(moved, 300, f"{slurmd} Ready on a node other than {lost}")
        story.wait_nodes({slurmd}, USABLE, 180, f"{slurmd} usable again in sinfo")
        story.wait_jobs([job], timeout=REQUEUE_TIMEOUT)
        events = story.kube.run("get", "events", "-n", NAMESPACE, "--field-selector", "reason=SlurmdLost",
                                "-o", "jsonpath={.items[*].message}").stdout
        assert f"{slurmd} marked DOWN" in events, events
    except AssertionError:
        _print_lost_node_diagnostics(story, job, slurmd)
        raise
    finally:
        # The machine boots again: its kubelet registers the Node anew, and the cluster goes on
        # with all its nodes (the chapters after this one, and the next run, need them).
        LocalCluster().power_on(lost)
    print(f"{lost} powered on and Ready again", flush=True)


def _print_lost_node_diagnostics(story, job: str, slurmd: str) -> None:
    """What Slurm and the operator did, for a failure that needs explaining."""
    for what, command in (
        ("sacct", ["sh", "-c", f"sacct -D -j {job} -o JobID,State,Start,End,NodeList,Reason%30 -P"]),
        ("scontrol", ["sh", "-c", f"scontrol show job {job} --oneliner; scontrol show node {slurmd} --oneliner"]),
    ):
        result = story.kube.exec(NAMESPACE, LOGIN, "login", command, check=False)
        print(f"---- {what}\n{result.stdout}{result.stderr}")
    log = story.kube.run("logs", "-n", NAMESPACE, CONTROLLER, "-c", "slurmctld", "--tail=400", check=False).stdout
    print("---- slurmctld\n" + "\n".join(line for line in log.splitlines() if f"={job}" in line or slurmd in line))
    log = story.kube.run("logs", "-n", deployment.OPERATOR_NAMESPACE, f"deployment/{deployment.OPERATOR_RELEASE}",
                         "--tail=200", check=False).stdout
    print("---- operator\n" + log[-6000:])


# -- 7. config change ----------------------------------------------------------------


def test_added_partition_reaches_slurm_without_losing_running_jobs(story):
    def sackd_restarts():
        return next(c["restartCount"] for c in story.pod(LOGIN)["status"]["containerStatuses"] if c["name"] == "sackd")
    login_before = (story.pod(LOGIN)["metadata"]["uid"], sackd_restarts())
    running = story.sbatch("-p cpu -w cpu-0 --wrap 'sleep 30'")
    story.wait_running(running)
    patch = [{"op": "add", "path": "/spec/partitions/-",
              "value": {"name": "debug", "nodeSets": ["cpu"], "maxTime": "00:30:00"}}]
    story.kube.run("patch", "slurmcluster", CLUSTER, "-n", NAMESPACE, "--type=json", "-p", json.dumps(patch))
    def debug_partition():
        out = story.sh("sinfo -h -p debug -o '%P %D'", check=False).strip()
        return out == "debug 2", out
    wait_for(debug_partition, 300, "partition debug with 2 nodes in sinfo")
    # slurmd has it too (configless: reconfigure pushes the new files to every node).
    for node in ("cpu-0", "h100-0"):
        wait_for(lambda: (story.kube.exec(NAMESPACE, node, "slurmd", [
            "sh", "-c", f"grep -h '^PartitionName=debug' /var/spool/slurmd/{node}/conf-cache/slurm.conf"],
            check=False).returncode == 0, node), 120, f"{node}'s cached slurm.conf has partition debug")
    # The running login pod got it too: slurmctld pushes it to sackd (which runs as SlurmUser), no restart.
    wait_for(lambda: (story.kube.exec(NAMESPACE, LOGIN, "login", [
        "grep", "-q", "^PartitionName=debug", "/run/slurm/conf/slurm.conf"], check=False).returncode == 0, LOGIN),
        120, "the login pod's slurm.conf has partition debug")
    assert (story.pod(LOGIN)["metadata"]["uid"], sackd_restarts()) == login_before
    story.wait_jobs([story.sbatch("-p debug --wrap true")], timeout=120)
    story.wait_jobs([running], timeout=120)


# -- data safety: the accounting history survives a spec edit ---------------------------


def test_moving_the_database_outside_and_back_keeps_the_accounting_history(story):
    """An edit that prunes the MariaDB StatefulSet (here: an external database) keeps its claim;
    moving back, sacct still has every job from before (the count below checks each one)."""
    kube = story.kube
    claim = kube.get("pvc", "data-research-mariadb-0", "-n", NAMESPACE)
    before = set(story.sh(f"sacct -a -n -X -P -S {story.started} -o JobID").split())
    assert claim is not None and before
    kube.run("create", "secret", "generic", "site-db", "-n", NAMESPACE, "--from-literal=password=site-db-password")

    def move(database):
        kube.run("patch", "slurmcluster", CLUSTER, "-n", NAMESPACE, "--type=json", "-p",
                 json.dumps([{"op": "replace", "path": "/spec/accounting/database", "value": database}]))
    move({"external": {"host": "db.example.invalid", "passwordSecretRef": {"name": "site-db"}}})
    wait_for(lambda: (kube.get("statefulset", "research-mariadb", "-n", NAMESPACE) is None, "still there"),
             180, "the MariaDB StatefulSet pruned")
    kept = kube.get("pvc", "data-research-mariadb-0", "-n", NAMESPACE)
    assert kept is not None and kept["metadata"]["uid"] == claim["metadata"]["uid"]
    move({"internal": {"size": "2Gi"}})

    def history_back():
        out = story.sh(f"sacct -a -n -X -P -S {story.started} -o JobID", check=False)
        return before <= set(out.split()), out[-200:]
    wait_for(history_back, 420, "sacct with every job from before, from the same database")
    kube.run("delete", "secret", "site-db", "-n", NAMESPACE)  # the site's own Secret: the operator never owns it


# -- the count: every submitted job COMPLETED ---------------------------------------


def test_every_submitted_job_completed(story):
    # slurmdbd may be on its way back from the lost node: self-healing, not a manual step.
    summary = story.ledger.settle(180)
    print(summary.line("the story"), flush=True)
    assert summary.lost == [] and summary.unexpected == [], summary.line("the story")


# -- 8. delete the SlurmCluster --------------------------------------------------------


KINDS = "statefulsets,pods,services,configmaps,secrets,persistentvolumeclaims,poddisruptionbudgets,networkpolicies"
HOME_CLAIM = f"PersistentVolumeClaim/{CLUSTER}-home"


def _left(story) -> list[str]:
    items = story.kube.get(KINDS, "-n", NAMESPACE)["items"]
    return [f"{i['kind']}/{i['metadata']['name']}" for i in items if i["metadata"]["name"] != "kube-root-ca.crt"]


def test_deleting_the_cluster_removes_every_object_but_the_homes(story):
    story.kube.run("delete", "secret", "research-keys", "-n", NAMESPACE, "--ignore-not-found")  # the site's own
    story.kube.run("delete", "slurmcluster", CLUSTER, "-n", NAMESPACE, "--timeout=300s")
    story.kube.run("delete", "nodesets", "--all", "-n", NAMESPACE, "--timeout=300s")
    # the home claim holds the researchers' files: kept (spec.storage.home.newClaim.keepOnDelete)
    wait_for(lambda: (_left(story) == [HOME_CLAIM], _left(story)), 300, "every object of the cluster gone but its homes")


def test_the_cluster_made_again_finds_the_old_homes(story):
    documents = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    for document in documents:
        document["metadata"]["namespace"] = NAMESPACE
    story.kube.apply("\n---\n".join(yaml.safe_dump(d) for d in documents))
    wait_for(lambda: (pod_ready(story.pod(LOGIN)), "login pod not Ready"), READY_TIMEOUT, "the new login pod Ready")
    assert story.sh("cat ~/runs/where.sh", user="alice") == WHERE_SCRIPT
    assert story.sh("stat -c '%a %U' $HOME", user="alice").split() == ["700", "alice"]
    # and now away with everything, the homes too
    story.kube.run("delete", "slurmcluster", CLUSTER, "-n", NAMESPACE, "--timeout=300s")
    story.kube.run("delete", "nodesets", "--all", "-n", NAMESPACE, "--timeout=300s")
    story.kube.run("delete", "pvc", f"{CLUSTER}-home", "-n", NAMESPACE, "--timeout=120s")
    wait_for(lambda: (not _left(story), _left(story)), 300, "every object of the cluster gone")
