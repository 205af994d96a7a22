// The transaction layer of the bbolt store: the buckets, their key encodings, and the typed
// accessors (txn) that every public operation uses inside its one transaction.

package ipam

import (
	"encoding/binary"
	"encoding/json"
	"net/netip"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The buckets of a store — every one is here, and Open creates them all (allBuckets) — and the
// keys of the meta bucket. ipam/README.md "Storage" lists them.
var (
	bucketMeta       = []byte("meta")
	bucketRanges     = []byte("ranges")            // subnet -> Range (JSON)
	bucketCursors    = []byte("cursors")           // subnet -> last IP handed out by next-free (16 bytes)
	bucketAllocs     = []byte("allocations")       // IP (16 bytes) -> Allocation (JSON)
	bucketAttach     = []byte("attachments")       // containerID\0ifname[\0second] -> IP (16 bytes), per family: index.go
	bucketReserved   = []byte("reservations")      // IP (16 bytes) -> Reservation (JSON)
	bucketReservedBy = []byte("reservedByPod")     // namespace/name[\0second] -> IP (16 bytes), per family: index.go
	bucketQuarantine = []byte("quarantine")        // IP (16 bytes) -> release time (unix nanos)
	bucketServed     = []byte("servedGenerations") // IPRange name -> ServedRange (JSON), fence.go
	allBuckets       = [][]byte{bucketMeta, bucketRanges, bucketCursors, bucketAllocs, bucketAttach,
		bucketReserved, bucketReservedBy, bucketQuarantine, bucketServed, bucketCalls, bucketNamespacePools}
	keySchema      = []byte("schema")
	keyManagedBy   = []byte("managedBy")  // set by SetNodeRanges: the agent owns the ranges
	keyRecovering  = []byte("recovering") // RecoveryState (JSON) while a rebuild runs
	managedByAgent = []byte("staticip-agent")
)

func ipKey(ip netip.Addr) []byte {
	b := ip.As16()
	return b[:]
}

func keyIP(b []byte) netip.Addr {
	if len(b) != 16 {
		return netip.Addr{}
	}
	return netip.AddrFrom16([16]byte(b)).Unmap()
}

type txn struct {
	tx                                                           *bolt.Tx
	ranges, cursors, allocs, attach, reserved, byPod, quarantine *bolt.Bucket
	path                                                         string
}

func (d *DB) txn(tx *bolt.Tx) *txn {
	return &txn{tx: tx, path: d.path,
		ranges: tx.Bucket(bucketRanges), cursors: tx.Bucket(bucketCursors), allocs: tx.Bucket(bucketAllocs),
		attach: tx.Bucket(bucketAttach), reserved: tx.Bucket(bucketReserved),
		byPod: tx.Bucket(bucketReservedBy), quarantine: tx.Bucket(bucketQuarantine)}
}

func (t *txn) loadRanges() ([]Range, error) {
	var rs []Range
	err := t.ranges.ForEach(func(k, v []byte) error {
		var r Range
		if err := json.Unmarshal(v, &r); err != nil {
			return decodeErr("range", k, err)
		}
		rs = append(rs, r)
		return nil
	})
	slices.SortFunc(rs, func(a, b Range) int { return a.Subnet.Addr().Compare(b.Subnet.Addr()) })
	return rs, err
}

func (t *txn) alloc(ip netip.Addr) (*Allocation, error) {
	v := t.allocs.Get(ipKey(ip))
	if v == nil {
		return nil, nil
	}
	var a Allocation
	if err := json.Unmarshal(v, &a); err != nil {
		return nil, decodeErr("allocation", ipKey(ip), err)
	}
	return &a, nil
}

func (t *txn) reservation(ip netip.Addr) (*Reservation, error) {
	v := t.reserved.Get(ipKey(ip))
	if v == nil {
		return nil, nil
	}
	var r Reservation
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, decodeErr("reservation", ipKey(ip), err)
	}
	return &r, nil
}

func (t *txn) putAlloc(a Allocation) error {
	v, err := json.Marshal(a)
	if err != nil {
		return err
	}
	if err := t.allocs.Put(ipKey(a.IP), v); err != nil {
		return err
	}
	if err := putIndexed(t.attach, a.Attachment.key(), a.IP); err != nil {
		return err
	}
	return t.quarantine.Delete(ipKey(a.IP))
}

func (t *txn) deleteAlloc(a Allocation) error {
	if err := t.allocs.Delete(ipKey(a.IP)); err != nil {
		return err
	}
	return deleteIndexed(t.attach, a.Attachment.key(), a.IP)
}

func (t *txn) putReservation(r Reservation) error {
	if old, err := t.reservation(r.IP); err != nil {
		return err
	} else if old != nil {
		if err := t.deleteReservation(*old); err != nil {
			return err
		}
	}
	// One reservation per pod and IP family: a pod's previous reservation of another IP of the
	// same family goes away.
	if prev, ok := indexedOf(t.byPod, []byte(r.Pod.Key()), family(r.IP)); ok {
		old, err := t.reservation(prev)
		if err != nil {
			return err
		}
		if old != nil && old.Pod.Key() == r.Pod.Key() {
			if err := t.deleteReservation(*old); err != nil {
				return err
			}
		}
	}
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := t.reserved.Put(ipKey(r.IP), v); err != nil {
		return err
	}
	return putIndexed(t.byPod, []byte(r.Pod.Key()), r.IP)
}

func (t *txn) deleteReservation(r Reservation) error {
	if err := t.reserved.Delete(ipKey(r.IP)); err != nil {
		return err
	}
	return deleteIndexed(t.byPod, []byte(r.Pod.Key()), r.IP)
}

func (t *txn) quarantined(ip netip.Addr, now time.Time, q time.Duration) bool {
	if q <= 0 {
		return false
	}
	released, ok := t.releasedAt(ip)
	return ok && now.Sub(released) < q
}

// releasedAt is when ip was last released, as its quarantine entry records it.
func (t *txn) releasedAt(ip netip.Addr) (time.Time, bool) {
	v := t.quarantine.Get(ipKey(ip))
	if len(v) != 8 {
		return time.Time{}, false
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(v))), true
}

func (t *txn) putQuarantine(ip netip.Addr, now time.Time) error {
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], uint64(now.UnixNano()))
	return t.quarantine.Put(ipKey(ip), v[:])
}

func (t *txn) putRange(r Range) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return t.ranges.Put([]byte(r.Subnet.String()), v)
}

func (t *txn) allocsIn(subnet netip.Prefix) ([]Allocation, error) {
	var out []Allocation
	c := t.allocs.Cursor()
	for k, v := c.Seek(ipKey(subnet.Masked().Addr())); k != nil; k, v = c.Next() {
		ip := keyIP(k)
		if !subnet.Contains(ip) {
			break
		}
		var a Allocation
		if err := json.Unmarshal(v, &a); err != nil {
			return nil, decodeErr("allocation", k, err)
		}
		out = append(out, a)
	}
	return out, nil
}

func (t *txn) deleteRange(subnet netip.Prefix) error {
	if err := t.cursors.Delete([]byte(subnet.String())); err != nil {
		return err
	}
	return t.ranges.Delete([]byte(subnet.String()))
}
