"""The `kubeslurm` command: render offline, print CRDs, run the operator."""

import argparse
import base64
import os
import sys
from pathlib import Path

import yaml

from .api import ManifestError, NodeSet, SlurmCluster, load_files
from .api.crds import crd_file_name, custom_resource_definitions
from .reconcile.storage_check import node_set_mount_conflict
from .render.bridge.bridged_nodes import bridged_node_set_problem
from .render.cluster_objects import desired_objects
from .render.config.files import render_config_files
from .render.config.sssd_conf import directory_files
from .render.errors import RenderError
from .render.k8s.config_hash import config_hash_key
from .render.k8s.name_collisions import name_collisions
from .render.k8s.secrets import auth_key_secret, database_password_secret, ssh_host_key_secret
from .render.slurm_pod import unix_users
from .render.slurmd.node import slurmd_conf_line

# /metrics; kopf's liveness endpoint (--liveness) has 8080.
METRICS_PORT = 9090

# Offline there is no key, no password and no uid: the operator makes the first two
# once at apply time and the API server assigns the last. render never invents them.
# The password placeholders are ones slurmdbd.conf could hold (no white space): render
# refuses any other password.
GENERATED_AT_APPLY_TIME = "<generated-at-apply-time>"
ASSIGNED_BY_THE_API_SERVER = "<assigned by the API server>"
OBJECTS_HEADER = (
    "# Kubernetes objects the operator creates. Secrets are shown decoded (stringData) with\n"
    "# placeholders: the auth key and the database password are generated at apply time,\n"
    "# never offline, so this output is for reading, not for kubectl apply. The config-hash\n"
    "# of slurmdbd's pods is keyed with the auth key, so it differs from the one applied.\n"
)


def _dump_yaml(documents) -> str:
    return yaml.safe_dump_all(documents, sort_keys=False, width=120)


class _ReadableDumper(yaml.SafeDumper):
    """Multi-line strings (the config files in ConfigMaps and Secrets) as literal blocks."""


def _represent_str(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ReadableDumper.add_representer(str, _represent_str)


def _as_read_back(model: SlurmCluster | NodeSet):
    """The model with a placeholder uid, as if read from the API server (owner references need one)."""
    uid = model.metadata.uid or ASSIGNED_BY_THE_API_SERVER
    return model.model_copy(update={"metadata": model.metadata.model_copy(update={"uid": uid})})


def _offline_database_password(cluster: SlurmCluster) -> str | None:
    accounting = cluster.spec.accounting
    if not accounting.enabled:
        return None
    external = accounting.database.external
    if external is not None:
        ref = external.password_secret_ref
        return f"<read-from-Secret-{ref.name}-key-{ref.key}-at-apply-time>"
    return GENERATED_AT_APPLY_TIME


def _offline_directory_files(cluster: SlurmCluster) -> dict[str, str] | None:
    """sssd.conf and the CA in ldap mode, with what the operator reads from the named Secrets as placeholders."""
    ldap = cluster.spec.identity.ldap
    if ldap is None:
        return None
    ref = ldap.bind_password_secret_ref
    password = f"<read-from-Secret-{ref.name}-key-{ref.key}-at-apply-time>" if ref is not None else None
    ca = ldap.ca_certificate
    return directory_files(cluster, password, f"# read from {ca.kind} {ca.ref.name}, key {ca.ref.key}, at apply time\n")


def _decoded_secret(obj: dict) -> dict:
    if obj["kind"] != "Secret":
        return obj
    shown = {k: v for k, v in obj.items() if k != "data"}
    shown["stringData"] = {key: base64.b64decode(value).decode() for key, value in obj["data"].items()}
    return shown


def kubernetes_objects_offline(cluster: SlurmCluster, node_sets: list[NodeSet]) -> list[dict]:
    """Every object for one cluster, with placeholders where apply-time values go."""
    cluster = _as_read_back(cluster)
    node_sets = [_as_read_back(ns) for ns in node_sets]
    objects = [auth_key_secret(cluster, GENERATED_AT_APPLY_TIME.encode())]
    if cluster.spec.accounting.enabled and cluster.spec.accounting.database.internal is not None:
        objects.append(database_password_secret(cluster, GENERATED_AT_APPLY_TIME))
    if cluster.spec.login.ssh.enabled:
        objects.append(ssh_host_key_secret(cluster, GENERATED_AT_APPLY_TIME.encode()))
    # The NodeSets themselves are the user's: the ownerReference the operator adds to each is left out.
    objects += [
        obj for obj in desired_objects(
            cluster, node_sets, database_password=_offline_database_password(cluster),
            config_hash_key=config_hash_key(GENERATED_AT_APPLY_TIME.encode()),
            directory_files=_offline_directory_files(cluster),
        )
        if obj["kind"] != "NodeSet"
    ]
    return [_decoded_secret(obj) for obj in objects]


def _objects_yaml(cluster: SlurmCluster, node_sets: list[NodeSet]) -> str:
    parts = []
    for obj in kubernetes_objects_offline(cluster, node_sets):
        meta = obj["metadata"]
        body = yaml.dump(obj, Dumper=_ReadableDumper, sort_keys=False, width=120)
        parts.append(f"---\n# {meta['namespace']}/{cluster.metadata.name}: {obj['kind']} {meta['name']}\n{body}")
    return "".join(parts)


def command_crds(args) -> int:
    crds = custom_resource_definitions()
    if args.output_dir:
        out = Path(args.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        for crd in crds:
            (out / crd_file_name(crd)).write_text(_dump_yaml([crd]))
            print(f"wrote {out / crd_file_name(crd)}")
    else:
        sys.stdout.write(_dump_yaml(crds))
    return 0


def command_api_reference(args) -> int:
    from .api.reference import api_reference

    text = api_reference()
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def command_render(args) -> int:
    try:
        manifests = load_files(args.filename)
        if not manifests.clusters:
            raise ManifestError("no SlurmCluster in the input: render needs one SlurmCluster and its NodeSets")
        known = {(c.metadata.namespace, c.metadata.name) for c in manifests.clusters}
        for ns in manifests.node_sets:
            if (ns.metadata.namespace, ns.spec.cluster_name) not in known:
                raise RenderError(
                    f"NodeSet {ns.metadata.namespace}/{ns.metadata.name}",
                    "spec.clusterName",
                    f"no SlurmCluster {ns.spec.cluster_name!r} in namespace {ns.metadata.namespace} among the inputs",
                )
        everything = [*manifests.clusters, *manifests.node_sets]
        seen = set()
        for obj in everything:
            key = (obj.KIND, obj.metadata.namespace, obj.metadata.name)
            if key in seen:
                raise ManifestError(f"{obj.KIND} {obj.metadata.namespace}/{obj.metadata.name} appears twice in the input: keep one")
            seen.add(key)
        collisions = [
            error
            for cluster in manifests.clusters
            for error in name_collisions(cluster, manifests.node_sets_of(cluster), everything)
        ]
        if collisions:
            raise RenderError(collisions[0].obj, collisions[0].field, "\n".join(
                [collisions[0].message, *(str(error) for error in collisions[1:])]))
        # What the operator reports as a NodeSet's InvalidSpec (it renders nothing for it): refused here too.
        for cluster in manifests.clusters:
            for ns in manifests.node_sets_of(cluster):
                problem = node_set_mount_conflict(cluster, ns) or bridged_node_set_problem(cluster, ns)
                if problem:
                    raise ManifestError(f"NodeSet {ns.metadata.namespace}/{ns.metadata.name}: {problem}")
        out = []
        objects = []
        for cluster in manifests.clusters:
            node_sets = manifests.node_sets_of(cluster)
            for name, content in render_config_files(cluster, node_sets).items():
                out.append(f"# ---- {cluster.metadata.namespace}/{cluster.metadata.name}: {name} ----\n{content}")
            for ns in node_sets:
                out.append(
                    f"# ---- {ns.metadata.namespace}/{ns.metadata.name}: slurmd registers as ----\n"
                    f"# slurmd -Z --conf '{slurmd_conf_line(ns)}'\n"
                )
            users = unix_users(cluster)
            if users:
                out.append(
                    f"# ---- {cluster.metadata.namespace}/{cluster.metadata.name}: uids of the account users ----\n"
                    "# for this spec alone: a running cluster uses the uids recorded in its status.unixIds, which differ\n"
                    "# only for users whose uid here was already taken there when they were added\n"
                    f"# {' '.join(f'{name}={uid}' for name, uid in users)}\n"
                )
            objects.append(_objects_yaml(cluster, node_sets))
    except (ManifestError, RenderError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    stream = OBJECTS_HEADER + "".join(objects)
    sys.stdout.write(stream if args.objects_only else "\n".join(out) + "\n" + stream)
    return 0


def command_run(args) -> int:
    """Start the operator. One replica (Deployment strategy Recreate): peering is off, see README."""
    from .process_memory import limit_arenas

    limit_arenas()  # before the metrics server, kopf and the daemons start their threads
    import kopf

    if args.kubeconfig:
        # kopf logs in on its own through the kubernetes client, which reads KUBECONFIG
        os.environ["KUBECONFIG"] = args.kubeconfig
        os.environ["KUBESLURM_KUBECONFIG"] = args.kubeconfig
    from .metrics.endpoint import serve_metrics
    from .reconcile import handlers

    if args.metrics_port:
        try:
            serve_metrics(args.metrics_port)
        except OSError as error:
            print(f"error: cannot serve metrics on port {args.metrics_port} ({error.strerror}): "
                  "choose another with --metrics-port, or 0 for none", file=sys.stderr)
            return 1
    handlers.RUNTIME.start(args.kubeconfig)
    handlers.RUNTIME.namespaces = args.namespace or None
    kopf.configure(
        verbose=args.verbose,
        log_format=kopf.LogFormat.JSON if args.log_format == "json" else kopf.LogFormat.PLAIN,
    )
    settings = kopf.OperatorSettings()
    # Watching chosen namespaces, the operator may read only those (the chart's Roles) and
    # Kubernetes nodes: kopf is not to list namespaces or follow CRDs, which it would retry
    # for a minute at every start before falling back to exactly this. It serves the CRDs
    # found at start; a restart picks up new ones.
    settings.scanning.disabled = bool(args.namespace)
    kopf.run(
        standalone=True,
        clusterwide=not args.namespace,
        namespaces=args.namespace or [],
        liveness_endpoint=args.liveness or None,
        settings=settings,
    )
    return 0


def command_device_plugin(args) -> int:
    """The kubeslurm device plugin on one bridged node (its DaemonSet runs this)."""
    from .device_plugin.server import run as run_device_plugin

    if not args.node:
        print("error: --node (or NODE_NAME, the downward API's spec.nodeName) is required", file=sys.stderr)
        return 2
    return run_device_plugin(cluster=args.cluster, namespace=args.namespace, kubernetes_node=args.node,
                             device_dir=Path(args.device_dir), plugin_dir=Path(args.plugin_dir))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubeslurm", description="Slurm clusters on Kubernetes.")
    sub = parser.add_subparsers(dest="command", required=True)

    render = sub.add_parser("render", help="print everything the operator would create, offline")
    render.add_argument("-f", "--filename", action="append", required=True, help="manifest file (repeatable, - for stdin)")
    render.add_argument(
        "--objects-only", action="store_true", help="print only the Kubernetes objects, as one YAML stream"
    )
    render.set_defaults(func=command_render)

    crds = sub.add_parser("crds", help="print the CustomResourceDefinitions (or write them to a folder)")
    crds.add_argument("--output-dir", help="write one file per CRD here instead of printing")
    crds.set_defaults(func=command_crds)

    reference = sub.add_parser("api-reference", help="print the field reference of both kinds (Markdown)")
    reference.add_argument("--output", help="write to this file")
    reference.set_defaults(func=command_api_reference)

    run = sub.add_parser("run", help="run the operator (kopf) against the current cluster")
    run.add_argument("--namespace", action="append", help="watch only this namespace (repeatable); default: all")
    run.add_argument("--kubeconfig", help="kubeconfig file; default: in-cluster ServiceAccount, then KUBECONFIG")
    run.add_argument("--liveness", default="http://0.0.0.0:8080/healthz", help="liveness endpoint URL, empty to disable")
    run.add_argument(
        "--metrics-port", type=int, default=int(os.environ.get("KUBESLURM_METRICS_PORT", METRICS_PORT)),
        help=f"serve Prometheus metrics on http://0.0.0.0:PORT/metrics (default {METRICS_PORT}; 0: off)",
    )
    run.add_argument("--log-format", choices=["plain", "json"], default="plain")
    run.add_argument("--verbose", action="store_true")
    run.set_defaults(func=command_run)

    plugin = sub.add_parser("device-plugin", help="serve kubeslurm.io/gpu to the kubelet: each GPU only to the pod "
                                                  "Slurm allocated it to (spec.bridge)")
    plugin.add_argument("--cluster", required=True, help="the SlurmCluster whose placement record to follow")
    plugin.add_argument("--namespace", required=True, help="the SlurmCluster's namespace")
    plugin.add_argument("--node", default=os.environ.get("NODE_NAME"), help="this Kubernetes node (default: $NODE_NAME)")
    plugin.add_argument("--device-dir", default="/dev", help="where the node's nvidiaN device files are")
    plugin.add_argument("--plugin-dir", default="/var/lib/kubelet/device-plugins", help="the kubelet's device-plugin folder")
    plugin.set_defaults(func=command_device_plugin)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
