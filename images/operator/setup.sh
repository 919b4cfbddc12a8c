#!/bin/sh
# Steps that turn "Debian trixie + images/operator/packages.txt" into the operator
# image. Run as root inside the image root by both images/operator/Dockerfile and
# images/build.py, with the project source (pyproject.toml, operator/, templates/)
# in $(dirname "$0")/src. Needs PyPI: pip builds the kubeslurm wheel (hatchling)
# and installs it with its dependencies into the venv /opt/kubeslurm.
set -eu
here=$(dirname "$0")
venv=/opt/kubeslurm

python3 -m venv "$venv"
"$venv/bin/pip" install --no-cache-dir --disable-pip-version-check --no-warn-script-location \
    "$here/src[device-plugin]"
"$venv/bin/kubeslurm" --help >/dev/null
# `kubeslurm device-plugin` (spec.bridge's DaemonSet) speaks gRPC: its stubs are generated now,
# into the cache it reads at run time (KUBESLURM_CACHE in the image), so protoc need not ship.
KUBESLURM_CACHE=$venv/stubs "$venv/bin/python" -c \
    'from kubeslurm.device_plugin.protocol import load_stubs; load_stubs()'
"$venv/bin/pip" uninstall -y -q grpcio-tools setuptools
KUBESLURM_CACHE=$venv/stubs "$venv/bin/kubeslurm" device-plugin --help >/dev/null
# pip is not needed at run time: one less thing to patch in a running operator.
"$venv/bin/pip" uninstall -y -q pip

# The operator runs as uid/gid 65532 ("nonroot", as in distroless images); the
# Deployment (deploy/operator.yaml) asks for the same ids with runAsNonRoot.
getent group 65532 >/dev/null || groupadd --gid 65532 nonroot
getent passwd 65532 >/dev/null || useradd --uid 65532 --gid 65532 --no-create-home \
    --home-dir /home/nonroot --shell /usr/sbin/nologin --comment "kubeslurm operator" nonroot
install -d -o 65532 -g 65532 -m 0750 /home/nonroot

: > /etc/machine-id
