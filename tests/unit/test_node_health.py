from kubeslurm.reconcile.node_health import health_actions
from kubeslurm.reconcile.slurm_control import SlurmNode


def k8s_node(name, ready=True, cordoned=False):
    return {
        "metadata": {"name": name},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def pod(name, node):
    return {"metadata": {"name": name}, "spec": {"nodeName": node}}


def test_not_ready_and_cordoned_nodes_drain_their_slurm_nodes():
    pods = [pod("h100-0", "k1"), pod("h100-1", "k2"), pod("h100-2", "k3")]
    nodes = {"k1": k8s_node("k1"), "k2": k8s_node("k2", ready=False), "k3": k8s_node("k3", cordoned=True)}
    slurm = {n: SlurmNode(n, {"IDLE"}) for n in ("h100-0", "h100-1", "h100-2")}
    drain, resume = health_actions(pods, nodes, slurm)
    assert drain == {"h100-1": "kubernetes node k2 is not Ready", "h100-2": "kubernetes node k3 is cordoned"}
    assert resume == []


def test_only_our_own_drains_are_resumed():
    pods = [pod("h100-0", "k1"), pod("h100-1", "k1")]
    slurm = {
        "h100-0": SlurmNode("h100-0", {"IDLE", "DRAIN"}, reason="kubeslurm: kubernetes node k1 is not Ready"),
        "h100-1": SlurmNode("h100-1", {"IDLE", "DRAIN"}, reason="replacing a fan"),
    }
    drain, resume = health_actions(pods, {"k1": k8s_node("k1")}, slurm)
    assert drain == {} and resume == ["h100-0"]


def test_scale_down_drains_are_not_health_drains():
    slurm = {"h100-0": SlurmNode("h100-0", {"IDLE", "DRAIN"}, reason="kubeslurm: scale-down of NodeSet h100 to 0")}
    assert health_actions([pod("h100-0", "k1")], {"k1": k8s_node("k1")}, slurm) == ({}, [])
