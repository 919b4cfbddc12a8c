"""The compute nodes of a NodeSet: their StatefulSet, Service and slurm.conf node lines."""
