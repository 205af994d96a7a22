package poolfit

import (
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

func TestVerdict(t *testing.T) {
	zoneA := labels.SelectorFromSet(labels.Set{"zone": "a"})
	known := map[string]Pool{
		"blue":      {Name: "blue", FreeBlocks: 3},
		"full":      {Name: "full"},
		"going":     {Name: "going", Deleting: true, FreeBlocks: 5},
		"mirror":    {Name: "mirror", NodePodCIDR: true, FreeBlocks: 5},
		"zone-a":    {Name: "zone-a", NodeSelector: zoneA, FreeBlocks: 5},
		"zone-full": {Name: "zone-full", NodeSelector: zoneA},
		"v6":        {Name: "v6", V6: true, FreeBlocks: 2},
		"v6-full":   {Name: "v6-full", V6: true},
	}
	nodeB := func(free map[string]int64) Node {
		return Node{Name: "n1", Labels: map[string]string{"zone": "b"}, Free: free}
	}
	for _, tc := range []struct {
		name  string
		pools []string
		node  Node
		ok    bool
		why   string
	}{
		{name: "a free address of the pool on the node", pools: []string{"full"}, node: nodeB(map[string]int64{"full": 1}), ok: true},
		{name: "no address here, the pool has a block to give", pools: []string{"blue"}, node: nodeB(nil), ok: true},
		{name: "exhausted pool, nothing on the node", pools: []string{"full"}, node: nodeB(map[string]int64{"full": 0}),
			why: `IPPool "full" is exhausted: no free address on the node and no free block to give it`},
		{name: "second choice serves", pools: []string{"full", "blue"}, node: nodeB(nil), ok: true},
		{name: "every pool named", pools: []string{"full", "zone-a", "nope"}, node: nodeB(nil),
			why: `IPPool "full" is exhausted: no free address on the node and no free block to give it; IPPool "zone-a" has no free address on the node and its nodeSelector does not select it; IPPool "nope" does not exist`},
		{name: "nodeSelector selects the node", pools: []string{"zone-a"}, node: Node{Name: "n2", Labels: map[string]string{"zone": "a"}}, ok: true},
		{name: "selected but exhausted", pools: []string{"zone-full"}, node: Node{Name: "n2", Labels: map[string]string{"zone": "a"}},
			why: `IPPool "zone-full" is exhausted`},
		{name: "a pool being deleted gives no block", pools: []string{"going"}, node: nodeB(nil), why: `IPPool "going" is being deleted`},
		{name: "but its free address here is still given", pools: []string{"going"}, node: nodeB(map[string]int64{"going": 2}), ok: true},
		// A dual-stack pod names a pool of each family and needs an address of each (issue 39
		// item 2): a free IPv4 address does not stand for the IPv6 one.
		{name: "dual-stack: IPv4 free here, IPv6 pool has a block to give", pools: []string{"full", "v6"}, node: nodeB(map[string]int64{"full": 1}), ok: true},
		{name: "dual-stack: IPv4 free here, IPv6 pool exhausted", pools: []string{"full", "v6-full"}, node: nodeB(map[string]int64{"full": 1}),
			why: `IPPool "v6-full" is exhausted`},
		{name: "dual-stack: IPv6 free here, IPv4 pool exhausted", pools: []string{"full", "v6-full"}, node: nodeB(map[string]int64{"v6-full": 1}),
			why: `IPPool "full" is exhausted`},
		{name: "NodePodCIDR pools give no block on demand", pools: []string{"mirror"}, node: nodeB(nil), why: `IPPool "mirror" (mode NodePodCIDR)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := Verdict(tc.pools, tc.node, known)
			if ok != tc.ok {
				t.Fatalf("Verdict = %v, %q; want %v", ok, why, tc.ok)
			}
			if !tc.ok && (why == "" || !strings.Contains(why, tc.why)) {
				t.Fatalf("reason %q; want it to contain %q", why, tc.why)
			}
		})
	}
}

func TestFree(t *testing.T) {
	blocks := []Block{{Prefix: netip.MustParsePrefix("10.1.0.0/30"), Capacity: 2}, {Prefix: netip.MustParsePrefix("10.1.0.8/29"), Capacity: 6, Reserved: 1}}
	ips := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, v := range s {
			out = append(out, netip.MustParseAddr(v))
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		ips     []netip.Addr
		waiting int64
		want    int64
	}{
		{name: "empty blocks, one reserved", want: 7},
		{name: "pods of the blocks and of other ranges", ips: ips("10.1.0.1", "10.1.0.2", "10.1.0.9", "10.244.0.5"), want: 4},
		{name: "pods bound without an address yet", ips: ips("10.1.0.1"), waiting: 2, want: 4},
		{name: "full", ips: ips("10.1.0.1", "10.1.0.2", "10.1.0.9", "10.1.0.10", "10.1.0.11", "10.1.0.12", "10.1.0.13"), want: 0},
	} {
		if got := Free(blocks, tc.ips, tc.waiting); got != tc.want {
			t.Errorf("%s: Free = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// ServesEveryNode holds only where Verdict admits every node whatever its labels and free
// addresses: checked against Verdict on nodes with no free address, inside and outside the
// zone-a nodeSelector, for every pair of the pools below.
func TestServesEveryNodeAgreesWithVerdict(t *testing.T) {
	known := map[string]Pool{
		"blue":       {Name: "blue", FreeBlocks: 3},
		"full":       {Name: "full"},
		"going":      {Name: "going", Deleting: true, FreeBlocks: 5},
		"mirror":     {Name: "mirror", NodePodCIDR: true, FreeBlocks: 5},
		"zone-a":     {Name: "zone-a", NodeSelector: labels.SelectorFromSet(labels.Set{"zone": "a"}), FreeBlocks: 5},
		"everywhere": {Name: "everywhere", NodeSelector: labels.Everything(), FreeBlocks: 1},
		"v6":         {Name: "v6", V6: true, FreeBlocks: 2},
		"v6-full":    {Name: "v6-full", V6: true},
	}
	nodes := []Node{{Name: "a", Labels: map[string]string{"zone": "a"}}, {Name: "b", Labels: map[string]string{"zone": "b"}},
		{Name: "b0", Labels: map[string]string{"zone": "b"}, Free: map[string]int64{"full": 0, "v6-full": 0}}}
	names := []string{"blue", "full", "going", "mirror", "zone-a", "everywhere", "v6", "v6-full", "nope"}
	var lists [][]string
	for _, a := range names {
		lists = append(lists, []string{a})
		for _, b := range names {
			if a != b {
				lists = append(lists, []string{a, b})
			}
		}
	}
	served := 0
	for _, pools := range lists {
		if !ServesEveryNode(pools, known) {
			continue
		}
		served++
		for _, n := range nodes {
			if ok, why := Verdict(pools, n, known); !ok {
				t.Errorf("ServesEveryNode(%v) but Verdict refuses node %s: %s", pools, n.Name, why)
			}
		}
	}
	for _, tc := range []struct {
		pools []string
		want  bool
	}{
		{[]string{"blue"}, true},
		{[]string{"everywhere"}, true},
		{[]string{"full", "blue"}, true},
		{[]string{"full"}, false},
		{[]string{"going"}, false},
		{[]string{"mirror"}, false},
		{[]string{"zone-a"}, false},
		{[]string{"nope"}, false},
		{nil, false},
		{[]string{"blue", "v6"}, true},
		{[]string{"blue", "v6-full"}, false}, // dual-stack: the IPv6 family has no block to give
		{[]string{"full", "v6"}, false},
	} {
		if got := ServesEveryNode(tc.pools, known); got != tc.want {
			t.Errorf("ServesEveryNode(%v) = %v, want %v", tc.pools, got, tc.want)
		}
	}
	if served == 0 {
		t.Fatal("no pool list served every node: the agreement check checked nothing")
	}
}
