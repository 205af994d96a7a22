// Package version is the one place the release of staticip is written: every binary reports
// it (--version; the CNI plugin in its about string; staticip_build_info on /metrics).
//
// The default is the release the shipped manifests' image tags name (manifests:
// TestImageTagsAreTheVersion); a build may set another with
//
//	go build -ldflags "-X github.com/staticip/staticip/internal/version.Version=v0.1.1"
//
// (the Makefile does when VERSION is given: make build VERSION=v0.1.1).
package version

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/pflag"
)

// Version is the release. A var, not a const, so that -ldflags -X can set it.
var Version = "v0.1.0"

// Revision is the VCS commit the binary was built from ("" when unknown: go build -trimpath
// of a tree without VCS information, or go test).
func Revision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" && dirty {
		rev += "-dirty"
	}
	return rev
}

// String is what --version prints: "<component> v0.1.0 (commit abc..., go1.26.0)".
func String(component string) string {
	if rev := Revision(); rev != "" {
		return fmt.Sprintf("%s %s (commit %s, %s)", component, Version, rev, runtime.Version())
	}
	return fmt.Sprintf("%s %s (%s)", component, Version, runtime.Version())
}

// AddFlag registers --version on fs; Options.Complete of each binary calls Print with it.
func AddFlag(fs *pflag.FlagSet, requested *bool) {
	fs.BoolVar(requested, "version", *requested, "Print the version and exit.")
}

// Print writes String(component) and a newline to w.
func Print(w io.Writer, component string) {
	fmt.Fprintln(w, String(component))
}

// WrapFlag takes over fs's --version where a library registered it (kube-scheduler's verflag,
// which prints the Kubernetes version): --version and --version=true print String(component)
// and then also(), and exit 0; other values (--version=raw, ...) stay the library's.
func WrapFlag(fs *pflag.FlagSet, component string, out io.Writer, also func() string, exit func(int)) bool {
	f := fs.Lookup("version")
	if f == nil {
		return false
	}
	f.Value = &wrapped{Value: f.Value, print: func() {
		Print(out, component)
		if also != nil {
			fmt.Fprintln(out, also())
		}
		exit(0)
	}}
	return true
}

type wrapped struct {
	pflag.Value
	print func()
}

func (w *wrapped) Set(s string) error {
	if s == "true" {
		w.print()
		return nil
	}
	return w.Value.Set(s)
}

// IsBoolFlag lets --version stand alone, as the wrapped flag does.
func (w *wrapped) IsBoolFlag() bool { return true }
