"""A native Slurm cluster: real slurmctld, slurmd, slurmdbd, MariaDB and sackd in network
namespaces, from the images' Debian packages, without Kubernetes (cluster.py). rendered.py
builds one from what kubeslurm renders for a manifest."""

from testbed.native_slurm.cluster import NativeSlurmCluster, NodeSpec  # noqa: F401
from testbed.native_slurm.hosts import NativeSlurmError, build_rootfs  # noqa: F401
from testbed.native_slurm.leftovers import cleanup_leftovers, stop_all  # noqa: F401
from testbed.native_slurm.slurm_conf import conf_value  # noqa: F401
