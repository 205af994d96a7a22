package ipam

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time          { return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.t = c.t.Add(d) }

func openTest(t *testing.T, path string, clock *fakeClock) *DB {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "ipam.db")
	}
	opts := Options{Path: path, OpenTimeout: 2 * time.Second, NoSync: true}
	if clock != nil {
		opts.Now = clock.Now
	}
	d, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func mustRange(t *testing.T, d *DB, r Range) {
	t.Helper()
	if err := d.AddRange(r); err != nil {
		t.Fatalf("AddRange(%v): %v", r.Subnet, err)
	}
}

func ip(s string) netip.Addr     { return netip.MustParseAddr(s) }
func pfx(s string) netip.Prefix  { return netip.MustParsePrefix(s) }
func att(id string) Attachment   { return Attachment{ContainerID: id, IfName: "eth0"} }
func pod(ns, name string) PodRef { return PodRef{Namespace: ns, Name: name, UID: name + "-uid"} }
func req(id string, p PodRef) AllocateRequest {
	return AllocateRequest{Attachment: att(id), Pod: p}
}

func allocate(t *testing.T, d *DB, r AllocateRequest) Allocation {
	t.Helper()
	a, _, err := d.Allocate(r)
	if err != nil {
		t.Fatalf("Allocate(%+v): %v", r, err)
	}
	return a
}

func TestNextFreeSkipsGatewayExcludedAndReserved(t *testing.T) {
	d := openTest(t, "", nil)
	mustRange(t, d, Range{Subnet: pfx("10.1.0.0/29"), Gateway: ip("10.1.0.1"), Exclude: []netip.Addr{ip("10.1.0.3")}})
	if err := d.Reserve(Reservation{IP: ip("10.1.0.4"), Pod: pod("ns", "web-0")}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := range 3 {
		a := allocate(t, d, req("c"+string(rune('a'+i)), pod("ns", "p"+string(rune('a'+i)))))
		got = append(got, a.IP.String())
	}
	// .0 network, .1 gateway, .3 excluded, .4 reserved, .7 broadcast.
	if want := "10.1.0.2 10.1.0.5 10.1.0.6"; strings.Join(got, " ") != want {
		t.Fatalf("got %v, want %s", got, want)
	}
	_, _, err := d.Allocate(req("cd", pod("ns", "pd")))
	var ex *ExhaustedError
	if !errors.As(err, &ex) || !errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), "10.1.0.0/29") {
		t.Fatalf("want ExhaustedError naming the range, got %v", err)
	}
	// The reservation's owner still gets its IP without asking for it.
	if a := allocate(t, d, req("c-web", pod("ns", "web-0"))); a.IP != ip("10.1.0.4") {
		t.Fatalf("reserved pod got %s, want 10.1.0.4", a.IP)
	}
}

func TestAllocateRequestedIP(t *testing.T) {
	d := openTest(t, "", nil)
	mustRange(t, d, Range{Subnet: pfx("10.2.0.0/24"), Gateway: ip("10.2.0.1"), Exclude: []netip.Addr{ip("10.2.0.9")}})
	if err := d.Reserve(Reservation{IP: ip("10.2.0.50"), Pod: pod("ns", "web-1")}); err != nil {
		t.Fatal(err)
	}
	a := allocate(t, d, AllocateRequest{Attachment: att("c1"), Pod: pod("ns", "a"), IP: ip("10.2.0.20")})
	if a.IP != ip("10.2.0.20") || a.Subnet != pfx("10.2.0.0/24") {
		t.Fatalf("got %+v", a)
	}
	// Reserved for the same pod: granted, and the reservation stays.
	if a := allocate(t, d, AllocateRequest{Attachment: att("c2"), Pod: pod("ns", "web-1"), IP: ip("10.2.0.50")}); a.IP != ip("10.2.0.50") {
		t.Fatalf("got %s", a.IP)
	}
	cases := []struct {
		name    string
		r       AllocateRequest
		is      error
		message string
	}{
		{"held by another pod", AllocateRequest{Attachment: att("c3"), Pod: pod("ns", "b"), IP: ip("10.2.0.20")}, ErrInUse, "in use by pod ns/a (container c1, interface eth0)"},
		{"reserved for another pod", AllocateRequest{Attachment: att("c3"), Pod: pod("ns", "b"), IP: ip("10.2.0.50")}, ErrInUse, "in use by pod ns/web-1"},
		{"outside every range", AllocateRequest{Attachment: att("c3"), Pod: pod("ns", "b"), IP: ip("10.3.0.5")}, ErrOutOfRange, "10.3.0.5 is outside every range of this node (10.2.0.0/24)"},
		{"gateway", AllocateRequest{Attachment: att("c3"), Pod: pod("ns", "b"), IP: ip("10.2.0.1")}, ErrNotAllocatable, "gateway"},
		{"excluded", AllocateRequest{Attachment: att("c3"), Pod: pod("ns", "b"), IP: ip("10.2.0.9")}, ErrNotAllocatable, "excluded"},
		{"broadcast", AllocateRequest{Attachment: att("c3"), Pod: pod("ns", "b"), IP: ip("10.2.0.255")}, ErrNotAllocatable, "outside"},
	}
	before, _ := d.Allocations()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := d.Allocate(tc.r)
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("got %v, want %v containing %q", err, tc.is, tc.message)
			}
		})
	}
	after, _ := d.Allocations()
	if len(before) != len(after) {
		t.Fatalf("failed requests changed allocations: %d -> %d", len(before), len(after))
	}
}

func TestAllocateIsIdempotentPerAttachment(t *testing.T) {
	d := openTest(t, "", nil)
	mustRange(t, d, Range{Subnet: pfx("10.4.0.0/24")})
	a1, created1, err := d.Allocate(req("c1", pod("ns", "a")))
	if err != nil || !created1 {
		t.Fatalf("first: %v created=%v", err, created1)
	}
	a2, created2, err := d.Allocate(req("c1", pod("ns", "a")))
	if err != nil || created2 || a2.IP != a1.IP {
		t.Fatalf("repeat: %+v created=%v err=%v, first %s", a2, created2, err, a1.IP)
	}
	_, _, err = d.Allocate(AllocateRequest{Attachment: att("c1"), Pod: pod("ns", "a"), IP: ip("10.4.0.77")})
	if !errors.Is(err, ErrAttachmentHasIP) {
		t.Fatalf("repeat with another IP: %v", err)
	}
	// Another interface of the same container is another attachment.
	b, _, err := d.Allocate(AllocateRequest{Attachment: Attachment{ContainerID: "c1", IfName: "net1"}, Pod: pod("ns", "a")})
	if err != nil || b.IP == a1.IP {
		t.Fatalf("second interface: %+v %v", b, err)
	}
}

func TestSamePodNameTakesOverStaleAttachment(t *testing.T) {
	d := openTest(t, "", nil)
	mustRange(t, d, Range{Subnet: pfx("10.5.0.0/24")})
	allocate(t, d, AllocateRequest{Attachment: att("old"), Pod: pod("ns", "web-0"), IP: ip("10.5.0.10")})
	newPod := PodRef{Namespace: "ns", Name: "web-0", UID: "second-incarnation"}
	a := allocate(t, d, AllocateRequest{Attachment: att("new"), Pod: newPod, IP: ip("10.5.0.10")})
	if a.IP != ip("10.5.0.10") || a.Pod.UID != "second-incarnation" {
		t.Fatalf("got %+v", a)
	}
	if _, found, _ := d.Get(att("old")); found {
		t.Fatal("stale attachment still holds the IP")
	}
	all, _ := d.Allocations()
	if len(all) != 1 {
		t.Fatalf("want one allocation, got %+v", all)
	}
}

func TestQuarantine(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	path := filepath.Join(t.TempDir(), "ipam.db")
	d, err := Open(Options{Path: path, Now: clock.Now, Quarantine: 10 * time.Second, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	mustRange(t, d, Range{Subnet: pfx("10.6.0.0/30")}) // two hosts: .1 and .2
	a := allocate(t, d, req("c1", pod("ns", "a")))
	if _, _, err := d.Release(att("c1"), false); err != nil {
		t.Fatal(err)
	}
	b := allocate(t, d, req("c2", pod("ns", "b")))
	if b.IP == a.IP {
		t.Fatalf("just-released %s was handed out again inside the quarantine", a.IP)
	}
	// Only the quarantined IP is left: it is given rather than failing.
	c := allocate(t, d, req("c3", pod("ns", "c")))
	if c.IP != a.IP {
		t.Fatalf("got %s, want the quarantined %s as last resort", c.IP, a.IP)
	}
	// An explicitly requested IP (annotation, IP=, ips) is quarantined too: a just-freed
	// address does not go to another pod by asking for it — try again later.
	d.Release(att("c3"), false)
	_, _, err = d.Allocate(AllocateRequest{Attachment: att("c4"), Pod: pod("ns", "d"), IP: a.IP})
	var qe *QuarantinedError
	if !errors.Is(err, ErrQuarantined) || !errors.As(err, &qe) || qe.IP != a.IP {
		t.Fatalf("requested %s inside its quarantine: err %v, want ErrQuarantined", a.IP, err)
	}
	if all, _ := d.Allocations(); len(all) != 1 {
		t.Fatalf("a refused request left allocations: %+v", all)
	}
	// A reservation for the requesting pod wins over the quarantine (its StaticIP names it).
	if err := d.Reserve(Reservation{IP: a.IP, Pod: pod("ns", "e")}); err != nil {
		t.Fatal(err)
	}
	if got := allocate(t, d, AllocateRequest{Attachment: att("c5"), Pod: pod("ns", "e"), IP: a.IP}); got.IP != a.IP {
		t.Fatalf("pod e requested its reserved %s, got %s", a.IP, got.IP)
	}
	d.Release(att("c5"), false)
	if _, err := d.SyncReservations(nil); err != nil { // e's StaticIP is gone
		t.Fatal(err)
	}
	// Once the quarantine is over, the request is honored.
	clock.t = clock.t.Add(10 * time.Second)
	if got := allocate(t, d, AllocateRequest{Attachment: att("c4"), Pod: pod("ns", "d"), IP: a.IP}); got.IP != a.IP {
		t.Fatalf("requested %s after its quarantine, got %s", a.IP, got.IP)
	}
}

func TestReleaseKeepsReservation(t *testing.T) {
	d := openTest(t, "", nil)
	mustRange(t, d, Range{Subnet: pfx("10.7.0.0/29")})
	a := allocate(t, d, req("c1", pod("ns", "web-0")))
	rel, found, err := d.Release(att("c1"), true)
	if err != nil || !found || rel.IP != a.IP {
		t.Fatalf("Release: %+v %v %v", rel, found, err)
	}
	rs, _ := d.Reservations()
	if len(rs) != 1 || rs[0].IP != a.IP || rs[0].Pod.Key() != "ns/web-0" || rs[0].Source != SourceRelease {
		t.Fatalf("reservations %+v", rs)
	}
	if _, _, err := d.Allocate(AllocateRequest{Attachment: att("c2"), Pod: pod("ns", "other"), IP: a.IP}); !errors.Is(err, ErrInUse) {
		t.Fatalf("another pod took a reserved IP: %v", err)
	}
	for i := range 4 {
		if o := allocate(t, d, req("x"+string(rune('0'+i)), pod("ns", "x"+string(rune('0'+i))))); o.IP == a.IP {
			t.Fatal("next-free handed out a reserved IP")
		}
	}
	// The recreated pod (same name, new UID) gets it back without asking: the offline path.
	back := allocate(t, d, AllocateRequest{Attachment: att("c9"), Pod: PodRef{Namespace: "ns", Name: "web-0", UID: "new"}})
	if back.IP != a.IP {
		t.Fatalf("recreated pod got %s, want %s", back.IP, a.IP)
	}
	// Released without keep: the Release-made reservation goes with it (the StaticIP is gone).
	if _, _, err := d.Release(att("c9"), false); err != nil {
		t.Fatal(err)
	}
	if rs, _ := d.Reservations(); len(rs) != 0 {
		t.Fatalf("reservations after a plain release: %+v", rs)
	}
	// Releasing an unknown attachment is fine (DEL is idempotent).
	if _, found, err := d.Release(att("nope"), false); err != nil || found {
		t.Fatalf("unknown: %v %v", found, err)
	}
}

func TestSyncReservations(t *testing.T) {
	d := openTest(t, "", nil)
	mustRange(t, d, Range{Subnet: pfx("10.8.0.0/24")})
	holder := allocate(t, d, AllocateRequest{Attachment: att("c1"), Pod: pod("ns", "a"), IP: ip("10.8.0.5")})
	allocate(t, d, req("c2", pod("ns", "kept")))
	d.Release(att("c2"), true)

	res, err := d.SyncReservations([]Reservation{
		{IP: ip("10.8.0.5"), Pod: pod("ns", "web-0")},
		{IP: ip("10.8.0.6"), Pod: pod("ns", "web-1")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Added != 2 || res.Removed != 1 || len(res.Conflicts) != 1 || res.Conflicts[0].IP != holder.IP {
		t.Fatalf("result %+v", res)
	}
	rs, _ := d.Reservations()
	if len(rs) != 2 || rs[0].Source != SourceStaticIP {
		t.Fatalf("reservations %+v", rs)
	}
	// An invalid set is refused whole and changes nothing.
	for _, bad := range [][]Reservation{
		{{IP: ip("10.8.0.7"), Pod: pod("ns", "x")}, {IP: ip("10.8.0.7"), Pod: pod("ns", "y")}},
		{{IP: ip("10.8.0.7"), Pod: pod("ns", "x")}, {IP: ip("10.8.0.8"), Pod: pod("ns", "x")}},
		{{IP: ip("10.8.0.7")}},
		{{Pod: pod("ns", "x")}},
	} {
		if _, err := d.SyncReservations(bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("bad set %+v: %v", bad, err)
		}
	}
	if again, _ := d.Reservations(); len(again) != 2 {
		t.Fatalf("invalid sync changed reservations: %+v", again)
	}
	res, err = d.SyncReservations([]Reservation{{IP: ip("10.8.0.6"), Pod: pod("ns", "web-1")}})
	if err != nil || res.Removed != 1 || res.Unchanged != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	// Reserve refuses an IP reserved for someone else.
	if err := d.Reserve(Reservation{IP: ip("10.8.0.6"), Pod: pod("ns", "intruder")}); !errors.Is(err, ErrInUse) {
		t.Fatalf("Reserve: %v", err)
	}
}

func TestGCFreesOnlyDeadAttachments(t *testing.T) {
	d := openTest(t, "", nil)
	mustRange(t, d, Range{Subnet: pfx("10.9.0.0/24")})
	live := allocate(t, d, req("live", pod("ns", "live")))
	dead := allocate(t, d, req("dead", pod("ns", "dead")))
	static := allocate(t, d, req("static", pod("ns", "web-0")))
	keep := allocate(t, d, req("keep", pod("ns", "keep")))
	if err := d.Reserve(Reservation{IP: static.IP, Pod: pod("ns", "web-0")}); err != nil {
		t.Fatal(err)
	}
	freed, err := d.GC(GCOptions{
		Live:         []Attachment{att("live")},
		KeepReserved: func(a Allocation) bool { return a.Pod.Name == "keep" },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(freed) != 3 {
		t.Fatalf("freed %+v", freed)
	}
	all, _ := d.Allocations()
	if len(all) != 1 || all[0].IP != live.IP {
		t.Fatalf("allocations after GC: %+v", all)
	}
	rs, _ := d.Reservations()
	reserved := map[netip.Addr]string{}
	for _, r := range rs {
		reserved[r.IP] = r.Pod.Key()
	}
	if reserved[static.IP] != "ns/web-0" || reserved[keep.IP] != "ns/keep" || reserved[dead.IP] != "" {
		t.Fatalf("reservations after GC: %v", reserved)
	}
	// The StaticIP-reserved IP is not handed to anyone else.
	if _, _, err := d.Allocate(AllocateRequest{Attachment: att("x"), Pod: pod("ns", "x"), IP: static.IP}); !errors.Is(err, ErrInUse) {
		t.Fatalf("%v", err)
	}
}

func TestRanges(t *testing.T) {
	d := openTest(t, "", nil)
	mustRange(t, d, Range{Subnet: pfx("10.10.0.0/24")})
	if err := d.AddRange(Range{Subnet: pfx("10.10.0.128/25")}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("overlap: %v", err)
	}
	for _, bad := range []Range{
		{Subnet: netip.MustParsePrefix("10.11.0.1/24")},
		{Subnet: pfx("10.11.0.0/24"), Gateway: ip("10.12.0.1")},
		{Subnet: pfx("10.11.0.0/24"), RangeStart: ip("10.11.0.50"), RangeEnd: ip("10.11.0.40")},
		{Subnet: pfx("10.11.0.0/24"), Exclude: []netip.Addr{ip("10.99.0.1")}},
	} {
		if err := d.AddRange(bad); !errors.Is(err, ErrInvalid) {
			t.Fatalf("bad range %+v accepted: %v", bad, err)
		}
	}
	a := allocate(t, d, req("c1", pod("ns", "a")))
	err := d.RemoveRange(pfx("10.10.0.0/24"))
	var rie *RangeInUseError
	if !errors.As(err, &rie) || !strings.Contains(err.Error(), a.IP.String()+" (ns/a)") {
		t.Fatalf("remove in use: %v", err)
	}
	kept, managed, err := d.SyncRanges([]Range{{Subnet: pfx("10.20.0.0/28")}})
	if err != nil || managed || len(kept) != 1 || kept[0] != pfx("10.10.0.0/24") {
		t.Fatalf("SyncRanges: kept %v err %v", kept, err)
	}
	rs, _ := d.Ranges()
	if len(rs) != 2 {
		t.Fatalf("ranges %+v", rs)
	}
	d.Release(att("c1"), false)
	if _, _, err := d.SyncRanges([]Range{{Subnet: pfx("10.20.0.0/28")}}); err != nil {
		t.Fatal(err)
	}
	rs, _ = d.Ranges()
	if len(rs) != 1 || rs[0].RangeStart != ip("10.20.0.1") || rs[0].RangeEnd != ip("10.20.0.14") {
		t.Fatalf("ranges %+v", rs)
	}
	u, _ := d.Usage()
	if len(u) != 1 || u[0].Total != 14 || u[0].Free != 14 {
		t.Fatalf("usage %+v", u)
	}
	if err := d.RemoveRange(pfx("10.20.0.0/28")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Allocate(req("c2", pod("ns", "b"))); !errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), "no IP ranges") {
		t.Fatalf("no ranges: %v", err)
	}
}

func TestUsage(t *testing.T) {
	d := openTest(t, "", nil)
	mustRange(t, d, Range{Subnet: pfx("10.30.0.0/28"), Gateway: ip("10.30.0.1"), Exclude: []netip.Addr{ip("10.30.0.2")}})
	allocate(t, d, req("c1", pod("ns", "a")))
	d.Reserve(Reservation{IP: ip("10.30.0.10"), Pod: pod("ns", "web-0")})
	u, err := d.Usage()
	if err != nil || len(u) != 1 {
		t.Fatal(err)
	}
	if got := u[0]; got.Total != 12 || got.Used != 1 || got.Reserved != 1 || got.Free != 10 {
		t.Fatalf("usage %+v", got)
	}
}

func TestOpenLockedTimesOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipam.db")
	holder := openTest(t, path, nil)
	_ = holder
	start := time.Now()
	_, err := Open(Options{Path: path, OpenTimeout: 300 * time.Millisecond})
	var le *LockedError
	if !errors.As(err, &le) || !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Fatalf("want LockedError naming %s, got %v", path, err)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("returned after %s, before the timeout", waited)
	}
	holder.Close()
	d, err := Open(Options{Path: path, OpenTimeout: time.Second})
	if err != nil {
		t.Fatalf("after the holder closed: %v", err)
	}
	d.Close()
}

func TestOpenCorruptNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	os.WriteFile(garbage, []byte(strings.Repeat("not a database ", 1000)), 0o600)
	foreign := filepath.Join(dir, "foreign.db")
	fdb, err := bolt.Open(foreign, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	fdb.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("other")); return err })
	fdb.Close()
	for _, path := range []string{garbage, foreign} {
		_, err := Open(Options{Path: path, OpenTimeout: time.Second})
		var ce *CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
			t.Fatalf("%s: want CorruptError naming the file, got %v", path, err)
		}
	}
	// A damaged value inside a valid file is reported the same way.
	damaged := filepath.Join(dir, "damaged.db")
	d := openTest(t, damaged, nil)
	mustRange(t, d, Range{Subnet: pfx("10.40.0.0/24")})
	d.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketRanges).Put([]byte("10.40.0.0/24"), []byte("{")) })
	if _, _, err := d.Allocate(req("c1", pod("ns", "a"))); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), damaged) {
		t.Fatalf("damaged value: want CorruptError naming %s, got %v", damaged, err)
	}
}

func TestReopenKeepsState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipam.db")
	d := openTest(t, path, nil)
	mustRange(t, d, Range{Subnet: pfx("10.50.0.0/24")})
	a := allocate(t, d, req("c1", pod("ns", "a")))
	d.Reserve(Reservation{IP: ip("10.50.0.100"), Pod: pod("ns", "web-0")})
	d.Close()
	d2 := openTest(t, path, nil)
	got, found, err := d2.Get(att("c1"))
	if err != nil || !found || got.IP != a.IP {
		t.Fatalf("after reopen: %+v %v %v", got, found, err)
	}
	if rs, _ := d2.Reservations(); len(rs) != 1 {
		t.Fatalf("reservations after reopen: %+v", rs)
	}
}

func TestIPv6Range(t *testing.T) {
	d := openTest(t, "", nil)
	mustRange(t, d, Range{Subnet: pfx("fd00:10::/120"), Gateway: ip("fd00:10::1")})
	a := allocate(t, d, req("c1", pod("ns", "a")))
	if a.IP != ip("fd00:10::2") {
		t.Fatalf("got %s", a.IP)
	}
	u, _ := d.Usage()
	if u[0].Total != 254 { // ::1..::ff minus the gateway
		t.Fatalf("total %d", u[0].Total)
	}
}
