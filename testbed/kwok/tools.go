//go:build tools

// Keeps the kwok command that build.sh builds in go.mod/go.sum (go mod tidy).
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
