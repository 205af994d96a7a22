package staticipnode

import (
	"math"
	"net/netip"
	"sort"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

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

func TestReservationFollowsPodPresence(t *testing.T) {
	c := NewEmpty()
	c.OnStaticIPUpdate(nil, sip("ns", "web-0", "n1", "2"))
	want := func(step string, node string, cpu int64, count int) {
		t.Helper()
		got := c.Node(node)
		if got.Reserved.MilliCPU != cpu || got.Reservations != count {
			t.Fatalf("%s: node %s holds cpu=%dm reservations=%d, want %dm/%d", step, node, got.Reserved.MilliCPU, got.Reservations, cpu, count)
		}
		if count > 0 && (got.Reserved.Memory != int64(count)<<30 || got.Reserved.Scalar["example.com/gpu"] != int64(count)) {
			t.Fatalf("%s: memory/gpu not reserved: %+v", step, got.Reserved)
		}
	}
	want("no pod at all", "n1", 2000, 1)

	c.OnPodUpdate(nil, pod("ns", "web-0", ""))
	want("pod pending", "n1", 2000, 1)

	c.OnPodUpdate(nil, pod("ns", "web-0", "n2"))
	want("pod on another node", "n1", 2000, 1)

	c.Assume("ns", "web-0", "n1")
	want("pod assumed onto its node", "n1", 0, 0)
	c.Forget("ns", "web-0", "n1")
	want("assumption undone", "n1", 2000, 1)

	c.OnPodUpdate(nil, pod("ns", "web-0", "n1"))
	want("pod bound to its node", "n1", 0, 0)

	other := pod("other", "web-0", "")
	c.OnPodUpdate(nil, other)
	want("same name in another namespace changes nothing", "n1", 0, 0)

	failed := pod("ns", "web-0", "n1")
	failed.Status.Phase = v1.PodFailed
	c.OnPodUpdate(nil, failed)
	want("pod failed", "n1", 2000, 1)

	c.OnPodUpdate(nil, pod("ns", "web-0", "n1"))
	c.OnPodDelete(cache.DeletedFinalStateUnknown{Key: "ns/web-0", Obj: pod("ns", "web-0", "n1")})
	want("pod deleted (tombstone)", "n1", 2000, 1)

	moved := sip("ns", "web-0", "n3", "2")
	c.OnStaticIPUpdate(nil, moved)
	want("StaticIP moved away", "n1", 0, 0)
	want("StaticIP moved here", "n3", 2000, 1)

	released := moved.DeepCopy()
	released.Status.Phase = jkev1.StaticIPReleased
	c.OnStaticIPUpdate(moved, released)
	want("StaticIP released", "n3", 0, 0)

	c.OnStaticIPUpdate(released, moved)
	c.OnStaticIPDelete(moved)
	want("StaticIP deleted", "n3", 0, 0)
	if len(c.nodes) != 0 || len(c.byPod) != 0 || len(c.staticIPs) != 0 {
		t.Fatalf("state left behind: nodes=%v byPod=%v staticIPs=%v", c.nodes, c.byPod, c.staticIPs)
	}
}

func TestSpecPodNamesThePod(t *testing.T) {
	c := NewEmpty()
	s := sip("ns", "record", "n1", "1")
	s.Spec.Pod = "web-7"
	c.OnStaticIPUpdate(nil, s)
	c.OnPodUpdate(nil, pod("ns", "record", "n1"))
	if c.Node("n1").Reservations != 1 {
		t.Fatal("a pod named like the record, not like spec.pod, must not release the reservation")
	}
	c.OnPodUpdate(nil, pod("ns", "web-7", "n1"))
	if c.Node("n1").Reservations != 0 {
		t.Fatal("pod spec.pod present on the node: reservation must be gone")
	}
	info, ok := c.StaticIPForPod("ns", "web-7")
	if !ok || info.Name != "record" || info.Node != "n1" || info.Reserved {
		t.Fatalf("StaticIPForPod = %+v, %v", info, ok)
	}
}

func TestIPRangeCapacity(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec jkev1.IPRangeSpec
		want int64
		err  bool
	}{
		{name: "/24 minus network and broadcast", spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/24"}, want: 254},
		{name: "/26 minus gateway", spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/26", Gateway: "10.1.2.1"}, want: 61},
		{name: "gateway and excluded, duplicates once", spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/24", Gateway: "10.1.2.1", ExcludeIPs: []string{"10.1.2.2", "10.1.2.2", "10.1.2.1"}}, want: 252},
		{name: "rangeStart/rangeEnd", spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/24", RangeStart: "10.1.2.10", RangeEnd: "10.1.2.19", ExcludeIPs: []string{"10.1.2.100"}, Gateway: "10.1.2.10"}, want: 9},
		{name: "rangeStart at network address is clamped", spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/30", RangeStart: "10.1.2.0"}, want: 2},
		{name: "/31 point-to-point", spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/31"}, want: 2},
		{name: "/32", spec: jkev1.IPRangeSpec{CIDR: "10.1.2.7/32"}, want: 1},
		{name: "IPv6 /120 minus anycast", spec: jkev1.IPRangeSpec{CIDR: "fd00::/120", Gateway: "fd00::1"}, want: 254},
		{name: "IPv6 /64 saturates", spec: jkev1.IPRangeSpec{CIDR: "fd00::/64"}, want: math.MaxInt64},
		{name: "start after end", spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/24", RangeStart: "10.1.2.20", RangeEnd: "10.1.2.10"}, want: 0},
		{name: "bad cidr", spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/33"}, err: true},
		{name: "rangeEnd outside", spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/24", RangeEnd: "10.1.3.1"}, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := parseIPRange(&jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Spec: tc.spec})
			if (r.err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", r.err, tc.err)
			}
			if !tc.err && r.capacity != tc.want {
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
	if c.Node("n2").Reservations != 1 || c.Node("n1").Reservations != 0 {
		t.Fatalf("an older version overwrote a newer one: n1=%+v n2=%+v", c.Node("n1"), c.Node("n2"))
	}
	c.ObserveStaticIPEvent(v7, nil) // deletion seen through a hint
	c.OnStaticIPUpdate(nil, v7)     // the informer's late update with the same version
	if c.Node("n2").Reservations != 0 {
		t.Fatal("an update with the deleted object's version resurrected it")
	}
	again := sip("ns", "web-0", "n1", "1")
	again.ResourceVersion = "9"
	c.OnStaticIPUpdate(nil, again) // re-created
	if c.Node("n1").Reservations != 1 {
		t.Fatal("a re-created StaticIP was ignored")
	}
}

// Node's answer is kept until the node changes: every kind of change must show in the next
// read, also right after an answer was kept.
func TestNodeViewFollowsEveryChange(t *testing.T) {
	c := NewEmpty()
	step := func(what, node, wantHeld string, wantCIDRs, wantReservations int) {
		t.Helper()
		got := c.Node(node)
		var held []string
		for _, h := range got.Held {
			held = append(held, h.PodName)
		}
		sort.Strings(held)
		if strings.Join(held, ",") != wantHeld || len(got.CIDRs) != wantCIDRs || got.Reservations != wantReservations {
			t.Fatalf("%s: node %s holds %v, CIDRs %v, %d reservations; want [%s], %d CIDRs, %d reservations",
				what, node, held, got.CIDRs, got.Reservations, wantHeld, wantCIDRs, wantReservations)
		}
	}
	r1 := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "r1"}, Spec: jkev1.IPRangeSpec{CIDR: "10.0.0.0/26", Node: "n1"}}
	a, b := sip("ns", "a", "n1", "1"), sip("ns", "b", "n1", "1")

	step("empty", "n1", "", 0, 0)
	c.OnStaticIPUpdate(nil, a)
	step("StaticIP a added", "n1", "a", 0, 1)
	c.OnStaticIPUpdate(nil, b)
	step("StaticIP b added", "n1", "a,b", 0, 2)
	c.OnIPRangeUpdate(nil, r1)
	step("IPRange added", "n1", "a,b", 1, 2)
	c.OnPodUpdate(nil, pod("ns", "b", "n1"))
	step("pod b bound to n1", "n1", "a,b", 1, 1)
	moved := a.DeepCopy()
	moved.Spec.Node = "n2"
	c.OnStaticIPUpdate(a, moved)
	step("StaticIP a moved away", "n1", "b", 1, 0)
	step("StaticIP a moved in", "n2", "a", 0, 1)
	c.OnStaticIPDelete(b)
	step("StaticIP b deleted", "n1", "", 1, 0)
	c.OnIPRangeDelete(r1)
	step("IPRange deleted", "n1", "", 0, 0)
}
