#!/usr/bin/env bash
# Builds a pinned upstream helm (v3) from the Go module proxy.
#
#   testbed/helm/build.sh
#
# The version is the helm.sh/helm/v3 requirement in go.mod beside this script.
# The binary goes to ${KUBESLURM_CACHE:-$HOME/.cache/kubeslurm}/helm/<version>/bin/helm
# and the last line on stdout is that directory (all logging goes to stderr), so
#   HELM_BIN=$(testbed/helm/build.sh | tail -n1)
# works. A binary that is already there is not rebuilt: delete the directory to
# force a rebuild. GOMODCACHE and GOCACHE stay where go puts them by default so
# later builds reuse downloaded modules and compiled packages (helm shares most
# of its k8s.io dependencies with testbed/kubernetes).
#
# To move to another helm release: `go get helm.sh/helm/v3@vX.Y.Z && go mod tidy`
# in this directory (the version must be served by the module proxy).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Both `require helm.sh/helm/v3 vX` and a line inside a require ( ... ) block.
version=$(awk '$1 == "require" { $0 = substr($0, index($0, $2)) }
               $1 == "helm.sh/helm/v3" && $2 ~ /^v/ { print $2; exit }' "$here/go.mod")
if [[ ! $version =~ ^v3\.[0-9]+\.[0-9]+$ ]]; then
  echo "build.sh: cannot find the helm.sh/helm/v3 requirement in $here/go.mod" >&2
  exit 1
fi

cache=${KUBESLURM_CACHE:-$HOME/.cache/kubeslurm}
bin=$cache/helm/$version/bin

if [[ -x $bin/helm ]]; then
  echo "$bin"
  exit 0
fi

# shellcheck source=../go-toolchain.sh
source "$here/../go-toolchain.sh"
find_go
lock_bin_dir "$bin"
if [[ -x $bin/helm ]]; then # built by someone holding the lock before us
  echo "$bin"
  exit 0
fi

# As upstream's Makefile does for a tagged release: the version (so `helm
# version` reports it and the user agent carries it), no "unreleased" metadata,
# and the Kubernetes version that `helm lint`/`helm template` assume
# (.Capabilities.KubeVersion without a cluster) derived from the client-go
# version helm is built with (v0.X.Y -> 1.X). gitCommit is unknown here (the
# module proxy serves no commit hash) and stays empty.
k8s_minor=$(GOTOOLCHAIN=local "$go" -C "$here" list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2)
if [[ ! $k8s_minor =~ ^[0-9]+$ ]]; then
  echo "build.sh: cannot read the k8s.io/client-go version from $here/go.mod" >&2
  exit 1
fi
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
ldflags+=" -X helm.sh/helm/v3/internal/version.metadata= -X helm.sh/helm/v3/internal/version.gitCommit="
ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState="
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
done

echo "build.sh: building helm $version into $bin; a cold build takes minutes" >&2
start=$SECONDS
(
  cd "$here"
  GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false \
    "$go" build -trimpath -ldflags "$ldflags" -o "$bin/.helm.tmp" helm.sh/helm/v3/cmd/helm
)
mv -f "$bin/.helm.tmp" "$bin/helm"
echo "build.sh: built helm in $((SECONDS - start))s" >&2

echo "$bin"
