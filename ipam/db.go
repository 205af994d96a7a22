// Open, Close and the transaction idiom of the bbolt store: one bbolt transaction per public
// operation (update, view), a panic on page damage turned into a CorruptError naming the file.

package ipam

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Options configures Open.
type Options struct {
	// Path of the database file; DefaultPath when empty. Its directory is created.
	Path string
	// OpenTimeout bounds the wait for another process holding the database;
	// DefaultOpenTimeout when zero.
	OpenTimeout time.Duration
	// Quarantine is how long a released IP is skipped by next-free allocation;
	// DefaultQuarantine when zero, none when negative.
	Quarantine time.Duration
	// NoSync skips fsync on commit (tests and benchmarks on tmpfs only: a power loss could
	// lose the last transactions).
	NoSync bool
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// LegacyPath is the single database of earlier versions (<dataDir>/ipam.db), shared by
	// every network. When Path does not exist yet and LegacyPath does, Open copies it to Path
	// first (so none of its allocations is lost or reissued) and marks the legacy file so
	// that an older plugin binary no longer writes to it. ForNetwork sets it.
	LegacyPath string

	// boltOptions replaces the bbolt options (the package's benchmarks compare bbolt's
	// tuning knobs with them); Timeout and NoSync still come from the fields above.
	boltOptions *bolt.Options
}

const (
	schemaVersion = "staticip-ipam/1"
	// schemaMigrated marks a legacy database whose content was copied to per-network
	// databases: older binaries refuse it (unknown schema) instead of allocating from it.
	schemaMigrated = "staticip-ipam/migrated-to-per-network-databases"
)

// NetworkPath is the database of one network: <dataDir>/<network>/ipam.db, as host-local
// keys its store by network name, so that two networks using staticip (Multus) never see, or
// garbage-collect, each other's attachments.
func NetworkPath(dataDir, network string) string {
	return filepath.Join(dataDir, network, "ipam.db")
}

// ForNetwork is the Options of one network's database, migrating the single database of
// earlier versions (<dataDir>/ipam.db) on first use. The CNI plugin and staticip-agent both
// open their network's store this way.
func ForNetwork(dataDir, network string) Options {
	return Options{Path: NetworkPath(dataDir, network), LegacyPath: filepath.Join(dataDir, "ipam.db")}
}

// ValidNetworkName reports whether name can key a store: the CNI network name rule
// (^[a-zA-Z0-9][a-zA-Z0-9_.-]*$), which also keeps it one path element.
func ValidNetworkName(name string) bool {
	if name == "" || name == "." || name == ".." {
		return false
	}
	for i, c := range name {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || (c != '_' && c != '.' && c != '-')) {
			return false
		}
	}
	return true
}

// DB is the allocator, one bbolt file. Every method is one transaction; several processes on a
// node may use the same file (the CNI plugin is one process per call). A DB holds an exclusive
// lock on the file for as long as it is open, so short-lived callers (the CNI plugin) should
// Close it as soon as possible.
type DB struct {
	db         *bolt.DB
	lock       *os.File
	path       string
	quarantine time.Duration
	now        func() time.Time
	// pending is a successful CNI call the next committed write transaction counts
	// (RecordCallOnCommit, callstats.go).
	pending *pendingCall
	// counted is the duration of the success the last commit counted (CountedCall).
	counted   time.Duration
	countedOK bool
}

// withDefaults fills in the defaults of opts.
func (opts Options) withDefaults() Options {
	if opts.Path == "" {
		opts.Path = DefaultPath
	}
	if opts.OpenTimeout <= 0 {
		opts.OpenTimeout = DefaultOpenTimeout
	}
	if opts.Quarantine == 0 {
		opts.Quarantine = DefaultQuarantine
	} else if opts.Quarantine < 0 {
		opts.Quarantine = 0
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return opts
}

// lockPath takes the side lock of the database at path.
func lockPath(path string, timeout time.Duration) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("IPAM database directory: %w", err)
	}
	lock, err := lockFile(path+".lock", timeout)
	if errors.Is(err, errLockTimeout) {
		return nil, &LockedError{Path: path, Timeout: timeout}
	} else if err != nil {
		return nil, fmt.Errorf("IPAM database lock %s.lock: %w", path, err)
	}
	return lock, nil
}

// Open opens (creating if needed) the allocator database.
func Open(opts Options) (*DB, error) {
	opts = opts.withDefaults()
	path, timeout := opts.Path, opts.OpenTimeout
	lock, err := lockPath(path, timeout)
	if err != nil {
		return nil, err
	}
	if opts.LegacyPath != "" && opts.LegacyPath != path {
		if err := migrateLegacy(opts.LegacyPath, path, timeout); err != nil {
			lock.Close()
			return nil, err
		}
	}
	// Our side lock is held, so bbolt's lock is normally free at once; its own timeout only
	// matters against a process that opens the file without the side lock (e.g. bbolt CLI).
	d, err := openLocked(opts, lock)
	if err != nil {
		lock.Close()
		return nil, err
	}
	return d, nil
}

func openBolt(path string, timeout time.Duration, noSync bool, tuning *bolt.Options) (db *bolt.DB, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", bolterrors.ErrInvalid, p)
		}
	}()
	// bbolt's defaults: every commit fdatasyncs its pages and then its meta page, and writes
	// the freelist. ipam/README.md "Commit cost" has the measurements behind keeping them.
	o := bolt.Options{}
	if tuning != nil {
		o = *tuning
	}
	o.Timeout, o.NoSync = timeout, noSync
	return bolt.Open(path, 0o600, &o)
}

func isCorruption(err error) bool {
	for _, e := range []error{bolterrors.ErrInvalid, bolterrors.ErrChecksum, bolterrors.ErrVersionMismatch,
		bolterrors.ErrInvalidMapping} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// init creates the buckets of a new database and checks the schema of an existing one.
// It writes only when something is missing, so opening an existing database costs no fsync.
func (d *DB) init() error {
	complete := false
	err := d.view(func(tx *bolt.Tx) error {
		names := 0
		if err := tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			names++
			return nil
		}); err != nil {
			return err
		}
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			if names > 0 {
				return errors.New("file is a bbolt database of something else (no staticip meta bucket)")
			}
			return nil
		}
		if v := meta.Get(keySchema); string(v) == schemaMigrated {
			return errMigrated
		} else if string(v) != schemaVersion {
			return fmt.Errorf("schema %q, want %q", v, schemaVersion)
		}
		complete = true
		for _, b := range allBuckets {
			if tx.Bucket(b) == nil {
				complete = false
			}
		}
		return nil
	})
	if errors.Is(err, errMigrated) {
		return fmt.Errorf("IPAM database %s: %w", d.path, err)
	} else if err != nil {
		return asCorrupt(d.path, err)
	}
	if complete {
		return nil
	}
	return d.update(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(keySchema, []byte(schemaVersion))
	})
}

func asCorrupt(path string, err error) error {
	var ce *CorruptError
	if errors.As(err, &ce) {
		return err
	}
	return &CorruptError{Path: path, Err: err}
}

// Path is the database file.
func (d *DB) Path() string { return d.path }

// Close releases the database and its lock.
func (d *DB) Close() error {
	var err error
	if d.db != nil {
		err = d.db.Close()
		d.db = nil
	}
	if d.lock != nil {
		d.lock.Close()
		d.lock = nil
	}
	return err
}

// update runs fn in one read-write transaction. bbolt panics on some kinds of page damage;
// that becomes a CorruptError naming the file instead of killing the caller. A call armed by
// RecordCallOnCommit is counted in the same transaction when fn succeeds.
func (d *DB) update(fn func(tx *bolt.Tx) error) (err error) {
	defer d.recoverCorrupt(&err)
	call := d.pending
	d.pending, d.countedOK = nil, false // counted by this transaction or, if it rolls back, by the caller's failure
	return d.nameFile(d.db.Update(func(tx *bolt.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return d.recordCall(tx, call)
	}))
}

func (d *DB) view(fn func(tx *bolt.Tx) error) (err error) {
	defer d.recoverCorrupt(&err)
	return d.nameFile(d.db.View(fn))
}

func (d *DB) recoverCorrupt(err *error) {
	if p := recover(); p != nil {
		*err = &CorruptError{Path: d.path, Err: fmt.Errorf("%v", p)}
	}
}

// nameFile fills in the file name of a CorruptError raised while decoding a value.
func (d *DB) nameFile(err error) error {
	var ce *CorruptError
	if errors.As(err, &ce) && ce.Path == "" {
		ce.Path = d.path
	}
	return err
}

// decodeErr marks a stored value that does not parse: the file is damaged.
func decodeErr(what string, key []byte, err error) error {
	return &CorruptError{Err: fmt.Errorf("%s %x: %w", what, key, err)}
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
