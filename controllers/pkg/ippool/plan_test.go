package ippool

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/controllers/pkg/nodegone"
)

var t0 = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

func pool(name string, age int, cidrs ...string) Pool {
	p := Pool{Name: name, Created: t0.Add(-time.Duration(age) * time.Hour), Mode: jkev1.IPPoolBlocks,
		Selector: labels.Everything(), ReleaseAfter: 5 * time.Minute, BlockBits: DefaultBlockBitsIPv4, NATOutgoing: true}
	for _, c := range cidrs {
		p.CIDRs = append(p.CIDRs, netip.MustParsePrefix(c))
	}
	if len(p.CIDRs) > 0 && p.CIDRs[0].Addr().Is6() {
		p.BlockBits = DefaultBlockBitsIPv6
	}
	return p
}

func nodes(names ...string) []Node {
	var out []Node
	for _, n := range names {
		out = append(out, Node{Name: n})
	}
	return out
}

func rng(name, cidr, node, pool string) Range {
	on := true
	return Range{Name: name, CIDR: netip.MustParsePrefix(cidr), Node: node, Pool: pool, NATOutgoing: &on}
}

func nothingHeld(Range, string) string { return "" }

// assigned renders the plan's assignments as "node=cidr".
func assigned(p Plan) []string {
	var out []string
	for _, a := range p.Assign {
		out = append(out, a.Node+"="+a.CIDR.String())
	}
	return out
}

func TestComputeAssign(t *testing.T) {
	withLabel := func(n Node, k, v string) Node { n.Labels = map[string]string{k: v}; return n }
	sel := func(p Pool, k, v string) Pool { p.Selector = labels.SelectorFromSet(labels.Set{k: v}); return p }
	excl := func(p Pool, ips ...string) Pool {
		for _, ip := range ips {
			p.Excludes = append(p.Excludes, netip.MustParseAddr(ip))
		}
		return p
	}
	small := pool("small", 1, "10.9.0.0/30")
	small.BlockBits = 30
	for _, tc := range []struct {
		name    string
		pools   []Pool
		nodes   []Node
		ranges  []Range
		want    []string
		waiting map[string][]string
	}{
		{name: "first fit in name order", pools: []Pool{pool("p", 1, "10.244.0.0/22")}, nodes: nodes("b", "a"),
			want: []string{"a=10.244.0.0/24", "b=10.244.1.0/24"}},
		{name: "a fenced node (out-of-service) gets nothing: failover moves its ranges away, a block would follow them",
			pools: []Pool{pool("p", 1, "10.244.0.0/22")}, nodes: []Node{{Name: "a", OutOfService: true}, {Name: "b"}},
			want: []string{"b=10.244.0.0/24"}},
		{name: "a node that owns a range gets nothing (hand-written or moved by failover)",
			pools: []Pool{pool("p", 1, "10.244.0.0/22")}, nodes: nodes("a", "b"),
			ranges: []Range{rng("node-a", "192.168.5.0/24", "a", "")}, want: []string{"b=10.244.0.0/24"}},
		{name: "blocks overlapping any IPRange are skipped, hand-written included",
			pools: []Pool{pool("p", 1, "10.244.0.0/22")}, nodes: nodes("a", "b"),
			ranges: []Range{rng("hand", "10.244.0.128/25", "x", ""), rng("p-10-244-1-0-24", "10.244.1.0/24", "y", "p")},
			want:   []string{"a=10.244.2.0/24", "b=10.244.3.0/24"}},
		{name: "a hand-written range wider than a block covers several",
			pools: []Pool{pool("p", 1, "10.244.0.0/22")}, nodes: nodes("a"),
			ranges: []Range{rng("wide", "10.244.0.0/23", "x", "")}, want: []string{"a=10.244.2.0/24"}},
		{name: "exhausted: the nodes left wait", pools: []Pool{pool("p", 1, "10.244.0.0/23")}, nodes: nodes("a", "b", "c"),
			want: []string{"a=10.244.0.0/24", "b=10.244.1.0/24"}, waiting: map[string][]string{"p": {"c"}}},
		{name: "pool growth: the second CIDR serves when the first is full",
			pools: []Pool{pool("p", 1, "10.244.0.0/24", "10.245.0.0/24")}, nodes: nodes("a", "b"),
			ranges: []Range{rng("p-10-244-0-0-24", "10.244.0.0/24", "x", "p")}, want: []string{"a=10.245.0.0/24"},
			waiting: map[string][]string{"p": {"b"}}},
		{name: "pool by labels; the oldest of two matching pools wins",
			pools: []Pool{sel(pool("gpu", 1, "10.1.0.0/16"), "kind", "gpu"), pool("all-new", 1, "10.3.0.0/16"), pool("all-old", 5, "10.2.0.0/16")},
			nodes: []Node{withLabel(Node{Name: "g"}, "kind", "gpu"), {Name: "c"}},
			want:  []string{"c=10.2.0.0/24", "g=10.2.1.0/24"}},
		{name: "selector mismatch: no block",
			pools: []Pool{sel(pool("gpu", 1, "10.1.0.0/16"), "kind", "gpu")},
			nodes: []Node{withLabel(Node{Name: "g"}, "kind", "gpu"), withLabel(Node{Name: "c"}, "kind", "cpu")},
			want:  []string{"g=10.1.0.0/24"}},
		{name: "a pool overlapping an older one hands out nothing",
			pools: []Pool{pool("old", 5, "10.244.0.0/16"), sel(pool("new", 1, "10.244.128.0/17"), "x", "y")},
			nodes: []Node{withLabel(Node{Name: "a"}, "x", "y")}, want: []string{"a=10.244.0.0/24"}},
		{name: "IPv6 block of /120; a dual-stack node gets one block per family",
			pools: []Pool{pool("v6", 1, "fd00:10:244::/112"), pool("v4", 2, "10.244.0.0/16")}, nodes: nodes("a", "b"),
			ranges: []Range{rng("hand", "10.244.0.0/24", "b", "")},
			want:   []string{"a=10.244.1.0/24", "a=fd00:10:244::/120", "b=fd00:10:244::100/120"}},
		{name: "a block whose every host is excluded is skipped", pools: []Pool{excl(small, "10.9.0.1", "10.9.0.2"), pool("big", 9, "10.8.0.0/16")},
			nodes: nodes("a"), want: []string{"a=10.8.0.0/24"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Compute(Input{Pools: tc.pools, Nodes: tc.nodes, Ranges: tc.ranges, Now: t0, Held: nothingHeld})
			got := assigned(p)
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("assigned %v, want %v", got, tc.want)
			}
			for _, pl := range tc.pools {
				if w := tc.waiting[pl.Name]; !slices.Equal(p.Pools[pl.Name].Waiting, w) {
					t.Errorf("pool %s waiting %v, want %v", pl.Name, p.Pools[pl.Name].Waiting, w)
				}
			}
		})
	}
}

func TestComputeCarriesGatewayExcludesAndNames(t *testing.T) {
	p := pool("pool", 1, "10.244.0.0/16")
	p.FirstHostGateway = true
	p.Excludes = []netip.Addr{netip.MustParseAddr("10.244.0.1"), netip.MustParseAddr("10.244.0.9"), netip.MustParseAddr("10.244.7.9")}
	plan := Compute(Input{Pools: []Pool{p}, Nodes: nodes("a"), Now: t0, Held: nothingHeld})
	if len(plan.Assign) != 1 {
		t.Fatalf("plan %+v", plan)
	}
	a := plan.Assign[0]
	if a.Name != "pool-10-244-0-0-24" || a.Gateway != "10.244.0.1" || !slices.Equal(a.Excludes, []string{"10.244.0.9"}) {
		t.Errorf("assign %+v", a)
	}
	st := plan.Pools["pool"]
	if st.Total != 256 || st.Assigned != 1 || st.Free != 255 || !st.Ready {
		t.Errorf("status %+v", st)
	}
	if n := RangeName("v6", netip.MustParsePrefix("fd00:10:244::100/120")); n != "v6-fd00-10-244--100-120" {
		t.Errorf("IPv6 name %s", n)
	}
}

func TestComputePodCIDRMode(t *testing.T) {
	p := pool("kind", 1, "10.244.0.0/16")
	p.Mode = jkev1.IPPoolNodePodCIDR
	ns := []Node{
		{Name: "a", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00::/64")}},
		{Name: "b", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}},
		{Name: "c", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/24")}},
		{Name: "d"},
		{Name: "e", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.3.0/24")}},
	}
	plan := Compute(Input{Pools: []Pool{p}, Nodes: ns, Now: t0, Held: nothingHeld,
		Ranges: []Range{rng("hand", "10.244.2.0/25", "x", ""), rng("node-e", "192.168.0.0/24", "e", "")}})
	if got := assigned(plan); !slices.Equal(got, []string{"a=10.244.1.0/24"}) {
		t.Errorf("assigned %v", got)
	}
	var skips []string
	for _, s := range plan.Skips {
		skips = append(skips, s.Node+":"+s.Reason)
	}
	if want := []string{"b:" + ReasonPodCIDROverlaps, "c:" + ReasonNoPodCIDR, "d:" + ReasonNoPodCIDR}; !slices.Equal(skips, want) {
		t.Errorf("skips %v, want %v", skips, want)
	}
}

func TestComputeRelease(t *testing.T) {
	p := pool("p", 1, "10.244.0.0/16")
	gone := func(since time.Duration) Range {
		r := rng("p-10-244-5-0-24", "10.244.5.0/24", "dead", "p")
		if since >= 0 {
			r.GoneSince = t0.Add(-since)
		}
		return r
	}
	for _, tc := range []struct {
		name        string
		r           Range
		nodes       []Node
		held        string
		verdict     *nodegone.Verdict // nil: proven gone
		wantRelease bool
		wantMark    string // "set", "clear" or ""
		wantRequeue time.Duration
		wantWait    string
	}{
		{name: "first seen gone: marked, looked at after the quarantine", r: gone(-1), wantMark: "set", wantRequeue: 5 * time.Minute},
		{name: "inside the quarantine: waits", r: gone(2 * time.Minute), wantRequeue: 3 * time.Minute},
		{name: "after the quarantine, held by a pod or StaticIP: kept", r: gone(10 * time.Minute), held: "pod ns/x holds 10.244.5.7", wantRequeue: heldRecheck, wantWait: ReasonHeld},
		{name: "after the quarantine, the node's Lease is still renewed (deleted Node, running kubelet): kept",
			r: gone(10 * time.Minute), verdict: &nodegone.Verdict{Reason: nodegone.ReasonLeaseRenewed, Message: "renewed", RecheckAfter: 20 * time.Second},
			wantRequeue: 20 * time.Second, wantWait: nodegone.ReasonLeaseRenewed},
		{name: "after the quarantine, not proven gone yet (no sign of life for less than the bound): kept",
			r: gone(10 * time.Minute), verdict: &nodegone.Verdict{Reason: nodegone.ReasonWaiting, Message: "waiting", RecheckAfter: 4 * time.Minute},
			wantRequeue: 4 * time.Minute, wantWait: nodegone.ReasonWaiting},
		{name: "a range unassigned by hand is not a node to prove gone: quarantine and holders only",
			r: func() Range { r := gone(10 * time.Minute); r.Node = ""; return r }(), verdict: &nodegone.Verdict{Reason: nodegone.ReasonWaiting}, wantRelease: true},
		{name: "a released block is free: never marked or released again",
			r: func() Range {
				r := gone(-1)
				r.Node, r.Released, r.ReleasedGeneration, r.OwnerGeneration = "", true, 3, 3
				return r
			}()},
		{name: "after the quarantine, nothing holds it: released", r: gone(10 * time.Minute), wantRelease: true},
		{name: "the node came back: the mark is cleared, nothing released", r: gone(10 * time.Minute), nodes: nodes("dead"), wantMark: "clear"},
		{name: "a hand-written range of a gone node is never touched", r: func() Range { r := gone(time.Hour); r.Pool = ""; return r }()},
		{name: "a deleted node's block of a pool that no longer exists: the same rule (the default quarantine)", r: func() Range { r := gone(time.Hour); r.Pool = "other"; return r }(), wantRelease: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := Compute(Input{Pools: []Pool{p}, Nodes: tc.nodes, Ranges: []Range{tc.r}, Now: t0,
				Held: func(Range, string) string { return tc.held },
				NodeGone: func(node string, since time.Time) nodegone.Verdict {
					if node != "dead" || !since.Equal(tc.r.GoneSince) {
						t.Errorf("NodeGone(%s, %v)", node, since)
					}
					if tc.verdict != nil {
						return *tc.verdict
					}
					return nodegone.Verdict{Gone: true, Reason: nodegone.ReasonLeaseExpired}
				}})
			if got := len(plan.Release) == 1; got != tc.wantRelease {
				t.Errorf("released %v, want %v (%+v)", plan.Release, tc.wantRelease, plan)
			}
			if tc.wantRelease && plan.Release[0].Generation != tc.r.OwnerGeneration+1 {
				t.Errorf("released at generation %d, want %d: the node it leaves must revoke it if it comes back", plan.Release[0].Generation, tc.r.OwnerGeneration+1)
			}
			wait := ""
			if len(plan.Waits) == 1 {
				wait = plan.Waits[0].Reason
			}
			if wait != tc.wantWait {
				t.Errorf("waits %+v, want reason %q", plan.Waits, tc.wantWait)
			}
			mark := ""
			if len(plan.Mark) == 1 {
				mark = map[bool]string{true: "clear", false: "set"}[plan.Mark[0].Since.IsZero()]
			}
			if mark != tc.wantMark {
				t.Errorf("mark %q, want %q", mark, tc.wantMark)
			}
			if plan.Requeue != tc.wantRequeue {
				t.Errorf("requeue %v, want %v", plan.Requeue, tc.wantRequeue)
			}
		})
	}
}

func TestComputeReturnsTheExtraBlockOfARace(t *testing.T) {
	p := pool("p", 1, "10.244.0.0/16")
	a0, a1 := rng("p-10-244-0-0-24", "10.244.0.0/24", "a", "p"), rng("p-10-244-1-0-24", "10.244.1.0/24", "a", "p")
	moved := rng("p-10-244-2-0-24", "10.244.2.0/24", "a", "p")
	moved.OwnerGeneration = 1
	for _, tc := range []struct {
		name   string
		ranges []Range
		held   string // the range name that is held
		want   []string
	}{
		{"both empty: the second by name goes", []Range{a0, a1}, "", []string{a1.Name}},
		{"the second is in use: the first goes", []Range{a0, a1}, a1.Name, []string{a0.Name}},
		{"a block moved here by failover is never an extra", []Range{a0, moved}, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := Compute(Input{Pools: []Pool{p}, Nodes: nodes("a"), Ranges: tc.ranges, Now: t0,
				Held: func(r Range, pending string) string {
					if pending != "a" {
						t.Errorf("an extra block must be checked with the node's pending pods")
					}
					if r.Name == tc.held {
						return "in use"
					}
					return ""
				}})
			var got []string
			for _, r := range plan.Release {
				got = append(got, r.Range)
			}
			if !slices.Equal(got, tc.want) || len(plan.Assign) != 0 {
				t.Errorf("released %v, want %v; assigned %v", got, tc.want, assigned(plan))
			}
		})
	}
}

func TestBlockArithmetic(t *testing.T) {
	c := netip.MustParsePrefix("10.244.0.0/16")
	if b := blockAt(c, 24, 255); b.String() != "10.244.255.0/24" {
		t.Error(b)
	}
	occ := occupiedBlocks(c, 24, []netip.Prefix{netip.MustParsePrefix("10.244.3.7/32"), netip.MustParsePrefix("10.244.4.0/23"),
		netip.MustParsePrefix("10.245.0.0/24"), netip.MustParsePrefix("fd00::/8")})
	if fmt.Sprint(occ) != "[{3 5}]" {
		t.Errorf("occupied %v", occ)
	}
	if !occupiedAt(occ, 4) || occupiedAt(occ, 6) {
		t.Error("occupiedAt")
	}
	if !strings.HasPrefix(blockAt(netip.MustParsePrefix("fd00::/104"), 120, 65535).String(), "fd00::ff:ff00/120") {
		t.Error(blockAt(netip.MustParsePrefix("fd00::/104"), 120, 65535))
	}
}

// TestComputeReusesReleasedBlocks: a released block (node "", generation raised) is free: the
// next node that needs a block gets the same IPRange at its generation, never a new one at 0
// over it; it counts as free, not assigned; a NodePodCIDR pool gives it back to the node whose
// podCIDR it is; a block the allocator gave again at its released generation is one it gave
// (an extra of a race), one moved on by failover is not.
func TestComputeReusesReleasedBlocks(t *testing.T) {
	p := pool("p", 1, "10.244.0.0/22")
	freed := func(name, cidr string, gen int64) Range {
		r := rng(name, cidr, "", "p")
		r.Released, r.ReleasedGeneration, r.OwnerGeneration = true, gen, gen
		return r
	}
	old := freed("p-10-244-0-0-24", "10.244.0.0/24", 2)
	plan := Compute(Input{Pools: []Pool{p}, Nodes: nodes("a", "b"), Now: t0, Held: nothingHeld,
		Ranges: []Range{old, rng("p-10-244-1-0-24", "10.244.1.0/24", "c", "p")}})
	if len(plan.Assign) != 2 {
		t.Fatalf("assign %+v", plan.Assign)
	}
	if a := plan.Assign[0]; a.Node != "a" || !a.Reuse || a.Name != old.Name || a.OwnerGeneration != 2 || a.CIDR != old.CIDR {
		t.Errorf("the released block must go to a as it is, at generation 2: %+v", a)
	}
	if b := plan.Assign[1]; b.Node != "b" || b.Reuse || b.CIDR.String() != "10.244.2.0/24" {
		t.Errorf("b: %+v", b)
	}
	if st := plan.Pools["p"]; st.Assigned != 3 || st.Free != 1 || st.Total != 4 {
		t.Errorf("status %+v", st)
	}
	// Nothing waits: the free block is counted free, not assigned.
	plan = Compute(Input{Pools: []Pool{p}, Now: t0, Held: nothingHeld, Ranges: []Range{old}})
	if st := plan.Pools["p"]; st.Assigned != 0 || st.Free != 4 || len(plan.Release)+len(plan.Mark) != 0 {
		t.Errorf("status %+v, plan %+v", st, plan)
	}
	// A free block whose pool is not valid any more stays in use for everyone.
	bad := pool("p", 1, "10.244.0.0/22")
	bad.Deleting = true
	other := pool("q", 0, "10.244.0.0/24")
	plan = Compute(Input{Pools: []Pool{bad, other}, Nodes: nodes("a"), Now: t0, Held: nothingHeld, Ranges: []Range{old}})
	if len(plan.Assign) != 0 {
		t.Errorf("a block of an invalid pool must stay in use: %+v", plan.Assign)
	}
	// NodePodCIDR: the node whose podCIDR it is gets it back.
	pc := pool("p", 1, "10.244.0.0/16")
	pc.Mode = jkev1.IPPoolNodePodCIDR
	plan = Compute(Input{Pools: []Pool{pc}, Now: t0, Held: nothingHeld, Ranges: []Range{old},
		Nodes: []Node{{Name: "a", PodCIDRs: []netip.Prefix{old.CIDR}}}})
	if len(plan.Assign) != 1 || !plan.Assign[0].Reuse || plan.Assign[0].Name != old.Name || len(plan.Skips) != 0 {
		t.Errorf("NodePodCIDR: %+v, skips %+v", plan.Assign, plan.Skips)
	}
	// Two blocks of one family on a, the second given again at its released generation: an
	// extra of a race; one moved by failover since (generation above the release) is not.
	given := freed("p-10-244-1-0-24", "10.244.1.0/24", 2)
	given.Node = "a"
	moved := given
	moved.OwnerGeneration = 3
	for _, tc := range []struct {
		r    Range
		want int
	}{{given, 1}, {moved, 0}} {
		plan = Compute(Input{Pools: []Pool{p}, Nodes: nodes("a"), Now: t0, Held: func(Range, string) string { return "" },
			Ranges: []Range{rng("p-10-244-0-0-24", "10.244.0.0/24", "a", "p"), tc.r}})
		if len(plan.Release) != tc.want {
			t.Errorf("generation %d: released %+v, want %d", tc.r.OwnerGeneration, plan.Release, tc.want)
		}
	}
}

// TestComputeNamesNeverCollide (issue 37, defect 7): "<pool>-<cidr>" with '.', ':' and '/' as
// '-' is ambiguous for IPv6 (p + 1:2::/120 and p-1 + 2::/120 are both p-1-2---120), and a
// hand-written IPRange may hold any name: the allocator then failed on AlreadyExists forever.
// A block whose plain name is taken by another range gets a name no other block can have.
func TestComputeNamesNeverCollide(t *testing.T) {
	p := pool("p", 2, "1:2::/112")
	p1 := pool("p-1", 1, "2::/112")
	taken := rng(RangeName("p-1", netip.MustParsePrefix("2::/120")), "2::/120", "b", "p-1")
	hand := rng("p-1-2--100-120", "10.0.0.0/24", "c", "") // a hand-written range with the next plain name
	plan := Compute(Input{Pools: []Pool{p, p1}, Nodes: nodes("a", "b", "c", "d"), Now: t0, Held: nothingHeld,
		Ranges: []Range{taken, hand}})
	names := map[string]string{taken.Name: taken.CIDR.String(), hand.Name: hand.CIDR.String()}
	for _, a := range plan.Assign {
		if other, dup := names[a.Name]; dup {
			t.Errorf("block %s of pool %s named %s, the name of %s", a.CIDR, a.Pool, a.Name, other)
		}
		names[a.Name] = a.CIDR.String()
	}
	if len(plan.Assign) != 3 {
		t.Errorf("assign %+v", plan.Assign)
	}
}

// TestUniqueRangeNameIsUnique: over adversarial pool names and CIDRs (pool names that end like
// CIDRs, IPv6 texts with and without "::", both families), a unique name never equals the
// unique or the plain name of another block.
func TestUniqueRangeNameIsUnique(t *testing.T) {
	pools := []string{"p", "p-1", "p-1-2", "p-10", "p-10-0", "a.b", "x-0", "x-0-0", "fd00", "p-fd00-0"}
	cidrs := []string{"1:2::/120", "2::/120", "1:2::100/120", "fd00::/120", "0:fd00::/120", "1:2:3:4:5:6:7:0/120",
		"10.0.0.0/24", "0.0.0.0/24", "10.0.0.0/25", "1.2.0.0/16", "::/120", "::a00:0/120"}
	type block struct{ pool, cidr string }
	unique := map[string]block{}
	plain := map[string][]block{}
	for _, p := range pools {
		for _, c := range cidrs {
			b := block{p, c}
			pr := netip.MustParsePrefix(c)
			n := UniqueRangeName(p, pr)
			if o, dup := unique[n]; dup {
				t.Errorf("%v and %v are both %s", o, b, n)
			}
			unique[n] = b
			plain[RangeName(p, pr)] = append(plain[RangeName(p, pr)], b)
		}
	}
	for n, b := range unique {
		for _, o := range plain[n] {
			if o != b {
				t.Errorf("unique name %s of %v is the plain name of %v", n, b, o)
			}
		}
	}
	if bs := plain["p-1-2---120"]; len(bs) < 2 {
		t.Errorf("the plain names were expected to collide here (the case of the issue): %v", bs)
	}
}

// TestComputeUpdatesExistingBlocks (issue 37, defect 7): excludeIPs and gatewayPolicy edits of a
// pool reach the blocks it gave out already. Removing an exclude or the gateway always goes
// through; adding one over an address a pod object or a StaticIP holds is held back on that
// block (the pod would keep it, but a static pod recreated could not get it back: the CNI
// refuses an excluded or gateway address), and says so.
func TestComputeUpdatesExistingBlocks(t *testing.T) {
	p := pool("p", 1, "10.244.0.0/16")
	p.FirstHostGateway = true
	p.Excludes = []netip.Addr{netip.MustParseAddr("10.244.0.9"), netip.MustParseAddr("10.244.1.7"), netip.MustParseAddr("10.244.2.5")}
	old := func(name, cidr, node string, gw string, ex ...string) Range {
		r := rng(name, cidr, node, "p")
		r.Gateway, r.Excludes = gw, ex
		return r
	}
	ranges := []Range{
		old("p-10-244-0-0-24", "10.244.0.0/24", "a", "", "10.244.0.200"),         // gateway and exclude added, an exclude dropped
		old("p-10-244-1-0-24", "10.244.1.0/24", "b", "10.244.1.1", "10.244.1.7"), // already right
		old("p-10-244-2-0-24", "10.244.2.0/24", "c", ""),                         // 10.244.2.1 and .5 are held
		old("hand", "10.244.3.0/24", "d", ""),
	}
	ranges[3].Pool = ""
	held := map[string]string{"10.244.2.1": "pod ns/x holds 10.244.2.1", "10.244.2.5": "StaticIP ns/y has spec.ip 10.244.2.5"}
	plan := Compute(Input{Pools: []Pool{p}, Nodes: nodes("a", "b", "c", "d"), Ranges: ranges, Now: t0, Held: nothingHeld,
		IPHeld: func(a netip.Addr) string { return held[a.String()] }})
	got := map[string]string{}
	for _, u := range plan.Update {
		got[u.Range] = u.Gateway + " " + strings.Join(u.Excludes, ",")
	}
	want := map[string]string{"p-10-244-0-0-24": "10.244.0.1 10.244.0.9", "p-10-244-2-0-24": " "}
	if len(got) != 1 || got["p-10-244-0-0-24"] != want["p-10-244-0-0-24"] {
		t.Errorf("updates %v, want only %s -> %q (the held block has nothing it may add)", got, "p-10-244-0-0-24", want["p-10-244-0-0-24"])
	}
	var warned []string
	for _, w := range plan.Waits {
		warned = append(warned, w.Range+":"+w.Reason)
	}
	if !slices.Equal(warned, []string{"p-10-244-2-0-24:" + ReasonExcludeHeld}) {
		t.Errorf("waits %v", warned)
	}
}

// TestComputeCarriesNATOutgoing (issue 36): a block takes its pool's natOutgoing when it is
// given (new or reused), and a pool's edit reaches every block it gave out at once (it moves no
// address, so nothing is held back), a block written before the field existed (unset) included;
// a hand-written range is never touched.
func TestComputeCarriesNATOutgoing(t *testing.T) {
	on, off := true, false
	p := pool("p", 1, "10.244.0.0/16")
	p.NATOutgoing = false
	ranges := []Range{rng("p-10-244-0-0-24", "10.244.0.0/24", "a", "p"), rng("p-10-244-1-0-24", "10.244.1.0/24", "b", "p"),
		rng("p-10-244-2-0-24", "10.244.2.0/24", "c", "p"), rng("hand", "10.244.3.0/24", "d", "")}
	ranges[1].NATOutgoing = &off
	ranges[2].NATOutgoing = nil
	plan := Compute(Input{Pools: []Pool{p}, Nodes: nodes("a", "b", "c", "d", "e"), Ranges: ranges, Now: t0, Held: nothingHeld, IPHeld: func(netip.Addr) string { return "" }})
	got := map[string]bool{}
	for _, u := range plan.Update {
		got[u.Range] = u.NATOutgoing
	}
	if len(got) != 2 || got["p-10-244-0-0-24"] || got["p-10-244-2-0-24"] {
		t.Errorf("updates %v, want p-10-244-0-0-24 and the unset p-10-244-2-0-24 to natOutgoing false, nothing else", got)
	}
	if len(plan.Assign) != 1 || plan.Assign[0].Node != "e" || plan.Assign[0].NATOutgoing {
		t.Errorf("assign %+v, want node e's new block with natOutgoing false", plan.Assign)
	}
	p.NATOutgoing = true
	ranges[0].NATOutgoing, ranges[2].NATOutgoing = &on, &on
	plan = Compute(Input{Pools: []Pool{p}, Nodes: nodes("a", "b", "c", "d"), Ranges: ranges, Now: t0, Held: nothingHeld, IPHeld: func(netip.Addr) string { return "" }})
	if len(plan.Update) != 1 || plan.Update[0].Range != "p-10-244-1-0-24" || !plan.Update[0].NATOutgoing {
		t.Errorf("updates %+v, want only p-10-244-1-0-24 back to natOutgoing true", plan.Update)
	}
}

// TestComputeCarriesDisableBGPExport: a pool's disableBGPExport is copied into every block and
// into new ones, and follows an edit; a block from before the field (unset) counts as exported,
// so an exported pool rewrites nothing.
func TestComputeCarriesDisableBGPExport(t *testing.T) {
	yes := true
	p := pool("p", 1, "10.244.0.0/16")
	ranges := []Range{rng("p-10-244-0-0-24", "10.244.0.0/24", "a", "p"), rng("p-10-244-1-0-24", "10.244.1.0/24", "b", "p"),
		rng("hand", "10.244.3.0/24", "d", "")}
	in := func(nodeNames ...string) Input {
		return Input{Pools: []Pool{p}, Nodes: nodes(nodeNames...), Ranges: ranges, Now: t0, Held: nothingHeld, IPHeld: func(netip.Addr) string { return "" }}
	}
	if plan := Compute(in("a", "b", "d")); len(plan.Update) != 0 {
		t.Errorf("an exported pool rewrites its unset blocks: %+v", plan.Update)
	}
	p.DisableBGPExport = true
	ranges[1].DisableBGPExport = &yes
	plan := Compute(in("a", "b", "d", "e"))
	if len(plan.Update) != 1 || plan.Update[0].Range != "p-10-244-0-0-24" || !plan.Update[0].DisableBGPExport {
		t.Errorf("updates %+v, want only p-10-244-0-0-24 to disableBGPExport true (the hand-written range is never touched)", plan.Update)
	}
	if len(plan.Assign) != 1 || plan.Assign[0].Node != "e" || !plan.Assign[0].DisableBGPExport {
		t.Errorf("assign %+v, want node e's new block with disableBGPExport true", plan.Assign)
	}
}

// TestExcludedBlocksFollowTheRangeRule: a block is skipped exactly when the IPRange written for
// it would give pods no address by iprangeaddr's rule (the rule the node-local IPAM allocates
// by), not by a host count of its own.
func TestExcludedBlocksFollowTheRangeRule(t *testing.T) {
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		cidr      string
		blockBits int
		gateway   bool
		excludes  []netip.Addr
		want      []uint64
	}{
		{name: "v4 /30: both hosts excluded", cidr: "10.9.0.0/29", blockBits: 30, excludes: addrs("10.9.0.5", "10.9.0.6"), want: []uint64{1}},
		{name: "v4 /30: network and broadcast are no hosts to exclude", cidr: "10.9.0.0/29", blockBits: 30, excludes: addrs("10.9.0.0", "10.9.0.3", "10.9.0.1")},
		{name: "v4 /30: the first host is the gateway", cidr: "10.9.0.0/29", blockBits: 30, gateway: true, excludes: addrs("10.9.0.6"), want: []uint64{1}},
		{name: "v6 /126: three hosts after the anycast address", cidr: "fd00::/124", blockBits: 126, excludes: addrs("fd00::5", "fd00::6", "fd00::7", "fd00::1", "fd00::2"), want: []uint64{1}},
		{name: "v6 /126: the anycast address is no host", cidr: "fd00::/124", blockBits: 126, excludes: addrs("fd00::4", "fd00::5", "fd00::6")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pool("p", 1, tc.cidr)
			p.BlockBits, p.FirstHostGateway, p.Excludes = tc.blockBits, tc.gateway, tc.excludes
			got := excludedBlocks(&p, p.CIDRs[0])
			var idx []uint64
			for i := range got {
				idx = append(idx, i)
			}
			slices.Sort(idx)
			if !slices.Equal(idx, tc.want) {
				t.Fatalf("fully excluded blocks %v, want %v", idx, tc.want)
			}
		})
	}
}

// A pool with a namespaceSelector is address space for the namespaces it selects, not a node's
// default pool: however old, it must never become the pool of the node's first block (pods of
// every other namespace would take its addresses). Converted from the IPPool as the controller
// does, so the field's reading is tested too.
func TestComputeNamespacePoolIsNoNodePool(t *testing.T) {
	ipp := func(name string, age int, cidr string, ns *metav1.LabelSelector) Pool {
		return poolOf(&jkev1.IPPool{
			ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(-time.Duration(age) * time.Hour))},
			Spec:       jkev1.IPPoolSpec{CIDRs: []string{cidr}, NamespaceSelector: ns},
		})
	}
	tenant := &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "blue"}}
	for _, tc := range []struct {
		name  string
		pools []Pool
		want  []string
	}{
		{name: "older tenant pool, younger node pool: the node pool serves",
			pools: []Pool{ipp("blue", 9, "10.1.0.0/16", tenant), ipp("default", 1, "10.244.0.0/16", nil)},
			want:  []string{"a=10.244.0.0/24"}},
		{name: "an empty namespaceSelector selects every namespace: a node pool",
			pools: []Pool{ipp("all", 9, "10.1.0.0/16", &metav1.LabelSelector{}), ipp("default", 1, "10.244.0.0/16", nil)},
			want:  []string{"a=10.1.0.0/24"}},
		{name: "only a tenant pool: no node block",
			pools: []Pool{ipp("blue", 9, "10.1.0.0/16", tenant)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := assigned(Compute(Input{Pools: tc.pools, Nodes: nodes("a"), Now: t0, Held: nothingHeld}))
			if !slices.Equal(got, tc.want) {
				t.Errorf("assigned %v, want %v", got, tc.want)
			}
		})
	}
}

// nsPool is a pool with a non-empty namespaceSelector (apis/poolchoice: never a node's pool).
func nsPool(name string, age int, bits int, cidrs ...string) Pool {
	p := pool(name, age, cidrs...)
	p.ForNamespaces, p.BlockBits = true, bits
	return p
}

func pending(node string, pods ...string) []PendingPod {
	var out []PendingPod
	for _, pp := range pods {
		name, pools, _ := strings.Cut(pp, ":")
		out = append(out, PendingPod{Namespace: "ns", Name: name, Node: node, Pools: strings.Split(pools, ",")})
	}
	return out
}

func TestComputeBlocksForPendingPods(t *testing.T) {
	dflt := pool("default", 9, "10.244.0.0/16")
	blue := nsPool("blue", 5, 30, "10.1.0.0/29") // two /30 blocks of 2 addresses each
	withFree := func(r Range, free int) Range { r.Free = free; return r }
	fenced := Node{Name: "a", OutOfService: true}
	for _, tc := range []struct {
		name        string
		pools       []Pool
		nodes       []Node
		ranges      []Range
		pending     []PendingPod
		want        []string
		wantWaiting []string // pod waits: "ns/name pool reason"
	}{
		{name: "a pod of a namespace pool on a node without its block: the node gets one (and its node block)",
			pools: []Pool{dflt, blue}, nodes: nodes("a"), pending: pending("a", "p:blue"),
			want: []string{"a=10.244.0.0/24", "a=10.1.0.0/30"}},
		{name: "a node holding a namespace pool's block still gets its node pool's block",
			pools: []Pool{dflt, blue}, nodes: nodes("a"), ranges: []Range{withFree(rng("blue-1", "10.1.0.0/30", "a", "blue"), 2)},
			want: []string{"a=10.244.0.0/24"}},
		{name: "a free address of the pool is left on the node: no block",
			pools: []Pool{dflt, blue}, nodes: nodes("a"),
			ranges:  []Range{rng("d", "10.244.0.0/24", "a", "default"), withFree(rng("blue-1", "10.1.0.0/30", "a", "blue"), 1)},
			pending: pending("a", "p:blue")},
		{name: "the node's block of the pool is full: a second block",
			pools: []Pool{dflt, blue}, nodes: nodes("a"),
			ranges:  []Range{rng("d", "10.244.0.0/24", "a", "default"), withFree(rng("blue-1", "10.1.0.0/30", "a", "blue"), 0)},
			pending: pending("a", "p:blue"), want: []string{"a=10.1.0.4/30"}},
		{name: "three pods, one free address, blocks of two: one more block serves the other two",
			pools: []Pool{dflt, blue}, nodes: nodes("a"),
			ranges:  []Range{rng("d", "10.244.0.0/24", "a", "default"), withFree(rng("blue-1", "10.1.0.0/30", "a", "blue"), 1)},
			pending: pending("a", "p1:blue", "p2:blue", "p3:blue"), want: []string{"a=10.1.0.4/30"}},
		{name: "pods on two nodes: a block each",
			pools: []Pool{blue}, nodes: nodes("a", "b"),
			pending: append(pending("a", "p:blue"), pending("b", "q:blue")...), want: []string{"a=10.1.0.0/30", "b=10.1.0.4/30"}},
		{name: "pool exhausted: every pod left waits, naming the pool",
			pools: []Pool{blue}, nodes: nodes("a", "b"),
			ranges:  []Range{withFree(rng("blue-1", "10.1.0.0/30", "a", "blue"), 0), withFree(rng("blue-2", "10.1.0.4/30", "b", "blue"), 0)},
			pending: pending("a", "p1:blue", "p2:blue"), wantWaiting: []string{"ns/p1 blue IPPoolExhausted", "ns/p2 blue IPPoolExhausted"}},
		{name: "the pod's first pool has a free address elsewhere only; its second has one here",
			pools: []Pool{blue, nsPool("green", 4, 30, "10.2.0.0/29")}, nodes: nodes("a"),
			ranges:  []Range{withFree(rng("green-1", "10.2.0.0/30", "a", "green"), 2)},
			pending: pending("a", "p:blue,green")},
		{name: "no pool of the pod can serve the node (its nodeSelector does not select it)",
			pools: []Pool{func() Pool { p := blue; p.Selector = labels.SelectorFromSet(labels.Set{"zone": "x"}); return p }()},
			nodes: nodes("a"), pending: pending("a", "p:blue"), wantWaiting: []string{"ns/p blue NoIPPoolForNode"}},
		// A dual-stack pod names a pool of each family (issue 39 item 2): each family is served
		// on its own — a free IPv4 address does not stand for the IPv6 one it needs too.
		{name: "a dual-stack pod: the IPv6 pool's block although its IPv4 pool has a free address",
			pools: []Pool{dflt, nsPool("v6", 4, 120, "fd00:10::/112")}, nodes: nodes("a"),
			ranges:  []Range{withFree(rng("d", "10.244.0.0/24", "a", "default"), 200)},
			pending: pending("a", "p:default,v6"), want: []string{"a=fd00:10::/120"}},
		{name: "a dual-stack pod on a node without either: a block of each family",
			pools: []Pool{nsPool("b4", 5, 30, "10.1.0.0/29"), nsPool("v6", 4, 120, "fd00:10::/112")}, nodes: nodes("a"),
			pending: pending("a", "p:b4,v6"), want: []string{"a=10.1.0.0/30", "a=fd00:10::/120"}},
		{name: "a fenced node gets no block for its pods",
			pools: []Pool{blue}, nodes: []Node{fenced}, pending: pending("a", "p:blue")},
		{name: "a pod on a node that is gone: nothing",
			pools: []Pool{blue}, nodes: nodes("b"), pending: pending("a", "p:blue")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := Compute(Input{Pools: tc.pools, Nodes: tc.nodes, Ranges: tc.ranges, Pending: tc.pending, Now: t0, Held: func(Range, string) string { return "in use" }})
			if got := assigned(plan); !slices.Equal(got, tc.want) {
				t.Errorf("assigned %v, want %v", got, tc.want)
			}
			for _, a := range plan.Assign {
				if a.Restricted != (a.Pool != "default") {
					t.Errorf("block %s of %s: Restricted %v; want it only on namespace pools' blocks", a.CIDR, a.Pool, a.Restricted)
				}
			}
			var waits []string
			for _, w := range plan.PodWaits {
				waits = append(waits, w.Namespace+"/"+w.Name+" "+w.Pool+" "+w.Reason)
				if !strings.Contains(w.Message, w.Pool) {
					t.Errorf("pod wait message %q does not name the pool %s", w.Message, w.Pool)
				}
			}
			if !slices.Equal(waits, tc.wantWaiting) {
				t.Errorf("pod waits %v, want %v", waits, tc.wantWaiting)
			}
			if len(plan.Release) > 0 {
				t.Errorf("released %v: a node's namespace pool block and its node pool block are not two blocks of a race", plan.Release)
			}
		})
	}
}

func TestComputeReleasesEmptyNamespaceBlocks(t *testing.T) {
	blue := nsPool("blue", 5, 30, "10.1.0.0/29")
	marked := func(r Range, since time.Time) Range { r.EmptySince = since; return r }
	block := rng("blue-1", "10.1.0.0/30", "a", "blue")
	for _, tc := range []struct {
		name        string
		pools       []Pool
		ranges      []Range
		held        string
		wantMark    string // "set", "clear" or ""
		wantRelease bool
	}{
		{name: "an empty block is marked", pools: []Pool{blue}, ranges: []Range{block}, wantMark: "set"},
		{name: "marked within releaseAfter: kept", pools: []Pool{blue}, ranges: []Range{marked(block, t0.Add(-time.Minute))}},
		{name: "marked past releaseAfter: released", pools: []Pool{blue}, ranges: []Range{marked(block, t0.Add(-6*time.Minute))}, wantRelease: true},
		{name: "held again: unmarked, kept", pools: []Pool{blue}, ranges: []Range{marked(block, t0.Add(-6*time.Minute))}, held: "pod ns/p holds 10.1.0.1", wantMark: "clear"},
		{name: "held: never marked", pools: []Pool{blue}, ranges: []Range{block}, held: "pod ns/p on node a has no IP yet"},
		{name: "a node pool's only block stays, however empty", pools: []Pool{pool("blue", 5, "10.1.0.0/29")}, ranges: []Range{marked(rng("blue-1", "10.1.0.0/24", "a", "blue"), t0.Add(-time.Hour))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var heldAsked []string
			plan := Compute(Input{Pools: tc.pools, Nodes: nodes("a"), Ranges: tc.ranges, Now: t0, Held: func(r Range, pendingOn string) string {
				heldAsked = append(heldAsked, r.Name+"@"+pendingOn)
				return tc.held
			}})
			mark := ""
			for _, m := range plan.Mark {
				if m.Annotation != jkev1.AnnotationEmptySince {
					t.Errorf("mark %+v: want the empty-since annotation", m)
				}
				mark = map[bool]string{true: "clear", false: "set"}[m.Since.IsZero()]
			}
			if mark != tc.wantMark {
				t.Errorf("mark %q, want %q (%+v)", mark, tc.wantMark, plan.Mark)
			}
			if got := len(plan.Release) == 1; got != tc.wantRelease {
				t.Errorf("released %v, want release %v", plan.Release, tc.wantRelease)
			}
			if tc.wantRelease && (plan.Release[0].Generation != 1 || plan.Release[0].NodeGone) {
				t.Errorf("release %+v: want generation 1 and the node's claims kept (it is alive)", plan.Release[0])
			}
			if tc.pools[0].ForNamespaces && !slices.Contains(heldAsked, "blue-1@a") {
				t.Errorf("Held asked %v: want it asked with the node's pending pods counted (blue-1@a)", heldAsked)
			}
		})
	}
}

// A node's block of a namespace pool and its node pool's block are not two blocks of one family
// that a race gave it: neither is released as an extra.
func TestComputeNamespaceBlockIsNoExtraBlock(t *testing.T) {
	plan := Compute(Input{Pools: []Pool{pool("default", 9, "10.244.0.0/16"), nsPool("blue", 5, 30, "10.1.0.0/29")}, Nodes: nodes("a"),
		Ranges: []Range{rng("a-default", "10.244.0.0/24", "a", "default"), rng("blue-1", "10.1.0.0/30", "a", "blue")},
		Now:    t0, Held: nothingHeld})
	if len(plan.Release) > 0 {
		t.Errorf("released %+v, want none (the empty blue block is only marked, and released after releaseAfter)", plan.Release)
	}
}

// TestComputeReturnsTheBlocksOfADeletedPool: a block whose pool no longer exists (or is being
// deleted) is never handed out again and goes back as soon as nothing holds it, under the same
// safety rule as an extra block of a race (Held with the node's pending pods); a block still in
// use stays with its node (served and routed) with a Warning, and a pool created again under
// the same name adopts the released block.
func TestComputeReturnsTheBlocksOfADeletedPool(t *testing.T) {
	orphan := rng("gone-10-244-5-0-24", "10.244.5.0/24", "a", "gone")
	deleting := pool("gone", 2, "10.244.5.0/24")
	deleting.Deleting = true
	released := orphan
	released.Node, released.Released, released.ReleasedGeneration, released.OwnerGeneration = "", true, 1, 1
	moved := orphan
	moved.OwnerGeneration = 3
	handWritten := orphan
	handWritten.Pool = ""
	deadNode := orphan
	deadNode.Node = "dead"
	other := pool("other", 1, "10.244.5.0/24")
	for _, tc := range []struct {
		name        string
		pools       []Pool
		nodes       []Node
		r           Range
		held        string
		wantRelease string // "" or the generation released at, as text
		wantWait    string
		wantAssign  []string
		wantMark    bool
	}{
		{name: "empty, on a live node: released at once, at generation + 1", nodes: nodes("a"), r: orphan, wantRelease: "1"},
		{name: "the pool is being deleted: the same", pools: []Pool{deleting}, nodes: nodes("a"), r: orphan, wantRelease: "1"},
		{name: "moved by failover, empty: released too (every block of the pool goes)", nodes: nodes("a"), r: moved, wantRelease: "4"},
		{name: "a pod holds an address: stays with its node, Warning", nodes: nodes("a"), r: orphan, held: "pod ns/x holds 10.244.5.7", wantWait: ReasonOrphanHeld},
		{name: "released: never handed out again, not even to a pool whose CIDR covers it", pools: []Pool{other}, nodes: nodes("b"), r: released},
		{name: "a pool created again under the same name adopts the released block", pools: []Pool{pool("gone", 0, "10.244.5.0/24")}, nodes: nodes("b"), r: released,
			wantAssign: []string{"b=10.244.5.0/24"}},
		{name: "a pool created again under the same name keeps the block still assigned", pools: []Pool{pool("gone", 0, "10.244.5.0/24")}, nodes: nodes("a"), r: orphan},
		{name: "a hand-written range is never touched", nodes: nodes("a"), r: handWritten},
		{name: "on a deleted node: the node-gone rule, after the default quarantine", r: deadNode, wantMark: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := Compute(Input{Pools: tc.pools, Nodes: tc.nodes, Ranges: []Range{tc.r}, Now: t0,
				Held: func(r Range, pending string) string {
					if pending != r.Node {
						t.Errorf("Held(%s, %q): a deleted pool's block must be checked with its node's pending pods", r.Name, pending)
					}
					return tc.held
				},
				NodeGone: func(string, time.Time) nodegone.Verdict { return nodegone.Verdict{Gone: true} }})
			got := ""
			if len(plan.Release) == 1 {
				got = fmt.Sprint(plan.Release[0].Generation)
				if plan.Release[0].Node != tc.r.Node || plan.Release[0].Pool != tc.r.Pool {
					t.Errorf("release %+v: must name the node and pool it was read with", plan.Release[0])
				}
			}
			if got != tc.wantRelease || len(plan.Release) > 1 {
				t.Errorf("released %+v, want at generation %q", plan.Release, tc.wantRelease)
			}
			wait := ""
			if len(plan.Waits) == 1 {
				wait = plan.Waits[0].Reason
				if !plan.Waits[0].Warning || !strings.Contains(plan.Waits[0].Message, "is deleted") || !strings.Contains(plan.Waits[0].Message, tc.held) {
					t.Errorf("wait %+v: want a Warning naming the deleted pool and what holds the block", plan.Waits[0])
				}
				if plan.Requeue != heldRecheck {
					t.Errorf("requeue %v, want %v", plan.Requeue, heldRecheck)
				}
			}
			if wait != tc.wantWait {
				t.Errorf("waits %+v, want reason %q", plan.Waits, tc.wantWait)
			}
			if a := assigned(plan); !slices.Equal(a, tc.wantAssign) {
				t.Errorf("assigned %v, want %v", a, tc.wantAssign)
			}
			if tc.wantMark != (len(plan.Mark) == 1 && plan.Mark[0].Annotation == jkev1.AnnotationNodeGoneSince && plan.Requeue == orphanQuarantine) {
				t.Errorf("marks %+v requeue %v, want a node-gone mark: %v", plan.Mark, plan.Requeue, tc.wantMark)
			}
		})
	}
}
