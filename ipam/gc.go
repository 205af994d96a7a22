// GC: the release of every allocation whose attachment is gone, in one transaction.

package ipam

import (
	"bytes"
	"encoding/json"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// GC releases every allocation whose attachment is not live and returns them. It never touches
// reservations.
func (d *DB) GC(opts GCOptions) ([]Allocation, error) {
	live := make(map[Attachment]bool, len(opts.Live))
	for _, a := range opts.Live {
		live[a] = true
	}
	var freed []Allocation
	err := d.update(func(tx *bolt.Tx) error {
		freed = nil
		t := d.txn(tx)
		var dead []Allocation
		err := t.allocs.ForEach(func(k, v []byte) error {
			var a Allocation
			if err := json.Unmarshal(v, &a); err != nil {
				return decodeErr("allocation", k, err)
			}
			if !live[a.Attachment] && (opts.Alive == nil || !opts.Alive(a)) {
				dead = append(dead, a)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, a := range dead {
			if err := t.deleteAlloc(a); err != nil {
				return err
			}
			keep := opts.KeepReserved != nil && opts.KeepReserved(a)
			if err := d.afterRelease(t, a, keep); err != nil {
				return err
			}
			freed = append(freed, a)
		}
		// Index entries without an allocation behind them, and expired quarantine entries.
		var orphans [][]byte
		if err := t.attach.ForEach(func(k, v []byte) error {
			al, err := t.alloc(keyIP(v))
			if err != nil {
				return err
			}
			if al == nil || !bytes.Equal(al.Attachment.key(), indexOwner(k)) {
				orphans = append(orphans, slices.Clone(k))
			}
			return nil
		}); err != nil {
			return err
		}
		now := d.now()
		if err := t.quarantine.ForEach(func(k, v []byte) error {
			if !t.quarantined(keyIP(k), now, d.quarantine) {
				orphans = append(orphans, append([]byte("q"), k...))
			}
			return nil
		}); err != nil {
			return err
		}
		for _, k := range orphans {
			var err error
			if len(k) == 17 && k[0] == 'q' {
				err = t.quarantine.Delete(k[1:])
			} else {
				err = t.attach.Delete(k)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	return freed, err
}
