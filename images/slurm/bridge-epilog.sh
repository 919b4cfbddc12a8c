#!/bin/sh
# kubeslurm-bridge-epilog: Slurm's Epilog on every slurmd pod of a cluster with spec.bridge
# enabled (slurm.conf). Installed by images/slurm/setup.sh.
#
# A placeholder job holds Slurm's CPUs, memory and GPUs for a Kubernetes pod that Slurm
# scheduled. When the job ends (scancel, preemption, time limit) the pod may still be running
# on those GPUs for its grace period. slurmd keeps the job COMPLETING, and its node takes no
# new allocation, until this epilog returns; so it returns only once the operator has removed
# the job's hold file, which it does when the pod is gone.
#
# The hold file is /run/kubeslurm/bridge/holds/<job id>: written (as root, through the exec
# API) by the operator before it binds the pod, removed when the pod is gone. Users cannot
# write there, so no job of theirs can hold a node, nor release a pod's GPUs early. A job
# without a hold file (every ordinary job) passes straight through.
set -u
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
case "${SLURM_JOB_ID:-}" in
    ''|*[!0-9]*) exit 0 ;;
esac
hold=/run/kubeslurm/bridge/holds/$SLURM_JOB_ID
while [ -e "$hold" ]; do
    sleep 1
done
exit 0
