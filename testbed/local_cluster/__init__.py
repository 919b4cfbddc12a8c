"""The local Kubernetes cluster (README.md beside this file): LocalCluster starts it, stops
it and loads images into it; layout.py says where it lives, host.py what it changes on the
machine, node.py and node_configs.py what runs on a node, teardown.py how it all goes."""

from testbed.local_cluster.cluster import LocalCluster, running_local_cluster  # noqa: F401
from testbed.local_cluster.layout import CLUSTER_DIR, DEFAULT_GPUS, DNS_IP, KUBECONFIG, ClusterError  # noqa: F401
