package staticipnode

import (
	"fmt"
	"math"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

func sip(ns, name, node, cpu string) *jkev1.StaticIP {
	return &jkev1.StaticIP{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: jkev1.StaticIPSpec{Node: node, IP: "10.0.0.5", Resources: v1.ResourceList{
			v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse("1Gi"),
			"example.com/gpu": resource.MustParse("1"),
		}},
	}
}

func pod(ns, name, node string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.PodSpec{NodeName: node}}
}

// heldOn lists the pods whose records the node holds, sorted.
func heldOn(c *Cache, node string) string {
	var out []string
	for _, h := range c.Node(node).Held {
		out = append(out, h.PodNamespace+"/"+h.PodName)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// A record is held on its node while it is active: not once it moved, was released,
// is being deleted or is gone. Whether its pod is present is the Filter's to decide.
func TestHeldFollowsTheRecord(t *testing.T) {
	c := NewEmpty()
	s := sip("ns", "web-0", "n1", "2")
	c.OnStaticIPUpdate(nil, s)
	want := func(step, node, held string) {
		t.Helper()
		if got := heldOn(c, node); got != held {
			t.Fatalf("%s: node %s holds [%s], want [%s]", step, node, got, held)
		}
	}
	want("created", "n1", "ns/web-0")
	if got := c.Node("n1").Held[0]; got.StaticIP != "ns/web-0" || got.Request.MilliCPU != 2000 || got.Request.Memory != 1<<30 ||
		got.Request.Scalar["example.com/gpu"] != 1 {
		t.Fatalf("held record %+v", got)
	}
	moved := sip("ns", "web-0", "n3", "2")
	c.OnStaticIPUpdate(nil, moved)
	want("moved away", "n1", "")
	want("moved here", "n3", "ns/web-0")
	released := moved.DeepCopy()
	released.Status.Phase = jkev1.StaticIPReleased
	c.OnStaticIPUpdate(moved, released)
	want("released", "n3", "")
	deleting := moved.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{}
	c.OnStaticIPUpdate(released, deleting)
	want("being deleted", "n3", "")
	c.OnStaticIPUpdate(deleting, moved)
	c.OnStaticIPDelete(moved)
	want("deleted", "n3", "")
	if len(c.nodes) != 0 || len(c.byPod) != 0 || len(c.staticIPs) != 0 {
		t.Fatalf("state left behind: nodes=%v byPod=%v staticIPs=%v", c.nodes, c.byPod, c.staticIPs)
	}
}

func TestSpecPodNamesThePod(t *testing.T) {
	c := NewEmpty()
	s := sip("ns", "record", "n1", "1")
	s.Spec.Pod = "web-7"
	c.OnStaticIPUpdate(nil, s)
	if got := heldOn(c, "n1"); got != "ns/web-7" {
		t.Fatalf("n1 holds [%s], want the record's spec.pod ns/web-7", got)
	}
	info, ok := c.StaticIPForPod("ns", "web-7")
	if !ok || info.Name != "record" || info.Node != "n1" || !info.Active {
		t.Fatalf("StaticIPForPod = %+v, %v", info, ok)
	}
	if _, ok := c.StaticIPForPod("ns", "record"); ok {
		t.Fatal("the record's own name is not its pod's")
	}
}

// TestIPRangeCapacity: the scheduler counts a range's addresses with iprangeaddr's rule, the
// one the node-local IPAM hands them out by (the full table is apis/iprangeaddr's). The cases
// marked "was" are the ones where the scheduler's own copy of the rule disagreed with the IPAM.
func TestIPRangeCapacity(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec jkev1.IPRangeSpec
		want int64
		err  bool
	}{
		{name: "/24 minus network and broadcast", spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/24"}, want: 254},
		{name: "gateway and excluded, duplicates once", spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/24", Gateway: "10.1.2.1", ExcludeIPs: []string{"10.1.2.2", "10.1.2.2", "10.1.2.1"}}, want: 252},
		{name: "rangeStart at the network address is taken as written (was: clamped, 2)", spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/30", RangeStart: "10.1.2.0"}, want: 3},
		{name: "IPv6 rangeStart at the anycast address is taken as written (was: clamped, 255)", spec: jkev1.IPRangeSpec{CIDR: "fd00::/120", RangeStart: "fd00::"}, want: 256},
		{name: "IPv6 /127 gives both (the IPAM gave 1)", spec: jkev1.IPRangeSpec{CIDR: "fd00::/127"}, want: 2},
		{name: "IPv6 /64 saturates", spec: jkev1.IPRangeSpec{CIDR: "fd00::/64"}, want: math.MaxInt64},
		{name: "start after end is refused, as the agent refuses it (was: 0 addresses, no error)", spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/24", RangeStart: "10.1.2.20", RangeEnd: "10.1.2.10"}, err: true},
		{name: "gateway outside the cidr is refused (was: ignored)", spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/24", Gateway: "10.1.3.1"}, err: true},
		{name: "bad cidr", spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/33"}, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := parseIPRange(&jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Spec: tc.spec})
			if (r.err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", r.err, tc.err)
			}
			if tc.err {
				c := NewEmpty()
				c.OnIPRangeUpdate(nil, &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Spec: func() jkev1.IPRangeSpec { s := tc.spec; s.Node = "n1"; return s }()})
				if n := c.Node("n1"); n.IPCapacity != 0 || !n.HasRanges {
					t.Fatalf("node of an invalid range: %+v, want a range with no capacity", n)
				}
				return
			}
			if r.capacity != tc.want {
				t.Fatalf("capacity = %d, want %d", r.capacity, tc.want)
			}
		})
	}
}

func TestRangesPerNode(t *testing.T) {
	c := NewEmpty()
	a := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/26", Node: "n1"}}
	b := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Spec: jkev1.IPRangeSpec{CIDR: "10.1.3.0/30", Node: "n1"}}
	c.OnIPRangeUpdate(nil, a)
	c.OnIPRangeUpdate(nil, b)
	if got := c.Node("n1"); got.IPCapacity != 64 || len(got.CIDRs) != 2 || !got.HasRanges {
		t.Fatalf("n1 = %+v, want 62+2 addresses in 2 ranges", got)
	}
	r, ok := c.RangeForIP(netip.MustParseAddr("10.1.3.1"))
	if !ok || r.Name != "b" || r.Node != "n1" {
		t.Fatalf("RangeForIP = %+v %v", r, ok)
	}
	moved := b.DeepCopy()
	moved.Spec.Node = "n2"
	c.OnIPRangeUpdate(b, moved)
	if c.Node("n1").IPCapacity != 62 || c.Node("n2").IPCapacity != 2 {
		t.Fatalf("after moving b: n1=%+v n2=%+v", c.Node("n1"), c.Node("n2"))
	}
	c.OnIPRangeDelete(a)
	if c.Node("n1").HasRanges {
		t.Fatal("n1 still has ranges after deleting a")
	}
	if _, ok := c.RangeForIP(netip.MustParseAddr("10.1.2.5")); ok {
		t.Fatal("deleted range still matches")
	}
}

// TestNewerVersionWins: the same StaticIP change reaches the cache from its informer and
// from the scheduler's queueing hints, in any order; older news never undoes newer.
func TestNewerVersionWins(t *testing.T) {
	c := NewEmpty()
	v5 := sip("ns", "web-0", "n1", "1")
	v5.ResourceVersion = "5"
	v7 := sip("ns", "web-0", "n2", "1")
	v7.ResourceVersion = "7"
	c.OnStaticIPUpdate(nil, v7)
	c.OnStaticIPUpdate(nil, v5) // late informer event
	if heldOn(c, "n2") != "ns/web-0" || heldOn(c, "n1") != "" {
		t.Fatalf("an older version overwrote a newer one: n1=%+v n2=%+v", c.Node("n1"), c.Node("n2"))
	}
	c.OnStaticIPDelete(v7)
	c.OnStaticIPUpdate(nil, v7) // the informer's late update with the same version
	if heldOn(c, "n2") != "" {
		t.Fatal("an update with the deleted object's version resurrected it")
	}
	again := sip("ns", "web-0", "n1", "1")
	again.ResourceVersion = "9"
	c.OnStaticIPUpdate(nil, again) // re-created
	if heldOn(c, "n1") != "ns/web-0" {
		t.Fatal("a re-created StaticIP was ignored")
	}
}

// Node's answer is kept until the node changes: every kind of change must show in the next
// read, also right after an answer was kept, and comes as a new value (its address is what
// the Filter's per-node summaries are keyed by).
func TestNodeViewFollowsEveryChange(t *testing.T) {
	c := NewEmpty()
	var last *NodeInfo
	step := func(what, node, wantHeld string, wantCIDRs int) {
		t.Helper()
		got := c.Node(node)
		if held := heldOn(c, node); held != wantHeld || len(got.CIDRs) != wantCIDRs {
			t.Fatalf("%s: node %s holds [%s], CIDRs %v; want [%s], %d CIDRs", what, node, held, got.CIDRs, wantHeld, wantCIDRs)
		}
		if got == last && node == "n1" && what != "read again" {
			t.Fatalf("%s: the same view came back after a change", what)
		}
		last = got
	}
	r1 := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "r1"}, Spec: jkev1.IPRangeSpec{CIDR: "10.0.0.0/26", Node: "n1"}}
	a, b := sip("ns", "a", "n1", "1"), sip("ns", "b", "n1", "1")

	step("empty", "n1", "", 0)
	c.OnStaticIPUpdate(nil, a)
	step("StaticIP a added", "n1", "ns/a", 0)
	if c.Node("n1") != last {
		t.Fatal("an unchanged node gave a new view")
	}
	c.OnStaticIPUpdate(nil, b)
	step("StaticIP b added", "n1", "ns/a,ns/b", 0)
	c.OnIPRangeUpdate(nil, r1)
	step("IPRange added", "n1", "ns/a,ns/b", 1)
	moved := a.DeepCopy()
	moved.Spec.Node = "n2"
	c.OnStaticIPUpdate(a, moved)
	step("StaticIP a moved away", "n1", "ns/b", 1)
	if heldOn(c, "n2") != "ns/a" {
		t.Fatal("StaticIP a did not move in to n2")
	}
	c.OnStaticIPDelete(b)
	step("StaticIP b deleted", "n1", "", 1)
	c.OnIPRangeDelete(r1)
	step("IPRange deleted", "n1", "", 0)
}

// BenchmarkInitialList is a scheduler's start at 5,000 nodes: the IPRange informer's initial
// list (one range per node) applied to an empty cache; the first pod is scheduled only after.
//
//	go test -run '^$' -bench InitialList ./scheduler-plugins/pkg/staticipnode/
func BenchmarkInitialList(b *testing.B) {
	const nodes = 5000
	ranges := make([]*jkev1.IPRange, nodes)
	for i := range ranges {
		name := fmt.Sprintf("node-%04d", i)
		ranges[i] = &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1, ResourceVersion: fmt.Sprint(i + 1)},
			Spec: jkev1.IPRangeSpec{CIDR: fmt.Sprintf("10.%d.%d.0/24", 64+i/256, i%256), Node: name}}
	}
	for range b.N {
		c := NewEmpty()
		for _, r := range ranges {
			c.OnIPRangeUpdate(nil, r)
		}
	}
}

// Node views are found without a lock once the cache has synced, through an immutable map of
// the node names that is published in batches before the sync and at once after it. Whatever
// the batching, every reader sees every node the cache knows, at its latest view, and the
// empty view of a node it forgot — before the sync (the hints read it then), across it, and
// while names come and go beside concurrent readers.
func TestNodeViewsFoundBeforeAndAfterSync(t *testing.T) {
	rangeOf := func(i int) *jkev1.IPRange {
		name := fmt.Sprintf("node-%04d", i)
		return &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
			Spec: jkev1.IPRangeSpec{CIDR: fmt.Sprintf("10.%d.%d.0/24", 64+i/256, i%256), Node: name}}
	}
	c := NewEmpty()
	check := func(step string, known map[int]bool) {
		t.Helper()
		for i, want := range known {
			if got := c.Node(rangeOf(i).Name).HasRanges; got != want {
				t.Fatalf("%s: node %s has ranges %v, want %v", step, rangeOf(i).Name, got, want)
			}
		}
	}
	known := map[int]bool{}
	for i := range 200 { // more than one batch (64, then doubling)
		c.OnIPRangeUpdate(nil, rangeOf(i))
		known[i] = true
		check(fmt.Sprintf("before the sync, %d ranges added", i+1), map[int]bool{i: true, 0: true})
	}
	check("before the sync", known)
	c.OnIPRangeDelete(rangeOf(3))
	known[3] = false
	check("before the sync, node-0003's range deleted", known)
	c.OnIPRangeUpdate(nil, rangeOf(3))
	known[3] = true
	check("before the sync, node-0003's range added again", known)
	c.OnIPRangeDelete(rangeOf(150)) // unpublished yet when deleted
	known[150] = false
	check("before the sync, node-0150's range deleted", known)

	c.MarkSynced()
	if n := c.unpublished.Load(); n != 0 {
		t.Fatalf("after the sync %d node names are unpublished, want 0 (Node would take the lock)", n)
	}
	check("after the sync", known)

	// After the sync: names come and go while readers look every node up.
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for i := range 260 {
					v := c.Node(rangeOf(i).Name)
					if v.HasRanges != (len(v.CIDRs) > 0) {
						t.Errorf("node %s: an inconsistent view %+v", rangeOf(i).Name, v)
						return
					}
				}
			}
		}()
	}
	for i := 200; i < 260; i++ {
		c.OnIPRangeUpdate(nil, rangeOf(i))
		known[i] = true
		check(fmt.Sprintf("after the sync, node-%04d's range added", i), map[int]bool{i: true})
		if n := c.unpublished.Load(); n != 0 {
			t.Fatalf("after the sync a new name is left unpublished (%d)", n)
		}
	}
	for i := 0; i < 260; i += 7 {
		c.OnIPRangeDelete(rangeOf(i))
		known[i] = false
	}
	close(stop)
	readers.Wait()
	check("after the sync, names added and removed", known)
}

// BenchmarkNodeLookup is what Filter pays per pod and node to find the node's view: one op
// is one lookup of each of 1,000 node names (kwok's names), on one goroutine. A sync.Map
// (the form before 2026-11-28) took 81–104 ns per lookup, the published map 52–67 ns (3
// alternating runs each, the shared machine at load 12).
//
//	go test -run '^$' -bench NodeLookup -cpu 1 ./scheduler-plugins/pkg/staticipnode/
func BenchmarkNodeLookup(b *testing.B) {
	c := NewEmpty()
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("kwok-%05d", i)
		c.OnIPRangeUpdate(nil, &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: names[i], Generation: 1},
			Spec: jkev1.IPRangeSpec{CIDR: fmt.Sprintf("10.%d.%d.0/24", 64+i/256, i%256), Node: names[i]}})
	}
	c.MarkSynced()
	b.ResetTimer()
	for range b.N {
		for _, name := range names {
			if !c.Node(name).HasRanges {
				b.Fatal(name)
			}
		}
	}
}

// A dual-stack pod takes one address of each family (issue 39 item 2): a node's capacity is its
// smaller family's, not the sum of both — the sum let the scheduler send an IPv4 /26 + IPv6 /120
// node 317 pods where the 63rd fails its sandbox with no IPv4 address left. A namespace pool's
// block (restricted) bounds no other pod; a node with restricted blocks only counts them all.
func TestIPCapacityIsPerFamily(t *testing.T) {
	rng := func(name, cidr string, restricted bool) *jkev1.IPRange {
		r := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: jkev1.IPRangeSpec{CIDR: cidr, Node: "n1"}}
		if restricted {
			r.Labels = map[string]string{jkev1.LabelIPPoolRestricted: "true"}
		}
		return r
	}
	for _, tc := range []struct {
		name   string
		ranges []*jkev1.IPRange
		want   int64
	}{
		{"IPv4 only: the sum of its ranges", []*jkev1.IPRange{rng("a", "10.1.2.0/26", false), rng("b", "10.1.3.0/30", false)}, 64},
		{"dual-stack: the smaller family", []*jkev1.IPRange{rng("a", "10.1.2.0/26", false), rng("v6", "fd00::/120", false)}, 62},
		{"dual-stack, IPv6 smaller", []*jkev1.IPRange{rng("a", "10.1.2.0/24", false), rng("v6", "fd00::/125", false)}, 7},
		{"dual-stack, two IPv4 ranges", []*jkev1.IPRange{rng("a", "10.1.2.0/26", false), rng("b", "10.1.3.0/26", false), rng("v6", "fd00::/120", false)}, 124},
		{"a restricted IPv6 block bounds no other pod", []*jkev1.IPRange{rng("a", "10.1.2.0/26", false), rng("v6", "fd00::/125", true)}, 62},
		{"restricted blocks only", []*jkev1.IPRange{rng("a", "10.1.2.0/26", true), rng("v6", "fd00::/125", true)}, 69},
		{"IPv6 only", []*jkev1.IPRange{rng("v6", "fd00::/120", false)}, 255},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewEmpty()
			for _, r := range tc.ranges {
				c.OnIPRangeUpdate(nil, r)
			}
			if got := c.Node("n1").IPCapacity; got != tc.want {
				t.Errorf("IPCapacity = %d, want %d", got, tc.want)
			}
		})
	}
}
