package ipam

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// The migration of the single database of earlier versions (<dataDir>/ipam.db) to one database
// per network: a path on which an IP could otherwise be lost or handed out twice.

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
