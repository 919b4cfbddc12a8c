"""Pure functions from the API models to what the operator creates: no I/O, no clients.

Grouped by what they render: controller/, accounting/ (slurmdbd), database/ (MariaDB), login/,
slurmd/ (a component each: StatefulSet, Services, claims); config/ (the files Slurm and SSSD
read, one module per file, and the sacctmgr commands); k8s/ (Kubernetes plumbing every
component uses). cluster_objects.py puts them together; slurm_pod.py holds what every Slurm
pod shares; shared_storage.py and unix_ids.py serve more than one component.
"""
