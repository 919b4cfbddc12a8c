"""`python -m testbed.local_cluster up|down|status|load|power-off|power-on` (make cluster-up /
cluster-down / cluster-status): the local cluster's command line."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from testbed.control_plane import BinaryBuildError, ControlPlaneError, build_kubernetes_binaries
from testbed.kubectl import Kube, KubectlError
from testbed.local_cluster.cluster import LocalCluster
from testbed.local_cluster.layout import DEFAULT_GPUS, KUBECONFIG, ClusterError
from testbed.local_cluster.system_images import ImageBuildError
from testbed.processes import SpawnError
from testbed.waiting import WaitTimeout


def existing_kubeconfig_cluster() -> str | None:
    """The user's own cluster, when KUBECONFIG names one that answers."""
    kubeconfig = os.environ.get("KUBECONFIG")
    if not kubeconfig or Path(kubeconfig).resolve() == KUBECONFIG.resolve():
        return None
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        try:
            kubectl = str(build_kubernetes_binaries("kubectl", stream_output=False) / "kubectl")
        except BinaryBuildError:
            return None
    result = Kube(kubeconfig, kubectl).run("get", "--raw", "/readyz", check=False, timeout=20)
    return kubeconfig if result.returncode == 0 else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.local_cluster",
                                     description="kubeslurm's local Kubernetes cluster")
    parser.add_argument("command", choices=("up", "down", "status", "load", "power-off", "power-on"))
    parser.add_argument("targets", nargs="*", metavar="TAR|NODE",
                        help="load: docker-archive tars to import on every node; "
                             "power-off, power-on: node names (kubeslurm-N)")
    parser.add_argument("--nodes", type=int, default=int(os.environ.get("KUBESLURM_CLUSTER_NODES", "1")))
    parser.add_argument("--gpus", type=int, default=int(os.environ.get("KUBESLURM_CLUSTER_GPUS", str(DEFAULT_GPUS))),
                        help="fake GPUs per node (nvidia.com/gpu)")
    parser.add_argument("--json", action="store_true", help="status as JSON")
    args = parser.parse_args(argv)
    cluster = LocalCluster(nodes=args.nodes, gpus_per_node=args.gpus)
    try:
        if args.command == "up":
            existing = existing_kubeconfig_cluster()
            if existing:
                print(f"cluster: KUBECONFIG={existing} answers; using that cluster, starting none")
                return 0
            cluster.up()
        elif args.command == "down":
            cluster.down()
        elif args.command == "load":
            cluster.load_images([Path(t) for t in args.targets])
        elif args.command in ("power-off", "power-on"):
            if not args.targets:
                parser.error(f"{args.command}: name the node(s), e.g. kubeslurm-4")
            for name in args.targets:
                (cluster.power_off if args.command == "power-off" else cluster.power_on)(name)
        else:
            return print_status(cluster.status(), as_json=args.json)
    except (ClusterError, ControlPlaneError, BinaryBuildError, ImageBuildError, KubectlError, SpawnError,
            WaitTimeout) as exc:
        print(f"cluster: error: {exc}", file=sys.stderr)
        return 1
    return 0


def print_status(st: dict, as_json: bool) -> int:
    if as_json:
        print(json.dumps(st, indent=2))
    else:
        print(f"kubeconfig: {st['kubeconfig'] or '(none: cluster is down)'}")
        print(f"healthy: {st['healthy']}")
        total = 0
        for p in st["processes"]:
            total += p["rss_mib"]
            where = f" [{p['node']}]" if p.get("node") else ""
            print(f"  {p['name']:<24}{where:<16} pid {p['pid']:<8} "
                  f"{'running' if p['alive'] else 'DEAD':<8} {p['rss_mib']:>5} MiB")
        print(f"  {'containerd shims':<40} {st['shims']:>3} procs {st['shims_rss_mib']:>7} MiB")
        print(f"  total (daemons): {total} MiB")
        if st.get("nodes"):
            print(st["nodes"].rstrip())
            print(st["pods"].rstrip())
    return 0 if st["healthy"] else 1
