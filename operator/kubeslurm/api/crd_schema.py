"""Turn pydantic's JSON Schema into a structural OpenAPI v3 schema for a CRD.

The API server refuses `$ref`, `anyOf` with null and `additionalProperties: false`
beside `properties`; it wants types on every node and knows a few `x-kubernetes-*`
markers. This module rewrites the model schema into that dialect and nothing else.
"""

from copy import deepcopy

_DROP = {"title", "additionalProperties"}
# A raw CEL string: the pattern's backslashes are regex escapes, not CEL ones.
_INT_OR_STRING_RULE = "type(self) == int || self.matches(r'{pattern}')"


def _resolve(node, defs):
    if isinstance(node, dict) and "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        merged = deepcopy(defs[name])
        merged.update({k: v for k, v in node.items() if k != "$ref"})
        return merged
    return node


def _property_names_rule(names: dict) -> dict:
    checks, allowed = [], []
    if "pattern" in names:
        checks.append(f"k.matches(r'{names['pattern']}')")
        allowed.append(f"match {names['pattern']}")
    if "maxLength" in names:
        checks.append(f"k.size() <= {names['maxLength']}")
        allowed.append(f"have at most {names['maxLength']} characters")
    if not checks or set(names) - {"pattern", "maxLength"}:
        raise ValueError(f"cannot express propertyNames {names} in a CEL rule")
    return {"rule": f"self.all(k, {' && '.join(checks)})", "message": f"keys must {' and '.join(allowed)}"}


def structural(node: dict, defs: dict) -> dict:
    node = _resolve(node, defs)
    out: dict = {}

    if "anyOf" in node:
        branches = [_resolve(b, defs) for b in node["anyOf"]]
        non_null = [b for b in branches if b.get("type") != "null"]
        types = sorted(b.get("type") for b in non_null)
        if types == ["integer", "string"]:
            # int | str: a Kubernetes int-or-string; a string pattern moves into CEL
            out["x-kubernetes-int-or-string"] = True
            string = next(b for b in non_null if b.get("type") == "string")
            pattern = string.get("pattern")
            if "maxLength" in string:
                # bounds the CEL rule's cost: the API server refuses unbounded strings in matches()
                out["maxLength"] = string["maxLength"]
            if pattern:
                out["x-kubernetes-validations"] = [
                    {"rule": _INT_OR_STRING_RULE.format(pattern=pattern), "message": f"must be an integer or match {pattern}"}
                ]
        elif len(non_null) == 1:
            inner = structural(non_null[0], defs)
            out.update(inner)
            # An optional field's own checks (Field(json_schema_extra=...)) sit beside anyOf, not in the branch.
            for key, value in node.items():
                if key in ("anyOf", "description", "default") or key in _DROP:
                    continue
                if key == "x-kubernetes-validations":
                    out[key] = [*out.get(key, []), *deepcopy(value)]
                else:
                    out[key] = deepcopy(value)
        else:
            raise ValueError(f"cannot express anyOf {branches} in a structural schema")
        if "description" in node:
            out["description"] = node["description"]
        if node.get("default") is not None:
            out["default"] = node["default"]
        return out

    for key, value in node.items():
        if key in _DROP or key == "$defs":
            continue
        if key == "propertyNames":
            # A structural schema has no propertyNames: map keys are checked by a CEL rule instead.
            out.setdefault("x-kubernetes-validations", []).append(_property_names_rule(value))
            continue
        if key == "patternProperties":
            # pydantic's form of a map whose keys have a pattern: the same as propertyNames + additionalProperties.
            if len(value) != 1 or "additionalProperties" in node:
                raise ValueError(f"cannot express patternProperties {value} in a structural schema")
            ((pattern, values),) = value.items()
            out.setdefault("x-kubernetes-validations", []).append(_property_names_rule({"pattern": pattern}))
            out["additionalProperties"] = structural(values, defs)
            continue
        if key == "default":
            # Only scalars: object defaults come from default_factory and are applied by the operator.
            if value is not None and not isinstance(value, (dict, list)):
                out["default"] = value
            continue
        if key == "properties":
            out["properties"] = {name: structural(prop, defs) for name, prop in value.items()}
        elif key == "items":
            out["items"] = structural(value, defs)
        else:
            out[key] = deepcopy(value)

    if node.get("type") == "object" and "properties" not in node:
        extra = node.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            out["additionalProperties"] = structural(extra, defs)
        elif not out.get("x-kubernetes-preserve-unknown-fields") and "additionalProperties" not in out:
            out["x-kubernetes-preserve-unknown-fields"] = True
    if "type" not in out and not out.get("x-kubernetes-int-or-string"):
        if "properties" in out:
            out["type"] = "object"
        elif out.get("x-kubernetes-preserve-unknown-fields"):
            out["type"] = "object"
    return out


def model_schema(model) -> dict:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    return structural(raw, defs)
