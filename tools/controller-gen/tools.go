//go:build tools

// Package tools pins controller-gen; see tools/README.md.
package tools

import _ "sigs.k8s.io/controller-tools/cmd/controller-gen"
