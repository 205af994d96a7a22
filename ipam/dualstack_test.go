package ipam

import (
	"errors"
	"net/netip"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func dualStackDB(t *testing.T) *DB {
	t.Helper()
	d := openTest(t, "", nil)
	mustRange(t, d, Range{Subnet: pfx("10.60.0.0/29")})
	mustRange(t, d, Range{Subnet: pfx("fd00:60::/125")})
	return d
}

func allocateFamily(t *testing.T, d *DB, id string, p PodRef, family int) Allocation {
	t.Helper()
	r := req(id, p)
	r.Family = family
	return allocate(t, d, r)
}

// A dual-stack attachment holds one address of each family: one request per family, each
// repeated ADD answered with the address of its family, DEL (Release) frees both, and a static
// pod's DEL keeps both reserved, which its next attachment gets back.
func TestDualStackAttachment(t *testing.T) {
	d := dualStackDB(t)
	web := pod("ns", "web-0")
	v4 := allocateFamily(t, d, "c1", web, 4)
	v6 := allocateFamily(t, d, "c1", web, 6)
	if family(v4.IP) != 4 || family(v6.IP) != 6 || v4.Subnet != pfx("10.60.0.0/29") || v6.Subnet != pfx("fd00:60::/125") {
		t.Fatalf("allocations %v (%v), %v (%v)", v4.IP, v4.Subnet, v6.IP, v6.Subnet)
	}
	// Repeated ADD: the same address per family, not a new one.
	for _, want := range []Allocation{v4, v6} {
		r := req("c1", web)
		r.Family = family(want.IP)
		again, created, err := d.Allocate(r)
		if err != nil || created || again.IP != want.IP {
			t.Fatalf("repeated IPv%d allocation: %v created=%v %v, want %v", r.Family, again.IP, created, err, want.IP)
		}
	}
	// A single-stack caller repeating its ADD gets the first address, as before.
	if again, created, err := d.Allocate(req("c1", web)); err != nil || created || again.IP != v4.IP {
		t.Fatalf("repeated single-stack allocation: %v created=%v %v", again.IP, created, err)
	}
	all, err := d.GetAll(att("c1"))
	if err != nil || len(all) != 2 || all[0].IP != v4.IP || all[1].IP != v6.IP {
		t.Fatalf("GetAll = %+v, %v", all, err)
	}
	// Another pod gets other addresses of each family.
	other4, other6 := allocateFamily(t, d, "c2", pod("ns", "db-0"), 4), allocateFamily(t, d, "c2", pod("ns", "db-0"), 6)
	if other4.IP == v4.IP || other6.IP == v6.IP {
		t.Fatalf("two pods share an address: %v %v", other4.IP, other6.IP)
	}
	// DEL of a static pod keeps both reserved for it.
	released, err := d.ReleaseAll(att("c1"), true)
	if err != nil || len(released) != 2 {
		t.Fatalf("ReleaseAll = %+v, %v", released, err)
	}
	if ips, err := d.PodReservations(web); err != nil || len(ips) != 2 || ips[0] != v4.IP || ips[1] != v6.IP {
		t.Fatalf("PodReservations = %v, %v; want %v %v", ips, err, v4.IP, v6.IP)
	}
	if all, _ := d.GetAll(att("c1")); len(all) != 0 {
		t.Fatalf("the released attachment still holds %+v", all)
	}
	// Nobody else gets them.
	for i := 0; i < 3; i++ {
		for _, f := range []int{4, 6} {
			r := req("x"+string(rune('a'+i)), pod("ns", "other"))
			r.Family = f
			if a, _, err := d.Allocate(r); err == nil && (a.IP == v4.IP || a.IP == v6.IP) {
				t.Fatalf("another pod got the reserved %v", a.IP)
			}
		}
	}
	// The recreated pod gets both back, each family its own.
	if back := allocateFamily(t, d, "c3", web, 6); back.IP != v6.IP {
		t.Fatalf("recreated pod's IPv6 = %v, want %v", back.IP, v6.IP)
	}
	if back := allocateFamily(t, d, "c3", web, 4); back.IP != v4.IP {
		t.Fatalf("recreated pod's IPv4 = %v, want %v", back.IP, v4.IP)
	}
	// DEL without a StaticIP frees both.
	if released, err := d.ReleaseAll(att("c3"), false); err != nil || len(released) != 2 {
		t.Fatalf("ReleaseAll = %+v, %v", released, err)
	}
	if ips, _ := d.PodReservations(web); len(ips) != 0 {
		t.Fatalf("reservations left: %v", ips)
	}
	checkIndexes(t, d)
}

// A request's family is held to: a requested IP of the other family is refused, a family with
// no range here is exhausted, and next free never crosses families.
func TestDualStackFamilyRules(t *testing.T) {
	d := openTest(t, "", nil)
	mustRange(t, d, Range{Subnet: pfx("10.61.0.0/30")})
	r := req("c1", pod("ns", "a"))
	r.Family, r.IP = 6, ip("10.61.0.1")
	if _, _, err := d.Allocate(r); !errors.Is(err, ErrInvalid) {
		t.Fatalf("IPv6 asked with an IPv4 address: %v", err)
	}
	r.IP = netip.Addr{}
	if _, _, err := d.Allocate(r); !errors.Is(err, ErrExhausted) {
		t.Fatalf("IPv6 on a node with IPv4 ranges only: %v, want ErrExhausted", err)
	}
	// The requested dual-stack pair, each by its own request naming its family (a dual-stack
	// caller; one naming none is answered with the attachment's one address, below).
	mustRange(t, d, Range{Subnet: pfx("fd00:61::/126")})
	for _, want := range []netip.Addr{ip("10.61.0.2"), ip("fd00:61::2")} {
		r := req("c2", pod("ns", "b"))
		r.IP, r.Family = want, family(want)
		if got := allocate(t, d, r); got.IP != want {
			t.Fatalf("requested %v, got %v", want, got.IP)
		}
	}
	// A single-stack caller asking for another address on a held attachment: refused, as before.
	r = req("c2", pod("ns", "b"))
	r.IP = ip("10.61.0.1")
	if _, _, err := d.Allocate(r); !errors.Is(err, ErrAttachmentHasIP) {
		t.Fatalf("another IPv4 address for a held attachment: %v", err)
	}
	// StaticIP reservations: one per pod and family; two of one family refused whole.
	if _, err := d.SyncReservations([]Reservation{{IP: ip("10.61.0.1"), Pod: pod("ns", "s")}, {IP: ip("fd00:61::1"), Pod: pod("ns", "s")}}); err != nil {
		t.Fatalf("a dual-stack pod's reservations: %v", err)
	}
	if ips, _ := d.PodReservations(pod("ns", "s")); len(ips) != 2 {
		t.Fatalf("PodReservations = %v", ips)
	}
	if _, err := d.SyncReservations([]Reservation{{IP: ip("10.61.0.1"), Pod: pod("ns", "s")}, {IP: ip("10.61.0.3"), Pod: pod("ns", "s")}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("two IPv4 reservations of one pod: %v", err)
	}
	// Reserve replaces the pod's reservation of the same family only.
	if err := d.Reserve(Reservation{IP: ip("fd00:61::3"), Pod: pod("ns", "s")}); err != nil {
		t.Fatal(err)
	}
	if ips, _ := d.PodReservations(pod("ns", "s")); len(ips) != 2 || ips[0] != ip("10.61.0.1") || ips[1] != ip("fd00:61::3") {
		t.Fatalf("after Reserve of another IPv6 address: %v", ips)
	}
	checkIndexes(t, d)
}

// A store written before dual-stack holds an IPv6-only attachment and reservation under the plain
// keys; a dual-stack request adds the IPv4 address beside them, and removing the first moves the
// second into its place.
func TestDualStackIndexKeepsSingleStackStores(t *testing.T) {
	d := openTest(t, "", nil)
	mustRange(t, d, Range{Subnet: pfx("fd00:62::/125")})
	old := allocate(t, d, req("c1", pod("ns", "a"))) // a single-stack IPv6 allocation
	mustRange(t, d, Range{Subnet: pfx("10.62.0.0/29")})
	v4 := allocateFamily(t, d, "c1", pod("ns", "a"), 4)
	if err := d.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAttach)
		if got := keyIP(b.Get(att("c1").key())); got != old.IP {
			t.Errorf("plain key holds %v, want the first address %v", got, old.IP)
		}
		if got := keyIP(b.Get(secondKey(att("c1").key()))); got != v4.IP {
			t.Errorf("second key holds %v, want %v", got, v4.IP)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := d.Unallocate(old); err != nil {
		t.Fatal(err)
	}
	if a, found, err := d.Get(att("c1")); err != nil || !found || a.IP != v4.IP {
		t.Fatalf("after removing the first address, Get = %v %v %v; want %v", a.IP, found, err, v4.IP)
	}
	if err := d.view(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketAttach).Get(secondKey(att("c1").key())); v != nil {
			t.Errorf("a second entry is left alone: %v", keyIP(v))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// GC keeps the second entries of live attachments and drops those of dead ones.
	v6 := allocateFamily(t, d, "c1", pod("ns", "a"), 6)
	if freed, err := d.GC(GCOptions{Live: []Attachment{att("c1")}}); err != nil || len(freed) != 0 {
		t.Fatalf("GC of a live dual-stack attachment freed %+v, %v", freed, err)
	}
	if all, _ := d.GetAll(att("c1")); len(all) != 2 || all[1].IP != v6.IP {
		t.Fatalf("after GC: %+v", all)
	}
	if freed, err := d.GC(GCOptions{}); err != nil || len(freed) != 2 {
		t.Fatalf("GC of a dead dual-stack attachment freed %+v, %v", freed, err)
	}
	checkIndexes(t, d)
}

// checkIndexes: every index entry points at an allocation/reservation of its owner, and a
// second entry exists only beside a first of the other family.
func checkIndexes(t *testing.T, d *DB) {
	t.Helper()
	if err := d.view(func(tx *bolt.Tx) error {
		tr := d.txn(tx)
		for _, b := range []*bolt.Bucket{tr.attach, tr.byPod} {
			if err := b.ForEach(func(k, v []byte) error {
				owner := indexOwner(k)
				if len(owner) != len(k) {
					first := b.Get(owner)
					if first == nil || family(keyIP(first)) == family(keyIP(v)) {
						t.Errorf("second entry %q (%v) beside %v", k, keyIP(v), keyIP(first))
					}
				}
				return nil
			}); err != nil {
				return err
			}
		}
		return tr.attach.ForEach(func(k, v []byte) error {
			a, err := tr.alloc(keyIP(v))
			if err != nil || a == nil || string(a.Attachment.key()) != string(indexOwner(k)) {
				t.Errorf("attachment entry %q -> %v has no allocation of its own (%+v, %v)", k, keyIP(v), a, err)
			}
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
}

// AllocatePod decides the families in the transaction: a node with ranges of both families
// gives both (IPv4 first), one family's ranges one address, requested and reserved addresses
// decide the primary, a pod of pools takes the families of its pools, and a failure of one
// family leaves nothing allocated.
func TestAllocatePod(t *testing.T) {
	d := dualStackDB(t)
	addrs := func(as []Allocated) []netip.Addr {
		var out []netip.Addr
		for _, a := range as {
			out = append(out, a.IP)
		}
		return out
	}
	got, err := d.AllocatePod(req("c1", pod("ns", "a")), netip.Addr{})
	if err != nil || len(got) != 2 || family(got[0].IP) != 4 || family(got[1].IP) != 6 || !got[0].Created || !got[1].Created {
		t.Fatalf("AllocatePod on a dual-stack node = %+v, %v", got, err)
	}
	again, err := d.AllocatePod(req("c1", pod("ns", "a")), netip.Addr{})
	if err != nil || len(again) != 2 || again[0].IP != got[0].IP || again[1].IP != got[1].IP || again[0].Created || again[1].Created {
		t.Fatalf("repeated AllocatePod = %+v, %v", again, err)
	}
	// Requested pair, IPv6 primary.
	r := req("c2", pod("ns", "b"))
	r.IP = ip("fd00:60::6")
	got, err = d.AllocatePod(r, ip("10.60.0.6"))
	if err != nil || len(got) != 2 || got[0].IP != ip("fd00:60::6") || got[1].IP != ip("10.60.0.6") {
		t.Fatalf("requested pair = %v, %v", addrs(got), err)
	}
	// Two of one family refused.
	r = req("c3", pod("ns", "c"))
	r.IP = ip("10.60.0.5")
	if _, err := d.AllocatePod(r, ip("10.60.0.4")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("two IPv4 addresses: %v", err)
	}
	// Both or none: the IPv6 range full, the IPv4 address is not kept.
	before, _ := d.Allocations()
	var fill []netip.Addr
	for i := 0; ; i++ {
		r := req("fill"+string(rune('a'+i)), pod("ns", "fill"+string(rune('a'+i))))
		r.Family = 6
		a, _, err := d.Allocate(r)
		if err != nil {
			break
		}
		fill = append(fill, a.IP)
	}
	if _, err := d.AllocatePod(req("c4", pod("ns", "d")), netip.Addr{}); !errors.Is(err, ErrExhausted) {
		t.Fatalf("IPv6 exhausted: %v, want ErrExhausted", err)
	}
	if after, _ := d.Allocations(); len(after) != len(before)+len(fill) {
		t.Fatalf("a failed dual-stack allocation left %d allocations behind", len(after)-len(before)-len(fill))
	}
	// A node with one family's ranges gives one address; pools decide the families too.
	single := openTest(t, "", nil)
	mustRange(t, single, Range{Subnet: pfx("fd00:63::/125")})
	mustRange(t, single, Range{Subnet: pfx("10.63.0.0/29"), Pool: "v4-only", Restricted: true})
	if got, err := single.AllocatePod(req("c1", pod("ns", "a")), netip.Addr{}); err != nil || len(got) != 1 || family(got[0].IP) != 6 {
		t.Fatalf("IPv6-only for a pod of no pool = %v, %v", addrs(got), err)
	}
	r = req("c2", pod("ns", "b"))
	r.Pools = []string{"v4-only"}
	if got, err := single.AllocatePod(r, netip.Addr{}); err != nil || len(got) != 1 || got[0].Subnet != pfx("10.63.0.0/29") {
		t.Fatalf("a pod of an IPv4 pool = %v, %v", addrs(got), err)
	}
	checkIndexes(t, d)
	checkIndexes(t, single)
}
