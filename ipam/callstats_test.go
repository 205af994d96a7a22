package ipam

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// committedTxID is the id of the last committed write transaction (bbolt's meta txid): one
// more per commit, and so per fsync.
func committedTxID(t *testing.T, d *DB) int {
	t.Helper()
	var id int
	if err := d.db.View(func(tx *bolt.Tx) error { id = tx.ID(); return nil }); err != nil {
		t.Fatal(err)
	}
	return id
}

func histogram(t *testing.T, d *DB, op, result string) CallHistogram {
	t.Helper()
	s, err := d.CallStats()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range s.Histograms {
		if h.Op == op && h.Result == result {
			return h
		}
	}
	return CallHistogram{}
}

// A successful call is counted in the transaction that commits its work — no second commit —
// with its duration in the right bucket; a call whose transaction rolls back is not counted as
// a success, and its failure, recorded on its own, lands in the failure histogram and under
// its reason.
func TestCallsAreCountedInTheirOwnCommit(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	path := filepath.Join(t.TempDir(), "ipam.db")
	d := openTest(t, path, clock)
	mustRange(t, d, Range{Subnet: pfx("10.1.0.0/24")})

	before := committedTxID(t, d)
	d.RecordCallOnCommit("add", clock.Now().Add(-3*time.Millisecond)) // 3 ms: le 0.005, not le 0.0025
	allocate(t, d, req("c1", pod("ns", "web-0")))
	if got := committedTxID(t, d) - before; got != 1 {
		t.Fatalf("ADD with its call counted took %d commits, want 1", got)
	}
	h := histogram(t, d, "add", CallSucceeded)
	if h.Count != 1 || h.Sum != 3*time.Millisecond {
		t.Fatalf("add/success: count %d sum %v, want 1 and 3ms", h.Count, h.Sum)
	}
	for i, bound := range CallDurationBuckets {
		want := uint64(0)
		if bound >= 0.005 {
			want = 1
		}
		if h.Buckets[i] != want {
			t.Errorf("bucket le=%v: %d, want %d", bound, h.Buckets[i], want)
		}
	}

	// Counted once: the next commit without a new call adds nothing.
	if _, _, err := d.Release(att("c1"), false); err != nil {
		t.Fatal(err)
	}
	if h := histogram(t, d, "add", CallSucceeded); h.Count != 1 {
		t.Fatalf("add/success counted %d times, want once", h.Count)
	}

	// A call whose transaction rolls back: not a success; its failure is recorded apart.
	held := allocate(t, d, req("c2", pod("ns", "web-1")))
	d.RecordCallOnCommit("add", clock.Now())
	if _, _, err := d.Allocate(AllocateRequest{Attachment: att("c3"), Pod: pod("ns", "web-2"), IP: held.IP}); !errors.Is(err, ErrInUse) {
		t.Fatalf("allocating a held IP: %v, want ErrInUse", err)
	}
	if h := histogram(t, d, "add", CallSucceeded); h.Count != 1 {
		t.Fatalf("a refused ADD was counted as a success (%d)", h.Count)
	}
	if _, _, err := d.Release(att("c2"), false); err != nil {
		t.Fatal(err)
	}
	if h := histogram(t, d, "add", CallSucceeded); h.Count != 1 {
		t.Fatalf("the refused ADD's record was left armed and counted by a later commit (%d)", h.Count)
	}
	d.Close()
	for range 2 {
		if err := RecordCallFailure(Options{Path: path, NoSync: true}, time.Second, "add", "ip_in_use", 40*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := RecordCallFailure(Options{Path: path, NoSync: true}, time.Second, "del", "netlink", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	d = openTest(t, path, clock)
	s, err := d.CallStats()
	if err != nil {
		t.Fatal(err)
	}
	want := map[[2]string]uint64{{"add", "ip_in_use"}: 2, {"del", "netlink"}: 1}
	if len(s.Failures) != len(want) {
		t.Fatalf("failures %+v, want %v", s.Failures, want)
	}
	for _, f := range s.Failures {
		if want[[2]string{f.Op, f.Reason}] != f.Count {
			t.Errorf("failures %s/%s = %d, want %d", f.Op, f.Reason, f.Count, want[[2]string{f.Op, f.Reason}])
		}
	}
	h = histogram(t, d, "add", CallFailed)
	if h.Count != 2 || h.Buckets[len(h.Buckets)-1] != 0 {
		t.Errorf("add/failure: count %d, le=30 %d; want 2 calls, both above the last bound (+Inf only)", h.Count, h.Buckets[len(h.Buckets)-1])
	}
}

// The failure path never waits long for a store another call holds: it gives up after its
// own timeout with ErrLocked.
func TestCallFailureGivesUpOnALockedStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ipam.db")
	openTest(t, path, nil) // holds the lock until the test ends
	start := time.Now()
	err := RecordCallFailure(Options{Path: path, NoSync: true}, 50*time.Millisecond, "add", "netlink", time.Millisecond)
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("recording into a locked store: %v, want ErrLocked", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("gave up after %v, want about 50ms", took)
	}
}

func TestBucketIndex(t *testing.T) {
	for _, c := range []struct {
		took time.Duration
		want int
	}{
		{0, 0}, {time.Millisecond, 0}, {time.Millisecond + 1, 1}, {3 * time.Millisecond, 2},
		{30 * time.Second, len(CallDurationBuckets) - 1}, {31 * time.Second, len(CallDurationBuckets)},
	} {
		if got := bucketIndex(c.took); got != c.want {
			t.Errorf("bucketIndex(%v) = %d, want %d", c.took, got, c.want)
		}
	}
}

// A call that fails after its commit (ADD whose interface setup failed) takes its success
// back in the transaction that undoes its work: the histogram is as if it never succeeded.
func TestRetractedCallLeavesNoSuccess(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	d := openTest(t, "", clock)
	mustRange(t, d, Range{Subnet: pfx("10.1.0.0/24")})
	d.RecordCallOnCommit("add", clock.Now().Add(-7*time.Millisecond))
	a := allocate(t, d, req("c1", pod("ns", "web-0")))
	took, ok := d.CountedCall()
	if !ok || took != 7*time.Millisecond {
		t.Fatalf("CountedCall = %v, %v; want 7ms, true", took, ok)
	}
	d.RetractCallOnCommit("add", took)
	if err := d.Unallocate(a); err != nil {
		t.Fatal(err)
	}
	h := histogram(t, d, "add", CallSucceeded)
	if h.Count != 0 || h.Sum != 0 {
		t.Fatalf("after the retraction: count %d sum %v, want 0", h.Count, h.Sum)
	}
	for i, n := range h.Buckets {
		if n != 0 {
			t.Errorf("bucket le=%v still counts %d", CallDurationBuckets[i], n)
		}
	}
}
