package ipam

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// Ownership generations (node failover). A range that node failover moves away from a fenced
// node is handed out elsewhere with a higher ownership generation while this node is off: when
// the node comes back, its allocations in that range are not its own any more, and draining them
// (serving them until they are freed) would put the same addresses on the wire twice. The agent
// remembers, per range it serves, the generation it serves it at (RecordServed), and revokes
// (RevokeRange) a range it finds at a higher one: everything the store held in it goes at once.

// ServedRange is a range the node served, under the name of its IPRange, and the ownership
// generation it served it at.
type ServedRange struct {
	Subnet          netip.Prefix `json:"subnet"`
	OwnerGeneration int64        `json:"ownerGeneration"`
	// Revoked: RevokeRange dropped the range from the store; the host side of its sandboxes
	// (veths, /32 routes) may not be withdrawn yet. The record stays until it is
	// (ForgetServed), so a failed or interrupted withdrawal is retried.
	Revoked bool `json:"revoked,omitempty"`
	// Withdraw: the sandboxes the store held in the range when it was revoked, whose host side
	// is to be withdrawn (the store no longer knows them).
	Withdraw []Attachment `json:"withdraw,omitempty"`
}

func (s ServedRange) equal(o ServedRange) bool {
	return s.Subnet == o.Subnet && s.OwnerGeneration == o.OwnerGeneration && s.Revoked == o.Revoked && slices.Equal(s.Withdraw, o.Withdraw)
}

// RecordServed records the generation each named range is served at, replacing what was
// recorded under those names; names not in served keep their records.
func (d *DB) RecordServed(served map[string]ServedRange) error {
	if len(served) == 0 {
		return nil
	}
	have, err := d.Served()
	if err != nil {
		return err
	}
	changed := false
	for name, s := range served {
		if h, ok := have[name]; !ok || !h.equal(s) {
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return d.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketServed)
		for name, s := range served {
			if !s.Subnet.IsValid() || name == "" {
				return invalidf("served range %q: subnet %v", name, s.Subnet)
			}
			v, err := json.Marshal(s)
			if err != nil {
				return err
			}
			if err := b.Put([]byte(name), v); err != nil {
				return err
			}
		}
		return nil
	})
}

// ForgetServed drops the records of names (ranges that left the node and are gone from the
// store, or revoked ranges whose host side is withdrawn).
func (d *DB) ForgetServed(names ...string) error {
	if len(names) == 0 {
		return nil
	}
	return d.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketServed)
		for _, n := range names {
			if err := b.Delete([]byte(n)); err != nil {
				return err
			}
		}
		return nil
	})
}

// Served returns the recorded generations by IPRange name.
func (d *DB) Served() (map[string]ServedRange, error) {
	out := map[string]ServedRange{}
	err := d.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketServed).ForEach(func(k, v []byte) error {
			var s ServedRange
			if err := json.Unmarshal(v, &s); err != nil {
				return decodeErr("served range", k, err)
			}
			out[string(k)] = s
			return nil
		})
	})
	return out, err
}

// RevokeRange removes, in one transaction, the range subnet (draining or not) and every
// allocation, reservation and quarantine entry inside it: the node never serves any of it
// again. The served record of name is kept, marked Revoked, with the attachments of the removed
// allocations added to its Withdraw list: their sandboxes may still exist, and the caller
// withdraws their host side and only then forgets the record (ForgetServed), so a withdrawal
// that fails or is interrupted is done again on the next pass. Their CNI DEL finds nothing and
// succeeds. It returns the allocations it removed.
func (d *DB) RevokeRange(name string, subnet netip.Prefix) ([]Allocation, error) {
	subnet = subnet.Masked()
	var removed []Allocation
	err := d.update(func(tx *bolt.Tx) error {
		t := d.txn(tx)
		var err error
		if removed, err = t.allocsIn(subnet); err != nil {
			return err
		}
		for _, a := range removed {
			if err := t.deleteAlloc(a); err != nil {
				return err
			}
		}
		var rs []Reservation
		c := t.reserved.Cursor()
		for k, v := c.Seek(ipKey(subnet.Addr())); k != nil && subnet.Contains(keyIP(k)); k, v = c.Next() {
			var r Reservation
			if err := json.Unmarshal(v, &r); err != nil {
				return decodeErr("reservation", k, err)
			}
			rs = append(rs, r)
		}
		for _, r := range rs {
			if err := t.deleteReservation(r); err != nil {
				return err
			}
		}
		var qs [][]byte
		qc := t.quarantine.Cursor()
		for k, _ := qc.Seek(ipKey(subnet.Addr())); k != nil && subnet.Contains(keyIP(k)); k, _ = qc.Next() {
			qs = append(qs, append([]byte(nil), k...))
		}
		for _, k := range qs {
			if err := t.quarantine.Delete(k); err != nil {
				return err
			}
		}
		// Every stored range inside subnet (the IPRange's CIDR may have been narrowed since).
		ranges, err := t.loadRanges()
		if err != nil {
			return err
		}
		for _, r := range ranges {
			if subnet.Overlaps(r.Subnet) {
				if err := t.deleteRange(r.Subnet); err != nil {
					return err
				}
			}
		}
		if name == "" {
			return nil
		}
		b := tx.Bucket(bucketServed)
		rec := ServedRange{Subnet: subnet}
		if v := b.Get([]byte(name)); v != nil {
			if err := json.Unmarshal(v, &rec); err != nil {
				return decodeErr("served range", []byte(name), err)
			}
		}
		rec.Revoked = true
		for _, a := range removed {
			if !slices.Contains(rec.Withdraw, a.Attachment) {
				rec.Withdraw = append(rec.Withdraw, a.Attachment)
			}
		}
		v, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		return b.Put([]byte(name), v)
	})
	if err != nil {
		return nil, fmt.Errorf("revoke range %s: %w", subnet, err)
	}
	return removed, nil
}
