"""Name and string rules shared by the API models.

Object names end up as Kubernetes object names, pod host names and Slurm node names.
A StatefulSet's pods carry the label `controller-revision-hash=<statefulset>-<hash>`
which must fit 63 characters, and the operator derives StatefulSets named
`<cluster>-accounting` and `<nodeset>`; 40 characters leaves room for every suffix.

Every pattern here is anchored with ^...$ and written for three regex engines at
once: pydantic's (Rust `regex`), the API server's (Go RE2) and helm's JSON Schema
(Go). None of them lets `$` match before a trailing newline, unlike Python's `re`:
Python code must use `re.fullmatch` with these patterns, never `re.match`.
They admit no whitespace, '#', quote, backslash or control character, so a value
that passes cannot start a new line, a comment or a second key in any config file
the operator renders, nor a second word on a command line.
"""

import re

from pydantic import AfterValidator, Field

MAX_OBJECT_NAME = 40
DNS_LABEL_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# Namespaces are RFC 1123 labels (they may start with a digit), at most 63 characters.
NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
MAX_NAMESPACE = 63
# Object names that Kubernetes validates as DNS subdomains: Secrets, StorageClasses, PriorityClasses.
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
MAX_DNS_SUBDOMAIN = 253
SLURM_NAME_PATTERN = r"^[a-z][a-z0-9_-]*$"
UNIX_USER_PATTERN = r"^[a-z_][a-z0-9_-]*$"
FEATURE_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
# A key of a Secret's data (Kubernetes' IsConfigMapKey).
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
# A label key: an optional DNS-subdomain prefix and '/', then a name of at most 63 characters.
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
MAX_LABEL_KEY = 317
LABEL_VALUE_PATTERN = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
MAX_LABEL_VALUE = 63
# A container image reference: [registry[:port]/]path[:tag][@algorithm:digest] (the
# distribution reference grammar, without IPv6 registries).
IMAGE_PATTERN = (
    r"^([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*(:[0-9]+)?/)?"
    r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)
MAX_IMAGE = 512
# A server (database, NFS): a host name, an IPv4 address or an IPv6 address (without brackets).
HOST_PATTERN = (
    r"^([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*"
    r"|[0-9A-Fa-f]*:[0-9A-Fa-f:.]*)$"
)
# MySQL/MariaDB names written unquoted in slurmdbd.conf (StorageUser, StorageLoc).
DATABASE_USER_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
DATABASE_NAME_PATTERN = r"^[A-Za-z0-9_]+$"
# slurm.conf: a key is a Slurm parameter name; a value is one word of letters, digits
# and the punctuation Slurm's values use (lists, key=value options, paths, hostlists,
# TRES, time and %-patterns). Left out: whitespace and quotes (a second key or a quoted
# value with spaces), '#' (a comment), '\' (an escape, or a line continuation at the end),
# and the shell's metacharacters ($ ` ; | & < >), which no Slurm value needs.
SLURM_CONF_KEY_PATTERN = r"^[A-Za-z][A-Za-z0-9]*$"
SLURM_CONF_KEY_HELP = "a slurm.conf key is letters and digits only, starting with a letter, e.g. MaxJobCount"
SLURM_CONF_VALUE_PATTERN = r"^[A-Za-z0-9!%()*+,./:=?@\[\]^_{}~-]+$"
SLURM_CONF_VALUE_HELP = (
    "one word of letters, digits and !%()*+,-./:=?@[]^_{}~ (no whitespace, quote, '#', '\\', "
    "$, `, ;, |, &, <, > or control character: slurm.conf would read them as another key, a comment or an escape)"
)
# Kubernetes resource names (requests/limits keys), e.g. ephemeral-storage, hugepages-2Mi, example.com/rdma.
RESOURCE_NAME_PATTERN = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$"
# Environment variable names as Kubernetes accepts them (C identifiers plus '-' and '.').
ENV_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
# An absolute path of plain components: none is '.' or '..', no whitespace, quote or control character.
_PATH_COMPONENT = r"([A-Za-z0-9_@+=,-][A-Za-z0-9_.@+=,-]*|\.[A-Za-z0-9_@+=,-][A-Za-z0-9_.@+=,-]*|\.\.[A-Za-z0-9_.@+=,-]+)"
MOUNT_PATH_PATTERN = rf"^(/{_PATH_COMPONENT})+$"
# The same, relative (a subPath, a file inside a volume).
RELATIVE_PATH_PATTERN = rf"^{_PATH_COMPONENT}(/{_PATH_COMPONENT})*$"

# A Kubernetes annotation value as kubeslurm passes it on: any text on one line (load balancer
# settings, JSON), no control characters.
ANNOTATION_VALUE_PATTERN = r"^[^\x00-\x1f\x7f]*$"

# What each pattern admits, in words: the manifest loader says this instead of the regex.
PATTERN_HELP = {
    DNS_LABEL_PATTERN: "a DNS label: lower-case letters, digits and '-', starting with a letter and not ending with '-'",
    NAMESPACE_PATTERN: "a namespace name: lower-case letters, digits and '-'",
    DNS_SUBDOMAIN_PATTERN: "a DNS subdomain: lower-case letters, digits, '-' and '.'",
    SLURM_NAME_PATTERN: "lower-case letters, digits, '_' and '-', starting with a letter",
    UNIX_USER_PATTERN: "a Unix user name: lower-case letters, digits, '_' and '-', starting with a letter or '_'",
    FEATURE_PATTERN: "letters, digits, '_', '.' and '-', not starting with '.' or '-'",
    SECRET_KEY_PATTERN: "letters, digits, '-', '_' and '.'",
    LABEL_KEY_PATTERN: "a Kubernetes label key: an optional DNS-subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or '.'",
    LABEL_VALUE_PATTERN: "a Kubernetes label value: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
    IMAGE_PATTERN: "an image reference such as registry.example.org:5000/team/slurm:24.11 or name@sha256:<digest>",
    HOST_PATTERN: "a host name (letters, digits, '-' and '.'), an IPv4 address or an IPv6 address without brackets",
    DATABASE_USER_PATTERN: "letters, digits, '_', '.' and '-'",
    DATABASE_NAME_PATTERN: "letters, digits and '_'",
    RESOURCE_NAME_PATTERN: "a Kubernetes resource name such as ephemeral-storage or example.com/rdma",
    ENV_NAME_PATTERN: "letters, digits, '_', '-' and '.', not starting with a digit",
    MOUNT_PATH_PATTERN: "an absolute path of letters, digits and _.@+=,- with no '.' or '..' component and no trailing '/'",
    RELATIVE_PATH_PATTERN: "a relative path of letters, digits and _.@+=,- with no '.' or '..' component",
    ANNOTATION_VALUE_PATTERN: "one line of text without control characters",
    SLURM_CONF_KEY_PATTERN: SLURM_CONF_KEY_HELP,
    SLURM_CONF_VALUE_PATTERN: SLURM_CONF_VALUE_HELP,
}

# Slurm reads these words specially wherever a name is expected.
# - PartitionName=DEFAULT (any case) is the template of the lines after it, not a partition.
# - Nodes=ALL (any case) in a partition line means every node, so no NodeSet may be `all`.
# - The account `root` is the top of Slurm's association tree: its limits bind everyone.
RESERVED_PARTITION_NAMES = ("default",)
RESERVED_NODE_SET_NAMES = ("all",)
RESERVED_ACCOUNT_NAMES = ("root",)

# CEL on the whole object: the API server validates metadata.name only as a DNS
# subdomain (dots allowed, 253 characters); we need a short DNS label.
OBJECT_NAME_RULES = [
    {
        "rule": f"self.metadata.name.size() <= {MAX_OBJECT_NAME}",
        "message": f"metadata.name must be at most {MAX_OBJECT_NAME} characters: it prefixes pod and Slurm node names",
    },
    {
        "rule": f"self.metadata.name.matches('{DNS_LABEL_PATTERN}')",
        "message": "metadata.name must be a DNS label: lower-case letters, digits and '-', starting with a letter (no dots)",
    },
]


def matching(pattern: str, help_text: str) -> tuple:
    """Annotated metadata: the pattern in the schema (so in the CRD), and in Python an error in words.

    pydantic's own pattern error shows the regex; for the strings users write most
    (slurm.conf keys and values) `help_text` says what is allowed instead."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(f"{value!r} is not allowed: {help_text}")
        return value

    return (Field(json_schema_extra={"pattern": pattern}), AfterValidator(check))
