"""Keeps the helm charts in step with crds/ (run by `make crds`; tests/helm checks both).

- charts/kubeslurm-operator/crds/ gets byte-identical copies of crds/*.yaml.
- charts/slurm-cluster/values.schema.json is derived from the CRDs' OpenAPI schemas, so
  `helm install` refuses what the API server would refuse, before anything is created, and
  also unknown keys (which the API server would silently prune): `cluster` is the SlurmCluster
  spec, `nodeSets[]` the NodeSet spec with `name` in place of `clusterName`.

    python charts/sync_from_crds.py          # write
    python charts/sync_from_crds.py --check  # exit 1 naming what drifted
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CRDS = REPO / "crds"
OPERATOR_CRDS = REPO / "charts" / "kubeslurm-operator" / "crds"
CLUSTER_SCHEMA = REPO / "charts" / "slurm-cluster" / "values.schema.json"

DNS_LABEL = "^[a-z]([-a-z0-9]*[a-z0-9])?$"
# The CRDs check int-or-string fields with this CEL rule; JSON Schema says it with a pattern.
INT_OR_MATCHING = re.compile(r"type\(self\) == int \|\| self\.matches\(r'(?P<pattern>.*)'\)")


def _spec_schema(crd_file: str) -> dict:
    crd = yaml.safe_load((CRDS / crd_file).read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def to_json_schema(node: dict) -> dict:
    """An OpenAPI v3 (structural CRD) schema as JSON Schema: objects with properties refuse
    unknown keys, int-or-string becomes integer|string, CEL and x-kubernetes-* are dropped."""
    out: dict = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key == "nullable":
            continue
        if key == "properties":
            out[key] = {name: to_json_schema(child) for name, child in value.items()}
        elif key == "items" or (key == "additionalProperties" and isinstance(value, dict)):
            out[key] = to_json_schema(value)
        else:
            out[key] = copy.deepcopy(value)
    if node.get("x-kubernetes-int-or-string"):
        string: dict = {"type": "string"}
        for rule in node.get("x-kubernetes-validations", []):
            match = INT_OR_MATCHING.fullmatch(rule["rule"])
            if match:
                string["pattern"] = match["pattern"]
        out["anyOf"] = [{"type": "integer"}, string]
    if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def cluster_values_schema() -> dict:
    cluster = to_json_schema(_spec_schema("slurmclusters.kubeslurm.io.yaml"))
    cluster["description"] = "The SlurmCluster spec (docs/api.md)."
    node_set = to_json_schema(_spec_schema("nodesets.kubeslurm.io.yaml"))
    del node_set["properties"]["clusterName"]
    node_set["properties"] = {
        "name": {
            "description": "The NodeSet's name: its pods <name>-0, <name>-1, ... are the Slurm nodes.",
            "type": "string",
            "minLength": 1,
            "maxLength": 40,
            "pattern": DNS_LABEL,
        },
        **node_set["properties"],
    }
    node_set["required"] = ["name"] + [r for r in node_set.get("required", []) if r != "clusterName"]
    node_set["description"] = "A NodeSet of this cluster: its name and the NodeSet spec (docs/api.md); clusterName is set by the chart."
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$comment": "Generated from crds/ by charts/sync_from_crds.py (make crds): do not edit.",
        "title": "Values of the slurm-cluster chart",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "global": {"type": "object", "description": "Values helm passes from a parent chart; unused."},
            "clusterName": {
                "description": "The SlurmCluster's name; the release name when empty.",
                "type": "string",
                "maxLength": 40,
                "pattern": f"^$|{DNS_LABEL}",
            },
            "cluster": cluster,
            "nodeSets": {"type": "array", "items": node_set},
        },
    }


def expected_files() -> dict[Path, str]:
    files = {OPERATOR_CRDS / path.name: path.read_text() for path in sorted(CRDS.glob("*.yaml"))}
    files[CLUSTER_SCHEMA] = json.dumps(cluster_values_schema(), indent=2) + "\n"
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report files that differ")
    args = parser.parse_args(argv)
    expected = expected_files()
    stale = [p for p in sorted(OPERATOR_CRDS.glob("*.yaml")) if p not in expected]
    drifted = [p for p, text in expected.items() if not p.exists() or p.read_text() != text]
    if args.check:
        for path in drifted + stale:
            print(f"{path.relative_to(REPO)} is out of date: run `make crds`", file=sys.stderr)
        return 1 if drifted or stale else 0
    OPERATOR_CRDS.mkdir(parents=True, exist_ok=True)
    for path in stale:
        path.unlink()
    for path in drifted:
        path.write_text(expected[path])
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
