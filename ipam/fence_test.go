package ipam

import (
	"errors"
	"path/filepath"
	"testing"
)

// A range revoked after a forced move (node failover) goes at once with everything in it —
// allocations of sandboxes that may still exist, reservations, quarantine — while a plain
// move away drains. Nothing of it is served afterwards, and other ranges are untouched.
func TestRevokeRangeDropsEverythingInsteadOfDraining(t *testing.T) {
	d := openTest(t, filepath.Join(t.TempDir(), "ipam.db"), nil)
	if _, err := d.SetNodeRanges([]Range{{Subnet: pfx("10.1.0.0/24")}, {Subnet: pfx("10.2.0.0/24")}}); err != nil {
		t.Fatal(err)
	}
	if err := d.RecordServed(map[string]ServedRange{"a": {Subnet: pfx("10.1.0.0/24")}, "b": {Subnet: pfx("10.2.0.0/24")}}); err != nil {
		t.Fatal(err)
	}
	a1 := allocate(t, d, AllocateRequest{Attachment: att("c1"), Pod: pod("ns", "web-0"), IP: ip("10.1.0.5")})
	allocate(t, d, AllocateRequest{Attachment: att("c2"), Pod: pod("ns", "web-1"), IP: ip("10.1.0.6")})
	allocate(t, d, AllocateRequest{Attachment: att("c3"), Pod: pod("ns", "other"), IP: ip("10.2.0.5")})
	if _, _, err := d.Release(att("c2"), false); err != nil { // quarantined
		t.Fatal(err)
	}
	if err := d.Reserve(Reservation{IP: ip("10.1.0.7"), Pod: PodRef{Namespace: "ns", Name: "web-2"}, Source: SourceStaticIP}); err != nil {
		t.Fatal(err)
	}

	// The range left the node (a failover moved it): SetNodeRanges alone would drain it.
	rs, err := d.SetNodeRanges([]Range{{Subnet: pfx("10.2.0.0/24")}})
	if err != nil || len(rs.Draining) != 1 {
		t.Fatalf("before the revocation the range drains: %+v, %v", rs, err)
	}
	removed, err := d.RevokeRange("a", pfx("10.1.0.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0].IP != a1.IP || removed[0].Attachment != a1.Attachment {
		t.Fatalf("removed %+v, want exactly %+v", removed, a1)
	}
	ranges, _ := d.Ranges()
	if len(ranges) != 1 || ranges[0].Subnet != pfx("10.2.0.0/24") {
		t.Fatalf("ranges after revocation: %+v", ranges)
	}
	allocs, _ := d.Allocations()
	if len(allocs) != 1 || allocs[0].IP != ip("10.2.0.5") {
		t.Fatalf("allocations after revocation: %+v", allocs)
	}
	if res, _ := d.Reservations(); len(res) != 0 {
		t.Fatalf("reservations after revocation: %+v", res)
	}
	// The served record stays, marked Revoked with the sandboxes to withdraw, until the
	// caller has withdrawn their host side and forgets it.
	served, _ := d.Served()
	if a := served["a"]; !a.Revoked || len(a.Withdraw) != 1 || a.Withdraw[0] != a1.Attachment || len(served) != 2 {
		t.Fatalf("served after revocation: %+v, want a kept as revoked with %v to withdraw", served, a1.Attachment)
	}
	// The leftover sandbox's DEL finds nothing and succeeds; its IP is never handed out here.
	if _, found, err := d.Release(att("c1"), true); err != nil || found {
		t.Fatalf("DEL of the leftover sandbox: found=%v err=%v", found, err)
	}
	_, _, err = d.Allocate(AllocateRequest{Attachment: att("c9"), Pod: pod("ns", "new"), IP: ip("10.1.0.5")})
	if err == nil {
		t.Fatal("an IP of the revoked range was allocated")
	}
	// Revoking again (a pass repeated after a failed withdrawal or a crash) removes nothing
	// more and keeps what is still to withdraw.
	if removed, err := d.RevokeRange("a", pfx("10.1.0.0/24")); err != nil || len(removed) != 0 {
		t.Fatalf("second revocation: %v, %v", removed, err)
	}
	if served, _ := d.Served(); len(served["a"].Withdraw) != 1 {
		t.Fatalf("a repeated revocation lost the sandboxes to withdraw: %+v", served["a"])
	}
	if err := d.ForgetServed("a"); err != nil {
		t.Fatal(err)
	}
	if served, _ := d.Served(); len(served) != 1 {
		t.Fatalf("served after the withdrawal was done: %+v", served)
	}
	if err := d.RecordServed(map[string]ServedRange{"x": {}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a record without subnet: %v, want InvalidError", err)
	}
}
