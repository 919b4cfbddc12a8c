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

# Identity: local files first, then SSSD. libnss-sss's postinst edits
# nsswitch.conf itself; write the lines we rely on so the image says exactly
# this whatever the package did. Without a running sssd, nss_sss finds no socket
# in /var/lib/sss/pipes and answers UNAVAIL at once, so an image used without a
# directory behaves as before. shadow stays files-only: SSSD serves no password
# hashes (pam_sss authenticates against the directory), and login pods refuse
# passwords anyway.
cat > /etc/nsswitch.conf <<'NSS'
# kubeslurm image (images/slurm/setup.sh): local files, then the directory via SSSD.
passwd:         files sss
group:          files sss
shadow:         files
gshadow:        files
hosts:          files dns
networks:       files
protocols:      db files
services:       db files
ethers:         db files
rpc:            db files
netgroup:       nis
NSS
chmod 0644 /etc/nsswitch.conf

# SSSD's config comes from a Secret at run time (it may hold the bind password);
# nothing from the build may be mistaken for it, and its caches start empty.
rm -f /etc/sssd/sssd.conf /etc/sssd/conf.d/*.conf
rm -rf /var/lib/sss/db/* /var/lib/sss/mc/* /var/lib/sss/pipes/private/* /var/log/sssd/*
find /var/lib/sss/pipes -maxdepth 1 -type s -delete

# sshd: its privilege-separation directory (systemd's RuntimeDirectory on a host).
# Host keys were deleted above: a login pod gets them from a Secret, so a replaced
# pod presents the same key. sshd takes the first value it reads for an option,
# so this drop-in, read before any the operator adds, pins what must never be on:
# password and keyboard-interactive login, and root.
install -d -o root -g root -m 0755 /run/sshd
install -d -o root -g root -m 0755 /etc/ssh/sshd_config.d
cat > /etc/ssh/sshd_config.d/00-kubeslurm-image.conf <<'SSHD'
# kubeslurm image defaults (images/slurm/setup.sh). sshd keeps the first value it
# reads for an option, so later drop-ins cannot turn these on again.
PermitRootLogin no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitEmptyPasswords no
SSHD
chmod 0644 /etc/ssh/sshd_config.d/00-kubeslurm-image.conf
# pam_loginuid writes /proc/self/loginuid, which needs CAP_AUDIT_CONTROL: a pod
# rarely has it, and "required" would then refuse every login. The audit login
# uid is worth nothing inside a pod, so the module stays but may fail.
sed -i 's/^session\([[:space:]]\+\)required\([[:space:]]\+\)pam_loginuid\.so/session\1optional\2pam_loginuid.so/' /etc/pam.d/sshd
grep -q '^session[[:space:]]\+optional[[:space:]]\+pam_loginuid\.so' /etc/pam.d/sshd
# Directory users (spec.identity.mode ldap, where sshd runs with UsePAM yes) are unknown
# when a pod starts, so no init container can make their homes: pam_mkhomedir makes
# <home>/<user> (mode 0700, from /etc/skel) at the first login, on the shared home when
# there is one. Local mode runs sshd without PAM, so this line never runs there.
sed -i '/^@include common-session$/a session    optional     pam_mkhomedir.so umask=0077' /etc/pam.d/sshd
grep -q '^session[[:space:]]\+optional[[:space:]]\+pam_mkhomedir\.so umask=0077$' /etc/pam.d/sshd

# Slurm's HealthCheckProgram (slurm.conf, spec.nodeHealth.check): checks the node's GPUs
# and the site's script, and drains its own node when they fail. setup.sh's files sit next to it.
install -o root -g root -m 0755 "$(dirname "$0")/health-check.sh" /usr/local/sbin/kubeslurm-health-check
# Slurm's Epilog when spec.bridge is on: a placeholder job of a Slurm-scheduled pod stays
# COMPLETING (its GPUs given to no one) until the operator removes its hold file.
install -o root -g root -m 0755 "$(dirname "$0")/bridge-epilog.sh" /usr/local/sbin/kubeslurm-bridge-epilog

# Containers as job steps (spec.slurm.containers): oci.conf's RunTimeRun. Slurm calls it as
# the job's user with the step's bundle and container id; it runs crun rootless on a copy of
# the bundle's config.json fitted to a pod (the step's /proc, the step's GPUs): see its docstring.
install -d -o root -g root -m 0755 /usr/libexec/kubeslurm
install -o root -g root -m 0755 "$(dirname "$0")/oci-run.py" /usr/libexec/kubeslurm/oci-run

# Users: the image runs as root (uid 0) on purpose. slurmd must be root (it starts
# every job as the job's user: setuid, cgroups, namespaces); slurmctld and slurmdbd
# start as root and drop to SlurmUser=slurm (uid 64030, fixed by Debian's
# base-passwd) themselves after opening their run directories. A non-root USER
# here would break slurmd and gain nothing for the other two.
getent passwd slurm >/dev/null
