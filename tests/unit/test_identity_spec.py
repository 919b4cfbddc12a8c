"""spec.identity: local (default) or ldap, and what the models refuse, naming the field."""

import copy

import pytest

from kubeslurm.api import ManifestError, load_documents

from .manifests import contract_documents, set_path

CLUSTER, GPU_NODES, CPU_NODES = contract_documents()
DIRECTORY = {
    "uris": ["ldap://ldap-0.example.org", "ldap://ldap-1.example.org:389"],
    "searchBase": "dc=example,dc=org",
    "bindDN": "cn=sssd,ou=services,dc=example,dc=org",
    "bindPasswordSecretRef": {"name": "sssd-bind"},
    "caCertificate": {"configMap": {"name": "site-ca"}},
}
LDAP = set_path(CLUSTER, "spec.identity", {"mode": "ldap", "ldap": DIRECTORY})


def cluster_of(document):
    (cluster,) = load_documents([document, GPU_NODES, CPU_NODES]).clusters
    return cluster


def test_local_is_the_default():
    identity = cluster_of(CLUSTER).spec.identity
    assert identity.mode == "local" and identity.ldap is None


def test_ldap_defaults_are_the_ones_a_site_expects():
    ldap = cluster_of(LDAP).spec.identity.ldap
    assert ldap.bind_password_secret_ref.key == "password" and ldap.ca_certificate.config_map.key == "ca.crt"
    assert ldap.ca_certificate.kind == "ConfigMap" and ldap.ca_certificate.ref.name == "site-ca"
    assert ldap.schema_ == "rfc2307" and ldap.ssh_public_key_attribute == "sshPublicKey"
    assert (ldap.cache_timeout_seconds, ldap.negative_cache_timeout_seconds, ldap.min_id) == (60, 15, 1000)
    assert ldap.login_groups == [] and ldap.login_filter is None


def test_anonymous_search_and_ldaps_and_ipv6_are_fine():
    directory = {k: v for k, v in DIRECTORY.items() if k not in ("bindDN", "bindPasswordSecretRef")}
    directory["uris"] = ["ldaps://[fd00::10]:636", "ldaps://ldap.example.org/"]
    ldap = cluster_of(set_path(CLUSTER, "spec.identity", {"mode": "ldap", "ldap": directory})).spec.identity.ldap
    assert ldap.bind_dn is None and ldap.uris[0] == "ldaps://[fd00::10]:636"


def _without(key):
    directory = copy.deepcopy(DIRECTORY)
    del directory[key]
    return {"mode": "ldap", "ldap": directory}


BAD = [
    # (what, spec.identity, words the error must hold)
    ("ldap without its settings", {"mode": "ldap"}, "spec.identity.ldap: required with mode: ldap"),
    ("settings with mode local", {"mode": "local", "ldap": DIRECTORY}, "spec.identity.ldap: not allowed with mode: local"),
    ("unknown mode", {"mode": "nis"}, "spec.identity.mode"),
    ("no uri", {"mode": "ldap", "ldap": {**DIRECTORY, "uris": []}}, "spec.identity.ldap.uris"),
    ("http uri", {"mode": "ldap", "ldap": {**DIRECTORY, "uris": ["http://ldap.example.org"]}}, "spec.identity.ldap.uris[0]"),
    ("uri with a path", {"mode": "ldap", "ldap": {**DIRECTORY, "uris": ["ldap://ldap.example.org/dc=x"]}}, "spec.identity.ldap.uris[0]"),
    ("port out of range", {"mode": "ldap", "ldap": {**DIRECTORY, "uris": ["ldap://ldap.example.org:70000"]}},
     "spec.identity.ldap.uris[0]: 'ldap://ldap.example.org:70000' has no valid port"),
    ("two schemes", {"mode": "ldap", "ldap": {**DIRECTORY, "uris": ["ldap://a.example.org", "ldaps://b.example.org"]}},
     "use one scheme"),
    ("no search base", _without("searchBase"), "spec.identity.ldap.searchBase"),
    ("search base not a DN", {"mode": "ldap", "ldap": {**DIRECTORY, "searchBase": "example.org"}}, "spec.identity.ldap.searchBase"),
    ("DN with a newline", {"mode": "ldap", "ldap": {**DIRECTORY, "userSearchBase": "ou=people\nldap_tls_reqcert = never"}},
     "spec.identity.ldap.userSearchBase"),
    ("bind DN without password", _without("bindPasswordSecretRef"), "set bindDN and bindPasswordSecretRef together"),
    ("password without bind DN", _without("bindDN"), "set bindDN and bindPasswordSecretRef together"),
    ("no CA", _without("caCertificate"), "spec.identity.ldap.caCertificate"),
    ("CA from both", {"mode": "ldap", "ldap": {**DIRECTORY, "caCertificate": {"configMap": {"name": "a"}, "secret": {"name": "b"}}}},
     "set exactly one of secret or configMap"),
    ("CA from neither", {"mode": "ldap", "ldap": {**DIRECTORY, "caCertificate": {}}}, "set exactly one of secret or configMap"),
    ("groups and filter", {"mode": "ldap", "ldap": {**DIRECTORY, "loginGroups": ["hpc"], "loginFilter": "(uid=*)"}},
     "give loginGroups or loginFilter, not both"),
    ("group with a comma", {"mode": "ldap", "ldap": {**DIRECTORY, "loginGroups": ["hpc,admins"]}}, "spec.identity.ldap.loginGroups[0]"),
    ("repeated group", {"mode": "ldap", "ldap": {**DIRECTORY, "loginGroups": ["hpc", "hpc"]}}, "groups must not repeat"),
    ("unbalanced filter", {"mode": "ldap", "ldap": {**DIRECTORY, "loginFilter": "(uid=a))(uid=b)"}}, "unbalanced parentheses"),
    ("filter without parentheses", {"mode": "ldap", "ldap": {**DIRECTORY, "loginFilter": "uid=alice"}}, "spec.identity.ldap.loginFilter"),
    ("schema", {"mode": "ldap", "ldap": {**DIRECTORY, "schema": "ad"}}, "spec.identity.ldap.schema"),
    ("attribute", {"mode": "ldap", "ldap": {**DIRECTORY, "sshPublicKeyAttribute": "ssh key"}}, "spec.identity.ldap.sshPublicKeyAttribute"),
    ("cache of zero", {"mode": "ldap", "ldap": {**DIRECTORY, "cacheTimeoutSeconds": 0}}, "spec.identity.ldap.cacheTimeoutSeconds"),
    ("negative cache of a day", {"mode": "ldap", "ldap": {**DIRECTORY, "negativeCacheTimeoutSeconds": 86400}},
     "spec.identity.ldap.negativeCacheTimeoutSeconds"),
    ("min id zero (root)", {"mode": "ldap", "ldap": {**DIRECTORY, "minId": 0}}, "spec.identity.ldap.minId"),
    ("secret name", {"mode": "ldap", "ldap": {**DIRECTORY, "bindPasswordSecretRef": {"name": "Sssd Bind"}}},
     "spec.identity.ldap.bindPasswordSecretRef.name"),
    ("unknown field", {"mode": "ldap", "ldap": {**DIRECTORY, "bindPassword": "plain"}}, "bindPassword"),
]


@pytest.mark.parametrize("identity,words", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_nonsense_is_refused_naming_the_field(identity, words):
    with pytest.raises(ManifestError) as raised:
        cluster_of(set_path(CLUSTER, "spec.identity", identity))
    assert words in str(raised.value), str(raised.value)
