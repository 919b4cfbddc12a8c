"""Every module behind a README command loads, and the command-line ones answer --help.

`make demo` was broken for two days by a name a refactor moved (testbed.deployment.CACHE):
nothing in `make test` imported testbed/demo.py or benchmarks/. Loading each module and
asking the entry points for --help finds that class of break in a second, without a cluster.
"""

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import benchmarks
import testbed

REPO = Path(__file__).resolve().parents[2]


def _modules(package) -> list[str]:
    # __main__ modules run their command when loaded: they are asked for --help below instead.
    return sorted(info.name for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
                  if not info.name.endswith(".__main__"))


@pytest.mark.parametrize("module", _modules(testbed) + _modules(benchmarks))
def test_module_loads(module):
    importlib.import_module(module)


# The modules the Makefile runs with -m or as scripts (make demo, demo-down, bench, bench-*).
COMMANDS = [
    ["-m", "testbed.demo", "--help"],
    ["-m", "testbed.local_cluster", "--help"],
    ["-m", "testbed.local_cluster.fake_gpu", "--help"],
    ["benchmarks/run_all.py", "--help"],
    ["benchmarks/render_bench.py", "--help"],
    ["benchmarks/cluster_bench.py", "--help"],
    ["benchmarks/scale_bench.py", "--help"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:-1]))
def test_command_answers_help(command):
    result = subprocess.run([sys.executable, *command], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout
