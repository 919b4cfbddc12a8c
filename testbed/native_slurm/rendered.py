"""A NativeSlurmCluster built from nothing but what kubeslurm renders for a manifest.

Used by the real-Slurm tier (tests/slurm/test_rendered_configs.py) and by the native half of the
Slurm-on-Kubernetes benchmark (benchmarks/native_slurm.py), so both run the same
topology the operator would create in Kubernetes:

- the configs of the cluster's ConfigMap (render_config_files) and its slurmdbd.conf
  (with a fresh database password),
- one host per slurmd pod, named like the pod (<nodeset>-<ordinal>, spec.replicas of
  each NodeSet), each running `slurmd -Z --conf <slurmd_conf_line(nodeset)>`,
- the controller, slurmdbd and MariaDB reachable under the names the configs use (the
  headless Services' names),
- the Unix users of spec.accounts on every host (as in every Slurm pod), and a login
  host running sackd.

Accounts are not created here: that is the operator's step, run against the started
cluster with `slurm_control(cluster).sacctmgr(accounting_commands(model))`.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path
from typing import Mapping, Sequence

import yaml

from kubeslurm.api import load_documents
from kubeslurm.reconcile.slurm_control import SlurmControl
from kubeslurm.render.config.files import render_config_files
from kubeslurm.render.config.slurmdbd_conf import database_connection, render_slurmdbd_conf
from kubeslurm.render.k8s import naming
from kubeslurm.render.slurmd.node import slurmd_conf_line
from testbed.native_slurm.cluster import NativeSlurmCluster, NodeSpec


def read_documents(path: Path | str) -> list[dict]:
    """The YAML documents of a manifest file (SlurmCluster + NodeSets)."""
    return [d for d in yaml.safe_load_all(Path(path).read_text()) if d]


def load(docs: list[dict]):
    """(the one SlurmCluster, {name: NodeSet} of its NodeSets) of DOCS, validated."""
    manifests = load_documents(docs)
    (cluster,) = manifests.clusters
    return cluster, {ns.metadata.name: ns for ns in manifests.node_sets_of(cluster)}


def node_specs(node_sets: Mapping) -> list[NodeSpec]:
    """One node per slurmd pod: <nodeset>-<ordinal> for spec.replicas of each NodeSet,
    registering what the pod's `slurmd --conf` line says (NodeSets in reverse name order)."""
    return [NodeSpec(f"{name}-{i}", slurmd_conf_line(ns), gpus=ns.spec.gpus.count if ns.spec.gpus else 0)
            for name, ns in sorted(node_sets.items(), reverse=True) for i in range(ns.spec.replicas)]


def account_users(model) -> list[str]:
    """The users of spec.accounts, in order of first appearance."""
    return list(dict.fromkeys(u for account in model.spec.accounts for u in account.users))


def native_cluster(rootfs: Path | str, model, node_sets: Mapping, *,
                   placements: Mapping[str, Mapping[str, str]] | None = None,
                   extra_users: Sequence[str] = (), name: str = "rendered",
                   login: bool = True) -> NativeSlurmCluster:
    """The (not yet started) native cluster of MODEL and its NODE_SETS; its `.configs`
    are the rendered files (slurmdbd.conf included when accounting is enabled).
    PLACEMENTS: pod name -> the labels of the Kubernetes node it runs on (topology.conf)."""
    cluster_name = model.metadata.name
    configs = render_config_files(model, list(node_sets.values()),
                                  {k: dict(v) for k, v in (placements or {}).items()})
    controller = naming.controller_hosts(cluster_name, backup=model.spec.controller.backup)[0]
    hostnames: dict[str, str] = {}
    db_credentials = None
    if model.spec.accounting.enabled:
        password = secrets.token_urlsafe(24)
        configs["slurmdbd.conf"] = render_slurmdbd_conf(model, password)
        db = database_connection(model)
        hostnames = {"slurmdbd": naming.accounting_service(cluster_name), "mariadb": db.host}
        db_credentials = (db.user, password)
    return NativeSlurmCluster(
        rootfs, configs=configs, auth_key=os.urandom(1024), nodes=node_specs(node_sets),
        # The names the rendered configs use, as the headless Services provide them.
        aliases={"controller": [controller.address]},
        hostnames=hostnames,
        users=[*account_users(model), *(u for u in extra_users if u not in account_users(model))],
        db_credentials=db_credentials, login=login, name=name)


def slurm_control(cluster: NativeSlurmCluster) -> SlurmControl:
    """The operator's SlurmControl, its commands run on the controller host."""
    def run(argv, timeout=60) -> subprocess.CompletedProcess:
        return cluster.run(cluster.controller, list(argv), timeout=timeout, check=False)
    return SlurmControl(run)
