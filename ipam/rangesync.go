// The ranges of a store: AddRange, RemoveRange, and the authoritative syncs (SyncRanges from a
// conflist, SetNodeRanges from the agent) with the draining rule, each one transaction.

package ipam

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// AddRange adds or updates a range.
func (d *DB) AddRange(r Range) error {
	r, err := r.Canonical()
	if err != nil {
		return err
	}
	return d.update(func(tx *bolt.Tx) error {
		t := d.txn(tx)
		existing, err := t.loadRanges()
		if err != nil {
			return err
		}
		for _, o := range existing {
			if o.Subnet != r.Subnet && o.Subnet.Overlaps(r.Subnet) {
				return invalidf("range %s overlaps range %s", r.Subnet, o.Subnet)
			}
		}
		return t.putRange(r)
	})
}

// RemoveRange removes a range unless it still has allocations.
func (d *DB) RemoveRange(subnet netip.Prefix) error {
	return d.update(func(tx *bolt.Tx) error {
		return d.removeRange(d.txn(tx), subnet)
	})
}

func (d *DB) removeRange(t *txn, subnet netip.Prefix) error {
	holders, err := t.allocsIn(subnet)
	if err != nil {
		return err
	}
	if len(holders) > 0 {
		return &RangeInUseError{Subnet: subnet, Holders: holders}
	}
	return t.deleteRange(subnet)
}

// canonicalSet validates rs as a node's set of ranges: each canonical, none overlapping.
func canonicalSet(rs []Range) ([]Range, error) {
	want := make([]Range, 0, len(rs))
	for _, r := range rs {
		c, err := r.Canonical()
		if err != nil {
			return nil, err
		}
		want = append(want, c)
	}
	slices.SortFunc(want, func(a, b Range) int { return a.Subnet.Addr().Compare(b.Subnet.Addr()) })
	for i := range want {
		for j := i + 1; j < len(want); j++ {
			if want[i].Subnet.Overlaps(want[j].Subnet) {
				return nil, invalidf("range %s overlaps range %s", want[i].Subnet, want[j].Subnet)
			}
		}
	}
	return want, nil
}

// rangesUpToDate reports (in a read transaction) whether applying want would change nothing:
// the active ranges are want and every draining range still has allocations.
func (t *txn) rangesUpToDate(want []Range) (bool, error) {
	have, err := t.loadRanges()
	if err != nil {
		return false, err
	}
	if !slices.EqualFunc(activeRanges(have), want, Range.equal) {
		return false, nil
	}
	for _, h := range have {
		if !h.Draining {
			continue
		}
		k, _ := t.allocs.Cursor().Seek(ipKey(h.Subnet.Masked().Addr()))
		if k == nil || !h.Subnet.Contains(keyIP(k)) {
			return false, nil // drained: it can go
		}
	}
	return true, nil
}

// SyncRanges makes rs the active ranges, for a store that is not agent-managed (the plugin with
// a hand-written conflist). Ranges no longer in rs that still have allocations become draining
// and are returned; the others are removed. A wanted range overlapping a draining one refuses
// the whole set (ErrInvalid). On an agent-managed store it changes nothing and returns
// managed=true: only SetNodeRanges changes its ranges. It writes nothing when nothing changes.
func (d *DB) SyncRanges(rs []Range) ([]netip.Prefix, bool, error) {
	want, err := canonicalSet(rs)
	if err != nil {
		return nil, false, err
	}
	managed, upToDate := false, false
	if err := d.view(func(tx *bolt.Tx) error {
		if managed = isManaged(tx); managed {
			return nil
		}
		upToDate, err = d.txn(tx).rangesUpToDate(want)
		return err
	}); err != nil || managed || upToDate {
		return nil, managed, err
	}
	var res RangeSync
	err = d.update(func(tx *bolt.Tx) error {
		if managed = isManaged(tx); managed {
			return nil
		}
		var err error
		res, err = d.applyRanges(d.txn(tx), want, true)
		return err
	})
	return res.Draining, managed, err
}

// SetNodeRanges is SyncRanges for the node agent, the one authority over a node's ranges: it
// marks the store agent-managed (the plugin no longer syncs ranges from its conflist) and
// applies every wanted range it can, reporting the ones it skipped. It writes nothing when
// nothing changes.
func (d *DB) SetNodeRanges(rs []Range) (RangeSync, error) {
	want, err := canonicalSet(rs)
	if err != nil {
		return RangeSync{}, err
	}
	var res RangeSync
	upToDate := false
	if err := d.view(func(tx *bolt.Tx) error {
		if !isManaged(tx) {
			return nil
		}
		t := d.txn(tx)
		if upToDate, err = t.rangesUpToDate(want); err != nil || !upToDate {
			return err
		}
		have, err := t.loadRanges()
		for _, h := range have {
			if h.Draining {
				res.Draining = append(res.Draining, h.Subnet)
			}
		}
		return err
	}); err != nil || upToDate {
		return res, err
	}
	err = d.update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketMeta).Put(keyManagedBy, managedByAgent); err != nil {
			return err
		}
		var err error
		res, err = d.applyRanges(d.txn(tx), want, false)
		return err
	})
	return res, err
}

// applyRanges makes want (canonical, sorted, not overlapping) the active ranges. A range that
// is no longer wanted goes away when nothing is allocated in it or everything allocated in it
// lies inside the wanted ranges (a CIDR grown in place); otherwise it drains. A wanted range
// overlapping a draining one is refused: strict fails the whole set, otherwise it is skipped.
func (d *DB) applyRanges(t *txn, want []Range, strict bool) (RangeSync, error) {
	var res RangeSync
	have, err := t.loadRanges()
	if err != nil {
		return res, err
	}
	wanted := map[netip.Prefix]bool{}
	for _, r := range want {
		wanted[r.Subnet] = true
	}
	var draining []Range
	for _, h := range have {
		if wanted[h.Subnet] {
			continue
		}
		holders, err := t.allocsIn(h.Subnet)
		if err != nil {
			return res, err
		}
		covered := true
		for _, a := range holders {
			if _, ok := rangeFor(want, a.IP); !ok {
				covered = false
				break
			}
		}
		if covered {
			if err := t.deleteRange(h.Subnet); err != nil {
				return res, err
			}
			res.Removed = append(res.Removed, h.Subnet)
			continue
		}
		h.Draining = true
		if err := t.putRange(h); err != nil {
			return res, err
		}
		draining = append(draining, h)
		res.Draining = append(res.Draining, h.Subnet)
	}
next:
	for _, r := range want {
		for _, k := range draining {
			if k.Subnet.Overlaps(r.Subnet) {
				reason := fmt.Sprintf("overlaps range %s, which left this node but still has allocations outside %s", k.Subnet, r.Subnet)
				if strict {
					return res, invalidf("range %s %s", r.Subnet, reason)
				}
				res.Skipped = append(res.Skipped, RangeConflict{Range: r, Reason: reason})
				continue next
			}
		}
		if err := t.putRange(r); err != nil {
			return res, err
		}
	}
	return res, nil
}

// Ranges lists the ranges.
func (d *DB) Ranges() ([]Range, error) {
	var rs []Range
	err := d.view(func(tx *bolt.Tx) error {
		var err error
		rs, err = d.txn(tx).loadRanges()
		return err
	})
	return rs, err
}

// Usage counts each range's addresses.
func (d *DB) Usage() ([]RangeUsage, error) {
	var out []RangeUsage
	err := d.view(func(tx *bolt.Tx) error {
		t := d.txn(tx)
		rs, err := t.loadRanges()
		if err != nil {
			return err
		}
		for _, r := range rs {
			u := RangeUsage{Range: r, Total: r.Size()}
			held, err := t.allocsIn(r.Subnet)
			if err != nil {
				return err
			}
			for _, a := range held {
				if r.allocatable(a.IP) {
					u.Used++
				}
			}
			c := t.reserved.Cursor()
			for k, _ := c.Seek(ipKey(r.Subnet.Addr())); k != nil && r.Subnet.Contains(keyIP(k)); k, _ = c.Next() {
				ip := keyIP(k)
				if r.allocatable(ip) && t.allocs.Get(k) == nil {
					u.Reserved++
				}
			}
			u.Free = max(u.Total-u.Used-u.Reserved, 0)
			if u.Draining = r.Draining; r.Draining {
				u.Free = 0
			}
			out = append(out, u)
		}
		return nil
	})
	return out, err
}

func isManaged(tx *bolt.Tx) bool {
	return bytes.Equal(tx.Bucket(bucketMeta).Get(keyManagedBy), managedByAgent)
}

// Managed reports whether the node agent manages the ranges.
func (d *DB) Managed() (bool, error) {
	managed := false
	err := d.view(func(tx *bolt.Tx) error {
		managed = isManaged(tx)
		return nil
	})
	return managed, err
}
