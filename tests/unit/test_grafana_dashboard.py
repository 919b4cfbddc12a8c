"""docs/grafana-dashboard.json: loads as a Grafana dashboard, and asks only for series the operator serves."""

import json
import re
from pathlib import Path

import pytest

from kubeslurm.metrics import operator_metrics
from kubeslurm.metrics.cluster_collector import CLUSTER_LABELS
from kubeslurm.metrics.slurm_state import FAMILIES

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
# what Grafana itself defines
BUILTIN_VARIABLES = {"__rate_interval", "__interval", "__range"}
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")


def served_labels() -> dict[str, set[str]]:
    """Every series name the operator serves -> the labels it may carry."""
    labels = {name: {*CLUSTER_LABELS, *family.labels} for name, family in FAMILIES.items()}
    for metric in vars(operator_metrics).values():
        if not hasattr(metric, "_labelnames") or not hasattr(metric, "_name"):
            continue
        kind, names = metric._type, set(metric._labelnames)
        if kind == "histogram":
            labels.update({metric._name + suffix: names | ({"le"} if suffix == "_bucket" else set()) for suffix in HISTOGRAM_SUFFIXES})
        elif kind == "counter":
            labels[metric._name + "_total"] = names
        else:
            labels[metric._name] = names
    return labels


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def queries(dashboard) -> list[str]:
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    return exprs + [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]


def test_it_is_a_dashboard_grafana_can_import(dashboard):
    assert {"uid", "title", "panels", "templating", "schemaVersion", "time"} <= set(dashboard)
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,40}", dashboard["uid"])
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    taken = set()
    for panel in dashboard["panels"]:
        assert panel["type"] in {"timeseries", "stat"} and panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]  # Grafana's grid is 24 wide
        cells = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells
        refs = [target["refId"] for target in panel["targets"]]
        assert refs and len(refs) == len(set(refs))


def test_every_query_asks_for_served_series_with_their_own_labels(dashboard):
    served = served_labels()
    seen = set()
    for expr in queries(dashboard):
        names = re.findall(r"\bkubeslurm_\w+", expr)
        assert names, expr
        for name, selector in re.findall(r"\b(kubeslurm_\w+)(?:\{([^}]*)\})?", expr):
            assert name in served, f"{name} is not served: {expr}"
            used = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", selector))
            assert used <= served[name], f"{name} has no label {used - served[name]}: {expr}"
            seen.add(name)
    # the cluster view of the issue: nodes by state, GPUs allocated, jobs by state, pending reasons, reconcile duration
    assert {"kubeslurm_slurm_nodes", "kubeslurm_slurm_allocated_gpus", "kubeslurm_slurm_jobs",
            "kubeslurm_slurm_pending_jobs", "kubeslurm_reconcile_duration_seconds_bucket"} <= seen


def test_every_variable_a_query_uses_is_defined(dashboard):
    defined = {v["name"] for v in dashboard["templating"]["list"]} | BUILTIN_VARIABLES
    used = {name for expr in queries(dashboard) for name in re.findall(r"\$\{?(\w+)", expr)}
    used |= {re.search(r"\$\{?(\w+)", panel["datasource"]["uid"])[1] for panel in dashboard["panels"]}
    assert used <= defined, used - defined
