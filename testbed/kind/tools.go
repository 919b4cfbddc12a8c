//go:build tools

// Pins the kind that testbed/kind/build.sh builds (go.mod holds the version).
package tools

import _ "sigs.k8s.io/kind"
