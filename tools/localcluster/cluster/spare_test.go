package cluster

import (
	"strings"
	"testing"
)

// Spares come after the workers, in the zone of the worker they back (node failover needs a
// spare of the failed node's zone), labelled and registered with the NoSchedule taint; workers
// get neither. The shape includes them, so `up` with another count refuses.
func TestSpareNodesLayout(t *testing.T) {
	o := DefaultOptions()
	o.Nodes, o.SpareNodes = 3, 2
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	l := newLayout(o)
	if len(l.nodes) != 5 {
		t.Fatalf("%d nodes, want 3 workers + 2 spares", len(l.nodes))
	}
	want := []struct {
		spare bool
		zone  string
	}{{false, "zone-0"}, {false, "zone-1"}, {false, "zone-0"}, {true, "zone-0"}, {true, "zone-1"}}
	for i, n := range l.nodes {
		if n.spare != want[i].spare || n.zone != want[i].zone {
			t.Errorf("%s: spare=%v zone=%s, want spare=%v zone=%s", n.name, n.spare, n.zone, want[i].spare, want[i].zone)
		}
		argv := strings.Join(l.kubelet(n).argv, " ")
		hasTaint := strings.Contains(argv, "--register-with-taints="+SpareTaint+"=true:NoSchedule")
		hasLabel := strings.Contains(argv, SpareLabel+"=true")
		if hasTaint != n.spare || hasLabel != n.spare {
			t.Errorf("%s: taint %v, label %v, want both %v: %s", n.name, hasTaint, hasLabel, n.spare, argv)
		}
	}
	o2 := o
	o2.SpareNodes = 1
	if newLayout(o2).shape() == l.shape() {
		t.Error("the shape ignores the number of spares")
	}
	o.SpareNodes = 198
	if err := o.validate(); err == nil {
		t.Error("201 nodes accepted")
	}
	o.SpareNodes, o.FailoverWindow = 0, "5s"
	lw := newLayout(o)
	if got := lw.failoverArgs(); len(got) != 1 || got[0] != "--node-failover-window=5s" {
		t.Errorf("failover args %v", got)
	}
}
