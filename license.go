// Package staticip is the repository root as a Go package: it carries the files every
// artifact the project builds must ship unchanged, so that tools do not have to find the
// checkout to copy them.
package staticip

import _ "embed"

// License is the text of LICENSE (Apache License 2.0) and Notice that of NOTICE (the
// copyright line). Apache-2.0 §4 asks both to travel with every redistribution:
// tools/images/imagebuilder writes them to /LICENSE and /NOTICE in every image it builds.
var (
	//go:embed LICENSE
	License []byte
	//go:embed NOTICE
	Notice []byte
)
