"""sssd.conf: who exists in every Slurm pod when the site's directory is LDAP (SSSD).

SSSD answers `getent passwd alice`, `id alice` (nss), ssh logins (pam) and
`sss_ssh_authorizedkeys alice` (ssh) from the directory, so login, slurmctld,
slurmd and slurmdbd pods agree on every uid, gid and group.

Why the whole file goes into a Secret, not a ConfigMap plus a password file:
SSSD has no option that reads the bind password from a file of its own
(`ldap_default_authtok` is a value in sssd.conf; `obfuscated_password` is an
encoding anyone can reverse, not a secret), so a file that authenticates to the
directory is a secret as a whole. SSSD treats it so too: it refuses to start
when others may read sssd.conf ("File ownership and permissions check failed";
trixie's sssd 2.10 accepts root-owned 0600, 0640 and 0400, refuses 0644). So the
operator renders this file into a Secret (as it does slurmdbd.conf, for the same
reason), and the pod's init container copies it from the Secret volume to

    /etc/sssd/sssd.conf   owner root:root, mode 0600

in an emptyDir (Secret volumes are read-only symlinks whose mode the kubelet
decides), the way slurm.key is installed. The CA certificate is not secret: it
may come from a ConfigMap or Secret mounted at `ca_cert_path`. sssd then runs as
SSSD_COMMAND (in the foreground, logging to stderr) as root; its cache
(/var/lib/sss/db) wants an emptyDir, and every container that looks users up
mounts the same /var/lib/sss/pipes and /var/lib/sss/mc (the in-memory cache)
from that pod's shared emptyDirs, or nss_sss finds no sssd and answers
"unavailable" at once (the image's nsswitch.conf is `files sss`).

TLS is not optional: the bind password and every user's entry cross the
network, so `ldap://` URIs always use StartTLS and `ldaps://` URIs TLS, both with
`ldap_tls_reqcert = demand` against the given CA.

Bounded time for a new user: SSSD asks the directory on every cache miss, so a
user nobody looked up appears at once; one looked up before they existed is
remembered as absent for `entry_negative_timeout` seconds; an existing user's
changes (groups, shell, keys) reach processes within `entry_cache_timeout`
seconds (the nss memory cache is bounded by the same number). Enumeration stays
off: it would load the whole directory into every pod.

Every field is checked against a pattern when the config is built, so no value
can end its line, open a `[section]` or add an option; the error names the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kubeslurm.render.config.templates import render_template

SSSD_CONF_PATH = "/etc/sssd/sssd.conf"
SSSD_CONF_MODE = 0o600
SSSD_COMMAND = ("sssd", "-i", "--logger=stderr")

_DNS_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = rf"(?:{_DNS_LABEL}(?:\.{_DNS_LABEL})*|\[[0-9A-Fa-f:.]+\])"
LDAP_URI = re.compile(rf"(?P<scheme>ldaps?)://{_HOST}(?::(?P<port>[0-9]{{1,5}}))?/?")
# A DN of plain RDNs: attr=value, values of letters, digits, space . _ ' - (no
# escapes, no multi-valued RDNs): what suffixes, OUs and service accounts look like.
_RDN = r"[A-Za-z][A-Za-z0-9-]*=[A-Za-z0-9](?:[A-Za-z0-9 ._'-]*[A-Za-z0-9])?"
DISTINGUISHED_NAME = re.compile(rf"{_RDN}(?:,{_RDN})*")
FILE_PATH = re.compile(r"(?:/[A-Za-z0-9._-]+)+")
# Comma separates groups in simple_allow_groups, so no group name may hold one.
GROUP_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_. -]{0,254}[A-Za-z0-9_.-])?")
# An LDAP search filter of the usual characters; parentheses are also counted.
LDAP_FILTER = re.compile(r"\([A-Za-z0-9=&|!()*.,_ :<>~'-]*\)")
ATTRIBUTE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,63}")
DOMAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
# The password is the rest of its `key = value` line: any printable ASCII
# character can stand there, '[' and '#' included (a section or comment only
# starts a line), but a line break would end it and SSSD trims white space at
# either end, so neither may appear there.
BIND_PASSWORD = re.compile(r"[!-~](?:[ -~]*[!-~])?")
SCHEMAS = ("rfc2307", "rfc2307bis")


def _check(field: str, value: object, pattern: re.Pattern, what: str) -> None:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ValueError(f"{field}: {value!r} is not {what}")


def _check_seconds(field: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{field}: {value!r} must be a whole number of seconds from {low} to {high}")


@dataclass(frozen=True)
class SssdConfig:
    """What sssd.conf says, checked when built (ValueError naming the field)."""

    # ldap:// (StartTLS) or ldaps:// URIs of the directory servers, tried in order.
    uris: tuple[str, ...]
    # Where users and groups are searched (subtree), unless the two below narrow it.
    search_base: str
    # The CA certificate (PEM) that the servers' certificates must chain to, in the pod.
    ca_cert_path: str
    # The service account SSSD binds as; None: anonymous searches.
    bind_dn: str | None = None
    user_search_bases: tuple[str, ...] = ()
    group_search_bases: tuple[str, ...] = ()
    # Who may log in (PAM account phase: ssh): members of any of these groups...
    login_groups: tuple[str, ...] = ()
    # ...or users matching this LDAP filter. At most one of the two; neither: everyone.
    login_filter: str | None = None
    ssh_public_key_attribute: str = "sshPublicKey"
    # rfc2307: groups list memberUid; rfc2307bis: groups list member DNs.
    schema: str = "rfc2307"
    # Seconds an entry (and the nss memory cache) is trusted before SSSD asks again.
    entry_cache_timeout: int = 60
    # Seconds a name that was not found stays "not found".
    entry_negative_timeout: int = 15
    # The [domain/NAME] section's name; shown by sssctl.
    domain: str = "directory"
    # Directory uids/gids below this are ignored, so no entry can claim root's,
    # slurm's or another system account's id.
    min_id: int = 1000

    def __post_init__(self) -> None:
        if not isinstance(self.uris, tuple) or not self.uris:
            raise ValueError("uris: give at least one ldap:// or ldaps:// URI, as a tuple")
        schemes = set()
        for uri in self.uris:
            _check("uris", uri, LDAP_URI, "an ldap://host[:port] or ldaps://host[:port] URI")
            match = LDAP_URI.fullmatch(uri)
            if match["port"] is not None and not 1 <= int(match["port"]) <= 65535:
                raise ValueError(f"uris: {uri!r} has no valid port (1 to 65535)")
            schemes.add(match["scheme"])
        if len(schemes) > 1:
            raise ValueError("uris: mix of ldap:// and ldaps://; use one scheme "
                             "(ldap:// always uses StartTLS, so either is encrypted)")
        _check("search_base", self.search_base, DISTINGUISHED_NAME, "a DN like ou=people,dc=example,dc=org")
        _check("ca_cert_path", self.ca_cert_path, FILE_PATH, "an absolute path of letters, digits, . _ -")
        if "/../" in self.ca_cert_path + "/" or "/./" in self.ca_cert_path + "/":
            raise ValueError(f"ca_cert_path: {self.ca_cert_path!r} must not contain . or .. components")
        if self.bind_dn is not None:
            _check("bind_dn", self.bind_dn, DISTINGUISHED_NAME, "a DN like cn=sssd,ou=services,dc=example,dc=org")
        for field in ("user_search_bases", "group_search_bases"):
            bases = getattr(self, field)
            if not isinstance(bases, tuple):
                raise ValueError(f"{field}: must be a tuple of DNs")
            for base in bases:
                _check(field, base, DISTINGUISHED_NAME, "a DN like ou=people,dc=example,dc=org")
        if not isinstance(self.login_groups, tuple):
            raise ValueError("login_groups: must be a tuple of group names")
        for group in self.login_groups:
            _check("login_groups", group, GROUP_NAME,
                   "a group name (letters, digits, _ . - and inner spaces; no comma)")
        if self.login_filter is not None:
            _check("login_filter", self.login_filter, LDAP_FILTER,
                   "an LDAP filter in parentheses, like (memberOf=cn=hpc,ou=groups,dc=example,dc=org)")
            if not _balanced(self.login_filter):
                raise ValueError(f"login_filter: {self.login_filter!r} has unbalanced parentheses")
            if self.login_groups:
                raise ValueError("login_filter: give login_groups or login_filter, not both")
        _check("ssh_public_key_attribute", self.ssh_public_key_attribute, ATTRIBUTE_NAME,
               "an LDAP attribute name like sshPublicKey")
        if self.schema not in SCHEMAS:
            raise ValueError(f"schema: {self.schema!r} is not one of {', '.join(SCHEMAS)}")
        _check_seconds("entry_cache_timeout", self.entry_cache_timeout, 1, 86400)
        _check_seconds("entry_negative_timeout", self.entry_negative_timeout, 1, 3600)
        _check("domain", self.domain, DOMAIN_NAME, "a name of letters, digits, . _ -")
        if isinstance(self.min_id, bool) or not isinstance(self.min_id, int) or not 1 <= self.min_id <= 2**31 - 1:
            raise ValueError(f"min_id: {self.min_id!r} must be a whole number from 1 to {2**31 - 1}")

    @property
    def start_tls(self) -> bool:
        return self.uris[0].startswith("ldap://")


def _balanced(text: str) -> bool:
    depth = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


def _search_bases(bases: tuple[str, ...]) -> str | None:
    """SSSD's list syntax: base?scope?filter, joined by '?' (empty filter)."""
    if not bases:
        return None
    if len(bases) == 1:
        return bases[0]
    return "?".join(f"{base}?subtree?" for base in bases)


def render_sssd_conf(config: SssdConfig, bind_password: str | None = None) -> str:
    """The text of /etc/sssd/sssd.conf. With a bind DN it holds the password: Secret only."""
    if config.bind_dn is None:
        if bind_password is not None:
            raise ValueError("bind_password: given without bind_dn; set bind_dn or drop the password")
    else:
        if not bind_password:
            raise ValueError("bind_password: bind_dn is set but the password is empty")
        if not BIND_PASSWORD.fullmatch(bind_password):
            # the message reaches status and Events: it names no character of the password
            raise ValueError("bind_password: must be one line of printable ASCII without white space "
                             "at either end (sssd.conf cannot hold anything else)")
    if config.login_groups:
        access = {"access_provider": "simple", "simple_allow_groups": ", ".join(config.login_groups)}
    elif config.login_filter is not None:
        access = {"access_provider": "ldap", "ldap_access_order": "filter",
                  "ldap_access_filter": config.login_filter}
    else:
        access = {"access_provider": "permit"}
    return render_template(
        "sssd.conf.j2",
        config=config,
        bind_password=bind_password,
        access=access,
        user_search_base=_search_bases(config.user_search_bases),
        group_search_base=_search_bases(config.group_search_bases),
    )
