package ipam

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
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

var (
	bucketMeta       = []byte("meta")
	bucketRanges     = []byte("ranges")        // subnet -> Range (JSON)
	bucketCursors    = []byte("cursors")       // subnet -> last IP handed out by next-free (16 bytes)
	bucketAllocs     = []byte("allocations")   // IP (16 bytes) -> Allocation (JSON)
	bucketAttach     = []byte("attachments")   // containerID\0ifname -> IP (16 bytes)
	bucketReserved   = []byte("reservations")  // IP (16 bytes) -> Reservation (JSON)
	bucketReservedBy = []byte("reservedByPod") // namespace/name -> IP (16 bytes)
	bucketQuarantine = []byte("quarantine")    // IP (16 bytes) -> release time (unix nanos)
	allBuckets       = [][]byte{bucketMeta, bucketRanges, bucketCursors, bucketAllocs, bucketAttach,
		bucketReserved, bucketReservedBy, bucketQuarantine, bucketServed}
	keySchema      = []byte("schema")
	keyManagedBy   = []byte("managedBy")  // set by SetNodeRanges: the agent owns the ranges
	keyRecovering  = []byte("recovering") // RecoveryState (JSON) while a rebuild runs
	managedByAgent = []byte("staticip-agent")
)

// DB is the bbolt-backed Store. It holds an exclusive lock on the database for as long as it
// is open, so short-lived callers (the CNI plugin) should Close it as soon as possible.
type DB struct {
	db         *bolt.DB
	lock       *os.File
	path       string
	quarantine time.Duration
	now        func() time.Time
}

var _ Store = (*DB)(nil)

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

func openBolt(path string, timeout time.Duration, noSync bool) (db *bolt.DB, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", bolterrors.ErrInvalid, p)
		}
	}()
	return bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout, NoSync: noSync, NoFreelistSync: false})
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
// that becomes a CorruptError naming the file instead of killing the caller.
func (d *DB) update(fn func(tx *bolt.Tx) error) (err error) {
	defer d.recoverCorrupt(&err)
	return d.nameFile(d.db.Update(fn))
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
	if err := t.attach.Put(a.Attachment.key(), ipKey(a.IP)); err != nil {
		return err
	}
	return t.quarantine.Delete(ipKey(a.IP))
}

func (t *txn) deleteAlloc(a Allocation) error {
	if err := t.allocs.Delete(ipKey(a.IP)); err != nil {
		return err
	}
	if cur := t.attach.Get(a.Attachment.key()); cur != nil && bytes.Equal(cur, ipKey(a.IP)) {
		return t.attach.Delete(a.Attachment.key())
	}
	return nil
}

func (t *txn) putReservation(r Reservation) error {
	if old, err := t.reservation(r.IP); err != nil {
		return err
	} else if old != nil {
		if err := t.deleteReservation(*old); err != nil {
			return err
		}
	}
	// One reservation per pod: a pod's previous reservation of another IP goes away.
	if prev := t.byPod.Get([]byte(r.Pod.Key())); prev != nil {
		old, err := t.reservation(keyIP(prev))
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
	return t.byPod.Put([]byte(r.Pod.Key()), ipKey(r.IP))
}

func (t *txn) deleteReservation(r Reservation) error {
	if err := t.reserved.Delete(ipKey(r.IP)); err != nil {
		return err
	}
	if cur := t.byPod.Get([]byte(r.Pod.Key())); cur != nil && bytes.Equal(cur, ipKey(r.IP)) {
		return t.byPod.Delete([]byte(r.Pod.Key()))
	}
	return nil
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

// requestedQuarantined refuses an explicitly requested IP released less than the quarantine
// ago, unless the requesting pod holds it already (a repeated ADD) or it is reserved for that
// pod (its StaticIP names it): asking for an address must not bypass what next-free honours.
func (d *DB) requestedQuarantined(t *txn, req AllocateRequest, now time.Time) error {
	if !t.quarantined(req.IP, now, d.quarantine) {
		return nil
	}
	if key := req.Pod.Key(); key != "" && !req.SkipPodReservation {
		if cur := t.byPod.Get([]byte(key)); cur != nil && keyIP(cur) == req.IP {
			return nil
		}
		if holder, err := t.alloc(req.IP); err != nil {
			return err
		} else if holder != nil && holder.Pod.Key() == key {
			return nil
		}
	}
	released, _ := t.releasedAt(req.IP) // present: quarantined said so
	return &QuarantinedError{IP: req.IP, Until: released.Add(d.quarantine)}
}

func (t *txn) putQuarantine(ip netip.Addr, now time.Time) error {
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], uint64(now.UnixNano()))
	return t.quarantine.Put(ipKey(ip), v[:])
}

func rangeFor(rs []Range, ip netip.Addr) (Range, bool) {
	for _, r := range rs {
		if r.Subnet.Contains(ip) {
			return r, true
		}
	}
	return Range{}, false
}

func subnets(rs []Range) []netip.Prefix {
	ps := make([]netip.Prefix, len(rs))
	for i, r := range rs {
		ps[i] = r.Subnet
	}
	return ps
}

// Allocate gives the attachment an IP; see Store.
func (d *DB) Allocate(req AllocateRequest) (Allocation, bool, error) {
	if req.Attachment.ContainerID == "" || req.Attachment.IfName == "" {
		return Allocation{}, false, invalidf("allocation needs a container ID and an interface name")
	}
	if req.IP.IsValid() {
		req.IP = req.IP.Unmap()
	}
	var result Allocation
	created := false
	err := d.update(func(tx *bolt.Tx) error {
		t := d.txn(tx)
		if cur := t.attach.Get(req.Attachment.key()); cur != nil {
			a, err := t.alloc(keyIP(cur))
			if err != nil {
				return err
			}
			if a != nil && a.Attachment == req.Attachment {
				if req.IP.IsValid() && req.IP != a.IP {
					return fmt.Errorf("%w: container %s interface %s holds %s, %s was requested",
						ErrAttachmentHasIP, shortID(req.Attachment.ContainerID), req.Attachment.IfName, a.IP, req.IP)
				}
				result = *a
				return nil
			}
			// Dangling index entry (cannot happen through this API): drop it and go on.
			if err := t.attach.Delete(req.Attachment.key()); err != nil {
				return err
			}
		}
		if st, ok, err := recovering(tx); err != nil {
			return err
		} else if ok {
			return &RecoveringError{Path: d.path, State: st}
		}
		ranges, err := t.loadRanges()
		if err != nil {
			return err
		}
		now := d.now()
		ip, rng, err := d.choose(t, ranges, req, now)
		if err != nil {
			return err
		}
		// The same pod name holding the IP through another attachment is a stale attachment of
		// an earlier incarnation (pod names are unique within a namespace) whose sandbox is gone
		// (choose asked req.Alive): take it over, remembering it for Unallocate.
		var previous *Allocation
		if old, err := t.alloc(ip); err != nil {
			return err
		} else if old != nil {
			if err := t.deleteAlloc(*old); err != nil {
				return err
			}
			old.Previous = nil
			previous = old
		}
		result = Allocation{IP: ip, Subnet: rng.Subnet, Attachment: req.Attachment, Pod: req.Pod, AllocatedAt: now.UTC(), Previous: previous}
		created = true
		return t.putAlloc(result)
	})
	if err != nil {
		return Allocation{}, false, err
	}
	return result, created, nil
}

// choose picks the IP for req: the requested one, else the pod's reservation, else next free.
// Nothing comes from a draining range.
func (d *DB) choose(t *txn, ranges []Range, req AllocateRequest, now time.Time) (netip.Addr, Range, error) {
	active := activeRanges(ranges)
	if req.IP.IsValid() {
		rng, ok := rangeFor(ranges, req.IP)
		if !ok {
			return netip.Addr{}, Range{}, &OutOfRangeError{IP: req.IP, Ranges: subnets(active)}
		}
		if rng.Draining {
			return netip.Addr{}, Range{}, &DrainingError{IP: req.IP, Subnet: rng.Subnet}
		}
		if err := d.usableBy(t, rng, req.IP, req); err != nil {
			return netip.Addr{}, Range{}, err
		}
		if err := d.requestedQuarantined(t, req, now); err != nil {
			return netip.Addr{}, Range{}, err
		}
		return req.IP, rng, nil
	}
	if key := req.Pod.Key(); key != "" && !req.SkipPodReservation {
		if cur := t.byPod.Get([]byte(key)); cur != nil {
			ip := keyIP(cur)
			if rng, ok := rangeFor(ranges, ip); ok {
				if rng.Draining {
					return netip.Addr{}, Range{}, &DrainingError{IP: ip, Subnet: rng.Subnet, Reserved: true}
				}
				if err := d.usableBy(t, rng, ip, req); err != nil {
					return netip.Addr{}, Range{}, fmt.Errorf("the IP reserved for pod %s: %w", req.Pod, err)
				}
				return ip, rng, nil
			}
			// Reserved in a range this node no longer owns: the pod belongs elsewhere.
			return netip.Addr{}, Range{}, &OutOfRangeError{IP: ip, Ranges: subnets(active),
				OwnerHint: fmt.Sprintf("it is reserved for pod %s", req.Pod)}
		}
	}
	if len(active) == 0 {
		return netip.Addr{}, Range{}, &ExhaustedError{}
	}
	// Two passes: first skip recently released IPs; only when nothing else is free, take one.
	for _, honorQuarantine := range []bool{true, false} {
		for _, rng := range active {
			ip, ok, err := d.nextFree(t, rng, now, honorQuarantine)
			if err != nil {
				return netip.Addr{}, Range{}, err
			}
			if ok {
				if err := t.cursors.Put([]byte(rng.Subnet.String()), ipKey(ip)); err != nil {
					return netip.Addr{}, Range{}, err
				}
				return ip, rng, nil
			}
		}
		if d.quarantine <= 0 {
			break
		}
	}
	return netip.Addr{}, Range{}, &ExhaustedError{Ranges: subnets(active)}
}

func activeRanges(rs []Range) []Range {
	out := make([]Range, 0, len(rs))
	for _, r := range rs {
		if !r.Draining {
			out = append(out, r)
		}
	}
	return out
}

// usableBy checks that ip (inside rng) may be given to req's pod.
func (d *DB) usableBy(t *txn, rng Range, ip netip.Addr, req AllocateRequest) error {
	pod := req.Pod
	switch {
	case !rng.Contains(ip):
		return fmt.Errorf("%w: %s is outside %s-%s of range %s", ErrNotAllocatable, ip, rng.RangeStart, rng.RangeEnd, rng.Subnet)
	case rng.Gateway.IsValid() && ip == rng.Gateway:
		return fmt.Errorf("%w: %s is the gateway of range %s", ErrNotAllocatable, ip, rng.Subnet)
	case !rng.allocatable(ip):
		return fmt.Errorf("%w: %s is excluded in range %s", ErrNotAllocatable, ip, rng.Subnet)
	}
	holder, err := t.alloc(ip)
	if err != nil {
		return err
	}
	if holder != nil && (holder.Pod.Key() == "" || holder.Pod.Key() != pod.Key()) {
		att := holder.Attachment
		return &InUseError{IP: ip, Holder: holder.Pod, Attachment: &att}
	}
	if holder != nil && req.Alive != nil && req.Alive(holder.Attachment) {
		return &TakeoverError{IP: ip, Pod: pod, Previous: holder.Attachment}
	}
	res, err := t.reservation(ip)
	if err != nil {
		return err
	}
	if res != nil && res.Pod.Key() != pod.Key() {
		return &InUseError{IP: ip, Holder: res.Pod}
	}
	if res != nil && req.SkipPodReservation {
		return &InUseError{IP: ip, Holder: res.Pod, OtherWorkload: true}
	}
	return nil
}

// nextFree walks rng round-robin from the address after its cursor.
func (d *DB) nextFree(t *txn, rng Range, now time.Time, honorQuarantine bool) (netip.Addr, bool, error) {
	start := rng.RangeStart
	if cur := t.cursors.Get([]byte(rng.Subnet.String())); cur != nil {
		if last := keyIP(cur); rng.Contains(last) && last != rng.RangeEnd {
			start = last.Next()
		}
	}
	ip := start
	for {
		if rng.allocatable(ip) && t.allocs.Get(ipKey(ip)) == nil && t.reserved.Get(ipKey(ip)) == nil &&
			!(honorQuarantine && t.quarantined(ip, now, d.quarantine)) {
			return ip, true, nil
		}
		if ip == rng.RangeEnd {
			ip = rng.RangeStart
		} else {
			ip = ip.Next()
		}
		if ip == start {
			return netip.Addr{}, false, nil
		}
	}
}

// Get returns the allocation of an attachment.
func (d *DB) Get(a Attachment) (Allocation, bool, error) {
	var out *Allocation
	err := d.view(func(tx *bolt.Tx) error {
		t := d.txn(tx)
		cur := t.attach.Get(a.key())
		if cur == nil {
			return nil
		}
		al, err := t.alloc(keyIP(cur))
		if err != nil || al == nil || al.Attachment != a {
			return err
		}
		out = al
		return nil
	})
	if err != nil || out == nil {
		return Allocation{}, false, err
	}
	return *out, true, nil
}

// Release frees (or keeps reserved) the attachment's IP.
func (d *DB) Release(a Attachment, keepReserved bool) (Allocation, bool, error) {
	var out *Allocation
	err := d.update(func(tx *bolt.Tx) error {
		t := d.txn(tx)
		cur := t.attach.Get(a.key())
		if cur == nil {
			return nil
		}
		al, err := t.alloc(keyIP(cur))
		if err != nil {
			return err
		}
		if al == nil || al.Attachment != a {
			return t.attach.Delete(a.key())
		}
		if err := t.deleteAlloc(*al); err != nil {
			return err
		}
		out = al
		return d.afterRelease(t, *al, keepReserved)
	})
	if err != nil || out == nil {
		return Allocation{}, false, err
	}
	return *out, true, nil
}

// afterRelease either leaves a reservation for the pod or quarantines the freed IP.
func (d *DB) afterRelease(t *txn, al Allocation, keepReserved bool) error {
	if keepReserved && al.Pod.Key() != "" {
		res, err := t.reservation(al.IP)
		if err != nil {
			return err
		}
		if res != nil {
			return nil // already reserved (by its StaticIP, normally for this very pod)
		}
		// Never displace the StaticIP reservation the pod has for another IP.
		if prev := t.byPod.Get([]byte(al.Pod.Key())); prev != nil {
			old, err := t.reservation(keyIP(prev))
			if err != nil {
				return err
			}
			if old != nil && old.Source == SourceStaticIP {
				return t.putQuarantine(al.IP, d.now())
			}
		}
		return t.putReservation(Reservation{IP: al.IP, Pod: PodRef{Namespace: al.Pod.Namespace, Name: al.Pod.Name, UID: al.Pod.UID}, Source: SourceRelease})
	}
	// Not kept: a reservation an earlier Release left for this pod goes too (its caller has
	// just learned that the pod's StaticIP is gone). StaticIP-synced ones stay: only the sync
	// removes them.
	if res, err := t.reservation(al.IP); err != nil {
		return err
	} else if res != nil && res.Source == SourceRelease && res.Pod.Key() == al.Pod.Key() {
		if err := t.deleteReservation(*res); err != nil {
			return err
		}
	}
	return t.putQuarantine(al.IP, d.now())
}

func validReservation(r Reservation) error {
	if !r.IP.IsValid() {
		return invalidf("reservation for pod %s has no valid IP", r.Pod)
	}
	if r.Pod.Name == "" {
		return invalidf("reservation of %s names no pod", r.IP)
	}
	return nil
}

// Reserve adds or replaces the StaticIP reservation of one IP. It refuses to take an IP that is
// reserved for another pod.
func (d *DB) Reserve(r Reservation) error {
	if err := validReservation(r); err != nil {
		return err
	}
	r.IP = r.IP.Unmap()
	r.Source = SourceStaticIP
	return d.update(func(tx *bolt.Tx) error {
		t := d.txn(tx)
		old, err := t.reservation(r.IP)
		if err != nil {
			return err
		}
		if old != nil && old.Pod.Key() != r.Pod.Key() {
			return &InUseError{IP: r.IP, Holder: old.Pod}
		}
		return t.putReservation(r)
	})
}

// SyncReservations makes the reservations exactly rs. The whole set is validated first; an
// invalid set changes nothing.
func (d *DB) SyncReservations(rs []Reservation) (SyncResult, error) {
	var res SyncResult
	want := map[netip.Addr]Reservation{}
	byPod := map[string]netip.Addr{}
	for _, r := range rs {
		if err := validReservation(r); err != nil {
			return res, err
		}
		r.IP = r.IP.Unmap()
		r.Source = SourceStaticIP
		if o, ok := want[r.IP]; ok && o.Pod.Key() != r.Pod.Key() {
			return res, invalidf("IP %s is reserved for both pod %s and pod %s", r.IP, o.Pod, r.Pod)
		}
		if ip, ok := byPod[r.Pod.Key()]; ok && ip != r.IP {
			return res, invalidf("pod %s has two reserved IPs, %s and %s", r.Pod, ip, r.IP)
		}
		want[r.IP] = r
		byPod[r.Pod.Key()] = r.IP
	}
	err := d.update(func(tx *bolt.Tx) error {
		res = SyncResult{}
		t := d.txn(tx)
		var stale []Reservation
		err := t.reserved.ForEach(func(k, v []byte) error {
			var r Reservation
			if err := json.Unmarshal(v, &r); err != nil {
				return decodeErr("reservation", k, err)
			}
			if w, ok := want[r.IP]; !ok || w.Pod.Key() != r.Pod.Key() {
				stale = append(stale, r)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, r := range stale {
			if err := t.deleteReservation(r); err != nil {
				return err
			}
			res.Removed++
		}
		ips := make([]netip.Addr, 0, len(want))
		for ip := range want {
			ips = append(ips, ip)
		}
		slices.SortFunc(ips, netip.Addr.Compare)
		for _, ip := range ips {
			r := want[ip]
			old, err := t.reservation(ip)
			if err != nil {
				return err
			}
			if old != nil && *old == r {
				res.Unchanged++
			} else {
				if err := t.putReservation(r); err != nil {
					return err
				}
				res.Added++
			}
			if al, err := t.alloc(ip); err != nil {
				return err
			} else if al != nil && al.Pod.Key() != r.Pod.Key() {
				res.Conflicts = append(res.Conflicts, *al)
			}
		}
		return nil
	})
	return res, err
}

// GC releases every allocation whose attachment is not live.
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
			if al == nil || !bytes.Equal(al.Attachment.key(), k) {
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

func (t *txn) putRange(r Range) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return t.ranges.Put([]byte(r.Subnet.String()), v)
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

func isManaged(tx *bolt.Tx) bool {
	return bytes.Equal(tx.Bucket(bucketMeta).Get(keyManagedBy), managedByAgent)
}

// SyncRanges makes rs the active ranges of a store that is not agent-managed; see Store. It
// writes nothing when nothing changes.
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

// SetNodeRanges makes rs the node's active ranges and marks the store agent-managed; see
// Store. It writes nothing when nothing changes.
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

// Managed reports whether the node agent manages the ranges.
func (d *DB) Managed() (bool, error) {
	managed := false
	err := d.view(func(tx *bolt.Tx) error {
		managed = isManaged(tx)
		return nil
	})
	return managed, err
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

func (t *txn) deleteRange(subnet netip.Prefix) error {
	if err := t.cursors.Delete([]byte(subnet.String())); err != nil {
		return err
	}
	return t.ranges.Delete([]byte(subnet.String()))
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

// Allocations lists the allocations, ordered by IP.
func (d *DB) Allocations() ([]Allocation, error) {
	var out []Allocation
	err := d.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAllocs).ForEach(func(k, v []byte) error {
			var a Allocation
			if err := json.Unmarshal(v, &a); err != nil {
				return decodeErr("allocation", k, err)
			}
			out = append(out, a)
			return nil
		})
	})
	return out, err
}

// PodReservation returns the IP reserved for pod (by namespace/name), if any.
func (d *DB) PodReservation(pod PodRef) (netip.Addr, bool, error) {
	var ip netip.Addr
	var ok bool
	err := d.view(func(tx *bolt.Tx) error {
		if cur := tx.Bucket(bucketReservedBy).Get([]byte(pod.Key())); cur != nil {
			ip, ok = keyIP(cur), true
		}
		return nil
	})
	return ip, ok, err
}

// Reservations lists the reservations, ordered by IP.
func (d *DB) Reservations() ([]Reservation, error) {
	var out []Reservation
	err := d.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketReserved).ForEach(func(k, v []byte) error {
			var r Reservation
			if err := json.Unmarshal(v, &r); err != nil {
				return decodeErr("reservation", k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	return out, err
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
