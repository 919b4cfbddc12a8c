"""docs/api.md: every field of both kinds, generated from the same schema as the CRDs."""

import json

from .crds import custom_resource_definitions


def _type_of(node: dict) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "int or string"
    kind = node.get("type", "object")
    if kind == "array":
        return f"list of {_type_of(node.get('items', {}))}"
    if "enum" in node:
        return " \\| ".join(f"`{v}`" for v in node["enum"])
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map of {_type_of(node['additionalProperties'])}"
    return kind


def _rows(node: dict, path: str, required: bool):
    description = (node.get("description") or "").replace("\n", " ")
    checks = []
    for key, label in (("minimum", "min"), ("maximum", "max"), ("maxLength", "max length"), ("minItems", "min items"), ("maxItems", "max items")):
        if key in node:
            checks.append(f"{label} {node[key]}")
    if "pattern" in node:
        checks.append(f"pattern `{node['pattern']}`")
    for rule in node.get("x-kubernetes-validations", []):
        checks.append(rule["message"])
    default = f"`{json.dumps(node['default'])}`" if "default" in node else ("required" if required else "")
    text = " ".join(part for part in (description, "; ".join(checks)) if part).replace("|", "\\|")
    yield f"| `{path}` | {_type_of(node)} | {default} | {text} |"
    children = node.get("properties") or node.get("items", {}).get("properties") or {}
    child_required = set(node.get("required") or node.get("items", {}).get("required") or [])
    prefix = f"{path}[]" if node.get("type") == "array" else path
    for name, child in children.items():
        yield from _rows(child, f"{prefix}.{name}", name in child_required)


def api_reference() -> str:
    out = [
        "# API reference: kubeslurm.io/v1alpha1",
        "",
        "Generated from the pydantic models by `make docs` (a unit test fails when it drifts).",
        "Every field below is checked by the API server at `kubectl apply` and again by the operator.",
    ]
    for crd in custom_resource_definitions():
        version = crd["spec"]["versions"][0]
        schema = version["schema"]["openAPIV3Schema"]
        kind = crd["spec"]["names"]["kind"]
        out += ["", f"## {kind}", ""]
        for rule in schema.get("x-kubernetes-validations", []):
            out.append(f"- {rule['message']}")
        if "scale" in version["subresources"]:
            out.append("- scale subresource: `kubectl scale nodeset NAME --replicas=N`")
        out += ["", "| field | type | default | description and checks |", "|---|---|---|---|"]
        for section in ("spec", "status"):
            node = schema["properties"][section]
            for name, child in node.get("properties", {}).items():
                out.extend(_rows(child, f"{section}.{name}", name in set(node.get("required", []))))
    return "\n".join(out) + "\n"
