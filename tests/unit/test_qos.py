"""QOS from spec.qos and the accounts' access to them, as sacctmgr commands; bad QOS specs refused."""

import pytest

from kubeslurm.api import ManifestError, parse_object
from kubeslurm.render.config.accounting_commands import accounting_commands

from .manifests import contract_documents, set_path

CLUSTER, _, _ = contract_documents()
QOS = [
    {"name": "high", "priority": 100, "preempt": ["low"], "limits": {"maxJobTime": "1:00:00", "maxGPUsPerUser": 4}},
    {"name": "low"},
]


def commands_of(doc) -> list[list[str]]:
    return accounting_commands(parse_object(doc))


def with_qos(qos_list=QOS, account: dict | None = None):
    """The contract cluster with spec.qos and fields of its first account (vision)."""
    doc = set_path(CLUSTER, "spec.qos", qos_list)
    for key, value in (account or {}).items():
        doc = set_path(doc, f"spec.accounts.0.{key}", value)
    return doc


def test_every_qos_is_added_before_any_is_modified_and_before_the_accounts():
    commands = commands_of(with_qos())
    verbs = [tuple(c[:2]) for c in commands]
    assert verbs[:5] == [("add", "cluster"), ("add", "qos"), ("add", "qos"), ("modify", "qos"), ("modify", "qos")]
    assert commands[1:3] == [["add", "qos", "high"], ["add", "qos", "low"]]


@pytest.mark.parametrize(
    "qos,expected",
    [
        (QOS[0], ["Priority=100", "Preempt=low", "MaxWall=1:00:00", "MaxJobsPerUser=-1", "MaxTRESPerUser=gres/gpu=4"]),
        # nothing set: every setting cleared, so a removed limit or preempt list leaves Slurm too
        (QOS[1], ["Priority=0", "Preempt=", "MaxWall=-1", "MaxJobsPerUser=-1", "MaxTRESPerUser=gres/gpu=-1"]),
        ({"name": "mid", "preempt": ["low", "normal"], "limits": {"maxJobsPerUser": 2}},
         ["Priority=0", "Preempt=low,normal", "MaxWall=-1", "MaxJobsPerUser=2", "MaxTRESPerUser=gres/gpu=-1"]),
    ],
)
def test_qos_settings(qos, expected):
    others = [] if qos["name"] == "low" else [{"name": "low"}]
    commands = commands_of(with_qos([qos, *others]))
    modify = next(c for c in commands if c[:4] == ["modify", "qos", "where", f"name={qos['name']}"])
    assert modify[4:] == ["set", *expected]


@pytest.mark.parametrize(
    "fields,expected",
    [
        ({}, ["QOS=normal", "DefaultQOS=-1"]),
        ({"qos": ["low", "high"]}, ["QOS=low,high", "DefaultQOS=-1"]),
        ({"qos": ["low", "high"], "defaultQOS": "low"}, ["QOS=low,high", "DefaultQOS=low"]),
    ],
)
def test_accounts_may_use_the_qos_they_name(fields, expected):
    commands = commands_of(with_qos(account=fields))
    vision = next(c for c in commands if c[:4] == ["modify", "account", "where", "name=vision"])
    assert vision[-2:] == expected


@pytest.mark.parametrize(
    "doc,field,message",
    [
        (with_qos([{"name": "high", "preempt": ["lo"]}]), "spec.qos[0].preempt", "'lo' is not in spec.qos"),
        (with_qos([{"name": "high", "preempt": ["high"]}]), "spec.qos[0].preempt", "cannot preempt itself"),
        (with_qos(account={"qos": ["x"]}), "spec.accounts[0].qos", "'x' is not in spec.qos"),
        (with_qos(account={"qos": ["low"], "defaultQOS": "high"}), "spec.accounts[0].defaultQOS", "not among the account's qos"),
        (with_qos([{"name": "High;rm"}]), "spec.qos[0].name", "is not allowed"),
        (with_qos([{"name": "low"}, {"name": "low"}]), "spec", "qos names must be unique"),
        (set_path(set_path(with_qos(), "spec.accounting.enabled", False), "spec.accounts", []), "spec", "qos needs accounting"),
    ],
)
def test_bad_qos_is_refused_naming_the_field(doc, field, message):
    with pytest.raises(ManifestError) as error:
        parse_object(doc)
    assert field in str(error.value) and message in str(error.value), str(error.value)
