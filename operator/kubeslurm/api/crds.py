"""The CustomResourceDefinitions, generated from the models (`kubeslurm crds`)."""

from .crd_schema import model_schema
from .names import OBJECT_NAME_RULES, RESERVED_NODE_SET_NAMES
from .node_set import RESERVED_NODE_SET_SUFFIXES, NodeSetSpec, NodeSetStatus
from .resources import GROUP, VERSION, NodeSet, SlurmCluster
from .slurm_cluster import SlurmClusterSpec, SlurmClusterStatus

_READY = '.status.conditions[?(@.type=="Ready")].status'

PRINTER_COLUMNS = {
    "SlurmCluster": [
        {"name": "Ready", "type": "string", "jsonPath": _READY},
        {"name": "Nodes", "type": "integer", "jsonPath": ".status.nodes"},
        {"name": "Idle", "type": "integer", "jsonPath": ".status.idleNodes"},
        {"name": "GPUs", "type": "integer", "jsonPath": ".status.gpus"},
        {"name": "Running", "type": "integer", "jsonPath": ".status.runningJobs"},
        {"name": "Pending", "type": "integer", "jsonPath": ".status.pendingJobs"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
    "NodeSet": [
        {"name": "Cluster", "type": "string", "jsonPath": ".spec.clusterName"},
        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
        {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
        {"name": "Idle", "type": "integer", "jsonPath": ".status.idleNodes"},
        {"name": "Allocated", "type": "integer", "jsonPath": ".status.allocatedNodes"},
        {"name": "Drained", "type": "integer", "jsonPath": ".status.drainedNodes", "priority": 1},
        {"name": "Down", "type": "integer", "jsonPath": ".status.downNodes", "priority": 1},
        {"name": "GPUs/Node", "type": "integer", "jsonPath": ".spec.gpus.count"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
}


NODE_SET_NAME_RULES = [
    {
        "rule": "!(self.metadata.name in ["
        + ", ".join(f"self.spec.clusterName + '-{s}'" for s in RESERVED_NODE_SET_SUFFIXES)
        + "])",
        "message": "metadata.name must not be <clusterName>-controller, -accounting, -mariadb, -login, -slurmctld, "
        "-slurmdbd, -database, -controller-state, -slurm-config, -auth-key, -slurmdbd-config, -mariadb-password or "
        "the name of one of the cluster's pods: the cluster's own objects use those names",
    },
    {
        "rule": f"!(self.metadata.name in {list(RESERVED_NODE_SET_NAMES)})",
        "message": "metadata.name must not be all: Nodes=ALL in a partition means every node",
    },
]


def _root_schema(spec_model, status_model, spec_required: bool, extra_rules: list[dict]) -> dict:
    schema = {
        "type": "object",
        "required": ["spec"] if spec_required else [],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": model_schema(spec_model),
            "status": model_schema(status_model),
        },
        "x-kubernetes-validations": OBJECT_NAME_RULES + extra_rules,
    }
    if not schema["required"]:
        del schema["required"]
    return schema


def _crd(kind_model, spec_model, status_model, spec_required: bool, scale: bool, extra_rules: list[dict]) -> dict:
    kind = kind_model.KIND
    subresources: dict = {"status": {}}
    if scale:
        subresources["scale"] = {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        }
    names = {"kind": kind, "listKind": f"{kind}List", "plural": kind_model.PLURAL, "singular": kind.lower()}
    if kind_model.SHORT_NAMES:
        names["shortNames"] = list(kind_model.SHORT_NAMES)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind_model.PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {**names, "categories": ["kubeslurm"]},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": _root_schema(spec_model, status_model, spec_required, extra_rules)},
                    "subresources": subresources,
                    "additionalPrinterColumns": PRINTER_COLUMNS[kind],
                }
            ],
        },
    }


def custom_resource_definitions() -> list[dict]:
    return [
        _crd(SlurmCluster, SlurmClusterSpec, SlurmClusterStatus, spec_required=False, scale=False, extra_rules=[]),
        _crd(NodeSet, NodeSetSpec, NodeSetStatus, spec_required=True, scale=True, extra_rules=NODE_SET_NAME_RULES),
    ]


def crd_file_name(crd: dict) -> str:
    return f"{crd['metadata']['name']}.yaml"
