//go:build e2e

package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/staticip/staticip/internal/testenv"
)

// TestLifecycle brings a real one-node cluster up and checks the promises of up and down:
// a second up is a no-op, a conflicting up is refused and harms nothing, up after kill -9
// of every daemon cleans the remains and starts afresh, and down leaves nothing behind.
// It needs the machine free of another cluster with the default prefix (make e2e runs it
// after the suite's cluster is down).
func TestLifecycle(t *testing.T) {
	o := testOptions(t)
	if left := Leftovers(o); len(left) > 0 {
		t.Fatalf("a cluster with prefix %q is already on this machine (run `localcluster down`): %v", o.Prefix, left)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		if err := Down(o); err != nil {
			t.Errorf("down in cleanup: %v", err)
		}
	})
	l := newLayout(o)
	sysctlsBefore := readSysctls(t)
	globalBefore := globalPaths()

	if err := Up(ctx, o); err != nil {
		t.Fatalf("up: %v", err)
	}
	first := l.pids(t)

	if err := Up(ctx, o); err != nil {
		t.Fatalf("second up: %v", err)
	}
	if again := l.pids(t); !equal(first, again) {
		t.Fatalf("second up restarted daemons: %v -> %v", first, again)
	}

	bigger := o
	bigger.Nodes = 2
	if err := Up(ctx, bigger); err == nil || !strings.Contains(err.Error(), "already up") {
		t.Fatalf("up with another node count: got %v, want an 'already up' error", err)
	}
	if !l.healthy(ctx) {
		t.Fatal("refused up harmed the running cluster")
	}

	// A crash: every daemon dies at once, pid files and mounts stay behind.
	for name, pid := range first {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %s: %v", name, err)
		}
	}
	if err := Up(ctx, o); err != nil {
		t.Fatalf("up after kill -9: %v", err)
	}
	for name, pid := range l.pids(t) {
		if pid == first[name] {
			t.Errorf("%s kept pid %d across the crash", name, pid)
		}
	}
	if !l.healthy(ctx) {
		t.Fatal("cluster not healthy after up following kill -9")
	}

	if err := Down(o); err != nil {
		t.Fatalf("down: %v", err)
	}
	if left := Leftovers(o); len(left) > 0 {
		t.Fatalf("down left %d things behind:\n%s", len(left), strings.Join(left, "\n"))
	}
	if err := Down(o); err != nil {
		t.Fatalf("down of nothing: %v", err)
	}
	// The kubelets rewrote machine-global kernel settings; down must have put them back.
	if after := readSysctls(t); !equalStrings(sysctlsBefore, after) {
		t.Fatalf("kernel settings changed by the cluster: before %v, after down %v", sysctlsBefore, after)
	}
	// Paths kubelets and runc use whatever their configuration: as before the cluster.
	if after := globalPaths(); !equalStrings(globalBefore, after) {
		t.Fatalf("machine-global paths changed by the cluster: before %v, after down %v", globalBefore, after)
	}
}

// globalPaths records whether each machine-global path the cluster may touch exists.
func globalPaths() map[string]string {
	paths := append([]string{"/sys/fs/cgroup/memory/k8s.io", "/sys/fs/cgroup/pids/k8s.io"}, kubeletGlobalDirs...)
	paths = append(paths, sharedRuntimeDirs...)
	out := map[string]string{}
	for _, p := range paths {
		_, err := os.Lstat(p)
		out[p] = strconv.FormatBool(err == nil)
	}
	return out
}

func readSysctls(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, name := range kubeletSysctls {
		b, err := os.ReadFile(filepath.Join("/proc/sys", name))
		if err != nil {
			t.Fatal(err)
		}
		out[name] = strings.TrimSpace(string(b))
	}
	return out
}

func equalStrings(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func testOptions(t *testing.T) Options {
	t.Helper()
	dir, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.Nodes = 1
	o.RepoRoot = dir
	o.BinDir = filepath.Join(dir, "_output", "bin")
	o.ImageDir = filepath.Join(dir, "_output", "images")
	o.CRDDir = filepath.Join(dir, "manifests", "crds")
	o.Logf = t.Logf
	return o
}

func (l *layout) pids(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, name := range l.daemonNames() {
		pid, ok := l.recordedPid(name)
		if !ok {
			t.Fatalf("no pid file of %s", name)
		}
		out[name] = pid
	}
	return out
}

func equal(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
