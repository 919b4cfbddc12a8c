#!/usr/bin/env bash
# Installs the Debian packages the local cluster runs, when any is missing:
# containerd 1.6 + runc (bookworm), the CNI plugins, busybox-static (the test
# image), gcc + libc6-dev (the static pause binary), iptables, conntrack.
# The Kubernetes binaries, crictl and CoreDNS come from the Go module proxy
# (testbed/kubernetes/build.sh, testbed/local_cluster/system_images.py); Python packages from the venv.
set -euo pipefail
packages=(containerd runc containernetworking-plugins busybox-static gcc libc6-dev iptables conntrack
          iproute2 util-linux openssl)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing ${missing[*]}; run as root: apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
apt-get update -qq
# On a machine with systemd the package also starts the system containerd; it
# does not get in the way: the cluster runs its own, with its own socket and state.
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
