#!/bin/sh
# Steps that turn "Debian trixie + images/fake-gpu/packages.txt" into the fake GPU device
# plugin image. Run as root inside the image root by images/fake-gpu/Dockerfile and by
# images/build.py, with the plugin's source in $(dirname "$0")/src. Needs PyPI.
set -eu
here=$(dirname "$0")
venv=/opt/fake-gpu

python3 -m venv "$venv"
"$venv/bin/pip" install --no-cache-dir --disable-pip-version-check --no-warn-script-location \
    'grpcio>=1.60' 'grpcio-tools>=1.60'

# The plugin keeps its import path (python -m testbed.local_cluster.fake_gpu), without the rest
# of the test bed: the packages above it are empty here.
lib=$venv/lib/kubeslurm
install -d "$lib/testbed/local_cluster"
: > "$lib/testbed/__init__.py"
: > "$lib/testbed/local_cluster/__init__.py"
cp -r "$here/src/testbed/local_cluster/fake_gpu" "$lib/testbed/local_cluster/"
# ... and the device-plugin protocol it imports from kubeslurm (only those files are in src).
cp -r "$here/src/operator/kubeslurm" "$lib/kubeslurm"

# The gRPC stubs are generated now, into the cache the plugin looks in at run time
# (KUBESLURM_CACHE), so that grpcio-tools and its protoc need not ship.
KUBESLURM_CACHE=$venv/stubs PYTHONPATH=$lib "$venv/bin/python" -c \
    'from testbed.local_cluster.fake_gpu.plugin import load_stubs; load_stubs()'
"$venv/bin/pip" uninstall -y -q grpcio-tools setuptools pip
PYTHONPATH=$lib KUBESLURM_CACHE=$venv/stubs "$venv/bin/python" -m testbed.local_cluster.fake_gpu --help >/dev/null
"$venv/bin/python" -m compileall -q "$lib"

: > /etc/machine-id
