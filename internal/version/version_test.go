package version

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

type libFlag struct{ v string }

func (f *libFlag) String() string     { return f.v }
func (f *libFlag) Set(s string) error { f.v = s; return nil }
func (f *libFlag) Type() string       { return "version" }

// WrapFlag: --version prints ours and the library's line and exits 0; --version=raw stays the
// library's.
func TestWrapFlag(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	lib := &libFlag{v: "false"}
	fs.Var(lib, "version", "library version flag")
	fs.Lookup("version").NoOptDefVal = "true"
	var out bytes.Buffer
	exited := -1
	if !WrapFlag(fs, "demo", &out, func() string { return "kube-scheduler v1.36.3" }, func(c int) { exited = c }) {
		t.Fatal("no --version found")
	}
	if err := fs.Parse([]string{"--version"}); err != nil {
		t.Fatal(err)
	}
	if exited != 0 || !strings.Contains(out.String(), "demo "+Version) || !strings.Contains(out.String(), "kube-scheduler v1.36.3") {
		t.Errorf("--version: exit %d, printed %q", exited, out.String())
	}
	if err := fs.Parse([]string{"--version=raw"}); err != nil || lib.v != "raw" {
		t.Errorf("--version=raw: %v, library flag %q", err, lib.v)
	}
}
