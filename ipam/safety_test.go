package ipam

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The allocator's side of issue 18: draining ranges, agent-managed ranges, rollback, takeover
// of a live sandbox's IP, and the rebuild after corruption.

func TestDrainingRangeAllocatesNothing(t *testing.T) {
	d := openTest(t, "", nil)
	a, b := Range{Subnet: pfx("10.60.0.0/29")}, Range{Subnet: pfx("10.61.0.0/29")}
	if _, err := d.SetNodeRanges([]Range{a, b}); err != nil {
		t.Fatal(err)
	}
	stay := allocate(t, d, AllocateRequest{Attachment: att("stay"), Pod: pod("ns", "stay"), IP: ip("10.61.0.2")})
	if err := d.Reserve(Reservation{IP: ip("10.61.0.4"), Pod: pod("ns", "res")}); err != nil {
		t.Fatal(err)
	}
	res, err := d.SetNodeRanges([]Range{a})
	if err != nil || len(res.Draining) != 1 || res.Draining[0] != b.Subnet {
		t.Fatalf("SetNodeRanges: %+v %v", res, err)
	}
	// Every kind of new allocation refuses the draining range.
	for name, r := range map[string]AllocateRequest{
		"requested":   {Attachment: att("r1"), Pod: pod("ns", "x"), IP: ip("10.61.0.3")},
		"reservation": {Attachment: att("r2"), Pod: pod("ns", "res")},
		"takeover":    {Attachment: att("r3"), Pod: pod("ns", "stay"), IP: stay.IP},
	} {
		_, _, err := d.Allocate(r)
		var de *DrainingError
		if !errors.As(err, &de) || !errors.Is(err, ErrOutOfRange) {
			t.Errorf("%s: %v, want DrainingError", name, err)
		}
	}
	for i := range 20 {
		al, _, err := d.Allocate(req("n"+string(rune('a'+i)), pod("ns", "n"+string(rune('a'+i)))))
		if err != nil {
			if !errors.Is(err, ErrExhausted) {
				t.Fatal(err)
			}
			continue
		}
		if b.Subnet.Contains(al.IP) {
			t.Fatalf("next free gave %s of the draining range", al.IP)
		}
	}
	// Existing attachments still work: a repeated ADD, Get, Release.
	if again, created, err := d.Allocate(AllocateRequest{Attachment: att("stay"), Pod: pod("ns", "stay")}); err != nil || created || again.IP != stay.IP {
		t.Fatalf("repeated Allocate of the draining attachment: %+v %v %v", again, created, err)
	}
	u, _ := d.Usage()
	for _, x := range u {
		if x.Range.Subnet == b.Subnet && (!x.Draining || x.Free != 0) {
			t.Fatalf("usage of the draining range: %+v", x)
		}
	}
	if _, found, err := d.Release(att("stay"), false); err != nil || !found {
		t.Fatal(err)
	}
	if res, err := d.SetNodeRanges([]Range{a}); err != nil || len(res.Draining) != 0 || len(res.Removed) != 1 {
		t.Fatalf("after the last pod left: %+v %v", res, err)
	}
	// The range comes back: it allocates again.
	if _, err := d.SetNodeRanges([]Range{a, b}); err != nil {
		t.Fatal(err)
	}
	if got := allocate(t, d, AllocateRequest{Attachment: att("back"), Pod: pod("ns", "back"), IP: ip("10.61.0.3")}); got.IP != ip("10.61.0.3") {
		t.Fatal(got)
	}
}

func TestOnlyTheAgentSetsTheRangesOfAManagedStore(t *testing.T) {
	d := openTest(t, "", nil)
	a, b := Range{Subnet: pfx("10.62.0.0/29")}, Range{Subnet: pfx("10.63.0.0/29")}
	if _, managed, err := d.SyncRanges([]Range{a, b}); err != nil || managed {
		t.Fatalf("standalone SyncRanges: managed=%v %v", managed, err)
	}
	if _, err := d.SetNodeRanges([]Range{a}); err != nil {
		t.Fatal(err)
	}
	// The plugin with a stale conflist listing b.
	if _, managed, err := d.SyncRanges([]Range{a, b}); err != nil || !managed {
		t.Fatalf("SyncRanges on a managed store: managed=%v %v", managed, err)
	}
	rs, _ := d.Ranges()
	if len(rs) != 1 || rs[0].Subnet != a.Subnet {
		t.Fatalf("a stale conflist changed the ranges of a managed store: %+v", rs)
	}
}

func TestResizedRangeAdoptsItsAllocationsOrDrains(t *testing.T) {
	d := openTest(t, "", nil)
	small := Range{Subnet: pfx("10.64.0.0/28")}
	if _, err := d.SetNodeRanges([]Range{small}); err != nil {
		t.Fatal(err)
	}
	held := allocate(t, d, AllocateRequest{Attachment: att("c"), Pod: pod("ns", "a"), IP: ip("10.64.0.9")})
	// Grown in place: the allocation lies inside the new CIDR, which takes it over.
	if res, err := d.SetNodeRanges([]Range{{Subnet: pfx("10.64.0.0/24")}}); err != nil || len(res.Removed) != 1 || len(res.Draining) != 0 || len(res.Skipped) != 0 {
		t.Fatalf("grow: %+v %v", res, err)
	}
	// Shrunk below the allocation: the old range drains and the new, overlapping one is
	// skipped until it has (the standalone path refuses the whole set).
	res, err := d.SetNodeRanges([]Range{{Subnet: pfx("10.64.0.0/29")}, {Subnet: pfx("10.65.0.0/29")}})
	if err != nil || len(res.Draining) != 1 || len(res.Skipped) != 1 || res.Skipped[0].Range.Subnet != pfx("10.64.0.0/29") {
		t.Fatalf("shrink: %+v %v", res, err)
	}
	if _, found, _ := d.Get(held.Attachment); !found {
		t.Fatal("the allocation went away")
	}
	d2 := openTest(t, "", nil)
	mustRange(t, d2, Range{Subnet: pfx("10.64.0.0/24")})
	allocate(t, d2, AllocateRequest{Attachment: att("c"), Pod: pod("ns", "a"), IP: ip("10.64.0.9")})
	if _, _, err := d2.SyncRanges([]Range{{Subnet: pfx("10.64.0.0/29")}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("standalone shrink below an allocation: %v", err)
	}
}

func TestUnallocateUndoesOnlyThatAllocation(t *testing.T) {
	d := openTest(t, "", nil)
	mustRange(t, d, Range{Subnet: pfx("10.66.0.0/29")})
	// The pod's reservation existed before the ADD.
	first := allocate(t, d, req("c1", pod("ns", "web")))
	d.Release(att("c1"), true)
	second, created, err := d.Allocate(req("c2", pod("ns", "web")))
	if err != nil || !created || second.IP != first.IP {
		t.Fatal(second, created, err)
	}
	if err := d.Unallocate(second); err != nil {
		t.Fatal(err)
	}
	rs, _ := d.Reservations()
	if len(rs) != 1 || rs[0].IP != first.IP || rs[0].Pod.Key() != "ns/web" {
		t.Fatalf("reservations after Unallocate: %+v", rs)
	}
	if as, _ := d.Allocations(); len(as) != 0 {
		t.Fatalf("allocations after Unallocate: %+v", as)
	}
	// A takeover is undone by giving the IP back to the earlier attachment.
	prev := allocate(t, d, req("old", pod("ns", "db")))
	took, _, err := d.Allocate(AllocateRequest{Attachment: att("new"), Pod: pod("ns", "db"), IP: prev.IP})
	if err != nil || took.Previous == nil || took.Previous.Attachment != att("old") {
		t.Fatalf("takeover: %+v %v", took, err)
	}
	if err := d.Unallocate(took); err != nil {
		t.Fatal(err)
	}
	if back, found, _ := d.Get(att("old")); !found || back.IP != prev.IP {
		t.Fatalf("the earlier attachment did not get %s back: %+v", prev.IP, back)
	}
	// Unallocate of an allocation that is no longer there (or another one) changes nothing.
	if err := d.Unallocate(took); err != nil {
		t.Fatal(err)
	}
	if back, found, _ := d.Get(att("old")); !found || back.IP != prev.IP {
		t.Fatal("a second Unallocate changed the state")
	}
}

func TestTakeoverAsksWhetherTheEarlierSandboxLives(t *testing.T) {
	d := openTest(t, "", nil)
	mustRange(t, d, Range{Subnet: pfx("10.67.0.0/29")})
	old := allocate(t, d, req("old", pod("ns", "web")))
	alive := map[Attachment]bool{att("old"): true}
	r := AllocateRequest{Attachment: att("new"), Pod: pod("ns", "web"), IP: old.IP, Alive: func(a Attachment) bool { return alive[a] }}
	_, _, err := d.Allocate(r)
	var te *TakeoverError
	if !errors.As(err, &te) || !errors.Is(err, ErrInUse) || te.Previous != att("old") {
		t.Fatalf("takeover from a live sandbox: %v", err)
	}
	d.Release(att("old"), true) // what the reservation path sees after a DEL
	if _, _, err := d.Allocate(AllocateRequest{Attachment: att("old2"), Pod: pod("ns", "web"), Alive: r.Alive}); err != nil {
		t.Fatal(err)
	}
	alive[att("old2")] = true
	r.IP = netip.Addr{}
	if _, _, err := d.Allocate(r); !errors.As(err, &te) {
		t.Fatalf("takeover through the reservation from a live sandbox: %v", err)
	}
	alive[att("old2")] = false
	if got, _, err := d.Allocate(r); err != nil || got.IP != old.IP {
		t.Fatalf("takeover once the sandbox is gone: %+v %v", got, err)
	}
}

func TestGCKeepsWhatAliveReports(t *testing.T) {
	d := openTest(t, "", nil)
	mustRange(t, d, Range{Subnet: pfx("10.68.0.0/29")})
	allocate(t, d, req("a", pod("ns", "a")))
	allocate(t, d, req("b", pod("ns", "b")))
	freed, err := d.GC(GCOptions{Alive: func(a Allocation) bool { return a.Attachment == att("a") }})
	if err != nil || len(freed) != 1 || freed[0].Attachment != att("b") {
		t.Fatalf("GC: %+v %v", freed, err)
	}
}

func TestRecoverRebuildsWithoutReissuingLiveIPs(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ipam.db")
	garbage := strings.Repeat("garbage!", 4096)
	os.WriteFile(path, []byte(garbage), 0o600)
	opts := Options{Path: path, OpenTimeout: time.Second, NoSync: true}
	if _, err := Open(opts); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open: %v", err)
	}
	d, err := Recover(opts)
	if err != nil {
		t.Fatal(err)
	}
	st, ok, err := d.Recovering()
	if err != nil || !ok || !strings.HasPrefix(st.MovedAside, path+".corrupt-") {
		t.Fatalf("Recovering: %+v %v %v", st, ok, err)
	}
	if data, _ := os.ReadFile(st.MovedAside); string(data) != garbage {
		t.Fatal("the corrupt file was not kept as it was")
	}
	if _, err := d.SetNodeRanges([]Range{{Subnet: pfx("10.69.0.0/29")}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Allocate(req("c", pod("ns", "new"))); !errors.Is(err, ErrRecovering) {
		t.Fatalf("Allocate while recovering: %v", err)
	}
	found := []Allocation{
		{IP: ip("10.69.0.1"), Attachment: RecoveredAttachment("sip0123456789a"), Pod: pod("ns", "a")},
		{IP: ip("10.69.0.2"), Attachment: RecoveredAttachment("sip0123456789b")},
		{IP: ip("10.69.0.2"), Attachment: RecoveredAttachment("sip0123456789c")}, // a second link claims the same IP
	}
	res, err := d.Import(found)
	if err != nil || res.Imported != 2 || len(res.Conflicts) != 1 {
		t.Fatalf("Import: %+v %v", res, err)
	}
	if res, err := d.Import(found[:2]); err != nil || res.Unchanged != 2 {
		t.Fatalf("Import again: %+v %v", res, err)
	}
	if link, ok := found[0].Attachment.RecoveredLink(); !ok || link != "sip0123456789a" {
		t.Fatal(link, ok)
	}
	if err := d.FinishRecovery(); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		al, _, err := d.Allocate(req("n"+string(rune('0'+i)), pod("ns", "n"+string(rune('0'+i)))))
		if err != nil {
			t.Fatal(err)
		}
		if al.IP == ip("10.69.0.1") || al.IP == ip("10.69.0.2") {
			t.Fatalf("reissued the imported %s", al.IP)
		}
	}
	d.Close()
	if _, err := Recover(opts); err == nil || !strings.Contains(err.Error(), "not corrupt") {
		t.Fatalf("Recover of a healthy database: %v", err)
	}
}
