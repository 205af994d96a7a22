package ipam

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// The rebuild after corruption (Recover, Import, FinishRecovery): a path on which an IP could
// otherwise be lost or handed out twice. Opening and closing the store are in db.go, the
// migration of the single database of earlier versions in migrate.go, Unallocate (a failed
// ADD's rollback) beside Allocate in allocate.go.

// RecoveredLinkPrefix starts the container ID of an attachment imported after corruption:
// the runtime's container ID cannot be learnt from the host (veth names are hashes), so an
// imported allocation is keyed by its host link; see RecoveredAttachment.
const RecoveredLinkPrefix = "recovered-link:"

// RecoveredAttachment is the attachment under which Import stores an allocation found on
// host link `link` (e.g. the sip* veth the IP's /32 route points at). The plugin's DEL and
// GC find it again through the veth name of the runtime's attachment.
func RecoveredAttachment(link string) Attachment {
	return Attachment{ContainerID: RecoveredLinkPrefix + link, IfName: "recovered"}
}

// RecoveredLink returns the host link of an attachment made by RecoveredAttachment.
func (a Attachment) RecoveredLink() (string, bool) {
	return strings.CutPrefix(a.ContainerID, RecoveredLinkPrefix)
}

// Recover starts the rebuild of a corrupt database (the node agent calls it when Open returns
// ErrCorrupt): it moves the corrupt file aside to <path>.corrupt-<UTC time>, never deleting
// it, and opens a fresh store in the recovering state, in which Allocate refuses (ADD fails
// with "try again later") while Release, GC, Get and the range/reservation syncs work. The
// caller then sets the ranges and reservations, Imports the allocations it finds on the host
// (every IP routed to a sip* veth, with the pod that holds it where known), and calls
// FinishRecovery. All of it happens while the caller holds the returned DB, i.e. the lock: no
// ADD can run in between. A store that is still recovering when opened (the agent died half
// way) is simply rebuilt again: Import is idempotent. Recover refuses a database that opens.
func Recover(opts Options) (*DB, error) {
	opts = opts.withDefaults()
	path := opts.Path
	lock, err := lockPath(path, opts.OpenTimeout)
	if err != nil {
		return nil, err
	}
	d, err := openLocked(opts, lock)
	if err == nil {
		d.Close()
		return nil, fmt.Errorf("IPAM database %s opens: not corrupt, nothing to rebuild", path)
	}
	if !errors.Is(err, ErrCorrupt) {
		lock.Close()
		return nil, err
	}
	now := opts.Now()
	moved := fmt.Sprintf("%s.corrupt-%s", path, now.UTC().Format("20060102T150405.000000000Z"))
	if err := os.Rename(path, moved); err != nil {
		lock.Close()
		return nil, fmt.Errorf("moving the corrupt IPAM database aside: %w", err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		lock.Close()
		return nil, err
	}
	d, err = openLocked(opts, lock)
	if err != nil {
		lock.Close()
		return nil, err
	}
	st, _ := json.Marshal(RecoveryState{Since: now.UTC(), MovedAside: moved})
	if err := d.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyRecovering, st) }); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

func recovering(tx *bolt.Tx) (RecoveryState, bool, error) {
	var st RecoveryState
	v := tx.Bucket(bucketMeta).Get(keyRecovering)
	if v == nil {
		return st, false, nil
	}
	if err := json.Unmarshal(v, &st); err != nil {
		return st, true, decodeErr("recovery state", keyRecovering, err)
	}
	return st, true, nil
}

// Recovering reports whether the store is being rebuilt.
func (d *DB) Recovering() (RecoveryState, bool, error) {
	var st RecoveryState
	var ok bool
	err := d.view(func(tx *bolt.Tx) error {
		var err error
		st, ok, err = recovering(tx)
		return err
	})
	return st, ok, err
}

// FinishRecovery ends the rebuild; Allocate works again.
func (d *DB) FinishRecovery() error {
	return d.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Delete(keyRecovering) })
}

// Import stores allocations found on the host, in one transaction. An allocation needs an IP
// and an attachment (RecoveredAttachment when only the host link is known); its Subnet is
// filled from the ranges when unset, AllocatedAt from the clock. One whose IP is allocated to
// another attachment, or whose attachment holds another IP, is not stored but reported.
func (d *DB) Import(allocs []Allocation) (ImportResult, error) {
	for _, a := range allocs {
		if !a.IP.IsValid() || a.Attachment.ContainerID == "" || a.Attachment.IfName == "" {
			return ImportResult{}, invalidf("imported allocation %+v needs an IP and an attachment", a)
		}
	}
	var res ImportResult
	err := d.update(func(tx *bolt.Tx) error {
		res = ImportResult{}
		t := d.txn(tx)
		ranges, err := t.loadRanges()
		if err != nil {
			return err
		}
		now := d.now().UTC()
		for _, a := range allocs {
			a.IP = a.IP.Unmap()
			a.Previous = nil
			cur, err := t.alloc(a.IP)
			if err != nil {
				return err
			}
			if cur != nil {
				if cur.Attachment == a.Attachment {
					res.Unchanged++
				} else {
					res.Conflicts = append(res.Conflicts, a)
				}
				continue
			}
			if hasIndexedOf(t.attach, a.Attachment.key(), family(a.IP)) {
				res.Conflicts = append(res.Conflicts, a)
				continue
			}
			if !a.Subnet.IsValid() {
				if r, ok := rangeFor(ranges, a.IP); ok {
					a.Subnet = r.Subnet
				} else {
					a.Subnet = netipHost(a.IP)
				}
			}
			if a.AllocatedAt.IsZero() {
				a.AllocatedAt = now
			}
			if err := t.putAlloc(a); err != nil {
				return err
			}
			res.Imported++
		}
		return nil
	})
	return res, err
}
