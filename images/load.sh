#!/usr/bin/env bash
# Import kubeslurm's image tars into containerd, where the kubelet (CRI, namespace
# k8s.io) finds them: no registry involved.
#
#   images/load.sh [--address SOCK] [--namespace NS] [TAR...]
#
# TAR defaults to the newest slurm, mariadb and operator tars of images/build.py
# (${KUBESLURM_CACHE:-~/.cache/kubeslurm}/images/NAME.tar; build them first with
# `make images`). SOCK defaults to $CONTAINERD_ADDRESS, else
# /run/containerd/containerd.sock; NS to k8s.io. Needs ctr (Debian: containerd)
# and permission to use the socket (root).
set -euo pipefail

address=${CONTAINERD_ADDRESS:-/run/containerd/containerd.sock}
namespace=k8s.io
tars=()
while [ "$#" -gt 0 ]; do
    case "$1" in
        --address) address=$2; shift 2 ;;
        --address=*) address=${1#*=}; shift ;;
        --namespace|-n) namespace=$2; shift 2 ;;
        --namespace=*) namespace=${1#*=}; shift ;;
        -h|--help) sed -n '2,12s/^# \{0,1\}//p' "$0"; exit 0 ;;
        -*) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) tars+=("$1"); shift ;;
    esac
done
if [ "${#tars[@]}" -eq 0 ]; then
    dir=${KUBESLURM_CACHE:-$HOME/.cache/kubeslurm}/images
    for name in slurm mariadb operator; do
        if [ ! -e "$dir/$name.tar" ]; then
            echo "error: $dir/$name.tar does not exist; run 'make images' first" >&2
            exit 1
        fi
        tars+=("$dir/$name.tar")
    done
fi
if ! command -v ctr >/dev/null 2>&1; then
    echo "error: ctr not found; install containerd (Debian: apt-get install containerd)" >&2
    exit 1
fi
if [ ! -S "$address" ]; then
    echo "error: no containerd socket at $address (pass --address)" >&2
    exit 1
fi
for tar in "${tars[@]}"; do
    echo "importing $tar into $address (namespace $namespace)" >&2
    # --all-platforms: the archive holds one platform; without it ctr would also
    # insist that it matches the host's exactly.
    ctr --address "$address" --namespace "$namespace" images import --all-platforms "$tar"
done
