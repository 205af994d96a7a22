// Command runc-capfix is an OCI runtime wrapper for hosts whose capability bounding set
// lacks capabilities (here: root has no CAP_SYS_RESOURCE). A privileged container asks for
// every capability; runc then fails with "unable to apply caps: operation not permitted".
// runc-capfix removes the capabilities that /proc/self/status's CapBnd does not hold from
// the bundle's config.json (create/run: --bundle) and from an exec's process file
// (--process), then execs the real runc with the unchanged arguments. With a full bounding
// set it execs runc at once and changes nothing.
//
// dockerd registers it as its default runtime (tools/kind/dockerd.sh) and the kind node's
// containerd as its runc binary (tools/kind/nodeimage), only where the check finds a gap.
//
//	runc-capfix [runc arguments...]      # real runc: $RUNC_CAPFIX_RUNC or the first runc in
//	                                     # /usr/local/sbin, /usr/sbin, /usr/bin, /sbin, /bin
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/staticip/staticip/tools/kind/runc-capfix/capfix"
)

func main() {
	if err := run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "runc-capfix:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	runc, err := realRunc()
	if err != nil {
		return err
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err
	}
	missing, err := capfix.MissingFromBoundingSet(string(status))
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		for _, path := range capfix.SpecFiles(args[1:]) {
			if err := capfix.RewriteFile(path, missing); err != nil {
				return err
			}
		}
	}
	return syscall.Exec(runc, append([]string{runc}, args[1:]...), os.Environ())
}

// realRunc is the runc this wrapper stands in for; never itself.
func realRunc() (string, error) {
	if p := os.Getenv("RUNC_CAPFIX_RUNC"); p != "" {
		return p, nil
	}
	self, _ := os.Executable()
	for _, dir := range []string{"/usr/local/sbin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		p := filepath.Join(dir, "runc")
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			if resolved, _ := filepath.EvalSymlinks(p); resolved != "" && resolved == self {
				continue
			}
			return p, nil
		}
	}
	return "", fmt.Errorf("no runc found (set RUNC_CAPFIX_RUNC)")
}
