# Sourced by the build scripts under testbed/ that compile pinned upstream tools from
# the Go module proxy (testbed/kubernetes/build.sh, testbed/helm/build.sh, testbed/kwok/build.sh).

# Sets $go to the Go toolchain: $GO, else go on PATH, else /usr/local/go/bin/go.
find_go() {
  go=${GO:-}
  if [[ -z $go ]]; then
    if command -v go >/dev/null; then
      go=$(command -v go)
    elif [[ -x /usr/local/go/bin/go ]]; then
      go=/usr/local/go/bin/go
    else
      echo "build.sh: no go toolchain found (set GO=/path/to/go or put go on PATH)" >&2
      exit 1
    fi
  fi
}

# Creates bin dir $1 and holds its build lock (fd 9) until the script exits:
# two test sessions starting at once must not build into each other.
lock_bin_dir() {
  mkdir -p "$1"
  exec 9>"$1/.build.lock"
  flock 9
}

# Prints the version that go.mod $1 requires of module $2 (`require M vX`, or a line inside
# a require ( ... ) block).
required_version() {
  awk -v module="$2" '$1 == "require" { $0 = substr($0, index($0, $2)) }
                      $1 == module && $2 ~ /^v/ { print $2; exit }' "$1"
}
