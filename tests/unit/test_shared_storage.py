"""spec.storage: the shared home and volumes in the login and slurmd pods, the claims the operator
makes for them, the homes made on them, and what only the operator can check (storage_check)."""

import pytest

from kubeslurm.api import ManifestError
from kubeslurm.reconcile.apply_objects import _kept_by_us
from kubeslurm.reconcile.storage_check import claim_problems, node_set_mount_conflict

from .manifests import DELETE, contract_documents, load_with_uids, set_path
from .test_objects_cluster import everything, find

CLUSTER, GPU_NODES, CPU_NODES = contract_documents()
NEW_HOME = {"home": {"newClaim": {"size": "100Gi", "storageClassName": "shared"}}}
SITE = {
    "home": {"mountPath": "/users", "existingClaim": {"name": "homes"}},
    "volumes": [
        {"name": "datasets", "mountPath": "/datasets", "readOnly": True, "nfs": {"server": "nfs.example.org", "path": "/export/ds"}},
        {"name": "scratch", "mountPath": "/scratch", "newClaim": {"size": "1Ti", "keepOnDelete": False}},
    ],
}


def _with(storage) -> dict:
    return set_path(CLUSTER, "spec.storage", storage)


def _pod(objects, statefulset):
    return find(objects, "StatefulSet", statefulset)["spec"]["template"]["spec"]


def _mounts(container) -> dict[str, dict]:
    return {m["mountPath"]: m for m in container["volumeMounts"]}


def _volumes(pod) -> dict[str, dict]:
    return {v["name"]: v for v in pod["volumes"]}


def test_without_storage_each_pod_has_its_own_home_as_before():
    objects = everything()
    assert not [o for o in objects if o["kind"] == "PersistentVolumeClaim" and "home" in o["metadata"]["name"]]
    for statefulset in ("research-login", "h100", "research-controller"):
        pod = _pod(objects, statefulset)
        assert _volumes(pod)["home"] == {"name": "home", "emptyDir": {}}
        assert _mounts(pod["containers"][0])["/home"]["name"] == "home"


def test_a_new_home_claim_is_read_write_many_and_kept_when_the_cluster_goes():
    objects = everything(_with(NEW_HOME))
    claim = find(objects, "PersistentVolumeClaim", "research-home")
    assert claim["spec"] == {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "100Gi"}}, "storageClassName": "shared"}
    assert "ownerReferences" not in claim["metadata"]  # garbage collection leaves it
    assert claim["metadata"]["labels"]["kubeslurm.io/cluster"] == "research"
    assert claim["metadata"]["labels"]["app.kubernetes.io/component"] == "storage"
    owned = everything(set_path(_with(NEW_HOME), "spec.storage.home.newClaim.keepOnDelete", False))
    assert find(owned, "PersistentVolumeClaim", "research-home")["metadata"]["ownerReferences"][0]["kind"] == "SlurmCluster"


def test_login_and_slurmd_pods_mount_every_shared_volume_and_the_daemons_none():
    objects = everything(_with(SITE))
    for statefulset, container in (("research-login", "login"), ("h100", "slurmd"), ("cpu", "slurmd")):
        pod = _pod(objects, statefulset)
        volumes = _volumes(pod)
        assert volumes["home"] == {"name": "home", "persistentVolumeClaim": {"claimName": "homes"}}
        assert volumes["shared-datasets"] == {
            "name": "shared-datasets", "nfs": {"server": "nfs.example.org", "path": "/export/ds", "readOnly": True}}
        assert volumes["shared-scratch"] == {"name": "shared-scratch", "persistentVolumeClaim": {"claimName": "research-shared-scratch"}}
        mounts = _mounts(next(c for c in pod["containers"] if c["name"] == container))
        assert mounts["/users"] == {"name": "home", "mountPath": "/users"}
        assert mounts["/datasets"] == {"name": "shared-datasets", "mountPath": "/datasets", "readOnly": True}
        assert mounts["/scratch"] == {"name": "shared-scratch", "mountPath": "/scratch"}
    for statefulset in ("research-controller", "research-accounting"):
        pod = _pod(objects, statefulset)
        assert not {"shared-datasets", "shared-scratch"} & set(_volumes(pod))
        assert _volumes(pod)["home"] == {"name": "home", "emptyDir": {}}  # users' homes stay out of the daemons
    # sackd holds no users' files
    sackd = next(c for c in _pod(objects, "research-login")["containers"] if c["name"] == "sackd")
    assert "/users" not in _mounts(sackd)


def test_homes_are_made_once_with_mode_0700_on_the_shared_home_and_never_changed():
    objects = everything(_with(SITE))
    for statefulset in ("research-login", "h100"):
        init = _pod(objects, statefulset)["initContainers"][0]
        script = init["command"][-1]
        assert '  [ -e "/users/$name" ] || install -d -o "$uid" -g "$uid" -m 0700 "/users/$name"' in script
        assert '"$name:x:$uid:$uid:kubeslurm account user:/users/$name:/bin/bash"' in script
        assert _mounts(init)["/etc/kubeslurm-unix-users"]["name"] == "unix-users-table"  # the table of uids
        assert _mounts(init)["/users"]["name"] == "home"
        assert _mounts(init)["/scratch"]["name"] == "shared-scratch"  # to give a fresh claim its mode
        assert "/datasets" not in _mounts(init)  # read-only: nothing to prepare
        # the fresh operator-made scratch claim is opened to all (sticky), only while it is empty
        assert '[ -n "$(ls -A /scratch)" ] || chmod 1777 /scratch' in script
        assert "chmod 1777 /users" not in script and "chmod 0755 /users" not in script  # the site's claim: untouched


def test_a_fresh_operator_made_home_is_opened_for_traversal_before_the_homes_are_made():
    script = _pod(everything(_with(NEW_HOME)), "research-login")["initContainers"][0]["command"][-1]
    opened = script.index('[ -n "$(ls -A /home)" ] || chmod 0755 /home')
    assert opened < script.index("install -d -o")


def test_make_user_homes_off_leaves_the_shared_home_alone():
    objects = everything(set_path(_with(SITE), "spec.storage.home.makeUserHomes", False))
    for statefulset in ("research-login", "h100"):
        script = _pod(objects, statefulset)["initContainers"][0]["command"][-1]
        assert "install -d -o" not in script
        assert "kubeslurm account user:/users/$name" in script  # the users still exist


def test_a_pod_template_may_not_use_the_shared_volume_names():
    template = {"spec": {"volumes": [{"name": "shared-data", "emptyDir": {}}]}}
    with pytest.raises(ManifestError, match="shared-"):
        load_with_uids(CLUSTER, set_path(GPU_NODES, "spec.podTemplate", template))


@pytest.mark.parametrize("storage,words", [
    ({"home": {}}, "exactly one of existingClaim, newClaim, nfs"),
    ({"home": {"nfs": {"server": "a", "path": "/x"}, "newClaim": {"size": "1Gi"}}}, "exactly one"),
    ({"home": {"mountPath": "/etc/home", "nfs": {"server": "a", "path": "/x"}}}, "the Slurm image owns"),
    ({"home": {"mountPath": "/var", "nfs": {"server": "a", "path": "/x"}}}, "would hide"),
    ({"volumes": [{"name": "a", "mountPath": "/home/data", "nfs": {"server": "a", "path": "/x"}}]}, "overlaps the home path /home"),
    ({"volumes": [{"name": "a", "mountPath": "/data", "nfs": {"server": "a", "path": "/x"}},
                  {"name": "b", "mountPath": "/data/more", "nfs": {"server": "a", "path": "/y"}}]}, "overlaps /data of volume a"),
    ({"volumes": [{"name": "a", "mountPath": "/data", "nfs": {"server": "a", "path": "/x"}},
                  {"name": "a", "mountPath": "/other", "nfs": {"server": "a", "path": "/y"}}]}, "unique"),
    ({"home": {"newClaim": {"size": "lots"}}}, "size"),
])
def test_bad_storage_is_refused_naming_the_field(storage, words):
    with pytest.raises(ManifestError, match=words):
        load_with_uids(_with(storage), GPU_NODES, CPU_NODES)


def _claim(name, *modes, deleting=False):
    meta = {"name": name, **({"deletionTimestamp": "2026-12-03T00:00:00Z"} if deleting else {})}
    return {"metadata": meta, "spec": {"accessModes": list(modes)}}


@pytest.mark.parametrize("claims,problems", [
    ({"homes": _claim("homes", "ReadWriteMany")}, []),
    ({"homes": _claim("homes", "ReadWriteOnce", "ReadWriteMany")}, []),
    ({}, ["spec.storage.home.existingClaim.name: PersistentVolumeClaim hpc/homes does not exist"]),
    ({"homes": _claim("homes", "ReadWriteOnce")}, ["spec.storage.home.existingClaim.name: PersistentVolumeClaim hpc/homes has "
                                                   "access modes ['ReadWriteOnce'], but every login and slurmd pod mounts it"]),
    ({"homes": _claim("homes", "ReadOnlyMany")}, ["give it ReadWriteMany"]),
    ({"homes": _claim("homes", "ReadWriteMany", deleting=True)}, ["is being deleted"]),
])
def test_a_named_home_claim_must_exist_and_be_mountable_on_many_nodes(claims, problems):
    cluster, _ = load_with_uids(_with({"home": {"existingClaim": {"name": "homes"}}}), GPU_NODES, CPU_NODES)
    found = claim_problems(cluster, claims)
    assert len(found) == len(problems)
    for message, words in zip(found, problems):
        assert words in message


def test_a_read_only_volume_may_use_a_read_only_many_claim():
    storage = {"volumes": [{"name": "ds", "mountPath": "/datasets", "readOnly": True, "existingClaim": {"name": "ds"}}]}
    cluster, _ = load_with_uids(_with(storage), GPU_NODES, CPU_NODES)
    assert claim_problems(cluster, {"ds": _claim("ds", "ReadOnlyMany")}) == []
    writable, _ = load_with_uids(_with(set_path(storage, "volumes.0.readOnly", False)), GPU_NODES, CPU_NODES)
    assert "spec.storage.volumes[0].existingClaim.name" in claim_problems(writable, {"ds": _claim("ds", "ReadOnlyMany")})[0]


@pytest.mark.parametrize("mount_path,conflict", [("/scratch/job", True), ("/users", True), ("/", False), ("/local-scratch", False)])
def test_a_node_set_mount_may_not_shadow_a_shared_path(mount_path, conflict):
    template = {"spec": {
        "volumes": [{"name": "local", "emptyDir": {}}],
        "containers": [{"name": "slurmd", "volumeMounts": [{"name": "local", "mountPath": mount_path}]}],
    }}
    if mount_path == "/":
        template = DELETE  # no podTemplate at all
    cluster, [gpu] = load_with_uids(_with(SITE), set_path(GPU_NODES, "spec.podTemplate", template))
    found = node_set_mount_conflict(cluster, gpu)
    assert bool(found) == conflict
    if conflict:
        assert found.startswith("spec.podTemplate.spec.containers[0].volumeMounts[0].mountPath")
        assert "SlurmCluster research" in found


OURS = {"kubeslurm.io/cluster": "research", "app.kubernetes.io/managed-by": "kubeslurm", "app.kubernetes.io/component": "storage"}


@pytest.mark.parametrize("live_meta,kept", [
    ({"labels": dict(OURS)}, True),  # kept by the cluster's previous life: taken back
    ({"labels": {**OURS, "extra": "x"}}, True),
    ({"labels": {**OURS, "kubeslurm.io/cluster": "other"}}, False),
    ({"labels": {}}, False),  # made by hand
    ({"labels": dict(OURS), "ownerReferences": [{"kind": "SlurmCluster", "name": "other", "uid": "u"}]}, False),
])
def test_a_kept_claim_is_taken_back_only_with_our_labels_and_no_owner(live_meta, kept):
    desired = {"kind": "PersistentVolumeClaim", "metadata": {"name": "research-home", "labels": dict(OURS)}}
    assert _kept_by_us({"metadata": {"name": "research-home", **live_meta}}, desired) is kept
    assert not _kept_by_us({"metadata": {"name": "x", **live_meta}}, {**desired, "kind": "ConfigMap"})
