package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
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
// the node that holds it; a range that moved away via the node that still drains it (unassigned,
// or assigned to a node that waits); a range nobody holds, and a range of a node the layout does
// not know (an IPRange written for a node that never joined), get none.
func TestWantRangeRoutes(t *testing.T) {
	nodes := map[string]string{"node-1": "172.30.0.11", "node-2": "172.30.0.12", "node-4": "172.30.0.14"}
	r := func(name, cidr, node string, age int) *jkev1.IPRange {
		return &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(int64(age), 0))},
			Spec: jkev1.IPRangeSpec{CIDR: cidr, Node: node}}
	}
	got := wantRangeRoutes([]*jkev1.IPRange{
		r("a", "10.244.0.0/24", "node-1", 1),
		r("b", "10.244.2.0/24", "node-4", 2), // moved by a failover
		r("c", "10.244.5.0/24", "", 3),       // unassigned, node-2 drains it
		r("d", "10.244.6.0/24", "node-1", 4), // assigned to node-1, which waits for node-2
		r("e", "10.244.7.0/24", "", 5),       // unassigned, drained
		r("f", "10.244.9.0/24", "node-9", 6), // no such node here
	}, map[string]string{"node-2": `{"c":"node-2/0","d":"node-2/0"}`}, nodes)
	want := map[string]string{"10.244.0.0/24": "172.30.0.11", "10.244.2.0/24": "172.30.0.14",
		"10.244.5.0/24": "172.30.0.12", "10.244.6.0/24": "172.30.0.12"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("wantRangeRoutes = %v, want %v", got, want)
	}
}
