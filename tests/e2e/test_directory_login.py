"""Researchers known from the site's directory log in with ssh as themselves (spec.identity ldap).

A real directory (slapd from localhost/kubeslurm/ldap, testbed/directory.py) runs in the
namespace, seeded with alice (in the login group `researchers` and in `physics`), bob (a
directory user outside the login group) and their ssh keys; a small SlurmCluster `lab` reads
it through SSSD in every Slurm pod (one cpu node, accounting, a shared home). Every Slurm
command here is run the way a researcher runs it: `ssh` from this host, outside every pod,
to the login Service's NodePort, with strict host-key checking. Chapters run in file order.

Its own chapter file, not part of the story: the story's cluster is in local mode and its
chapters take their time; this one needs a cluster of its own and about five minutes.
"""

from __future__ import annotations

import time

import pytest
import yaml

from testbed import deployment
from testbed.directory import Directory, DirectoryGroup, DirectoryUser
from testbed.kubectl import Kube
from testbed.ssh_client import Ssh, key_pair
from tests.e2e.test_story import pod_ready, wait_for

pytestmark = pytest.mark.e2e

NAMESPACE = "e2e-directory"
CLUSTER = "lab"
LOGIN = f"{CLUSTER}-login-0"
READY_TIMEOUT = 600
RESEARCHERS = DirectoryGroup("researchers", 30001, ("alice",))
PHYSICS = DirectoryGroup("physics", 30002, ("alice",))
ALICE_ID = "uid=20001(alice) gid=20001(alice) groups=20001(alice),30001(researchers),30002(physics)"
# Bounded time for a user added to the directory: SSSD's negative cache (10 s in Directory.spec)
# plus the login pod's first lookup; generous for a 2-core machine.
NEW_USER_WITHIN = 120


def cluster_manifest(directory: Directory) -> list[dict]:
    cluster = {
        "apiVersion": "kubeslurm.io/v1alpha1", "kind": "SlurmCluster", "metadata": {"name": CLUSTER, "namespace": NAMESPACE},
        "spec": {
            "identity": directory.spec(login_groups=["researchers"]),
            "login": {"ssh": {"service": {"type": "NodePort"}}},
            "storage": {"home": {"newClaim": {"size": "1Gi", "keepOnDelete": False}}},
            # carol joins the directory later; dave never does
            "accounts": [{"name": "physics", "users": ["alice", "carol", "dave"]}],
            "partitions": [{"name": "cpu", "nodeSets": ["cpu"], "default": True}],
        },
    }
    node_set = {"apiVersion": "kubeslurm.io/v1alpha1", "kind": "NodeSet", "metadata": {"name": "cpu", "namespace": NAMESPACE},
                "spec": {"clusterName": CLUSTER, "replicas": 1, "resources": {"cpu": "1", "memory": "1Gi"}}}
    return [cluster, node_set]


class Site:
    def __init__(self, kube: Kube, directory: Directory, ssh: Ssh, keys: dict):
        self.kube, self.directory, self.ssh, self.keys = kube, directory, ssh, keys

    def as_user(self, user: str, command: str, key: str | None = None):
        return self.ssh.run(user, self.keys[key or user], command)

    def cluster(self) -> dict:
        return self.kube.get("slurmcluster", CLUSTER, "-n", NAMESPACE)


@pytest.fixture(scope="module")
def site(kube, operator, tmp_path_factory):
    client, _local = kube
    # helm installs CRDs only when absent: a cluster that ran an older operator has no spec.identity
    client.run("apply", "--server-side", "--force-conflicts", "--field-manager=kubeslurm-e2e", "-f", str(deployment.ROOT / "crds"))
    client.run("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=300s")
    client.ensure_namespace(NAMESPACE, deployment.TEST_NAMESPACE_LABELS)
    keys_dir = tmp_path_factory.mktemp("directory-keys")
    keys = {name: key_pair(keys_dir, name) for name in ("alice", "bob", "carol", "stranger")}
    public = {name: (keys_dir / f"{name}.pub").read_text().strip() for name in keys}
    directory = Directory(client, NAMESPACE)
    directory.deploy([DirectoryUser("alice", 20001, ssh_key=public["alice"]), DirectoryUser("bob", 20002, ssh_key=public["bob"])],
                     [RESEARCHERS, PHYSICS])
    client.apply("\n---\n".join(yaml.safe_dump(d) for d in cluster_manifest(directory)))
    deployment.wait_usable(client, NAMESPACE, CLUSTER, READY_TIMEOUT, report=lambda line: print(line, flush=True))
    service = client.get("service", f"{CLUSTER}-ssh", "-n", NAMESPACE)
    node = client.get("nodes")["items"][0]
    address = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
    yield Site(client, directory, Ssh(keys_dir, address, service["spec"]["ports"][0]["nodePort"]), keys)
    # waited for: the story's chapters need every node's CPUs
    client.run("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=300s", check=False)


def test_a_directory_user_logs_in_with_ssh_and_runs_slurm_with_the_directory_s_ids(site):
    first = wait_for(lambda: ((r := site.ssh.run("alice", site.keys["alice"], "id; pwd; sinfo -h -o %P", first=True)).returncode == 0,
                              r.stdout + r.stderr), 120, "ssh alice@<login Service>")
    lines = first.splitlines()
    assert lines[:2] == [ALICE_ID, "/home/alice"] and "cpu*" in lines[2], first  # her home made at her first login
    job = site.as_user("alice", "sbatch --parsable --wait -o ~/id-%j.out --wrap 'id; hostname'")
    assert job.returncode == 0, job.stdout + job.stderr
    job_id = job.stdout.strip().splitlines()[-1]
    listed = site.as_user("alice", f"cat ~/id-{job_id}.out; stat -c %U:%G:%a ~; squeue -h -u alice; "
                                   f"sacct -n -X -j {job_id} -o User,Account,State -P")
    # the job ran on the compute node with slapd's uid, gid and groups, charged to her account
    assert listed.stdout.splitlines() == [ALICE_ID, "cpu-0", "alice:alice:700", "alice|physics|COMPLETED"], listed.stdout + listed.stderr


def test_a_wrong_key_another_user_root_and_passwords_are_refused(site):
    for user, key in (("alice", "stranger"), ("mallory", "alice"), ("root", "alice")):
        refused = site.as_user(user, "id", key=key)
        assert refused.returncode == 255 and "Permission denied" in refused.stderr, (user, key, refused.stderr)
    # bob is in the directory with his own key, but not in the login group researchers: his key is
    # accepted, then PAM's account phase (SSSD's access provider) refuses him and sshd closes the connection
    bob = site.as_user("bob", "id", key="bob")
    assert bob.returncode == 255 and "uid=" not in bob.stdout, bob.stdout + bob.stderr
    assert "Permission denied" in bob.stderr or "closed" in bob.stderr, bob.stderr
    password = site.ssh.password_login("alice")
    assert password.returncode == 255 and "Permission denied (publickey)" in password.stderr, password.stderr


def test_the_researcher_cannot_read_the_slurm_key_or_the_bind_password_or_become_root(site):
    login = site.as_user("alice", "for f in /etc/slurm/slurm.key /etc/sssd/sssd.conf /etc/sssd-secret/sssd.conf; do "
                                  "cat $f >/dev/null 2>&1 && echo READ $f; done; "
                                  "touch /var/lib/sss/pipes/x 2>/dev/null && echo WROTE; su -c id root </dev/null 2>&1 | tail -1; echo done")
    assert "READ" not in login.stdout and "WROTE" not in login.stdout and "uid=0" not in login.stdout, login.stdout
    job = site.as_user("alice", "srun -p cpu sh -c 'cat /etc/slurm/slurm.key >/dev/null 2>&1 && echo READ-KEY; "
                                "cat /etc/sssd/sssd.conf >/dev/null 2>&1 && echo READ-SSSD; id -u'")
    assert job.returncode == 0 and job.stdout.split() == ["20001"], job.stdout + job.stderr


def test_an_account_user_absent_from_the_directory_is_reported_in_status_and_an_event(site):
    def reported():
        found = next((c for c in site.cluster().get("status", {}).get("conditions", []) if c["type"] == "AccountUsersInDirectory"), None)
        return bool(found) and found["status"] == "False", found
    condition = wait_for(reported, 120, "the AccountUsersInDirectory condition")
    assert "carol (account physics), dave (account physics)" in condition["message"], condition
    events = site.kube.get("events", "-n", NAMESPACE, "--field-selector", f"involvedObject.name={CLUSTER},reason=UsersNotInDirectory")
    assert any("dave (account physics)" in e["message"] for e in events["items"]), events


def test_a_user_added_to_the_directory_logs_in_and_submits_in_bounded_time_without_restarts(site):
    restarts_before = _restarts(site.kube)
    carol_key = (site.ssh.directory / "carol.pub").read_text().strip()
    t0 = time.monotonic()
    site.directory.add_user(DirectoryUser("carol", 20003, ssh_key=carol_key), also_in=[RESEARCHERS])
    out = wait_for(lambda: ((r := site.as_user("carol", "sbatch --parsable --wait -o /dev/null --wrap 'id -un' && id -un")).returncode == 0,
                            r.stdout + r.stderr), NEW_USER_WITHIN, "carol's ssh login and job")
    print(f"\ncarol logged in and her job completed {time.monotonic() - t0:.0f} s after she was added to the directory")
    assert out.split()[-1] == "carol"
    assert _restarts(site.kube) == restarts_before, "a pod restarted"

    def only_dave():
        found = next(c for c in site.cluster()["status"]["conditions"] if c["type"] == "AccountUsersInDirectory")
        return "carol" not in found["message"] and "dave" in found["message"], found
    wait_for(only_dave, 120, "the condition naming dave only")


def test_after_the_login_pod_is_replaced_ssh_connects_with_strict_host_key_checking(site):
    old = site.kube.get("pod", LOGIN, "-n", NAMESPACE)["metadata"]["uid"]
    site.kube.run("delete", "pod", LOGIN, "-n", NAMESPACE, "--wait=false")
    wait_for(lambda: ((p := site.kube.get("pod", LOGIN, "-n", NAMESPACE)) is not None and p["metadata"]["uid"] != old
                      and pod_ready(p), p and p["status"].get("phase")), 300, "a new login pod Ready")
    again = wait_for(lambda: ((r := site.as_user("alice", "id -un; ls ~")).returncode == 0, r.stdout + r.stderr), 120,
                     "ssh to the new login pod, strict host-key checking")
    assert again.split()[0] == "alice" and any(name.startswith("id-") for name in again.split()[1:]), again


def _restarts(kube: Kube) -> dict[str, int]:
    pods = kube.get("pods", "-n", NAMESPACE)["items"]
    return {p["metadata"]["name"] + "/" + p["metadata"]["uid"]: sum(c.get("restartCount", 0) for c in
            p["status"].get("containerStatuses", []) + p["status"].get("initContainerStatuses", [])) for p in pods}

