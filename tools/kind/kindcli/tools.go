//go:build tools

// Package tools pins kind (sigs.k8s.io/kind v0.32.0, the first release with 1.36 node
// images) in a module of its own, so that kind's dependencies (cobra, pflag, x/sys, ...)
// never change the versions the main module pins. tools/kind/build-kind.sh builds it into
// _output/bin/kind.
package tools

import _ "sigs.k8s.io/kind"
