package cluster

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestSyncRangeRoutesTouchesOnlyThePodSpace: in a network namespace of its own, the IPRange
// routes follow want (a moved range is re-pointed, a gone one deleted, a new one added) while a
// route via a node to anything outside the pod address space — the host's Service CIDR route —
// stays. Before, `up` deleted the Service route and the host's Service traffic left by the
// default route (TestPluginCredentialOnTheNode: x509 from a stranger at 10.96.0.1).
func TestSyncRangeRoutesTouchesOnlyThePodSpace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	ns := "lc-routes-test"
	_ = exec.Command("ip", "netns", "del", ns).Run()
	for _, c := range [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "-n", ns, "link", "add", "d0", "type", "veth", "peer", "name", "d1"},
		{"ip", "-n", ns, "link", "set", "d1", "up"},
		{"ip", "-n", ns, "addr", "add", "172.31.0.1/24", "dev", "d0"},
		{"ip", "-n", ns, "link", "set", "d0", "up"},
		{"ip", "-n", ns, "route", "add", "10.96.0.0/16", "via", "172.31.0.11"},  // Service CIDR via node-1
		{"ip", "-n", ns, "route", "add", "10.244.0.0/24", "via", "172.31.0.11"}, // stays
		{"ip", "-n", ns, "route", "add", "10.244.1.0/24", "via", "172.31.0.12"}, // moves to node-3
		{"ip", "-n", ns, "route", "add", "10.244.2.0/24", "via", "172.31.0.13"}, // gone
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", c, err, out)
		}
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	nodes := map[string]string{"node-1": "172.31.0.11", "node-2": "172.31.0.12", "node-3": "172.31.0.13"}
	want := map[string]string{"10.244.0.0/24": "172.31.0.11", "10.244.1.0/24": "172.31.0.13", "10.244.5.0/24": "172.31.0.12"}
	if err := syncRangeRoutes(ns, "", "10.244.0.0/16", want, nodes); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ip", "-n", ns, "-4", "route", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	for _, line := range []string{"10.96.0.0/16 via 172.31.0.11", "10.244.0.0/24 via 172.31.0.11", "10.244.1.0/24 via 172.31.0.13", "10.244.5.0/24 via 172.31.0.12"} {
		if !strings.Contains(got, line) {
			t.Errorf("route %q missing:\n%s", line, got)
		}
	}
	if strings.Contains(got, "10.244.2.0/24") {
		t.Errorf("the gone range's route stayed:\n%s", got)
	}
}
