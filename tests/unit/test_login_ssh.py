"""sshd in the login pods: the command that pins key-only login, the host key and users' keys, the Service."""

import pytest

from kubeslurm.api import ManifestError

from .manifests import contract_documents, load_with_uids, set_path
from .test_objects_cluster import everything, find

CLUSTER, GPU_NODES, CPU_NODES = contract_documents()


def _login(objects) -> dict:
    pod = find(objects, "StatefulSet", "research-login")["spec"]["template"]["spec"]
    return pod


def test_sshd_runs_in_the_sessions_container_with_key_login_only():
    pod = _login(everything(set_path(CLUSTER, "spec.login.ssh.authorizedKeysSecret", "research-keys")))
    login = next(c for c in pod["containers"] if c["name"] == "login")
    command = login["command"]
    assert command[:3] == ["/usr/sbin/sshd", "-D", "-e"]
    options = dict(arg.split("=", 1) for arg in command[4::2])
    assert all(flag == "-o" for flag in command[3::2])
    assert options["PermitRootLogin"] == "no" and options["PasswordAuthentication"] == "no"
    assert options["KbdInteractiveAuthentication"] == "no"
    assert options["HostKey"] == "/etc/ssh/kubeslurm-host-key/ssh_host_ed25519_key"
    assert options["AuthorizedKeysFile"] == "/etc/ssh/kubeslurm-authorized-keys/%u"
    assert login["securityContext"] == {"runAsUser": 0, "allowPrivilegeEscalation": False}  # no_new_privs for sessions
    assert login["readinessProbe"]["tcpSocket"]["port"] == 22
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["ssh-host-key"]["secret"] == {"secretName": "research-ssh-host-keys", "defaultMode": 0o400}
    assert volumes["authorized-keys"]["secret"] == {"secretName": "research-keys", "defaultMode": 0o444}
    mounts = {m["mountPath"]: m for m in login["volumeMounts"]}
    assert mounts["/etc/ssh/kubeslurm-host-key"]["readOnly"] and mounts["/etc/ssh/kubeslurm-authorized-keys"]["readOnly"]
    # sackd, which holds the Slurm key, has neither
    sackd = next(c for c in pod["containers"] if c["name"] == "sackd")
    assert not {"ssh-host-key", "authorized-keys"} & {m["name"] for m in sackd["volumeMounts"]}


def test_without_a_keys_secret_nobody_has_keys_yet():
    volumes = {v["name"]: v for v in _login(everything())["volumes"]}
    assert volumes["authorized-keys"] == {"name": "authorized-keys", "emptyDir": {}}


def test_ssh_off_keeps_the_login_pod_as_it_was_and_makes_no_service():
    objects = everything(set_path(CLUSTER, "spec.login.ssh.enabled", False))
    login = next(c for c in _login(objects)["containers"] if c["name"] == "login")
    assert login["command"] == ["sleep", "infinity"] and "readinessProbe" not in login
    assert find(objects, "Service", "research-ssh") is None


def test_the_ssh_service_has_the_type_port_and_annotations_asked_for():
    service_spec = {"type": "LoadBalancer", "nodePort": 30022, "annotations": {"example.com/lb": "internal"}}
    service = find(everything(set_path(CLUSTER, "spec.login.ssh.service", service_spec)), "Service", "research-ssh")
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["spec"]["ports"] == [{"name": "ssh", "port": 22, "targetPort": 22, "protocol": "TCP", "nodePort": 30022}]
    assert service["metadata"]["annotations"] == {"example.com/lb": "internal"}
    assert service["metadata"]["ownerReferences"][0]["kind"] == "SlurmCluster"


@pytest.mark.parametrize("ssh,words", [
    ({"service": {"type": "ClusterIP", "nodePort": 30022}}, "a ClusterIP Service has no node port"),
    ({"service": {"type": "NodePort", "nodePort": 22}}, "nodePort"),
    ({"service": {"annotations": {"a": "line\nbreak"}}}, "annotations"),
    ({"authorizedKeysSecret": "Keys With Spaces"}, "authorizedKeysSecret"),
])
def test_bad_ssh_settings_are_refused_naming_the_field(ssh, words):
    with pytest.raises(ManifestError, match=words):
        load_with_uids(set_path(CLUSTER, "spec.login.ssh", ssh), GPU_NODES, CPU_NODES)
