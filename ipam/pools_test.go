package ipam

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// A range of a namespace pool (Restricted) gives its addresses only to requests naming its
// pool; a request naming pools takes an address of the first of them that has one here and of
// no other range; a requested IP (a static IP) keeps its pool, whatever the request names.
func TestAllocateByPool(t *testing.T) {
	ranges := []Range{
		{Subnet: pfx("10.0.0.0/30")},                                                  // hand-written: 10.0.0.1-2
		{Subnet: pfx("10.1.0.0/30"), Pool: "default"},                                 // node pool: 10.1.0.1-2
		{Subnet: pfx("10.2.0.0/30"), Pool: "blue", Restricted: true},                  // 10.2.0.1-2
		{Subnet: pfx("10.3.0.0/30"), Pool: "green", Restricted: true},                 // 10.3.0.1-2
		{Subnet: pfx("10.4.0.0/30"), Pool: "full", Restricted: true},                  // filled below
		{Subnet: pfx("10.5.0.0/31"), Pool: "blue", Restricted: true, Draining: false}, // 10.5.0.0-1
	}
	for _, tc := range []struct {
		name      string
		pools     []string
		ip        string
		want      []string // the addresses successive pods get, in order ("!" + error text: refused)
		wantError string
	}{
		{name: "no pool named: never an address of a restricted range",
			want: []string{"10.0.0.1", "10.0.0.2", "10.1.0.1", "10.1.0.2", "!no free IP address in range(s) 10.0.0.0/30, 10.1.0.0/30"}},
		{name: "one pool: only its ranges, all of them",
			pools: []string{"blue"}, want: []string{"10.2.0.1", "10.2.0.2", "10.5.0.0", "10.5.0.1", "!no free IP address of IPPool(s) blue on this node: its ranges of them here (10.2.0.0/30, 10.5.0.0/31) are full"}},
		{name: "two pools, in the order the pod names them",
			pools: []string{"green", "blue"}, want: []string{"10.3.0.1", "10.3.0.2", "10.2.0.1"}},
		{name: "a pool with no range here: the message says so and what gives one",
			pools: []string{"red"}, want: []string{"!no free IP address of IPPool(s) red on this node: this node holds no range of them yet; the range allocator"}},
		{name: "a node pool named explicitly",
			pools: []string{"default"}, want: []string{"10.1.0.1", "10.1.0.2", "!IPPool(s) default"}},
		{name: "a requested IP keeps its pool: of a restricted range, no pool named",
			ip: "10.2.0.2", want: []string{"10.2.0.2"}},
		{name: "a requested IP keeps its pool: of another pool than the one named",
			ip: "10.1.0.2", pools: []string{"blue"}, want: []string{"10.1.0.2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := openTest(t, "", nil)
			for _, r := range ranges {
				mustRange(t, d, r)
			}
			for i, a := range []string{"10.4.0.1", "10.4.0.2"} {
				allocate(t, d, AllocateRequest{Attachment: att("full-" + a), Pod: pod("ns", "full"+string(rune('0'+i))), IP: ip(a)})
			}
			for i, want := range tc.want {
				r := AllocateRequest{Attachment: att("c" + string(rune('a'+i))), Pod: pod("ns", "p"+string(rune('a'+i))), Pools: tc.pools}
				if tc.ip != "" {
					r.IP = ip(tc.ip)
				}
				got, _, err := d.Allocate(r)
				if msg, refused := strings.CutPrefix(want, "!"); refused {
					if err == nil || !errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), msg) {
						t.Fatalf("pod %d: got %v, %v; want an ErrExhausted containing %q", i, got.IP, err, msg)
					}
					continue
				}
				if err != nil || got.IP.String() != want {
					t.Fatalf("pod %d: got %v, %v; want %s", i, got.IP, err, want)
				}
			}
		})
	}
}

// The agent's ranges carry their pool: a change of pool or restriction is a change of the range.
func TestSetNodeRangesFollowsPool(t *testing.T) {
	d := openTest(t, "", nil)
	if _, err := d.SetNodeRanges([]Range{{Subnet: pfx("10.2.0.0/30"), Pool: "blue"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.SetNodeRanges([]Range{{Subnet: pfx("10.2.0.0/30"), Pool: "blue", Restricted: true}}); err != nil {
		t.Fatal(err)
	}
	rs, err := d.Ranges()
	if err != nil || len(rs) != 1 || !rs[0].Restricted || rs[0].Pool != "blue" {
		t.Fatalf("ranges %+v, %v: want 10.2.0.0/30 of blue, restricted", rs, err)
	}
	if _, _, err := d.Allocate(AllocateRequest{Attachment: att("x"), Pod: pod("ns", "x")}); !errors.Is(err, ErrExhausted) {
		t.Errorf("a pod naming no pool got an address of a restricted range: %v", err)
	}
}

// A pod naming no pool takes its namespace's pools as the agent recorded them only when the
// caller asks (NamespacePoolsFromStore: the plugin could not read the API server); otherwise the
// table, which lags the API, is not read. The table is rewritten only when it changes.
func TestAllocateByNamespacePools(t *testing.T) {
	d := openTest(t, "", nil)
	mustRange(t, d, Range{Subnet: pfx("10.1.0.0/29"), Pool: "default"})
	mustRange(t, d, Range{Subnet: pfx("10.2.0.0/30"), Pool: "blue", Restricted: true})
	if changed, err := d.SetNamespacePools(map[string][]string{"tenant": {"blue"}, "empty": nil}); err != nil || !changed {
		t.Fatalf("SetNamespacePools: %v, %v", changed, err)
	}
	if changed, err := d.SetNamespacePools(map[string][]string{"tenant": {"blue"}}); err != nil || changed {
		t.Fatalf("the same table again: changed %v, %v; want no write", changed, err)
	}
	if got, _ := d.NamespacePools(); len(got) != 1 || got["tenant"][0] != "blue" {
		t.Fatalf("NamespacePools %v", got)
	}
	if a := allocate(t, d, AllocateRequest{Attachment: att("t0"), Pod: pod("tenant", "p0")}); !pfx("10.1.0.0/29").Contains(a.IP) {
		t.Errorf("tenant pod, its pools decided by the caller (none): got %s, want the node pool's 10.1.0.0/29 (the table is not read)", a.IP)
	}
	if a := allocate(t, d, AllocateRequest{Attachment: att("t"), Pod: pod("tenant", "p"), NamespacePoolsFromStore: true}); !pfx("10.2.0.0/30").Contains(a.IP) {
		t.Errorf("tenant pod got %s, want an address of blue's 10.2.0.0/30", a.IP)
	}
	if a := allocate(t, d, AllocateRequest{Attachment: att("o"), Pod: pod("other", "p"), NamespacePoolsFromStore: true}); !pfx("10.1.0.0/29").Contains(a.IP) {
		t.Errorf("other namespace's pod got %s, want an address of 10.1.0.0/29", a.IP)
	}
	if a := allocate(t, d, AllocateRequest{Attachment: att("x"), Pod: pod("tenant", "x"), Pools: []string{"default"}, NamespacePoolsFromStore: true}); !pfx("10.1.0.0/29").Contains(a.IP) {
		t.Errorf("tenant pod naming default got %s: its own annotation wins over its namespace's pools", a.IP)
	}
	if _, err := d.SetNamespacePools(nil); err != nil {
		t.Fatal(err)
	}
	if a := allocate(t, d, AllocateRequest{Attachment: att("t2"), Pod: pod("tenant", "p2"), NamespacePoolsFromStore: true}); !pfx("10.1.0.0/29").Contains(a.IP) {
		t.Errorf("after the table emptied the tenant pod got %s, want the node pool", a.IP)
	}
}

// A dual-stack pod names a pool of each family (PoolFamilies 4 and 6): while its IPv6 pool has no
// block on the node yet it gets no address at all (ErrExhausted naming the pools: the CNI waits for
// the block), never an IPv4 address alone; once the block is there it gets one of each.
func TestAllocatePodWaitsForEveryFamilyOfItsPools(t *testing.T) {
	d := openTest(t, "", nil)
	mustRange(t, d, Range{Subnet: pfx("10.1.0.0/30"), Pool: "default"})
	req := AllocateRequest{Attachment: att("c-ds"), Pod: pod("ns", "ds"), Pools: []string{"default", "default-v6"}, PoolFamilies: []int{4, 6}}
	got, err := d.AllocatePod(req, netip.Addr{})
	if err == nil || !errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), "default-v6") {
		t.Fatalf("AllocatePod without the IPv6 block: %v, %v; want ErrExhausted naming the pools", got, err)
	}
	if as, _ := d.Allocations(); len(as) != 0 {
		t.Fatalf("a failed dual-stack allocation left %v allocated", as)
	}
	mustRange(t, d, Range{Subnet: pfx("fd00:10::/120"), Pool: "default-v6", Restricted: true})
	got, err = d.AllocatePod(req, netip.Addr{})
	if err != nil || len(got) != 2 || got[0].IP.String() != "10.1.0.1" || got[1].IP.String() != "fd00:10::1" {
		t.Fatalf("AllocatePod with both blocks: %+v, %v; want 10.1.0.1 and fd00:10::1", got, err)
	}
}
