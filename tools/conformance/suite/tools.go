//go:build tools

// Package tools pins the upstream e2e suite and agnhost at the Kubernetes version the main
// module pins; see README.md.
package tools

import (
	_ "k8s.io/kubernetes/test/e2e"
	_ "k8s.io/kubernetes/test/images/agnhost"
)
