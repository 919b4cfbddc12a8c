import pytest

from kubeslurm.reconcile.drift import contains

LIVE = {
    "metadata": {"name": "a", "uid": "1", "labels": {"x": "1", "y": "2"}},
    "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "i", "imagePullPolicy": "IfNotPresent"}]}}},
    "status": {"replicas": 2},
}


@pytest.mark.parametrize(
    "desired,expected",
    [
        ({"metadata": {"name": "a", "labels": {"x": "1"}}}, True),
        ({"spec": {"replicas": 2}}, True),
        ({"spec": {"replicas": 3}}, False),
        ({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}, True),
        ({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "j"}]}}}}, False),
        ({"spec": {"template": {"spec": {"containers": []}}}}, False),
        ({"metadata": {"annotations": {"a": "b"}}}, False),
    ],
)
def test_contains(desired, expected):
    assert contains(LIVE, desired) is expected


def test_quantities_compare_by_value_inside_resources_only():
    live = {"resources": {"limits": {"memory": "1Gi", "cpu": "8"}}, "image": "slurm:24.11"}
    assert contains(live, {"resources": {"limits": {"memory": "1024Mi", "cpu": "8"}}})
    assert not contains(live, {"resources": {"limits": {"memory": "2Gi"}}})
    assert not contains(live, {"image": "slurm:24.110"})
