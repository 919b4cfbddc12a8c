"""sssd.conf rendering (render/config/sssd_conf.py): what each input turns into, and that no
input can end a line, open a section or add an option."""

import configparser
import dataclasses
import re

import pytest

from kubeslurm.render.config.sssd_conf import SssdConfig, render_sssd_conf

BASE = SssdConfig(
    uris=("ldap://ldap-0.directory.example.org", "ldap://ldap-1.directory.example.org:389"),
    search_base="dc=example,dc=org",
    ca_cert_path="/etc/sssd/ca/ca.crt",
    bind_dn="cn=sssd,ou=services,dc=example,dc=org",
)
PASSWORD = "s3cret-Bind.pw"
SECTIONS = ["sssd", "nss", "pam", "ssh", "domain/directory"]


def parse(text: str) -> configparser.ConfigParser:
    """Read the way SSSD's ini parser does: `key = value` lines, '#' comments, [sections]."""
    parser = configparser.ConfigParser(interpolation=None, delimiters=("=",), comment_prefixes=("#",),
                                       strict=True)
    parser.optionxform = str
    parser.read_string(text)
    return parser


def assert_only_rendered_lines(text: str) -> None:
    """Every line is a comment, blank, one of the five sections, or key = value."""
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            assert line[1:-1] in SECTIONS and line.endswith("]"), line
        else:
            assert re.fullmatch(r"[a-z_]+ = \S.*", line), line


def domain(config: SssdConfig = BASE, password: str | None = PASSWORD) -> dict[str, str]:
    text = render_sssd_conf(config, password)
    assert_only_rendered_lines(text)
    parsed = parse(text)
    assert parsed.sections() == SECTIONS[:4] + [f"domain/{config.domain}"]
    return dict(parsed[f"domain/{config.domain}"])


def test_defaults():
    text = render_sssd_conf(BASE, PASSWORD)
    parsed = parse(text)
    assert dict(parsed["sssd"]) == {"services": "nss, pam, ssh", "domains": "directory"}
    assert parsed["nss"]["entry_negative_timeout"] == "15"
    assert parsed["nss"]["memcache_timeout"] == "60"
    d = domain()
    assert d["id_provider"] == d["auth_provider"] == "ldap"
    assert d["access_provider"] == "permit"
    assert d["ldap_uri"] == "ldap://ldap-0.directory.example.org, ldap://ldap-1.directory.example.org:389"
    assert d["ldap_search_base"] == "dc=example,dc=org"
    assert "ldap_user_search_base" not in d and "ldap_group_search_base" not in d
    assert d["ldap_default_bind_dn"] == "cn=sssd,ou=services,dc=example,dc=org"
    assert d["ldap_default_authtok_type"] == "password"
    assert d["ldap_default_authtok"] == PASSWORD
    assert d["ldap_id_use_start_tls"] == "true"
    assert d["ldap_tls_reqcert"] == "demand"
    assert d["ldap_tls_cacert"] == "/etc/sssd/ca/ca.crt"
    assert d["ldap_user_ssh_public_key"] == "sshPublicKey"
    assert d["ldap_schema"] == "rfc2307"
    assert d["enumerate"] == "false" and d["cache_credentials"] == "false"
    assert d["entry_cache_timeout"] == "60"
    assert d["min_id"] == "1000"


@pytest.mark.parametrize(
    "change,expected",
    [
        ({"uris": ("ldaps://ldap.example.org:636",)},
         {"ldap_uri": "ldaps://ldap.example.org:636", "ldap_id_use_start_tls": "false"}),
        ({"uris": ("ldap://[fd00::10]:389",)}, {"ldap_uri": "ldap://[fd00::10]:389", "ldap_id_use_start_tls": "true"}),
        ({"login_groups": ("researchers", "hpc admins")},
         {"access_provider": "simple", "simple_allow_groups": "researchers, hpc admins"}),
        ({"login_filter": "(&(objectClass=posixAccount)(memberOf=cn=hpc,ou=groups,dc=example,dc=org))"},
         {"access_provider": "ldap", "ldap_access_order": "filter",
          "ldap_access_filter": "(&(objectClass=posixAccount)(memberOf=cn=hpc,ou=groups,dc=example,dc=org))"}),
        ({"user_search_bases": ("ou=people,dc=example,dc=org",)},
         {"ldap_user_search_base": "ou=people,dc=example,dc=org"}),
        ({"user_search_bases": ("ou=people,dc=example,dc=org", "ou=staff,dc=example,dc=org"),
          "group_search_bases": ("ou=groups,dc=example,dc=org",)},
         {"ldap_user_search_base": "ou=people,dc=example,dc=org?subtree??ou=staff,dc=example,dc=org?subtree?",
          "ldap_group_search_base": "ou=groups,dc=example,dc=org"}),
        ({"ssh_public_key_attribute": "ipaSshPubKey"}, {"ldap_user_ssh_public_key": "ipaSshPubKey"}),
        ({"schema": "rfc2307bis"}, {"ldap_schema": "rfc2307bis"}),
        ({"entry_cache_timeout": 300}, {"entry_cache_timeout": "300"}),
        ({"min_id": 20000}, {"min_id": "20000"}),
        ({"ca_cert_path": "/etc/sssd/ca/site-ca.pem"}, {"ldap_tls_cacert": "/etc/sssd/ca/site-ca.pem"}),
    ],
)
def test_inputs_become_options(change, expected):
    d = domain(dataclasses.replace(BASE, **change))
    for key, value in expected.items():
        assert d[key] == value, key


def test_cache_timeouts_reach_the_nss_section():
    config = dataclasses.replace(BASE, entry_cache_timeout=120, entry_negative_timeout=5)
    parsed = parse(render_sssd_conf(config, PASSWORD))
    assert parsed["nss"]["entry_negative_timeout"] == "5"
    assert parsed["nss"]["memcache_timeout"] == "120"


def test_anonymous_bind_has_no_credentials():
    config = dataclasses.replace(BASE, bind_dn=None)
    d = domain(config, None)
    assert not {"ldap_default_bind_dn", "ldap_default_authtok", "ldap_default_authtok_type"} & set(d)
    assert "holds the directory bind password" not in render_sssd_conf(config)


def test_domain_name_names_the_section():
    text = render_sssd_conf(dataclasses.replace(BASE, domain="example.org"), PASSWORD)
    parsed = parse(text)
    assert parsed["sssd"]["domains"] == "example.org"
    assert "domain/example.org" in parsed.sections()


@pytest.mark.parametrize("password", ["p[a]ss #1 ;x", "[section]", "]", "a = b", "%(x)s", "{{ config }}", "x" * 300])
def test_a_password_is_one_value_whatever_it_holds(password):
    d = domain(BASE, password)
    assert d["ldap_default_authtok"] == password


HOSTILE = ["x\n[sssd]", "x\nservices = nss", "x\r\ny", "[domain/evil]", "x]", "x\x00", "", "x\tz"]


@pytest.mark.parametrize(
    "field,bad",
    [("uris", (value,)) for value in ["ldap://host\n[nss]", "ldap://[host]", "http://ldap.example.org",
                                      "ldap://ldap.example.org:99999", "ldap://ldap.example.org/dc=x",
                                      "ldap://", "ldap://a b", "ldap://host#x"]]
    + [("uris", ()), ("uris", ["ldap://list.example.org"]), ("uris", ("ldap://a", "ldaps://b"))]
    + [("search_base", value) for value in HOSTILE + ["dc=example,", "=x", "dc=a,,dc=b", "dc=a\\,b", "dc=a+cn=b"]]
    + [("bind_dn", value) for value in HOSTILE + ["cn=sssd,dc=x\nldap_tls_reqcert = never"]]
    + [("ca_cert_path", value) for value in HOSTILE + ["relative/ca.crt", "/etc/../etc/shadow", "/etc/./x",
                                                       "/a b", "/etc/ca.crt\nldap_tls_reqcert = never"]]
    + [("user_search_bases", (value,)) for value in HOSTILE]
    + [("group_search_bases", (value,)) for value in HOSTILE]
    + [("user_search_bases", "ou=people,dc=x")]
    + [("login_groups", (value,)) for value in HOSTILE + ["a,b", " lead", "trail ", "a=b"]]
    + [("login_groups", "researchers")]
    + [("login_filter", value) for value in HOSTILE + ["uid=alice", "(uid=alice", "(uid=a))(", "(uid=[x])",
                                                     "(uid=a)\n(uid=b)"]]
    + [("ssh_public_key_attribute", value) for value in HOSTILE + ["1attr", "ssh PublicKey"]]
    + [("schema", value) for value in ["ad", "RFC2307", "rfc2307\n"]]
    + [("entry_cache_timeout", value) for value in [0, -1, 86401, "60", 1.5, True]]
    + [("entry_negative_timeout", value) for value in [0, 3601, "15", None]]
    + [("domain", value) for value in HOSTILE + ["a/b", "-x", "a b"]]
    + [("min_id", value) for value in [0, -5, 2**31, "1000", False]],
)
def test_hostile_or_malformed_field_is_refused_naming_it(field, bad):
    with pytest.raises(ValueError, match=rf"^{field}: "):
        dataclasses.replace(BASE, **{field: bad})


def test_login_groups_and_filter_are_exclusive():
    with pytest.raises(ValueError, match="^login_filter: .*not both"):
        dataclasses.replace(BASE, login_groups=("hpc",), login_filter="(uid=*)")


@pytest.mark.parametrize("password", ["line\nldap_tls_reqcert = never", "x\r", " leading", "trailing ", "\t",
                                      "caf\u00e9", "nul\x00l", ""])
def test_password_that_sssd_conf_cannot_hold_is_refused_without_echoing_it(password):
    with pytest.raises(ValueError, match="^bind_password: ") as raised:
        render_sssd_conf(BASE, password)
    if password.strip():
        assert password.strip() not in str(raised.value)


def test_password_and_bind_dn_come_together():
    with pytest.raises(ValueError, match="^bind_password: .*empty"):
        render_sssd_conf(BASE, None)
    with pytest.raises(ValueError, match="^bind_password: .*without bind_dn"):
        render_sssd_conf(dataclasses.replace(BASE, bind_dn=None), PASSWORD)


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        BASE.uris = ("ldap://other",)  # type: ignore[misc]
