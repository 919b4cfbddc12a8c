#!/bin/sh
# Steps that turn "Debian trixie + images/slurm/packages.txt" into the Slurm image.
# Run as root inside the image root by both builders: images/slurm/Dockerfile
# (RUN) and images/build.py (chroot over an overlay of the cached rootfs), so the
# two produce the same image. The image contract is the docstring of
# operator/kubeslurm/render/slurm_pod.py.
set -eu

# Slurm's run directories. On a host systemd creates them (RuntimeDirectory=);
# in a pod nothing does, and slurmctld/slurmdbd exit without them
# ("fatal: _prepare_run_dir: failed to create /run/slurmdbd").
install -d -o slurm -g slurm -m 0755 /run/slurmctld /run/slurmdbd
# sackd and configless slurmd keep the fetched configs and the auth socket here
# (pods usually mount an emptyDir over it).
install -d -o root -g root -m 0755 /run/slurm
# Spool and state directories the rendered configs name; pods mount volumes over
# them, but a bare `ctr run` / `docker run` should work too.
install -d -o slurm -g slurm -m 0700 /var/spool/slurmctld
install -d -o root -g root -m 0755 /var/spool/slurmd
install -d -o slurm -g slurm -m 0755 /var/log/slurm

# Debian's plugstack.conf is `include /etc/slurm/plugstack.conf.d/*.conf` and the
# directory is empty, so slurmctld logs a glob error at every start. Pods mount an
# emptyDir over /etc/slurm anyway (the configs come from the init container), so
# ship no plugstack.conf at all: without one Slurm loads no SPANK plugins, silently.
rm -f /etc/slurm/plugstack.conf
rm -rf /etc/slurm/plugstack.conf.d

# No secrets in an image: the auth key comes from a Kubernetes Secret at run time.
# Package scripts may have generated keys; they must not ship.
rm -f /etc/munge/munge.key /etc/slurm/slurm.key /etc/slurm/jwt*.key /etc/ssh/ssh_host_*
: > /etc/machine-id

# Users: the image runs as root (uid 0) on purpose. slurmd must be root (it starts
# every job as the job's user: setuid, cgroups, namespaces); slurmctld and slurmdbd
# start as root and drop to SlurmUser=slurm (uid 64030, fixed by Debian's
# base-passwd) themselves after opening their run directories. A non-root USER
# here would break slurmd and gain nothing for the other two.
getent passwd slurm >/dev/null
