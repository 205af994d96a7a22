//go:build e2e

// Package lifecycle tests tools/kind/kind.sh as make kind-up / kind-down run it: up twice is
// a no-op, up after the Docker engine was killed recovers, down leaves nothing, and the
// kubelets in the nodes never rewrite the host's machine-global kernel settings.
//
//	go -C tools test -tags e2e -count=1 -v -timeout 60m ./kind/lifecycle/
package lifecycle

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func repoRoot(t *testing.T) string {
	dir, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func stateDir() string {
	if d := os.Getenv("KIND_STATE_DIR"); d != "" {
		return d
	}
	return "/var/lib/staticip-kind"
}

func runDir() string {
	if d := os.Getenv("KIND_RUN_DIR"); d != "" {
		return d
	}
	return "/run/staticip-kind"
}

// kindSh runs tools/kind/kind.sh and returns its combined output.
func kindSh(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot(t), "tools/kind/kind.sh"), args...)
	cmd.Dir = repoRoot(t)
	out, err := cmd.CombinedOutput()
	t.Logf("kind.sh %s:\n%s", strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("kind.sh %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

func docker(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("docker", args...)
	cmd.Env = append(os.Environ(), dockerHost(t))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func dockerHost(t *testing.T) string {
	out, err := exec.Command(filepath.Join(repoRoot(t), "tools/kind/dockerd.sh"), "env").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// nodes returns "name id startedAt" of each node container of the cluster.
func nodes(t *testing.T) string {
	ids := strings.Fields(docker(t, "ps", "-q", "--filter", "label=io.x-k8s.kind.cluster="+cluster()))
	if len(ids) == 0 {
		t.Fatal("no node containers")
	}
	return docker(t, append([]string{"inspect", "-f", "{{.Name}} {{.Id}} {{.State.StartedAt}}"}, ids...)...)
}

func cluster() string {
	if c := os.Getenv("KIND_CLUSTER"); c != "" {
		return c
	}
	return "staticip"
}

// ourRules are the iptables rules that would be the engine's or kind's on the host.
func ourRules(t *testing.T) string {
	out, err := exec.Command("iptables-save").Output()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(strings.ToLower(l), "docker") || strings.Contains(l, "stkind0") || strings.Contains(l, "10.254.") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// kubeletSysctls are the machine-global settings every kubelet writes (see
// tools/kind/node/kind/bin/staticip-kernel-defaults.sh) with the value it writes.
var kubeletSysctls = map[string]string{
	"vm/overcommit_memory": "1", "vm/panic_on_oom": "0", "kernel/panic": "10", "kernel/panic_on_oops": "1",
	"kernel/keys/root_maxkeys": "1000000", "kernel/keys/root_maxbytes": "25000000",
}

// onRunningCluster is make e2e-kind's way of running the test: its own cluster and install
// (kind.sh cluster, then the upgrade's kind.sh install: the steps of up) are the first up, the
// test starts at "up again" on it and leaves it running for the caller's uninstall check,
// down, leftover check and second down. Standalone (make e2e-kind-lifecycle) the test does
// all of it itself, from no cluster to none.
func onRunningCluster() bool { return os.Getenv("KIND_LIFECYCLE_ON_RUNNING_CLUSTER") == "1" }

func TestKindLifecycle(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (dockerd, kind nodes)")
	}
	if rules := ourRules(t); rules != "" {
		t.Fatalf("iptables rules of docker/kind before the test:\n%s", rules)
	}

	if onRunningCluster() {
		t.Log("KIND_LIFECYCLE_ON_RUNNING_CLUSTER=1: the first up was the caller's (make e2e-kind); starting at up again")
	} else {
		kindSh(t, "up")
	}
	first := nodes(t)

	// Up again: nothing is recreated or restarted.
	out := kindSh(t, "up")
	if !strings.Contains(out, "is up to date") && !strings.Contains(out, "node image kindest/") {
		t.Errorf("second up rebuilt the node image")
	}
	if !strings.Contains(out, "cluster "+cluster()+" is up") {
		t.Errorf("second up did not find the cluster up")
	}
	if again := nodes(t); again != first {
		t.Errorf("second up changed the nodes:\nbefore %s\nafter  %s", first, again)
	}

	// The kubelets have run: in every node each machine-global setting either already had
	// the kubelet's value on the host or is covered by the node's own file (the host's
	// value was never written).
	for _, line := range strings.Split(first, "\n") {
		node := strings.TrimPrefix(strings.Fields(line)[0], "/")
		mounts := docker(t, "exec", node, "cat", "/proc/self/mountinfo")
		for name, want := range kubeletSysctls {
			host, err := os.ReadFile("/proc/sys/" + name)
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(string(host)) == want {
				continue
			}
			if !strings.Contains(mounts, " /proc/sys/"+name+" ") {
				t.Errorf("node %s: /proc/sys/%s is the host's (%s), not shielded from the kubelet's %s", node, name, strings.TrimSpace(string(host)), want)
			}
		}
	}
	if rules := ourRules(t); rules != "" {
		t.Errorf("the engine or kind added iptables rules on the host:\n%s", rules)
	}

	// A killed engine: up brings the cluster back.
	pid, err := os.ReadFile(filepath.Join(runDir(), "dockerd.pid"))
	if err == nil {
		var p int
		for _, c := range strings.TrimSpace(string(pid)) {
			p = p*10 + int(c-'0')
		}
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil {
			t.Fatalf("kill -9 dockerd %d: %v", p, err)
		}
		t.Logf("killed dockerd %d", p)
		kindSh(t, "up")
		nodes(t)
	} else {
		t.Logf("the engine is not ours (no %s/dockerd.pid): not killing it", runDir())
	}

	if onRunningCluster() {
		t.Log("KIND_LIFECYCLE_ON_RUNNING_CLUSTER=1: the cluster stays up for the caller's uninstall, down, leftover check and second down")
		return
	}
	kindSh(t, "down")
	kindSh(t, "leftovers")
	if rules := ourRules(t); rules != "" {
		t.Errorf("iptables rules left after down:\n%s", rules)
	}
	// Down twice is fine too.
	kindSh(t, "down")
}
