//go:build tools

// Package tools pins CoreDNS; see tools/README.md.
package tools

import _ "github.com/coredns/coredns"
