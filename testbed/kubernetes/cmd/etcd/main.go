// Command etcd is upstream etcd's server, built at the version k8s.io/kubernetes
// pins for its own integration tests (go.etcd.io/etcd/server/v3 in go.mod), so
// the test tier runs the etcd that this Kubernetes release was tested with and
// needs no etcd package from the OS (a fresh CI machine has none; Debian
// bookworm's would be 3.4.23).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
