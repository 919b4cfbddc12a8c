#!/usr/bin/env bash
# Builds a pinned upstream kwok (sigs.k8s.io/kwok) from the Go module proxy.
#
#   testbed/kwok/build.sh
#
# kwok fakes nodes and pod lifecycles against a real API server (benchmarks/scale_bench.py).
# The version is the sigs.k8s.io/kwok requirement in go.mod beside this script.
# The binary goes to ${KUBESLURM_CACHE:-$HOME/.cache/kubeslurm}/kwok/<version>/bin/kwok
# and the last line on stdout is that directory (all logging goes to stderr). A binary
# that is already there is not rebuilt: delete the directory to force a rebuild.
#
# To move to another kwok release: `go get sigs.k8s.io/kwok@vX.Y.Z && go mod tidy`
# in this directory (the version must be served by the module proxy).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../go-toolchain.sh
source "$here/../go-toolchain.sh"

version=$(required_version "$here/go.mod" sigs.k8s.io/kwok)
if [[ ! $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "build.sh: cannot find the sigs.k8s.io/kwok requirement in $here/go.mod" >&2
  exit 1
fi
bin=${KUBESLURM_CACHE:-$HOME/.cache/kubeslurm}/kwok/$version/bin

built() { [[ -x $bin/kwok ]] && echo "$bin"; }
built && exit 0
find_go
lock_bin_dir "$bin"
built && exit 0 # built by someone who held the lock before us

# kwok's version is a constant in its source (pkg/consts), so no -X flags are needed.
echo "build.sh: building kwok $version into $bin; a cold build takes minutes" >&2
start=$SECONDS
(
  cd "$here"
  GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false \
    "$go" build -trimpath -ldflags "-s -w" -o "$bin/.kwok.tmp" sigs.k8s.io/kwok/cmd/kwok
)
mv -f "$bin/.kwok.tmp" "$bin/kwok"
echo "build.sh: built kwok in $((SECONDS - start))s" >&2

echo "$bin"
