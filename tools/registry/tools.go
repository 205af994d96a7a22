//go:build tools

// Package registry pins the OCI registry the kind e2e pulls staticip's released images and
// chart from (tools/registry/registry.sh builds it into _output/bin/registry).
package registry

import _ "github.com/distribution/distribution/v3/cmd/registry"
