//go:build tools

// Package tools pins helm's command so that `go build helm.sh/helm/v3/cmd/helm` in this
// module builds the version go.mod names (tools/helm.sh).
package tools

import _ "helm.sh/helm/v3/cmd/helm"
