import subprocess
import sys

from kubeslurm.cli import main

from .manifests import EXAMPLE


def test_render_prints_every_config_file(capsys):
    assert main(["render", "-f", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    for name in ("slurm.conf", "gres.conf", "cgroup.conf"):
        assert f"hpc/research: {name}" in out
    assert "slurmd -Z --conf 'CPUs=8 RealMemory=31129 Features=h100,nvlink Gres=gpu:h100:8'" in out


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


def test_console_script_crds_is_valid_yaml():
    out = subprocess.run([sys.executable, "-m", "kubeslurm.cli", "crds"], capture_output=True, text=True, check=True).stdout
    assert out.count("kind: CustomResourceDefinition") == 2
