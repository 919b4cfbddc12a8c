"""Hostile manifests: each is refused naming the field, or renders no config line it did not ask for.

Three kinds of input, each run twice: through the models (load_documents, plus the
cross-object name check the operator runs) and through `kubeslurm render` the way a user
runs it, where nothing may end in a traceback.
- INJECTIONS: every string of both kinds that reaches a config file, a command line or
  an object name, with each character that means something there (newline, $(..),
  backticks, ';', '#', a trailing backslash, \\v, Unicode line separators, spaces, quotes).
- REFUSED: name collisions, podTemplate escapes, wrong types, YAML tricks.
- RENDERED: odd but harmless input; the config files keep exactly the lines of the
  contract manifest (plus those the input asks for).
"""

import copy
import re

import pytest
import yaml

from kubeslurm.api import ManifestError, load_documents
from kubeslurm.cli import main
from kubeslurm.render.config.files import render_config_files
from kubeslurm.render.errors import RenderError
from kubeslurm.render.k8s.name_collisions import name_collisions

from .manifests import contract_documents, set_path

CLUSTER, GPU_NODES, CPU_NODES = contract_documents()

EXTERNAL_DATABASE = {
    "external": {
        "host": "db.example.org", "user": "slurm", "database": "slurm_acct_db",
        "passwordSecretRef": {"name": "dbpw", "key": "pw"},
    }
}
TREE = {"plugin": "tree", "nodeLabels": ["topology.kubernetes.io/zone", "example.com/switch"]}
BLOCK = {"plugin": "block", "nodeLabels": ["example.com/nvlink-domain"], "blockSizes": [4, 8]}
POD_TEMPLATE = {
    "metadata": {"labels": {"team": "vision"}, "annotations": {"example.com/owner": "vision"}},
    "spec": {
        "nodeSelector": {"example.com/pool": "gpu"},
        "priorityClassName": "hpc",
        "volumes": [
            {"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets"}},
            {"name": "scratch", "nfs": {"server": "nfs.example.org", "path": "/export/scratch"}},
            {"name": "settings", "configMap": {"name": "settings"}},
            {"name": "creds", "secret": {"secretName": "team-creds"}},
        ],
        "containers": [{
            "name": "slurmd",
            "image": "example.org/slurm-cuda:24.11",
            "env": [
                {"name": "NCCL_DEBUG", "value": "INFO"},
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "team-token", "key": "token"}}},
            ],
            "resources": {"limits": {"ephemeral-storage": "10Gi"}},
            "volumeMounts": [{"name": "datasets", "mountPath": "/datasets"}],
        }],
    },
}

# Every manifest starts from the contract example with these optional parts filled in, so
# that each string field exists and is valid before one of them is poisoned.
FULL_CLUSTER = set_path(set_path(set_path(CLUSTER, "spec.slurmConf", {"MaxJobCount": "20000"}),
                                 "spec.topology", TREE), "spec.controller.persistence.storageClassName", "fast")
FULL_CLUSTER = set_path(FULL_CLUSTER, "spec.partitions.0.defaultTime", "1:00:00")
FULL_CLUSTER = set_path(FULL_CLUSTER, "spec.accounts.0.limits", {"maxJobTime": "1-00:00:00"})
FULL_CLUSTER = set_path(FULL_CLUSTER, "spec.nodeHealth", {"check": {"nodeStates": ["IDLE", "MIXED"], "siteScript": {"configMap": "gpu-burn", "key": "check.sh"}},
                                                       "drainOnNodeConditions": [{"type": "example.com/GPUProblem", "status": "True"}]})
FULL_CLUSTER = set_path(FULL_CLUSTER, "spec.qos", [{"name": "high", "preempt": ["low"], "limits": {"maxJobTime": "1:00:00"}},
                                                   {"name": "low"}])
FULL_CLUSTER = set_path(set_path(FULL_CLUSTER, "spec.accounts.0.qos", ["low"]), "spec.accounts.0.defaultQOS", "low")
FULL_CLUSTER = set_path(FULL_CLUSTER, "spec.bridge", {"enabled": True, "namespaces": [
    {"namespace": "inference", "account": "vision", "user": "alice", "qos": "low", "partition": "gpu"}]})
EXTERNAL_CLUSTER = set_path(CLUSTER, "spec.accounting.database", EXTERNAL_DATABASE)
INTERNAL_CLUSTER = set_path(CLUSTER, "spec.accounting.database.internal",
                            {"size": "2Gi", "storageClassName": "fast", "image": "example.org/mariadb:11"})
BLOCK_CLUSTER = set_path(CLUSTER, "spec.topology", BLOCK)
SITE_STORAGE = {  # every source of spec.storage, as a site with its own claims and NFS writes them
    "home": {"mountPath": "/users", "newClaim": {"size": "100Gi", "storageClassName": "shared"}},
    "volumes": [
        {"name": "datasets", "mountPath": "/datasets", "readOnly": True, "existingClaim": {"name": "datasets"}},
        {"name": "scratch", "mountPath": "/scratch", "newClaim": {"size": "1Ti", "storageClassName": "fast"}},
        {"name": "software", "mountPath": "/opt/software", "nfs": {"server": "nfs.example.org", "path": "/export/sw"}},
    ],
}
STORAGE_CLUSTER = set_path(CLUSTER, "spec.storage", SITE_STORAGE)
SSH_CLUSTER = set_path(CLUSTER, "spec.login.ssh", {"authorizedKeysSecret": "research-keys", "service": {"type": "NodePort"}})
NFS_HOME_CLUSTER = set_path(CLUSTER, "spec.storage", {"home": {"nfs": {"server": "10.0.0.5", "path": "/export/home"}}})
CLAIM_HOME_CLUSTER = set_path(CLUSTER, "spec.storage", {"home": {"existingClaim": {"name": "homes"}}})
DIRECTORY = {  # every string of spec.identity.ldap, as a site with a bound service account writes them
    "uris": ["ldap://ldap.example.org"], "searchBase": "dc=example,dc=org", "userSearchBase": "ou=people,dc=example,dc=org",
    "groupSearchBase": "ou=groups,dc=example,dc=org", "bindDN": "cn=sssd,ou=services,dc=example,dc=org",
    "bindPasswordSecretRef": {"name": "sssd-bind", "key": "password"}, "caCertificate": {"configMap": {"name": "site-ca", "key": "ca.crt"}},
    "loginGroups": ["researchers"], "schema": "rfc2307", "sshPublicKeyAttribute": "sshPublicKey",
}
LDAP_CLUSTER = set_path(CLUSTER, "spec.identity", {"mode": "ldap", "ldap": DIRECTORY})
FILTER_CLUSTER = set_path(set_path(LDAP_CLUSTER, "spec.identity.ldap.loginGroups", []), "spec.identity.ldap.loginFilter", "(uid=*)")
SECRET_CA_CLUSTER = set_path(LDAP_CLUSTER, "spec.identity.ldap.caCertificate", {"secret": {"name": "site-ca", "key": "ca.crt"}})
FULL_GPU = set_path(set_path(GPU_NODES, "spec.podTemplate", POD_TEMPLATE), "spec.nodeSelector", {"example.com/gpu": "h100"})

# (documents, path to poison, base value, field path the error must name)
KEY = "{key}"  # a path ending in {key} poisons the key of a map instead of a value
STRING_FIELDS = [
    ("cluster-name", [FULL_CLUSTER], "metadata.name", "research", "metadata.name"),
    ("cluster-namespace", [FULL_CLUSTER], "metadata.namespace", "hpc", "metadata.namespace"),
    ("slurm-image", [FULL_CLUSTER], "spec.slurm.image", "localhost/kubeslurm/slurm:24.11", "spec.slurm.image"),
    ("pull-policy", [FULL_CLUSTER], "spec.slurm.imagePullPolicy", "IfNotPresent", "spec.slurm.imagePullPolicy"),
    ("state-size", [FULL_CLUSTER], "spec.controller.persistence.size", "1Gi", "spec.controller.persistence.size"),
    ("state-class", [FULL_CLUSTER], "spec.controller.persistence.storageClassName", "fast",
     "spec.controller.persistence.storageClassName"),
    ("db-size", [INTERNAL_CLUSTER], "spec.accounting.database.internal.size", "2Gi", "spec.accounting.database.internal.size"),
    ("db-class", [INTERNAL_CLUSTER], "spec.accounting.database.internal.storageClassName", "fast",
     "spec.accounting.database.internal.storageClassName"),
    ("db-image", [INTERNAL_CLUSTER], "spec.accounting.database.internal.image", "example.org/mariadb:11",
     "spec.accounting.database.internal.image"),
    ("db-host", [EXTERNAL_CLUSTER], "spec.accounting.database.external.host", "db.example.org",
     "spec.accounting.database.external.host"),
    ("db-user", [EXTERNAL_CLUSTER], "spec.accounting.database.external.user", "slurm", "spec.accounting.database.external.user"),
    ("db-name", [EXTERNAL_CLUSTER], "spec.accounting.database.external.database", "slurm_acct_db",
     "spec.accounting.database.external.database"),
    ("db-secret", [EXTERNAL_CLUSTER], "spec.accounting.database.external.passwordSecretRef.name", "dbpw",
     "spec.accounting.database.external.passwordSecretRef.name"),
    ("db-secret-key", [EXTERNAL_CLUSTER], "spec.accounting.database.external.passwordSecretRef.key", "pw",
     "spec.accounting.database.external.passwordSecretRef.key"),
    ("home-path", [STORAGE_CLUSTER], "spec.storage.home.mountPath", "/users", "spec.storage.home.mountPath"),
    ("home-size", [STORAGE_CLUSTER], "spec.storage.home.newClaim.size", "100Gi", "spec.storage.home.newClaim.size"),
    ("home-class", [STORAGE_CLUSTER], "spec.storage.home.newClaim.storageClassName", "shared",
     "spec.storage.home.newClaim.storageClassName"),
    ("home-nfs-server", [NFS_HOME_CLUSTER], "spec.storage.home.nfs.server", "10.0.0.5", "spec.storage.home.nfs.server"),
    ("home-nfs-path", [NFS_HOME_CLUSTER], "spec.storage.home.nfs.path", "/export/home", "spec.storage.home.nfs.path"),
    ("home-claim", [CLAIM_HOME_CLUSTER], "spec.storage.home.existingClaim.name", "homes", "spec.storage.home.existingClaim.name"),
    ("volume-name", [STORAGE_CLUSTER], "spec.storage.volumes.0.name", "datasets", "spec.storage.volumes[0].name"),
    ("volume-path", [STORAGE_CLUSTER], "spec.storage.volumes.0.mountPath", "/datasets", "spec.storage.volumes[0].mountPath"),
    ("volume-claim", [STORAGE_CLUSTER], "spec.storage.volumes.0.existingClaim.name", "datasets",
     "spec.storage.volumes[0].existingClaim.name"),
    ("volume-size", [STORAGE_CLUSTER], "spec.storage.volumes.1.newClaim.size", "1Ti", "spec.storage.volumes[1].newClaim.size"),
    ("volume-class", [STORAGE_CLUSTER], "spec.storage.volumes.1.newClaim.storageClassName", "fast",
     "spec.storage.volumes[1].newClaim.storageClassName"),
    ("volume-nfs-server", [STORAGE_CLUSTER], "spec.storage.volumes.2.nfs.server", "nfs.example.org",
     "spec.storage.volumes[2].nfs.server"),
    ("volume-nfs-path", [STORAGE_CLUSTER], "spec.storage.volumes.2.nfs.path", "/export/sw", "spec.storage.volumes[2].nfs.path"),
    ("ssh-keys-secret", [SSH_CLUSTER], "spec.login.ssh.authorizedKeysSecret", "research-keys", "spec.login.ssh.authorizedKeysSecret"),
    ("ssh-service-type", [SSH_CLUSTER], "spec.login.ssh.service.type", "NodePort", "spec.login.ssh.service.type"),
    ("identity-mode", [LDAP_CLUSTER], "spec.identity.mode", "ldap", "spec.identity.mode"),
    ("ldap-uri", [LDAP_CLUSTER], "spec.identity.ldap.uris.0", "ldap://ldap.example.org", "spec.identity.ldap.uris[0]"),
    ("ldap-search-base", [LDAP_CLUSTER], "spec.identity.ldap.searchBase", "dc=example,dc=org", "spec.identity.ldap.searchBase"),
    ("ldap-user-base", [LDAP_CLUSTER], "spec.identity.ldap.userSearchBase", "ou=people,dc=example,dc=org",
     "spec.identity.ldap.userSearchBase"),
    ("ldap-group-base", [LDAP_CLUSTER], "spec.identity.ldap.groupSearchBase", "ou=groups,dc=example,dc=org",
     "spec.identity.ldap.groupSearchBase"),
    ("ldap-bind-dn", [LDAP_CLUSTER], "spec.identity.ldap.bindDN", "cn=sssd,ou=services,dc=example,dc=org", "spec.identity.ldap.bindDN"),
    ("ldap-bind-secret", [LDAP_CLUSTER], "spec.identity.ldap.bindPasswordSecretRef.name", "sssd-bind",
     "spec.identity.ldap.bindPasswordSecretRef.name"),
    ("ldap-bind-key", [LDAP_CLUSTER], "spec.identity.ldap.bindPasswordSecretRef.key", "password",
     "spec.identity.ldap.bindPasswordSecretRef.key"),
    ("ldap-ca-config-map", [LDAP_CLUSTER], "spec.identity.ldap.caCertificate.configMap.name", "site-ca",
     "spec.identity.ldap.caCertificate.configMap.name"),
    ("ldap-ca-config-map-key", [LDAP_CLUSTER], "spec.identity.ldap.caCertificate.configMap.key", "ca.crt",
     "spec.identity.ldap.caCertificate.configMap.key"),
    ("ldap-ca-secret", [SECRET_CA_CLUSTER], "spec.identity.ldap.caCertificate.secret.name", "site-ca",
     "spec.identity.ldap.caCertificate.secret.name"),
    ("ldap-ca-secret-key", [SECRET_CA_CLUSTER], "spec.identity.ldap.caCertificate.secret.key", "ca.crt",
     "spec.identity.ldap.caCertificate.secret.key"),
    ("ldap-login-group", [LDAP_CLUSTER], "spec.identity.ldap.loginGroups.0", "researchers", "spec.identity.ldap.loginGroups[0]"),
    ("ldap-login-filter", [FILTER_CLUSTER], "spec.identity.ldap.loginFilter", "(uid=*)", "spec.identity.ldap.loginFilter"),
    ("ldap-schema", [LDAP_CLUSTER], "spec.identity.ldap.schema", "rfc2307", "spec.identity.ldap.schema"),
    ("ldap-ssh-key-attribute", [LDAP_CLUSTER], "spec.identity.ldap.sshPublicKeyAttribute", "sshPublicKey",
     "spec.identity.ldap.sshPublicKeyAttribute"),
    ("half-life", [FULL_CLUSTER], "spec.scheduling.fairShare.decayHalfLife", "7-0", "spec.scheduling.fairShare.decayHalfLife"),
    ("preemption", [FULL_CLUSTER], "spec.scheduling.preemption", "off", "spec.scheduling.preemption"),
    ("account", [FULL_CLUSTER], "spec.accounts.0.name", "vision", "spec.accounts[0].name"),
    ("max-job-time", [FULL_CLUSTER], "spec.accounts.0.limits.maxJobTime", "1-00:00:00", "spec.accounts[0].limits.maxJobTime"),
    ("account-user", [FULL_CLUSTER], "spec.accounts.0.users.0", "alice", "spec.accounts[0].users[0]"),
    ("qos", [FULL_CLUSTER], "spec.qos.1.name", "low", "spec.qos[1].name"),
    ("qos-preempt", [FULL_CLUSTER], "spec.qos.0.preempt.0", "low", "spec.qos[0].preempt[0]"),
    ("qos-max-job-time", [FULL_CLUSTER], "spec.qos.0.limits.maxJobTime", "1:00:00", "spec.qos[0].limits.maxJobTime"),
    ("account-qos", [FULL_CLUSTER], "spec.accounts.0.qos.0", "low", "spec.accounts[0].qos[0]"),
    ("account-default-qos", [FULL_CLUSTER], "spec.accounts.0.defaultQOS", "low", "spec.accounts[0].defaultQOS"),
    ("partition", [FULL_CLUSTER], "spec.partitions.0.name", "gpu", "spec.partitions[0].name"),
    ("bridge-namespace", [FULL_CLUSTER], "spec.bridge.namespaces.0.namespace", "inference", "spec.bridge.namespaces[0].namespace"),
    ("bridge-account", [FULL_CLUSTER], "spec.bridge.namespaces.0.account", "vision", "spec.bridge.namespaces[0].account"),
    ("bridge-user", [FULL_CLUSTER], "spec.bridge.namespaces.0.user", "alice", "spec.bridge.namespaces[0].user"),
    ("bridge-qos", [FULL_CLUSTER], "spec.bridge.namespaces.0.qos", "low", "spec.bridge.namespaces[0].qos"),
    ("bridge-partition", [FULL_CLUSTER], "spec.bridge.namespaces.0.partition", "gpu", "spec.bridge.namespaces[0].partition"),
    ("partition-node-set", [FULL_CLUSTER], "spec.partitions.0.nodeSets.0", "h100", "spec.partitions[0].nodeSets[0]"),
    ("max-time", [FULL_CLUSTER], "spec.partitions.0.maxTime", "1-00:00:00", "spec.partitions[0].maxTime"),
    ("default-time", [FULL_CLUSTER], "spec.partitions.0.defaultTime", "1:00:00", "spec.partitions[0].defaultTime"),
    ("topology-plugin", [FULL_CLUSTER], "spec.topology.plugin", "tree", "spec.topology.plugin"),
    ("topology-label", [FULL_CLUSTER], "spec.topology.nodeLabels.1", "example.com/switch", "spec.topology.nodeLabels[1]"),
    ("health-node-state", [FULL_CLUSTER], "spec.nodeHealth.check.nodeStates.1", "MIXED", "spec.nodeHealth.check.nodeStates[1]"),
    ("site-check-config-map", [FULL_CLUSTER], "spec.nodeHealth.check.siteScript.configMap", "gpu-burn",
     "spec.nodeHealth.check.siteScript.configMap"),
    ("site-check-key", [FULL_CLUSTER], "spec.nodeHealth.check.siteScript.key", "check.sh", "spec.nodeHealth.check.siteScript.key"),
    ("drain-condition-type", [FULL_CLUSTER], "spec.nodeHealth.drainOnNodeConditions.0.type", "example.com/GPUProblem",
     "spec.nodeHealth.drainOnNodeConditions[0].type"),
    ("drain-condition-status", [FULL_CLUSTER], "spec.nodeHealth.drainOnNodeConditions.0.status", "True",
     "spec.nodeHealth.drainOnNodeConditions[0].status"),
    ("slurm-conf-value", [FULL_CLUSTER], "spec.slurmConf.MaxJobCount", "20000", "spec.slurmConf.MaxJobCount"),
    ("slurm-conf-key", [FULL_CLUSTER], "spec.slurmConf.{key}", "MaxJobCount", "spec.slurmConf['MaxJobCount"),
    ("node-set-name", [FULL_GPU], "metadata.name", "h100", "metadata.name"),
    ("node-set-namespace", [FULL_GPU], "metadata.namespace", "hpc", "metadata.namespace"),
    ("cluster-ref", [FULL_GPU], "spec.clusterName", "research", "spec.clusterName"),
    ("cpu", [FULL_GPU], "spec.resources.cpu", "8", "spec.resources.cpu"),
    ("memory", [FULL_GPU], "spec.resources.memory", "32Gi", "spec.resources.memory"),
    ("gpu-type", [FULL_GPU], "spec.gpus.type", "h100", "spec.gpus.type"),
    ("gpu-resource", [FULL_GPU], "spec.gpus.resourceName", "nvidia.com/gpu", "spec.gpus.resourceName"),
    ("gpu-detect", [FULL_GPU], "spec.gpus.autoDetect", "off", "spec.gpus.autoDetect"),
    ("feature", [FULL_GPU], "spec.features.0", "nvlink", "spec.features[0]"),
    ("node-selector-key", [FULL_GPU], "spec.nodeSelector.{key}", "example.com/gpu", "spec.nodeSelector"),
    ("node-selector-value", [FULL_GPU], "spec.nodeSelector.example.com/gpu", "h100", "spec.nodeSelector.example.com/gpu"),
    ("update-strategy", [FULL_GPU], "spec.updateStrategy.type", "OnDelete", "spec.updateStrategy.type"),
    ("pod-label-key", [FULL_GPU], "spec.podTemplate.metadata.labels.{key}", "team", "spec.podTemplate.metadata.labels"),
    ("pod-label-value", [FULL_GPU], "spec.podTemplate.metadata.labels.team", "vision", "spec.podTemplate.metadata.labels.team"),
    ("pod-annotation-key", [FULL_GPU], "spec.podTemplate.metadata.annotations.{key}", "example.com/owner",
     "spec.podTemplate.metadata.annotations"),
    ("pod-pool-value", [FULL_GPU], "spec.podTemplate.spec.nodeSelector.example.com/pool", "gpu",
     "spec.podTemplate.spec.nodeSelector.example.com/pool"),
    ("priority-class", [FULL_GPU], "spec.podTemplate.spec.priorityClassName", "hpc", "spec.podTemplate.spec.priorityClassName"),
    ("volume-name", [FULL_GPU], "spec.podTemplate.spec.volumes.0.name", "datasets", "spec.podTemplate.spec.volumes[0].name"),
    ("claim-name", [FULL_GPU], "spec.podTemplate.spec.volumes.0.persistentVolumeClaim.claimName", "datasets",
     "spec.podTemplate.spec.volumes[0].persistentVolumeClaim.claimName"),
    ("nfs-server", [FULL_GPU], "spec.podTemplate.spec.volumes.1.nfs.server", "nfs.example.org",
     "spec.podTemplate.spec.volumes[1].nfs.server"),
    ("nfs-path", [FULL_GPU], "spec.podTemplate.spec.volumes.1.nfs.path", "/export/scratch",
     "spec.podTemplate.spec.volumes[1].nfs.path"),
    ("config-map-volume", [FULL_GPU], "spec.podTemplate.spec.volumes.2.configMap.name", "settings",
     "spec.podTemplate.spec.volumes[2].configMap.name"),
    ("secret-volume", [FULL_GPU], "spec.podTemplate.spec.volumes.3.secret.secretName", "team-creds",
     "spec.podTemplate.spec.volumes[3].secret.secretName"),
    ("container-name", [FULL_GPU], "spec.podTemplate.spec.containers.0.name", "slurmd", "spec.podTemplate.spec.containers[0].name"),
    ("container-image", [FULL_GPU], "spec.podTemplate.spec.containers.0.image", "example.org/slurm-cuda:24.11",
     "spec.podTemplate.spec.containers[0].image"),
    ("env-name", [FULL_GPU], "spec.podTemplate.spec.containers.0.env.0.name", "NCCL_DEBUG",
     "spec.podTemplate.spec.containers[0].env[0].name"),
    ("env-secret", [FULL_GPU], "spec.podTemplate.spec.containers.0.env.1.valueFrom.secretKeyRef.name", "team-token",
     "spec.podTemplate.spec.containers[0].env[1].valueFrom.secretKeyRef.name"),
    ("env-secret-key", [FULL_GPU], "spec.podTemplate.spec.containers.0.env.1.valueFrom.secretKeyRef.key", "token",
     "spec.podTemplate.spec.containers[0].env[1].valueFrom.secretKeyRef.key"),
    ("resource-name", [FULL_GPU], "spec.podTemplate.spec.containers.0.resources.limits.{key}", "ephemeral-storage",
     "spec.podTemplate.spec.containers[0].resources.limits"),
    ("resource-quantity", [FULL_GPU], "spec.podTemplate.spec.containers.0.resources.limits.ephemeral-storage", "10Gi",
     "spec.podTemplate.spec.containers[0].resources.limits.ephemeral-storage"),
    ("mount-name", [FULL_GPU], "spec.podTemplate.spec.containers.0.volumeMounts.0.name", "datasets",
     "spec.podTemplate.spec.containers[0].volumeMounts[0].name"),
    ("mount-path", [FULL_GPU], "spec.podTemplate.spec.containers.0.volumeMounts.0.mountPath", "/datasets",
     "spec.podTemplate.spec.containers[0].volumeMounts[0].mountPath"),
]
PAYLOADS = {
    "newline": "\nNodeName=evil",
    "carriage-return": "\rx",
    "command-substitution": "$(touch /tmp/pwned)",
    "backticks": "`id`",
    "semicolon": ";reboot",
    "comment": "#x",
    "trailing-backslash": "\\",
    "vertical-tab": "\vx",
    "space": " Nodes=ALL",
    "tab": "\tx",
    "line-separator": "\u2028x",
    "next-line": "\u0085x",
    "quote": '"x y"',
}


def _poisoned(documents: list[dict], path: str, base: str, payload: str) -> list[dict]:
    documents = copy.deepcopy(documents)
    document = documents[0]
    if path.endswith(KEY):
        parent_path = path[: -len(KEY) - 1]
        node = document
        for part in _split(parent_path):
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[base + payload] = node.pop(base)
        return documents
    parts = _split(path)
    node = document
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = base + payload
    else:
        node[last] = base + payload
    return documents


def _split(path: str) -> list[str]:
    """Dotted path, keeping label-like keys (example.com/pool) whole."""
    parts: list[str] = []
    for part in path.split("."):
        if parts and ("/" in part or part in ("com", "org")) and parts[-1] in ("example",):
            parts[-1] += "." + part
        else:
            parts.append(part)
    return parts


def _with_companions(documents: list[dict]) -> list[dict]:
    """A cluster manifest gets the contract's NodeSets, a NodeSet the contract's cluster and other NodeSet."""
    kinds = {d["kind"] for d in documents}
    if kinds == {"SlurmCluster"}:
        return documents + [GPU_NODES, CPU_NODES]
    return [CLUSTER, *documents, CPU_NODES]


INJECTIONS = [
    pytest.param(_with_companions(_poisoned(docs, path, base, payload)), field, id=f"{name}-{payload_name}")
    for name, docs, path, base, field in STRING_FIELDS
    for payload_name, payload in PAYLOADS.items()
]


def _refused_by_models(documents: list[dict]) -> str:
    """The error text the operator's models and name checks give, or '' when they accept."""
    try:
        manifests = load_documents(documents)
    except ManifestError as error:
        return str(error)
    everything = [*manifests.clusters, *manifests.node_sets]
    for cluster in manifests.clusters:
        node_sets = manifests.node_sets_of(cluster)
        collisions = name_collisions(cluster, node_sets, everything)
        if collisions:
            return "\n".join(str(error) for error in collisions)
        try:
            render_config_files(cluster, node_sets)
        except RenderError as error:
            return str(error)
    return ""


def _render(tmp_path, capsys, text: str | bytes) -> tuple[int, str, str]:
    """`kubeslurm render -f` on the text; an exception escaping main() fails the test with its traceback."""
    path = tmp_path / "hostile.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    code = main(["render", "-f", str(path)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _yaml(documents: list) -> str:
    return yaml.dump_all(documents, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)


def _assert_refused(tmp_path, capsys, documents: list, field: str, message: str = ""):
    by_models = _refused_by_models(documents)
    assert field in by_models and message in by_models, f"models: {by_models or 'accepted'}"
    code, out, err = _render(tmp_path, capsys, _yaml(documents))
    assert code == 1 and out == "", f"render accepted it: {out[:2000]}"
    assert err.startswith("error: ") and field in err and message in err, err


@pytest.mark.parametrize("documents,field", INJECTIONS)
def test_injection_is_refused_naming_the_field(tmp_path, capsys, documents, field):
    _assert_refused(tmp_path, capsys, documents, field)


def test_every_string_field_is_poisoned():
    """The list above covers every string of both specs that is not free text for Kubernetes alone."""
    from kubeslurm.api.crds import custom_resource_definitions

    pod_spec_only = {  # strings that reach only the slurmd pod's spec (as data the API server checks again), no config file or command line
        "spec.podTemplate.metadata.annotations{}", "spec.podTemplate.spec.containers[].env[].value",
        # the ssh Service's annotations: only its metadata, as data the API server checks again
        "spec.login.ssh.service.annotations{}",
        "spec.podTemplate.spec.volumes[].configMap.items[].key", "spec.podTemplate.spec.volumes[].configMap.items[].path",
        "spec.podTemplate.spec.volumes[].secret.items[].key", "spec.podTemplate.spec.volumes[].secret.items[].path",
        "spec.podTemplate.spec.volumes[].emptyDir.medium", "spec.podTemplate.spec.volumes[].emptyDir.sizeLimit",
        "spec.podTemplate.spec.containers[].imagePullPolicy", "spec.podTemplate.spec.containers[].volumeMounts[].subPath",
        "spec.podTemplate.spec.containers[].env[].valueFrom.configMapKeyRef.name",
        "spec.podTemplate.spec.containers[].env[].valueFrom.configMapKeyRef.key",
        "spec.podTemplate.spec.containers[].resources.requests{}",
    }
    poisoned = {re.sub(r"\.[0-9]+", "[]", path).replace("{key}", "{}") for _, _, path, _, _ in STRING_FIELDS}
    poisoned = {re.sub(r"\.(MaxJobCount|example\.com/\w+|team|ephemeral-storage)$", "{}", p) for p in poisoned}
    strings = set()

    def walk(node, path):
        if node.get("type") == "string" or "enum" in node:
            strings.add(path)
        for name, child in node.get("properties", {}).items():
            walk(child, f"{path}.{name}")
        if "items" in node:
            walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}{{}}")

    for crd in custom_resource_definitions():
        walk(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"], "spec")
    missing = sorted(strings - poisoned - pod_spec_only)
    assert not missing, f"string fields without an injection case: {missing}"


# Refused, each naming the field: (id, documents or raw YAML, field, words of the message)
def _cluster(path, value, base=CLUSTER):
    return [set_path(base, path, value), GPU_NODES, CPU_NODES]


def _gpu(path, value, base=GPU_NODES):
    return [CLUSTER, set_path(base, path, value), CPU_NODES]


def _pod(pod_template):
    return _gpu("spec.podTemplate", pod_template)


def _slurmd(**fields):
    return _pod({"spec": {"containers": [{"name": "slurmd", **fields}]}})


def _node_set(name, **spec):
    return {"apiVersion": "kubeslurm.io/v1alpha1", "kind": "NodeSet", "metadata": {"name": name, "namespace": "hpc"},
            "spec": {"clusterName": "research", "replicas": 1, "resources": {"cpu": "1", "memory": "1Gi"}, **spec}}


def _other_cluster(name):
    return {"apiVersion": "kubeslurm.io/v1alpha1", "kind": "SlurmCluster", "metadata": {"name": name, "namespace": "hpc"},
            "spec": {"accounting": {"enabled": False}}}


GPU_VOLUME = {"name": "x", "emptyDir": {}}
REFUSED = [
    # names Slurm reads specially
    ("partition-default", _cluster("spec.partitions.1.name", "default"), "spec.partitions[1].name", "reserved"),
    ("partition-DEFAULT", _cluster("spec.partitions.1.name", "DEFAULT"), "spec.partitions[1].name", ""),
    ("account-root", _cluster("spec.accounts.0.name", "root"), "spec.accounts[0].name", "reserved"),
    ("node-set-all", [CLUSTER, GPU_NODES, CPU_NODES, _node_set("all")], "metadata.name", "Nodes=ALL"),
    ("partition-of-all", _cluster("spec.partitions.1.nodeSets", ["all"]), "spec.partitions[1].nodeSets[0]", "reserved"),
    # a NodeSet named like the cluster's objects or pods (decided by the NodeSet alone)
    *((f"node-set-{suffix}", [CLUSTER, GPU_NODES, CPU_NODES, _node_set(f"research-{suffix}")], "metadata.name", "taken")
      for suffix in ("controller", "controller-0", "controller-1", "controller-state", "slurmctld", "slurmctld-0",
                     "slurmctld-1", "accounting", "accounting-0", "slurmdbd", "mariadb", "mariadb-0", "database",
                     "login", "login-0", "login-15", "slurm-config", "auth-key", "slurmdbd-config", "mariadb-password")),
    # collisions that take two objects
    ("node-set-of-another-cluster", [CLUSTER, GPU_NODES, CPU_NODES, _other_cluster("other"), _node_set("other-controller")],
     "metadata.name", "controller StatefulSet and Service of SlurmCluster other"),
    ("node-set-pod-vs-node-set", [CLUSTER, GPU_NODES, CPU_NODES, _node_set("h100-1")], "metadata.name", "pod 1 of NodeSet h100"),
    ("node-set-vs-budget", [CLUSTER, GPU_NODES, CPU_NODES, _node_set("h100-running-jobs")], "metadata.name",
     "running-jobs PodDisruptionBudget of NodeSet h100"),
    ("node-set-of-other-cluster-takes-our-name",
     [CLUSTER, GPU_NODES, CPU_NODES, _other_cluster("other"), {**_node_set("research-slurmdbd"), "spec": {
         **_node_set("research-slurmdbd")["spec"], "clusterName": "other"}}],
     "metadata.name", "the slurmdbd Service of SlurmCluster research"),
    ("feature-is-another-node-set", _gpu("spec.features", ["nvlink", "cpu"]), "spec.features[1]", "partitions"),
    # the bridged pods' feature would let a node the admin did not dedicate take them
    ("feature-kubeslurm-bridged", _gpu("spec.features", ["nvlink", "kubeslurm_bridged"]), "spec.features[1]",
     "must not name kubeslurm_bridged"),
    # podTemplate: what it may not change
    ("sidecar", _pod({"spec": {"containers": [{"name": "slurmd"}, {"name": "steal", "image": "busybox"}]}}),
     "spec.podTemplate.spec.containers[1].name", "only the container named slurmd"),
    ("init-container", _pod({"spec": {"initContainers": [{"name": "x", "image": "busybox"}]}}),
     "spec.podTemplate.spec.initContainers", "may set only"),
    ("ephemeral-container", _pod({"spec": {"ephemeralContainers": [{"name": "x"}]}}), "spec.podTemplate.spec.ephemeralContainers", ""),
    ("privileged", _slurmd(securityContext={"privileged": True}), "spec.podTemplate.spec.containers[0].securityContext", "may set only"),
    ("capabilities", _slurmd(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}}),
     "spec.podTemplate.spec.containers[0].securityContext", ""),
    ("pod-security-context", _pod({"spec": {"securityContext": {"runAsUser": 0}}}), "spec.podTemplate.spec.securityContext", ""),
    ("host-network", _pod({"spec": {"hostNetwork": True}}), "spec.podTemplate.spec.hostNetwork", "host namespaces"),
    ("host-pid", _pod({"spec": {"hostPID": True}}), "spec.podTemplate.spec.hostPID", "host namespaces"),
    ("host-ipc", _pod({"spec": {"hostIPC": True}}), "spec.podTemplate.spec.hostIPC", "host namespaces"),
    ("service-account", _pod({"spec": {"serviceAccountName": "admin"}}), "spec.podTemplate.spec.serviceAccountName", "API access"),
    ("token-automount", _pod({"spec": {"automountServiceAccountToken": True}}), "spec.podTemplate.spec.automountServiceAccountToken", ""),
    ("host-path", _pod({"spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}),
     "spec.podTemplate.spec.volumes[0].hostPath", "host path"),
    ("projected-token", _pod({"spec": {"volumes": [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]}}),
     "spec.podTemplate.spec.volumes[0].projected", ""),
    ("volume-without-source", _pod({"spec": {"volumes": [{"name": "x"}]}}), "spec.podTemplate.spec.volumes[0]", "exactly one"),
    ("volume-two-sources", _pod({"spec": {"volumes": [{"name": "x", "emptyDir": {}, "nfs": {"server": "a", "path": "/b"}}]}}),
     "spec.podTemplate.spec.volumes[0]", "exactly one"),
    ("auth-key-volume", _pod({"spec": {"volumes": [{"name": "k", "secret": {"secretName": "research-auth-key"}}]}}),
     "spec.podTemplate.spec.volumes[0].secret.secretName", "keys and passwords"),
    ("db-password-volume", _pod({"spec": {"volumes": [{"name": "k", "secret": {"secretName": "research-mariadb-password"}}]}}),
     "spec.podTemplate.spec.volumes[0].secret.secretName", "keys and passwords"),
    ("slurmdbd-conf-volume", _pod({"spec": {"volumes": [{"name": "k", "secret": {"secretName": "research-slurmdbd-config"}}]}}),
     "spec.podTemplate.spec.volumes[0].secret.secretName", "keys and passwords"),
    ("auth-key-env", _slurmd(env=[{"name": "K", "valueFrom": {"secretKeyRef": {"name": "research-auth-key", "key": "slurm.key"}}}]),
     "spec.podTemplate.spec.containers[0].env[0].valueFrom.secretKeyRef.name", "keys and passwords"),
    ("another-clusters-key", _pod({"spec": {"volumes": [{"name": "k", "secret": {"secretName": "other-auth-key", "defaultMode": 0o444}}]}}),
     "spec.podTemplate.spec.volumes[0].secret.secretName", "keys and passwords"),
    ("running-jobs-label", _pod({"metadata": {"labels": {"kubeslurm.io/running-jobs": "true"}}}),
     "spec.podTemplate.metadata.labels.kubeslurm.io/running-jobs", "operator's"),
    ("config-hash-annotation", _pod({"metadata": {"annotations": {"kubeslurm.io/config-hash": "x"}}}),
     "spec.podTemplate.metadata.annotations.kubeslurm.io/config-hash", "operator's"),
    ("env-from", _slurmd(envFrom=[{"secretRef": {"name": "research-auth-key"}}]), "spec.podTemplate.spec.containers[0].envFrom", ""),
    ("replace-key-volume", _pod({"spec": {"volumes": [{"name": "slurm-key", "secret": {"secretName": "mine"}}]}}),
     "spec.podTemplate.spec.volumes[0].name", "volume names"),
    ("replace-spool-volume", _pod({"spec": {"volumes": [{"name": "spool", "emptyDir": {}}]}}),
     "spec.podTemplate.spec.volumes[0].name", "volume names"),
    *((f"mount-{path.strip('/').replace('/', '-') or 'root'}",
       _pod({"spec": {"volumes": [GPU_VOLUME], "containers": [{"name": "slurmd", "volumeMounts": [{"name": "x", "mountPath": path}]}]}}),
       "spec.podTemplate.spec.containers[0].volumeMounts[0].mountPath", "")
      for path in ("/etc/slurm", "/etc/slurm/slurm.key", "/run/slurm", "/run/slurm/conf", "/var/spool/slurmd", "/etc/slurm-key",
                   "/etc", "/", "/var", "/run", "/home/alice", "/etc/passwd", "/dev/shm", "/proc", "/sys/fs/cgroup",
                   "/data/../etc/slurm", "/data/./x", "relative/path", "/data/")),
    ("mount-propagation", _slurmd(volumeMounts=[{"name": "x", "mountPath": "/x", "mountPropagation": "Bidirectional"}]),
     "spec.podTemplate.spec.containers[0].volumeMounts[0].mountPropagation", "host's mounts"),
    ("env-pod-name", _slurmd(env=[{"name": "POD_NAME", "value": "h100-0"}]), "spec.podTemplate.spec.containers[0].env[0].name", "operator's"),
    ("env-slurm-conf", _slurmd(env=[{"name": "SLURM_CONF", "value": "/tmp/x"}]), "spec.podTemplate.spec.containers[0].env[0].name", "operator's"),
    ("resources-cpu", _slurmd(resources={"limits": {"cpu": "64"}}), "spec.podTemplate.spec.containers[0].resources.limits.cpu", "spec.resources"),
    ("resources-memory", _slurmd(resources={"requests": {"memory": "1Ti"}}), "spec.podTemplate.spec.containers[0].resources.requests.memory", ""),
    ("resources-gpu", _slurmd(resources={"limits": {"nvidia.com/gpu": "8"}}),
     "spec.podTemplate.spec.containers[0].resources.limits.nvidia.com/gpu", "spec.gpus"),
    ("resources-custom-gpu", [CLUSTER, set_path(set_path(GPU_NODES, "spec.gpus.resourceName", "example.com/gpu"), "spec.podTemplate",
                                                {"spec": {"containers": [{"name": "slurmd", "resources": {"requests": {"example.com/gpu": "1"}}}]}}),
                              CPU_NODES], "spec.podTemplate.spec.containers[0].resources.requests.example.com/gpu", "spec.gpus"),
    ("command", _slurmd(command=["/bin/sh", "-c", "cat /etc/slurm/slurm.key"]), "spec.podTemplate.spec.containers[0].command", "arguments"),
    ("args", _slurmd(args=["-D"]), "spec.podTemplate.spec.containers[0].args", ""),
    ("probe-null", _slurmd(readinessProbe=None), "spec.podTemplate.spec.containers[0].readinessProbe", ""),
    ("mounts-null", _slurmd(volumeMounts=None), "spec.podTemplate.spec.containers[0].volumeMounts", "null"),
    ("spec-null", _pod({"spec": None}), "spec.podTemplate.spec", "null"),
    ("pod-metadata-string", _pod({"metadata": "oops"}), "spec.podTemplate.metadata", "dictionary"),
    ("pod-metadata-name", _pod({"metadata": {"name": "x"}}), "spec.podTemplate.metadata.name", ""),
    ("pod-spec-list", _pod({"spec": []}), "spec.podTemplate.spec", ""),
    ("pod-template-string", _pod("spec: {}"), "spec.podTemplate", ""),
    ("containers-map", _pod({"spec": {"containers": {"name": "slurmd"}}}), "spec.podTemplate.spec.containers", ""),
    ("volumes-string", _pod({"spec": {"volumes": "x"}}), "spec.podTemplate.spec.volumes", ""),
    ("pod-quantity-int", _slurmd(resources={"limits": {"ephemeral-storage": 10}}),
     "spec.podTemplate.spec.containers[0].resources.limits.ephemeral-storage", "string"),
    # wrong types and out-of-range numbers (strict, as the API server is)
    ("replicas-string", _gpu("spec.replicas", "3"), "spec.replicas", "integer"),
    ("replicas-bool", _gpu("spec.replicas", True), "spec.replicas", "integer"),
    ("replicas-float", _gpu("spec.replicas", 2.0), "spec.replicas", "integer"),
    ("replicas-inf", _gpu("spec.replicas", float("inf")), "spec.replicas", ""),
    ("replicas-nan", _gpu("spec.replicas", float("nan")), "spec.replicas", ""),
    ("replicas-huge", _gpu("spec.replicas", 10**30), "spec.replicas", ""),
    ("replicas-negative", _gpu("spec.replicas", -1), "spec.replicas", ""),
    ("max-replicas-zero", _gpu("spec.maxReplicas", 0), "spec.maxReplicas", ""),
    ("gpu-count-string", _gpu("spec.gpus.count", "8"), "spec.gpus.count", ""),
    ("cpu-float", _gpu("spec.resources.cpu", 8.5), "spec.resources.cpu", ""),
    ("cpu-bool", _gpu("spec.resources.cpu", True), "spec.resources.cpu", ""),
    ("cpu-huge", _gpu("spec.resources.cpu", "1" * 400), "spec.resources.cpu", ""),
    ("cpu-too-many", _gpu("spec.resources.cpu", 70000), "spec.resources.cpu", "65535"),
    ("memory-huge", _gpu("spec.resources.memory", "9999999Ei"), "spec.resources.memory", ""),
    ("memory-space", _gpu("spec.resources.memory", "32Gi "), "spec.resources.memory", ""),
    ("features-string", _gpu("spec.features", "nvlink"), "spec.features", "list"),
    ("node-selector-int", _gpu("spec.nodeSelector", {"a": 1}), "spec.nodeSelector.a", "string"),
    ("tolerations-string", _gpu("spec.tolerations", "x"), "spec.tolerations", ""),
    ("backup-yes", _cluster("spec.controller.backup", "yes"), "spec.controller.backup", "boolean"),
    ("backup-true-string", _cluster("spec.controller.backup", "true"), "spec.controller.backup", "boolean"),
    ("backup-one", _cluster("spec.controller.backup", 1), "spec.controller.backup", "boolean"),
    ("accounting-false-string", _cluster("spec.accounting.enabled", "false"), "spec.accounting.enabled", "boolean"),
    ("login-replicas-string", _cluster("spec.login.replicas", "1"), "spec.login.replicas", ""),
    ("login-replicas-17", _cluster("spec.login.replicas", 17), "spec.login.replicas", ""),
    ("slurm-conf-int", _cluster("spec.slurmConf", {"MaxJobCount": 20000}), "spec.slurmConf.MaxJobCount", "string"),
    ("slurm-conf-list", _cluster("spec.slurmConf", ["MaxJobCount=1"]), "spec.slurmConf", ""),
    ("slurm-conf-empty-value", _cluster("spec.slurmConf", {"MaxJobCount": ""}), "spec.slurmConf.MaxJobCount", ""),
    ("slurm-conf-two-spellings", _cluster("spec.slurmConf", {"MaxJobCount": "1", "maxjobcount": "2"}), "spec.slurmConf.maxjobcount", "repeats"),
    ("slurm-conf-owned-key", _cluster("spec.slurmConf", {"NodeName": "evil"}), "spec.slurmConf.NodeName", "instead"),
    ("slurm-conf-include", _cluster("spec.slurmConf", {"Include": "/etc/shadow"}), "spec.slurmConf.Include", ""),
    ("slurm-conf-health-program", _cluster("spec.slurmConf", {"HealthCheckProgram": "/tmp/x"}), "spec.slurmConf.HealthCheckProgram",
     "spec.nodeHealth.check"),
    ("health-interval-too-short", _cluster("spec.nodeHealth", {"check": {"intervalSeconds": 1}}), "spec.nodeHealth.check.intervalSeconds", ""),
    ("health-node-state-cycle", _cluster("spec.nodeHealth", {"check": {"nodeStates": ["CYCLE"]}}), "spec.nodeHealth.check.nodeStates[0]", ""),
    ("accounts-map", _cluster("spec.accounts", {"vision": {}}), "spec.accounts", ""),
    ("users-string", _cluster("spec.accounts.0.users", "alice"), "spec.accounts[0].users", ""),
    ("shares-float", _cluster("spec.accounts.0.shares", 1e3), "spec.accounts[0].shares", ""),
    ("max-gpus-huge", _cluster("spec.accounts.1.limits.maxGPUs", 2**63), "spec.accounts[1].limits.maxGPUs", ""),
    ("port-too-big", _cluster("spec.accounting.database", {"external": {**EXTERNAL_DATABASE["external"], "port": 70000}}),
     "spec.accounting.database.external.port", ""),
    ("replace-with-rolling-update", _gpu("spec", {**GPU_NODES["spec"], "replaceUnhealthy": True, "updateStrategy": {"type": "RollingUpdate"}}),
     "spec.replaceUnhealthy", "OnDelete"),
    ("port-string", _cluster("spec.accounting.database", {"external": {**EXTERNAL_DATABASE["external"], "port": "3306"}}),
     "spec.accounting.database.external.port", ""),
    ("block-size-negative", _cluster("spec.topology", {**BLOCK, "blockSizes": [-4]}), "spec.topology.blockSizes[0]", ""),
    ("block-size-zero", _cluster("spec.topology", {**BLOCK, "blockSizes": [0]}), "spec.topology.blockSizes[0]", ""),
    ("block-size-string", _cluster("spec.topology", {**BLOCK, "blockSizes": ["4"]}), "spec.topology.blockSizes[0]", ""),
    ("node-label-not-a-key", _cluster("spec.topology", {**TREE, "nodeLabels": ["a/b/c"]}), "spec.topology.nodeLabels[0]", ""),
    ("name-too-long", _cluster("metadata.name", "r" * 41), "metadata.name", ""),
    ("name-homoglyph", _cluster("metadata.name", "rese\u0430rch"), "metadata.name", ""),
    ("name-zero-width", _cluster("metadata.name", "research\u200b"), "metadata.name", ""),
    ("name-dots", _cluster("metadata.name", "a.b"), "metadata.name", ""),
    ("name-int", _cluster("metadata.name", 1), "metadata.name", ""),
    ("namespace-upper", _cluster("metadata.namespace", "HPC"), "metadata.namespace", ""),
    ("metadata-string", [{**CLUSTER, "metadata": "oops"}, GPU_NODES, CPU_NODES], "metadata", ""),
    ("metadata-null", [{**CLUSTER, "metadata": None}, GPU_NODES, CPU_NODES], "metadata", ""),
    ("spec-string", [{**CLUSTER, "spec": "x"}, GPU_NODES, CPU_NODES], "spec", ""),
    ("kind-list", [{**CLUSTER, "kind": ["SlurmCluster"]}], "kind", "not one of"),
    ("api-version", [{**CLUSTER, "apiVersion": "kubeslurm.io/v1"}], "apiVersion", ""),
    ("document-list", [[CLUSTER]], "expected a YAML mapping", ""),
    ("document-scalar", ["SlurmCluster"], "expected a YAML mapping", ""),
]

# Raw YAML (what PyYAML would quietly misread): (id, text, field or phrase, words of the message)
CONTRACT_TEXT = _yaml([CLUSTER, GPU_NODES, CPU_NODES])
RAW_REFUSED = [
    ("duplicate-key", CONTRACT_TEXT.replace("  replicas: 2\n", "  replicas: 2\n  replicas: 200\n", 1), "duplicate key 'replicas'", ""),
    ("duplicate-kind", CONTRACT_TEXT.replace("kind: SlurmCluster\n", "kind: SlurmCluster\nkind: NodeSet\n", 1), "duplicate key 'kind'", ""),
    ("alias-bomb", "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
                   "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n", "aliases", ""),
    ("alias-bomb-after-a-long-list", "a: [" + ",".join(["x"] * 120_000) + "]\n" + "b: &a [x,x,x,x,x,x,x,x,x,x]\n"
     "c: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nd: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\ne: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
     "f: [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n", "aliases", ""),
    ("recursive-alias", CONTRACT_TEXT.replace("  features:\n  - nvlink\n", "  features: &f\n  - *f\n", 1), "endless", ""),
    ("python-tag", "!!python/object/apply:os.system ['id']\n", "not valid YAML", ""),
    ("binary-string", CONTRACT_TEXT.replace("name: research\n", "name: !!binary cmVzZWFyY2g=\n", 1), "metadata.name", ""),
    ("norway-off", CONTRACT_TEXT.replace("preemption: 'off'", "preemption: off"), "spec.scheduling.preemption", ""),
    ("sexagesimal-time", CONTRACT_TEXT.replace("maxTime: 1-00:00:00", "maxTime: 1:00:00"), "spec.partitions[0].maxTime", "string"),
    ("octal-cpu", CONTRACT_TEXT.replace("cpu: '8'", "cpu: 0o10"), "spec.resources.cpu", ""),
    ("tab-indent", CONTRACT_TEXT.replace("  replicas: 2", "\treplicas: 2", 1), "not valid YAML", ""),
    ("unhashable-key", "? [a]\n: 1\n", "not valid YAML", ""),
    ("null-document-only", "---\n...\n", "no SlurmCluster", ""),
    ("inf-replicas", CONTRACT_TEXT.replace("  replicas: 2\n", "  replicas: .inf\n", 1), "spec.replicas", ""),
    # PyYAML ends a line at U+2028 (YAML 1.1): the rest of the comment becomes content
    ("line-separator-in-a-comment", "# comment \u2028 in: YAML\n" + CONTRACT_TEXT, "not valid YAML", ""),
    ("merge-key-not-a-map", CONTRACT_TEXT.replace("  replicas: 2\n", "  <<: 3\n", 1), "not valid YAML", ""),
]


@pytest.mark.parametrize("documents,field,message", [pytest.param(d, f, m, id=i) for i, d, f, m in REFUSED])
def test_hostile_manifest_is_refused_naming_the_field(tmp_path, capsys, documents, field, message):
    _assert_refused(tmp_path, capsys, documents, field, message)


# The API server holds one object per name; only an input file can repeat one.
TWICE = [
    ("node-set-twice", [CLUSTER, GPU_NODES, CPU_NODES, CPU_NODES], "NodeSet hpc/cpu appears twice"),
    ("cluster-twice", [CLUSTER, CLUSTER, GPU_NODES, CPU_NODES], "SlurmCluster hpc/research appears twice"),
]


@pytest.mark.parametrize("documents,message", [pytest.param(d, m, id=i) for i, d, m in TWICE])
def test_an_object_twice_in_the_input_is_refused(tmp_path, capsys, documents, message):
    code, out, err = _render(tmp_path, capsys, _yaml(documents))
    assert code == 1 and out == "" and message in err, err


@pytest.mark.parametrize("text,field,message", [pytest.param(t, f, m, id=i) for i, t, f, m in RAW_REFUSED])
def test_yaml_tricks_are_refused(tmp_path, capsys, text, field, message):
    code, out, err = _render(tmp_path, capsys, text)
    assert code == 1 and out == "", out[:2000]
    assert err.startswith("error: ") and field in err and message in err, err


def test_a_file_that_is_not_utf8_is_refused(tmp_path, capsys):
    code, out, err = _render(tmp_path, capsys, CONTRACT_TEXT.encode() + b"\xff\xfe")
    assert code == 1 and "not UTF-8" in err


# Accepted: odd input that must not add, drop or split a config line.
def _config_lines(out: str) -> dict[str, list[str]]:
    """For each config file in render's output: the key of every line (comments as '#')."""
    files: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        header = re.match(r"^# ---- \S+: (\S+) ----$", line)
        if header:
            current = header[1]
            files[current] = []
        elif line.startswith("# Kubernetes objects"):
            current = None
        elif current is not None and line:
            files[current].append("#" if line.startswith("#") else line.split("=", 1)[0])
    return files


BASELINE_TEXT = CONTRACT_TEXT
RENDERED = [
    # (id, text, config lines it adds: {file: [keys]})
    ("anchors-and-aliases", CONTRACT_TEXT.replace("    maxTime: 1-00:00:00\n", "    maxTime: &day 1-00:00:00\n").replace(
        "    - cpu\n  slurmConf", "    - cpu\n    maxTime: *day\n  slurmConf"), {}),
    ("merge-key", CONTRACT_TEXT.replace("  gpus:\n    count: 8\n    type: h100\n",
                                        "  gpus:\n    <<: {count: 4, type: a100}\n    count: 8\n    type: h100\n", 1), {}),
    ("env-value-with-shell", _yaml(_slurmd(env=[{"name": "X", "value": "$(reboot); `id` # \\\n\u2028NodeName=evil"}])), {}),
    ("annotation-with-newline", _yaml(_pod({"metadata": {"annotations": {"example.com/note": "a\nNodeName=evil # x"}}})), {}),
    ("affinity-free-form", _yaml(_gpu("spec.affinity", {"nodeAffinity": {"x": "a\nNodeName=evil"}})), {}),
    ("toleration-free-form", _yaml(_gpu("spec.tolerations", [{"key": "a\nb", "operator": "Exists"}])), {}),
    ("slurm-conf-option-list", _yaml(_cluster("spec.slurmConf", {"SchedulerParameters": "bf_continue,bf_max_job_test=1000"})),
     {"slurm.conf": ["SchedulerParameters"]}),
    ("slurm-conf-lower-case-key", _yaml(_cluster("spec.slurmConf", {"maxjobcount": "20000"})), {"slurm.conf": ["maxjobcount"]}),
    ("slurm-conf-hostlist-and-percent", _yaml(_cluster("spec.slurmConf", {"SuspendExcNodes": "h100-[0-1]:1", "TmpFS": "/tmp/%n"})),
     {"slurm.conf": ["SuspendExcNodes", "TmpFS"]}),
    ("full-pod-template", _yaml([CLUSTER, FULL_GPU, CPU_NODES]), {}),
    ("external-database-ipv6", _yaml(_cluster("spec.accounting.database", {"external": {**EXTERNAL_DATABASE["external"], "host": "fd00::10"}})), {}),
    ("unicode-in-a-comment", "# Ünïcödé comment, \u00a0 and \u200b in YAML\n" + CONTRACT_TEXT, {}),
    ("empty-documents", "---\n---\n" + CONTRACT_TEXT + "---\n", {}),
]


@pytest.mark.parametrize("text,added", [pytest.param(t, a, id=i) for i, t, a in RENDERED])
def test_odd_but_harmless_input_renders_only_the_lines_it_asks_for(tmp_path, capsys, text, added):
    code, baseline, err = _render(tmp_path, capsys, BASELINE_TEXT)
    assert code == 0, err
    code, out, err = _render(tmp_path, capsys, text)
    assert code == 0, err
    expected = _config_lines(baseline)
    got = _config_lines(out)
    for name, keys in added.items():
        assert sorted(set(got[name]) - set(expected[name])) == sorted(keys)
        expected[name] = [k for k in got[name] if k in set(expected[name]) | set(keys)]
    if "external-database" in text or "fd00::10" in text:
        expected.pop("slurmdbd.conf", None), got.pop("slurmdbd.conf", None)
    assert got == expected
    assert "NodeName=evil" not in "".join(line for line in out.splitlines() if not line.startswith(" "))
    list(yaml.safe_load_all(out.split("# Kubernetes objects", 1)[1]))  # the objects part stays valid YAML
