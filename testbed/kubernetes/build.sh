#!/usr/bin/env bash
# Builds pinned upstream Kubernetes binaries from the Go module proxy.
#
#   testbed/kubernetes/build.sh [NAME...]
#
# NAME is etcd (./cmd/etcd: upstream etcd at the version Kubernetes pins) or any
# command under k8s.io/kubernetes/cmd (kube-apiserver, kube-controller-manager,
# kubectl, kube-scheduler, kubelet, kube-proxy, ...); the default is what the
# real-API-server tier needs: etcd kube-apiserver kube-controller-manager kubectl.
#
# The version is the k8s.io/kubernetes requirement in go.mod beside this script.
# Binaries go to ${KUBESLURM_CACHE:-$HOME/.cache/kubeslurm}/kubernetes/<version>/bin/
# and the last line on stdout is that directory (all logging goes to stderr), so
#   BIN=$(testbed/kubernetes/build.sh | tail -n1)
# works. A binary that is already there is not rebuilt: delete the directory to
# force a rebuild. GOMODCACHE and GOCACHE stay where go puts them by default so
# later builds (and other versions) reuse downloaded modules and compiled
# packages.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Both `require k8s.io/kubernetes vX` and a line inside a require ( ... ) block.
version=$(awk '$1 == "require" { $0 = substr($0, index($0, $2)) }
               $1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' "$here/go.mod")
if [[ ! $version =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+$ ]]; then
  echo "build.sh: cannot find the k8s.io/kubernetes requirement in $here/go.mod" >&2
  exit 1
fi
major=${BASH_REMATCH[1]}
minor=${BASH_REMATCH[2]}

cache=${KUBESLURM_CACHE:-$HOME/.cache/kubeslurm}
bin=$cache/kubernetes/$version/bin

names=("$@")
if [[ ${#names[@]} -eq 0 ]]; then
  names=(etcd kube-apiserver kube-controller-manager kubectl)
fi

missing=()
for name in "${names[@]}"; do
  if [[ ! $name =~ ^[a-z0-9-]+$ ]]; then
    echo "build.sh: '$name' is not a command name (expected e.g. kube-apiserver)" >&2
    exit 2
  fi
  [[ -x $bin/$name ]] || missing+=("$name")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "$bin"
  exit 0
fi

# shellcheck source=../go-toolchain.sh
source "$here/../go-toolchain.sh"
find_go
lock_bin_dir "$bin"

# Upstream's hack/lib/version.sh sets these; kube-apiserver serves gitVersion in
# /version and discovery, so `kubectl version` reports the pinned release.
# gitCommit is unknown here (the module proxy serves no commit hash), so it is
# set empty rather than left at its "$Format:%H$" placeholder. buildDate is the
# release's commit time from the proxy, which keeps builds reproducible.
build_date=$(GOTOOLCHAIN=local "$go" -C "$here" list -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes 2>/dev/null || true)
: "${build_date:=1970-01-01T00:00:00Z}"
ldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  ldflags+=" -X '$pkg.gitVersion=$version' -X '$pkg.gitMajor=$major' -X '$pkg.gitMinor=$minor'"
  ldflags+=" -X '$pkg.buildDate=$build_date' -X '$pkg.gitCommit=' -X '$pkg.gitTreeState='"
done

for name in "${missing[@]}"; do
  [[ -x $bin/$name ]] && continue # built by someone holding the lock before us
  pkg=k8s.io/kubernetes/cmd/$name
  [[ $name == etcd ]] && pkg=./cmd/etcd
  # Upstream links everything statically except the kubelet (cgo for its
  # cadvisor/selinux bits) and builds with the same tags.
  cgo=0
  [[ $name == kubelet ]] && cgo=${CGO_ENABLED:-1}
  echo "build.sh: building $name ($pkg, kubernetes $version) into $bin; a cold build takes minutes" >&2
  start=$SECONDS
  (
    cd "$here"
    GOTOOLCHAIN=local CGO_ENABLED=$cgo GOFLAGS=-buildvcs=false \
      "$go" build -trimpath -tags selinux,notest -ldflags "$ldflags" \
      -o "$bin/.$name.tmp" "$pkg"
  )
  mv -f "$bin/.$name.tmp" "$bin/$name"
  echo "build.sh: built $name in $((SECONDS - start))s" >&2
done

echo "$bin"
