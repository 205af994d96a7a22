package cluster

import (
	"fmt"
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
	changes, err := syncRangeRoutes(ns, "", "10.244.0.0/16", want, nodes)
	if err != nil {
		t.Fatal(err)
	}
	wantChanges := []string{"deleted 10.244.2.0/24 via 172.31.0.13", "10.244.1.0/24 via 172.31.0.13", "10.244.5.0/24 via 172.31.0.12"}
	if strings.Join(changes, "; ") != strings.Join(wantChanges, "; ") {
		t.Errorf("changes reported: %q, want %q", changes, wantChanges)
	}
	// In sync: a second pass changes nothing (the daemon runs it on every IPRange event).
	if again, err := syncRangeRoutes(ns, "", "10.244.0.0/16", want, nodes); err != nil || len(again) > 0 {
		t.Errorf("second pass: %q, %v; want no change", again, err)
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

// TestWantRangeRoutes: the control plane routes what the agents route: an assigned range via
// its node; a draining range (node "") and a range of a node the layout does not know
// (an IPRange written for a node that never joined) get none.
func TestWantRangeRoutes(t *testing.T) {
	nodes := map[string]string{"node-1": "172.30.0.11", "node-4": "172.30.0.14"}
	got := wantRangeRoutes([]rangeAssignment{
		{CIDR: "10.244.0.0/24", Node: "node-1"},
		{CIDR: "10.244.2.0/24", Node: "node-4"}, // moved by a failover
		{CIDR: "10.244.5.0/24", Node: ""},       // draining
		{CIDR: "10.244.9.0/24", Node: "node-9"}, // no such node here
		{CIDR: "", Node: "node-1"},
	}, nodes)
	want := map[string]string{"10.244.0.0/24": "172.30.0.11", "10.244.2.0/24": "172.30.0.14"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("wantRangeRoutes = %v, want %v", got, want)
	}
}
