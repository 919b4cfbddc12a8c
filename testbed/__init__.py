"""The real systems that the tests, the benchmarks and `make demo` run on: a Kubernetes
control plane, a local Kubernetes cluster, a native Slurm cluster in network namespaces,
and the tools that put kubeslurm onto a cluster. No tests live here (they are in tests/)."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
