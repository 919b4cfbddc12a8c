#!/usr/bin/env bash
# Builds a pinned kind (sigs.k8s.io/kind) from the Go module proxy, for the e2e tier's kind
# provider (testbed/cluster_providers.py), so that pytest-kind needs no download of its own.
#
#   testbed/kind/build.sh
#
# The version is the sigs.k8s.io/kind requirement in go.mod beside this script. The binary
# goes to ${KUBESLURM_CACHE:-$HOME/.cache/kubeslurm}/kind/<version>/bin/kind and the last
# line on stdout is that directory (logging goes to stderr). A binary already there is not
# rebuilt. kind itself still needs Docker (or podman) and its node image at run time.
#
# To move to another release: `go get sigs.k8s.io/kind@vX.Y.Z && go mod tidy` here.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=$(awk '$1 == "require" { $0 = substr($0, index($0, $2)) }
               $1 == "sigs.k8s.io/kind" && $2 ~ /^v/ { print $2; exit }' "$here/go.mod")
if [[ ! $version =~ ^v0\.[0-9]+\.[0-9]+$ ]]; then
  echo "build.sh: cannot find the sigs.k8s.io/kind requirement in $here/go.mod" >&2
  exit 1
fi
bin=${KUBESLURM_CACHE:-$HOME/.cache/kubeslurm}/kind/$version/bin

# shellcheck source=../go-toolchain.sh
source "$here/../go-toolchain.sh"
if [[ ! -x $bin/kind ]]; then
  find_go
  lock_bin_dir "$bin"
fi
if [[ ! -x $bin/kind ]]; then # (not built by someone holding the lock before us)
  echo "build.sh: building kind $version into $bin" >&2
  (cd "$here" && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false \
    "$go" build -trimpath -ldflags "-s -w" -o "$bin/.kind.tmp" sigs.k8s.io/kind)
  mv -f "$bin/.kind.tmp" "$bin/kind"
fi
echo "$bin"
