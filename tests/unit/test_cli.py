import subprocess
import sys

import yaml

from kubeslurm.cli import ASSIGNED_BY_THE_API_SERVER, GENERATED_AT_APPLY_TIME, main

from .manifests import EXAMPLE


def test_render_prints_every_config_file(capsys):
    assert main(["render", "-f", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    for name in ("slurm.conf", "gres.conf", "cgroup.conf"):
        assert f"hpc/research: {name}" in out
    assert "slurmd -Z --conf 'CPUs=8 RealMemory=31129 Features=h100,nvlink Gres=gpu:h100:8'" in out
    assert "# hpc/research: StatefulSet h100\n" in out


def _objects(capsys, path=EXAMPLE) -> list[dict]:
    assert main(["render", "-f", str(path), "--objects-only"]) == 0
    return [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]


def test_render_prints_every_kubernetes_object_as_yaml(capsys):
    objects = _objects(capsys)
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert names == {
        ("Secret", "research-auth-key"), ("Secret", "research-mariadb-password"), ("Secret", "research-slurmdbd-config"),
        ("Secret", "research-ssh-host-keys"), ("Service", "research-ssh"),
        ("ConfigMap", "research-slurm-config"), ("ConfigMap", "research-unix-users"),
        ("PersistentVolumeClaim", "research-controller-state"),
        ("Service", "research-controller"), ("Service", "research-slurmctld-0"), ("Service", "research-slurmdbd"), ("Service", "research-database"), ("StatefulSet", "research-controller"),
        ("Service", "research-accounting"), ("StatefulSet", "research-accounting"),
        ("Service", "research-mariadb"), ("StatefulSet", "research-mariadb"),
        ("PersistentVolumeClaim", "data-research-mariadb-0"), ("NetworkPolicy", "research-mariadb"),
        ("Service", "research-login"), ("StatefulSet", "research-login"),
        ("Service", "h100"), ("StatefulSet", "h100"), ("PodDisruptionBudget", "h100-running-jobs"),
        ("Service", "cpu"), ("StatefulSet", "cpu"), ("PodDisruptionBudget", "cpu-running-jobs"),
    }
    assert all(o["metadata"]["ownerReferences"][0]["uid"] == ASSIGNED_BY_THE_API_SERVER for o in objects)
    config_map = next(o for o in objects if o["kind"] == "ConfigMap")
    assert config_map["data"]["slurm.conf"].startswith("# slurm.conf for SlurmCluster hpc/research")


def test_render_never_generates_secrets_offline(capsys):
    secrets = {o["metadata"]["name"]: o for o in _objects(capsys) if o["kind"] == "Secret"}
    assert all("data" not in s for s in secrets.values())
    assert secrets["research-auth-key"]["stringData"] == {"slurm.key": GENERATED_AT_APPLY_TIME}
    assert secrets["research-mariadb-password"]["stringData"] == {"password": GENERATED_AT_APPLY_TIME}
    assert f"StoragePass={GENERATED_AT_APPLY_TIME}\n" in secrets["research-slurmdbd-config"]["stringData"]["slurmdbd.conf"]


def test_render_names_where_an_external_password_comes_from(tmp_path, capsys):
    external = tmp_path / "external.yaml"
    external.write_text(EXAMPLE.read_text().replace(
        "database: {internal: {size: 2Gi}}",
        "database: {external: {host: db.example.org, passwordSecretRef: {name: dbpw, key: pw}}}",
    ))
    secrets = {o["metadata"]["name"]: o for o in _objects(capsys, external) if o["kind"] == "Secret"}
    assert "research-mariadb-password" not in secrets
    conf = secrets["research-slurmdbd-config"]["stringData"]["slurmdbd.conf"]
    assert "StoragePass=<read-from-Secret-dbpw-key-pw-at-apply-time>\n" in conf


def test_invalid_input_exits_non_zero_naming_the_field(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXAMPLE.read_text().replace('preemption: "off"', "preemption: always"))
    assert main(["render", "-f", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "spec.scheduling.preemption" in err and "'off', 'qos' or 'partition'" in err


def test_node_set_without_its_cluster(tmp_path, capsys):
    lonely = tmp_path / "lonely.yaml"
    lonely.write_text(EXAMPLE.read_text().replace("clusterName: research", "clusterName: elsewhere", 1))
    assert main(["render", "-f", str(lonely)]) == 1
    assert "spec.clusterName" in capsys.readouterr().err


def _with_first_node_set(tmp_path, change) -> str:
    documents = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    change(next(d for d in documents if d["kind"] == "NodeSet")["spec"], next(d for d in documents if d["kind"] == "SlurmCluster")["spec"])
    path = tmp_path / "changed.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    return str(path)


def test_a_bridged_node_set_of_a_cluster_without_the_bridge_is_refused_offline_too(tmp_path, capsys):
    """The same InvalidSpec the operator reports: nothing is rendered, the message names the field."""
    def bridged(node_set, cluster):
        node_set["bridged"] = True
    assert main(["render", "-f", _with_first_node_set(tmp_path, bridged)]) == 1
    err = capsys.readouterr().err
    assert "spec.bridged is true but SlurmCluster research has spec.bridge.enabled off" in err, err


def test_a_node_set_mount_over_a_shared_path_is_refused_offline_too(tmp_path, capsys):
    def shadowing(node_set, cluster):
        cluster["storage"] = {"volumes": [{"name": "scratch", "mountPath": "/scratch", "existingClaim": {"name": "scratch"}}]}
        node_set["podTemplate"] = {"spec": {"containers": [
            {"name": "slurmd", "volumeMounts": [{"name": "cache", "mountPath": "/scratch/cache"}]}]}}
    assert main(["render", "-f", _with_first_node_set(tmp_path, shadowing)]) == 1
    err = capsys.readouterr().err
    assert "spec.podTemplate.spec.containers[0].volumeMounts[0].mountPath: /scratch/cache overlaps /scratch" in err, err


def test_console_script_crds_is_valid_yaml():
    out = subprocess.run([sys.executable, "-m", "kubeslurm.cli", "crds"], capture_output=True, text=True, check=True).stdout
    assert out.count("kind: CustomResourceDefinition") == 2


def test_run_refuses_a_metrics_port_in_use_naming_the_option(capsys):
    import socket

    from kubeslurm.cli import main

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["run", "--metrics-port", str(port)]) == 1  # before it reads any kubeconfig
    err = capsys.readouterr().err
    assert f"cannot serve metrics on port {port}" in err and "--metrics-port" in err
