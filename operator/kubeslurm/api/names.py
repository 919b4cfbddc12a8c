"""Name rules shared by the API models.

Object names end up as Kubernetes object names, pod host names and Slurm node names.
A StatefulSet's pods carry the label `controller-revision-hash=<statefulset>-<hash>`
which must fit 63 characters, and the operator derives StatefulSets named
`<cluster>-accounting` and `<nodeset>`; 40 characters leaves room for every suffix.
"""

MAX_OBJECT_NAME = 40
DNS_LABEL_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
SLURM_NAME_PATTERN = r"^[a-z][a-z0-9_-]*$"
UNIX_USER_PATTERN = r"^[a-z_][a-z0-9_-]*$"
FEATURE_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"

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
