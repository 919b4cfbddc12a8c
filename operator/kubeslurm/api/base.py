"""The base of every API model: camelCase on the wire, unknown fields refused, types strict."""

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class KubeModel(BaseModel):
    """Fields are snake_case in Python and camelCase in YAML, like Kubernetes types.

    Unknown fields are an error, not silently dropped: a typo such as `replica: 3`
    must fail at `kubectl apply` (the CRD schema) and in `kubeslurm render` alike.
    Types are strict for the same reason: the API server refuses `replicas: "3"` or
    `backup: "yes"`, so offline render must not quietly read them as 3 and true.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_default=True,
        strict=True,
    )

    def to_wire(self) -> dict:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class SubfieldError(ValueError):
    """A validator's error about a field below the one it validates: `path` is relative to it.

    The manifest loader joins `path` to the validated field's path, so the message names
    the exact field (spec.podTemplate.spec.volumes[0].secret.secretName) however deep the
    validator that found it sits.
    """

    def __init__(self, path: str, message: str):
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}")


def preserve_unknown(description: str) -> dict:
    """Schema extras for free-form Kubernetes sub-objects (affinity, pod templates)."""
    return {"description": description, "x-kubernetes-preserve-unknown-fields": True}
