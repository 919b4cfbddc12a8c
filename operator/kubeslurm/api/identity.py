"""spec.identity: who the researchers are, the same in every Slurm pod.

- local (the default): the users of spec.accounts, made by the pods' init containers
  with the uids recorded in status.unixIds (render/unix_ids.py); ssh keys from
  spec.login.ssh.authorizedKeysSecret.
- ldap: the site's directory, through SSSD in every login, slurmctld, slurmd and
  slurmdbd pod: uids, gids, groups and ssh public keys come from there
  (render/config/sssd_conf.py says what each field turns into).

The strings here end up in sssd.conf (a `key = value` line each), so each has a pattern
that admits nothing able to end its line, open a `[section]` or add an option. The
patterns are written for the three regex engines that check them (pydantic's, the API
server's and helm's), anchored, like those of names.py.
"""

import re
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from .base import KubeModel, SubfieldError
from .names import PATTERN_HELP
from .secret_ref import CertificateSource, SecretKeyRef

_DNS_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = rf"({_DNS_LABEL}(\.{_DNS_LABEL})*|\[[0-9A-Fa-f:.]+\])"
LDAP_URI_PATTERN = rf"^ldaps?://{_HOST}(:[0-9]{{1,5}})?/?$"
# A DN of plain RDNs: attr=value, values of letters, digits, space . _ ' - (no escapes,
# no multi-valued RDNs): what suffixes, OUs and service accounts look like.
_RDN = r"[A-Za-z][A-Za-z0-9-]*=[A-Za-z0-9]([A-Za-z0-9 ._'-]*[A-Za-z0-9])?"
DN_PATTERN = rf"^{_RDN}(,{_RDN})*$"
# Comma separates groups in simple_allow_groups, so no group name may hold one.
GROUP_NAME_PATTERN = r"^[A-Za-z0-9_]([A-Za-z0-9_. -]{0,254}[A-Za-z0-9_.-])?$"
# An LDAP search filter of the usual characters; the model also counts its parentheses.
LDAP_FILTER_PATTERN = r"^\([A-Za-z0-9=&|!()*.,_ :<>~'-]*\)$"
ATTRIBUTE_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9-]{0,63}$"
MAX_DN = 512
MAX_LDAP_URIS = 8
MAX_LOGIN_GROUPS = 32
# Directory ids below this are ignored by default: the images' own system accounts live there.
DEFAULT_MIN_ID = 1000

PATTERN_HELP.update({
    LDAP_URI_PATTERN: "an ldap://host[:port] or ldaps://host[:port] URI (no path, user or query)",
    DN_PATTERN: "a DN of attr=value parts joined by ',' (values of letters, digits, space . _ ' -), like ou=people,dc=example,dc=org",
    GROUP_NAME_PATTERN: "a group name of letters, digits, _ . - and inner spaces (no comma)",
    LDAP_FILTER_PATTERN: "an LDAP filter in parentheses, like (memberOf=cn=hpc,ou=groups,dc=example,dc=org)",
    ATTRIBUTE_NAME_PATTERN: "an LDAP attribute name like sshPublicKey",
})

DistinguishedName = Annotated[str, Field(min_length=3, max_length=MAX_DN, pattern=DN_PATTERN)]


def balanced_parentheses(text: str) -> bool:
    depth = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


def uri_port_problem(uri: str) -> str | None:
    port = re.search(r":([0-9]+)/?$", uri.split("://", 1)[1])
    if port and not 1 <= int(port[1]) <= 65535:
        return f"{uri!r} has no valid port (1 to 65535)"
    return None


class LdapDirectory(KubeModel):
    """Where SSSD finds the site's users, and how it proves the directory is the real one."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        {
            "rule": "self.uris.all(u, u.startsWith('ldap://')) || self.uris.all(u, u.startsWith('ldaps://'))",
            "message": "identity.ldap.uris: use one scheme, all ldap:// (StartTLS) or all ldaps://",
        },
        {
            "rule": "has(self.bindDN) == has(self.bindPasswordSecretRef)",
            "message": "identity.ldap: set bindDN and bindPasswordSecretRef together (or neither, for anonymous searches)",
        },
        {
            "rule": "!has(self.loginFilter) || !has(self.loginGroups) || self.loginGroups.size() == 0",
            "message": "identity.ldap: give loginGroups or loginFilter, not both",
        },
    ]})

    uris: list[Annotated[str, Field(max_length=300, pattern=LDAP_URI_PATTERN)]] = Field(
        min_length=1, max_length=MAX_LDAP_URIS,
        description=(
            "Directory servers, tried in order: ldap://host[:port] (always with StartTLS) or ldaps://host[:port]. "
            "The host must be a name in the servers' certificates."
        ),
    )
    search_base: DistinguishedName = Field(description="Where users and groups are searched, e.g. dc=example,dc=org.")
    user_search_base: DistinguishedName | None = Field(default=None, description="Narrows the user search, e.g. ou=people,dc=example,dc=org.")
    group_search_base: DistinguishedName | None = Field(default=None, description="Narrows the group search, e.g. ou=groups,dc=example,dc=org.")
    bind_dn: DistinguishedName | None = Field(
        default=None, alias="bindDN",
        description="The service account SSSD binds as, e.g. cn=sssd,ou=services,dc=example,dc=org; unset: anonymous searches.",
    )
    bind_password_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="The Secret key holding bindDN's password (one line of printable ASCII). It reaches only the Secret <cluster>-sssd.",
    )
    ca_certificate: CertificateSource = Field(
        description=(
            "The CA certificate(s), PEM, that the servers' certificates must chain to: TLS is always on and the "
            "certificate always checked (ldap_tls_reqcert = demand)."
        ),
    )
    login_groups: list[Annotated[str, Field(max_length=256, pattern=GROUP_NAME_PATTERN)]] = Field(
        default_factory=list, max_length=MAX_LOGIN_GROUPS, json_schema_extra={"x-kubernetes-list-type": "set"},
        description="Only members of these directory groups may log in over ssh (SSSD's simple access provider); empty: every directory user.",
    )
    login_filter: str | None = Field(
        default=None, max_length=1024, pattern=LDAP_FILTER_PATTERN,
        description="Or: only users matching this LDAP filter may log in, e.g. (memberOf=cn=hpc,ou=groups,dc=example,dc=org).",
    )
    schema_: Literal["rfc2307", "rfc2307bis"] = Field(
        default="rfc2307", alias="schema",
        description="rfc2307: groups list members by memberUid (OpenLDAP's nis schema); rfc2307bis: by member DN.",
    )
    ssh_public_key_attribute: str = Field(
        default="sshPublicKey", max_length=64, pattern=ATTRIBUTE_NAME_PATTERN,
        description="The user attribute holding ssh public keys (openssh-lpk's sshPublicKey).",
    )
    cache_timeout_seconds: int = Field(
        default=60, ge=1, le=86400,
        description="How long a user's entry (groups, keys) is trusted before SSSD asks again: a change in the directory shows within this.",
    )
    negative_cache_timeout_seconds: int = Field(
        default=15, ge=1, le=3600,
        description="How long a name that was not found stays not found: a user added to the directory can log in within this.",
    )
    min_id: int = Field(
        default=DEFAULT_MIN_ID, ge=1, le=2**31 - 1,
        description="Directory uids and gids below this are ignored, so no entry can claim root's, slurm's or another system account's id.",
    )

    @field_validator("uris")
    @classmethod
    def _one_scheme_and_real_ports(cls, uris: list[str]) -> list[str]:
        for index, uri in enumerate(uris):
            problem = uri_port_problem(uri)
            if problem:
                raise SubfieldError(f"[{index}]", problem)
        if len({uri.split("://", 1)[0] for uri in uris}) > 1:
            raise ValueError("use one scheme, all ldap:// (StartTLS) or all ldaps://")
        return uris

    @field_validator("login_filter")
    @classmethod
    def _balanced(cls, text: str | None) -> str | None:
        if text is not None and not balanced_parentheses(text):
            raise ValueError(f"{text!r} has unbalanced parentheses")
        return text

    @model_validator(mode="after")
    def _cross_field(self):
        if (self.bind_dn is None) != (self.bind_password_secret_ref is None):
            raise ValueError("set bindDN and bindPasswordSecretRef together (or neither, for anonymous searches)")
        if self.login_filter is not None and self.login_groups:
            raise ValueError("give loginGroups or loginFilter, not both")
        if len(set(self.login_groups)) != len(self.login_groups):
            raise SubfieldError("loginGroups", "groups must not repeat")
        return self


class IdentitySpec(KubeModel):
    """Where the users of the login and compute pods come from."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        {
            "rule": "(has(self.mode) && self.mode == 'ldap') == has(self.ldap)",
            "message": "identity.ldap is required with mode: ldap, and not allowed with mode: local",
        },
    ]})

    mode: Literal["local", "ldap"] = Field(
        default="local",
        description=(
            "local: the users of spec.accounts, made in every pod with uids of status.unixIds; ldap: the site's "
            "directory through SSSD in every Slurm pod (uids, groups and ssh keys from there)."
        ),
    )
    ldap: LdapDirectory | None = Field(default=None, description="The directory, with mode: ldap.")

    @model_validator(mode="after")
    def _ldap_with_its_mode(self):
        if self.mode == "ldap" and self.ldap is None:
            raise SubfieldError("ldap", "required with mode: ldap (uris, searchBase, caCertificate)")
        if self.mode == "local" and self.ldap is not None:
            raise SubfieldError("ldap", "not allowed with mode: local: set mode: ldap or remove ldap")
        return self

    @property
    def from_directory(self) -> bool:
        return self.mode == "ldap"
