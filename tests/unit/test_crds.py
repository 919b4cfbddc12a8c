from pathlib import Path

import yaml

from kubeslurm.api.crds import crd_file_name, custom_resource_definitions

CRDS_DIR = Path(__file__).resolve().parents[2] / "crds"


def test_committed_crds_match_the_models():
    for crd in custom_resource_definitions():
        path = CRDS_DIR / crd_file_name(crd)
        assert path.exists(), f"{path} is missing: run `make crds`"
        assert yaml.safe_load(path.read_text()) == crd, f"{path} drifted from the models: run `make crds` and commit"


def _walk(node, path="$"):
    yield path, node
    for key in ("properties",):
        for name, child in node.get(key, {}).items():
            yield from _walk(child, f"{path}.{name}")
    if "items" in node:
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


def _schemas():
    for crd in custom_resource_definitions():
        yield crd, crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_schemas_are_structural():
    for crd, schema in _schemas():
        for path, node in _walk(schema):
            where = f"{crd['metadata']['name']} {path}"
            assert "$ref" not in node, where
            assert "title" not in node, where
            assert node.get("additionalProperties") is not False, where
            if node.get("x-kubernetes-int-or-string"):
                assert "type" not in node and "anyOf" not in node, where
            else:
                assert "type" in node, f"{where} has no type"
                assert "anyOf" not in node and "oneOf" not in node, where
            if node.get("type") == "object" and "properties" in node:
                assert "additionalProperties" not in node, where
            if node.get("x-kubernetes-list-type") == "map":
                keys = node["x-kubernetes-list-map-keys"]
                assert set(keys) <= set(node["items"].get("required", [])), f"{where}: map keys must be required"


def test_subresources_printer_columns_and_name_rules():
    crds = {crd["spec"]["names"]["kind"]: crd for crd in custom_resource_definitions()}
    node_set = crds["NodeSet"]["spec"]["versions"][0]
    assert node_set["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    cluster = crds["SlurmCluster"]["spec"]["versions"][0]
    assert "status" in cluster["subresources"]
    assert {c["name"] for c in cluster["additionalPrinterColumns"]} >= {"Ready", "Nodes", "GPUs", "Running", "Pending"}
    for crd in crds.values():
        rules = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"]
        assert any("metadata.name.size()" in r["rule"] for r in rules)
        status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
        assert "conditions" in status["properties"] and "observedGeneration" in status["properties"]


def test_strings_used_in_cel_have_bounds():
    # matches() on an unbounded string or an unbounded list makes the API server reject a rule as too costly
    for crd, schema in _schemas():
        for path, node in _walk(schema):
            if any(".matches(" in r["rule"] for r in node.get("x-kubernetes-validations", [])):
                if path != "$" and node.get("type") == "object":
                    # a rule on a map's keys: the map is bounded instead (the API server accepts that)
                    assert "maxProperties" in node, f"{crd['metadata']['name']} {path}"
                elif path != "$" and not node.get("x-kubernetes-int-or-string"):
                    assert "maxLength" in node, f"{crd['metadata']['name']} {path}"


def test_committed_api_reference_matches_the_models():
    from kubeslurm.api.reference import api_reference

    path = CRDS_DIR.parent / "docs" / "api.md"
    assert path.read_text() == api_reference(), "docs/api.md drifted from the models: run `make docs` and commit"


def test_optional_fields_keep_their_own_bounds():
    # pydantic writes an optional field's extra schema beside its anyOf; the CRD must keep it
    # (without maxItems on podTemplate containers the API server refuses the CRD's rules as too costly)
    crds = {crd["spec"]["names"]["kind"]: crd for crd in custom_resource_definitions()}
    spec = crds["NodeSet"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    pod_spec = spec["properties"]["podTemplate"]["properties"]["spec"]["properties"]
    assert pod_spec["containers"]["maxItems"] == 1
    assert pod_spec["containers"]["items"]["properties"]["name"]["enum"] == ["slurmd"]
