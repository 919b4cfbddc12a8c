"""References to one key of a Secret or ConfigMap in the SlurmCluster's namespace."""

from pydantic import ConfigDict, Field, model_validator

from .base import KubeModel
from .names import DNS_SUBDOMAIN_PATTERN, MAX_DNS_SUBDOMAIN, SECRET_KEY_PATTERN



def _name(kind: str) -> object:
    return Field(
        min_length=1, max_length=MAX_DNS_SUBDOMAIN, pattern=DNS_SUBDOMAIN_PATTERN,
        description=f"{kind} name, in the SlurmCluster's namespace (a DNS subdomain).",
    )


def _key(default: str) -> object:
    return Field(
        default=default, min_length=1, max_length=MAX_DNS_SUBDOMAIN, pattern=SECRET_KEY_PATTERN,
        description="Key inside the object: letters, digits, '-', '_' and '.'.",
    )


class SecretKeyRef(KubeModel):
    name: str = _name("Secret")
    key: str = _key("password")


class CertificateKeyRef(KubeModel):
    name: str = _name("Secret or ConfigMap")
    key: str = _key("ca.crt")


class CertificateSource(KubeModel):
    """A PEM certificate from exactly one of a Secret or a ConfigMap (a CA certificate is not secret)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        {"rule": "has(self.secret) != has(self.configMap)", "message": "set exactly one of secret or configMap"},
    ]})

    secret: CertificateKeyRef | None = Field(default=None, description="A Secret holding the PEM certificate(s).")
    config_map: CertificateKeyRef | None = Field(default=None, description="A ConfigMap holding the PEM certificate(s).")

    @model_validator(mode="after")
    def _exactly_one(self):
        if (self.secret is None) == (self.config_map is None):
            raise ValueError("set exactly one of secret or configMap")
        return self

    @property
    def kind(self) -> str:
        return "Secret" if self.secret is not None else "ConfigMap"

    @property
    def ref(self) -> CertificateKeyRef:
        return self.secret if self.secret is not None else self.config_map
