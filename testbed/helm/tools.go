//go:build tools

// Keeps the helm command that build.sh builds in go.mod/go.sum (go mod tidy).
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
