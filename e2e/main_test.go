//go:build e2e

package e2e

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/staticip/staticip/e2e/framework"
)

// f is the cluster under test; the suite runs against any kubeconfig.
var f *framework.Framework

func TestMain(m *testing.M) {
	flag.Parse()
	var err error
	if f, err = framework.New(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "staticip-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	if err := f.BuildNodeTool(dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
