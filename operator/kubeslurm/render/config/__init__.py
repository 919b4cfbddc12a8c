"""The configuration files, one module each (slurm.conf, gres.conf, cgroup.conf, topology.conf,
slurmdbd.conf, sssd.conf), their templates, the accounting commands (sacctmgr), and the
ConfigMap that carries the public ones."""
