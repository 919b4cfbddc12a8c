"""Builders of test manifests: the contract example, changed in one place per test."""

import copy
from pathlib import Path

import yaml

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "research.yaml"


def contract_documents() -> list[dict]:
    return [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]


def set_path(document: dict, path: str, value) -> dict:
    """Copy of `document` with `value` at a dotted path (list indexes as numbers)."""
    document = copy.deepcopy(document)
    parts = path.split(".")
    node = document
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = value
    elif value is DELETE:
        node.pop(last, None)
    else:
        node[last] = value
    return document


DELETE = object()


def with_uid(document: dict) -> dict:
    """The document as read back from the API server: owner references need its uid."""
    return set_path(document, "metadata.uid", f"uid-of-{document['kind']}-{document['metadata']['name']}")


def load_with_uids(*documents: dict):
    """(cluster, node_sets) models of one SlurmCluster document and its NodeSet documents."""
    from kubeslurm.api import load_documents

    manifests = load_documents([with_uid(d) for d in documents])
    return manifests.clusters[0], manifests.node_sets
