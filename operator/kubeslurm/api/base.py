"""The base of every API model: camelCase on the wire, unknown fields refused."""

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class KubeModel(BaseModel):
    """Fields are snake_case in Python and camelCase in YAML, like Kubernetes types.

    Unknown fields are an error, not silently dropped: a typo such as `replica: 3`
    must fail at `kubectl apply` (the CRD schema) and in `kubeslurm render` alike.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_default=True,
    )

    def to_wire(self) -> dict:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


def preserve_unknown(description: str) -> dict:
    """Schema extras for free-form Kubernetes sub-objects (affinity, pod templates)."""
    return {"description": description, "x-kubernetes-preserve-unknown-fields": True}
