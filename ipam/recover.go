package ipam

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Rollback, the migration of the single database of earlier versions, and the rebuild after
// corruption: the paths on which an IP could otherwise be lost or handed out twice.

// Unallocate undoes one Allocate that returned created=true (a failed ADD's rollback): it
// removes exactly that allocation, puts back the allocation it took over, and touches no
// reservation.
func (d *DB) Unallocate(a Allocation) error {
	return d.update(func(tx *bolt.Tx) error {
		t := d.txn(tx)
		cur, err := t.alloc(a.IP)
		if err != nil || cur == nil || cur.Attachment != a.Attachment || !cur.AllocatedAt.Equal(a.AllocatedAt) {
			return err // not (or no longer) the allocation that call made
		}
		if err := t.deleteAlloc(*cur); err != nil {
			return err
		}
		if prev := cur.Previous; prev != nil && t.attach.Get(prev.Attachment.key()) == nil {
			return t.putAlloc(*prev)
		}
		return nil
	})
}

// errMigrated: a legacy database whose content lives on in per-network databases.
var errMigrated = errors.New("this database was copied to per-network databases (<dataDir>/<network>/ipam.db) " +
	"by a newer staticip and is no longer used; an older plugin binary must not allocate from it")

// migrateLegacy copies the legacy single database to path when path does not exist yet, under
// the legacy file's lock (so no older binary writes to it meanwhile), then marks the legacy
// file so that older binaries refuse it. The caller holds path's lock. A crash before the
// rename leaves only a temporary file; a crash after it, a complete copy (the legacy file is
// then marked on the next migration of another network, or never: it is no longer read).
func migrateLegacy(legacy, path string, timeout time.Duration) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("IPAM database %s: %w", path, err)
	}
	if _, err := os.Stat(legacy); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("IPAM database %s: %w", legacy, err)
	}
	lock, err := lockPath(legacy, timeout)
	if err != nil {
		return err
	}
	defer lock.Close()
	ldb, err := openBolt(legacy, timeout, false, nil)
	if errors.Is(err, bolterrors.ErrTimeout) {
		return &LockedError{Path: legacy, Timeout: timeout}
	} else if err != nil {
		return &CorruptError{Path: legacy, Err: fmt.Errorf("cannot migrate it to %s: %w", path, err)}
	}
	defer ldb.Close()
	tmp := path + ".migrating"
	err = guard(func() error {
		return ldb.View(func(tx *bolt.Tx) error {
			if meta := tx.Bucket(bucketMeta); meta != nil {
				if v := string(meta.Get(keySchema)); v != schemaVersion && v != schemaMigrated {
					return fmt.Errorf("schema %q", v)
				}
			} else if tx.Bucket(bucketAllocs) != nil {
				return errors.New("no staticip meta bucket")
			}
			return tx.CopyFile(tmp, 0o600)
		})
	})
	if err != nil {
		os.Remove(tmp)
		return &CorruptError{Path: legacy, Err: fmt.Errorf("cannot migrate it to %s: %w", path, err)}
	}
	if err := syncFile(tmp); err != nil {
		return err
	}
	// The copy keeps the legacy schema mark (a second network may copy an already marked
	// file): make it current before it goes live.
	cdb, err := openBolt(tmp, timeout, false, nil)
	if err != nil {
		return fmt.Errorf("IPAM database migration %s: %w", tmp, err)
	}
	err = cdb.Update(func(tx *bolt.Tx) error {
		if meta := tx.Bucket(bucketMeta); meta != nil {
			return meta.Put(keySchema, []byte(schemaVersion))
		}
		return nil
	})
	if cerr := cdb.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("IPAM database migration %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return err
	}
	return guard(func() error {
		return ldb.Update(func(tx *bolt.Tx) error {
			if meta := tx.Bucket(bucketMeta); meta != nil {
				return meta.Put(keySchema, []byte(schemaMigrated))
			}
			return nil
		})
	})
}

// guard turns a bbolt panic on a damaged page into an error.
func guard(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	return fn()
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

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

// openLocked opens the bbolt file at opts.Path whose side lock the caller holds; on success
// the DB owns the lock, on failure the caller still does.
func openLocked(opts Options, lock *os.File) (*DB, error) {
	bdb, err := openBolt(opts.Path, opts.OpenTimeout, opts.NoSync, opts.boltOptions)
	if err != nil {
		switch {
		case errors.Is(err, bolterrors.ErrTimeout):
			return nil, &LockedError{Path: opts.Path, Timeout: opts.OpenTimeout}
		case isCorruption(err):
			return nil, &CorruptError{Path: opts.Path, Err: err}
		}
		return nil, fmt.Errorf("IPAM database %s: %w", opts.Path, err)
	}
	d := &DB{db: bdb, path: opts.Path, quarantine: opts.Quarantine, now: opts.Now}
	if err := d.init(); err != nil {
		d.Close()
		return nil, err
	}
	d.lock = lock
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
			if t.attach.Get(a.Attachment.key()) != nil {
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
