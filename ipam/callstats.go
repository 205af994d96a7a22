// CNI call statistics: how long each ADD/DEL/CHECK took and how it ended, kept in the store
// itself so that the short-lived plugin process leaves them where staticip-agent reads them
// (cni/agent/metrics.go exports them). Cheap by construction: a successful call is counted
// inside the write transaction it commits anyway (RecordCallOnCommit — no second commit, no
// second fsync); only a failed call, whose transaction rolled back, costs a commit of its own
// (RecordCallFailure), and failures are rare.

package ipam

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// bucketCalls holds the counters: "d\x00<op>\x00<result>" → callHistogram (count, sum of
// nanoseconds, one count per CallDurationBuckets bound and +Inf, big-endian uint64s), and
// "f\x00<op>\x00<reason>" → failure count (uint64). A handful of keys whatever the load.
var bucketCalls = []byte("cniCalls")

// CallDurationBuckets are the upper bounds (seconds) of the call duration histogram: a call
// is an fsync or two on a healthy node (milliseconds) and seconds behind a locked database or
// a slow API server. Changing them starts the stored histograms afresh (the length differs).
var CallDurationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// The results a call histogram is kept by.
const (
	CallSucceeded = "success"
	CallFailed    = "failure"
)

// CallHistogram is the duration histogram of one operation and result.
type CallHistogram struct {
	Op, Result string
	Count      uint64
	Sum        time.Duration
	// Buckets are cumulative counts, one per CallDurationBuckets bound (+Inf is Count).
	Buckets []uint64
}

// CallFailures counts the failed calls of one operation for one reason.
type CallFailures struct {
	Op, Reason string
	Count      uint64
}

// CallStats are every counter a store holds, sorted by their labels.
type CallStats struct {
	Histograms []CallHistogram
	Failures   []CallFailures
}

type pendingCall struct {
	op    string
	start time.Time
	// retract: take back a success of op that lasted took (counted by an earlier commit of a
	// call that failed after it).
	retract bool
	took    time.Duration
}

// RecordCallOnCommit makes the next write transaction of d that commits also count one
// successful call of op, lasting from start to that commit (the fsync excluded: it follows).
// It counts once; a transaction that rolls back drops it (the caller records the failure).
// CountedCall then says what was counted.
func (d *DB) RecordCallOnCommit(op string, start time.Time) {
	d.pending = &pendingCall{op: op, start: start}
}

// RecordCall counts one successful call of op, lasting from start to now, in a transaction of
// its own: for a call that commits nothing else (CHECK only reads), so it costs a commit.
func (d *DB) RecordCall(op string, start time.Time) error {
	d.RecordCallOnCommit(op, start)
	return d.update(func(*bolt.Tx) error { return nil })
}

// RetractCallOnCommit makes the next write transaction of d that commits take back one
// success of op lasting took — what CountedCall reported for a call whose commit was followed
// by a failure (an ADD whose interface setup failed and whose allocation is being undone).
func (d *DB) RetractCallOnCommit(op string, took time.Duration) {
	d.pending = &pendingCall{op: op, retract: true, took: took}
}

// CountedCall is the duration of the successful call the last commit of d counted, if any.
func (d *DB) CountedCall() (time.Duration, bool) {
	return d.counted, d.countedOK
}

// recordCall counts p (if any) inside a write transaction whose work succeeded.
func (d *DB) recordCall(tx *bolt.Tx, p *pendingCall) error {
	if p == nil {
		return nil
	}
	b := tx.Bucket(bucketCalls)
	if b == nil { // never fail the call for its statistics
		return nil
	}
	if p.retract {
		return retractCall(b, p.op, CallSucceeded, p.took)
	}
	took := d.now().Sub(p.start)
	if err := addCall(b, p.op, CallSucceeded, took); err != nil {
		return err
	}
	d.counted, d.countedOK = took, true
	return nil
}

// RecordCallFailure counts one failed call of op (lasting took) for reason in its own
// transaction: the failed call's own transaction, if any, rolled back. Best effort for the
// plugin: it opens the store with openTimeout (a store held by another call for longer is not
// waited for, the call has failed already) and reports what went wrong.
func RecordCallFailure(opts Options, openTimeout time.Duration, op, reason string, took time.Duration) error {
	opts.OpenTimeout = openTimeout
	opts.LegacyPath = "" // never migrate on the failure path
	d, err := Open(opts)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketCalls)
		if err := addCall(b, op, CallFailed, took); err != nil {
			return err
		}
		return addUint(b, failureKey(op, reason), 1)
	})
}

// CallStats reads every call counter of the store.
func (d *DB) CallStats() (CallStats, error) {
	var s CallStats
	err := d.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketCalls)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			parts := strings.Split(string(k), "\x00")
			if len(parts) != 3 {
				return nil // a key of a later version: not ours to read
			}
			switch parts[0] {
			case "d":
				h, ok := decodeHistogram(v)
				if !ok {
					return nil // other bucket bounds (another version): starts afresh on the next call
				}
				h.Op, h.Result = parts[1], parts[2]
				s.Histograms = append(s.Histograms, h)
			case "f":
				if len(v) == 8 {
					s.Failures = append(s.Failures, CallFailures{Op: parts[1], Reason: parts[2], Count: binary.BigEndian.Uint64(v)})
				}
			}
			return nil
		})
	})
	return s, err
}

func histogramKey(op, result string) []byte { return []byte("d\x00" + op + "\x00" + result) }
func failureKey(op, reason string) []byte   { return []byte("f\x00" + op + "\x00" + reason) }

// addCall adds one call lasting took to the histogram of op and result.
func addCall(b *bolt.Bucket, op, result string, took time.Duration) error {
	return adjustCall(b, op, result, took, false)
}

// retractCall takes one call lasting took back from the histogram of op and result (never
// below zero; nothing when there is no histogram).
func retractCall(b *bolt.Bucket, op, result string, took time.Duration) error {
	return adjustCall(b, op, result, took, true)
}

// adjustCall adds (or, retracting, subtracts) one call lasting took to the histogram of op
// and result: its count, its sum and the count of its bucket.
func adjustCall(b *bolt.Bucket, op, result string, took time.Duration, retract bool) error {
	if b == nil {
		return fmt.Errorf("IPAM store has no %s bucket", bucketCalls)
	}
	if strings.Contains(op+result, "\x00") {
		return invalidf("call label %q/%q contains NUL", op, result)
	}
	key := histogramKey(op, result)
	v := make([]byte, 8*(2+len(CallDurationBuckets)+1))
	if old := b.Get(key); len(old) == len(v) {
		copy(v, old)
	} else if retract {
		return nil
	}
	adjust := func(i int, by uint64) {
		cur := binary.BigEndian.Uint64(v[8*i:])
		if retract {
			cur -= min(cur, by)
		} else {
			cur += by
		}
		binary.BigEndian.PutUint64(v[8*i:], cur)
	}
	took = max(took, 0)
	adjust(0, 1)
	adjust(1, uint64(took))
	adjust(2+bucketIndex(took), 1)
	return b.Put(key, v)
}

// bucketIndex is the first CallDurationBuckets bound took fits under (len for +Inf).
func bucketIndex(took time.Duration) int {
	secs := took.Seconds()
	i, _ := slices.BinarySearch(CallDurationBuckets, secs)
	return i
}

func addUint(b *bolt.Bucket, key []byte, by uint64) error {
	var v [8]byte
	if old := b.Get(key); len(old) == 8 {
		copy(v[:], old)
	}
	binary.BigEndian.PutUint64(v[:], binary.BigEndian.Uint64(v[:])+by)
	return b.Put(key, v[:])
}

// decodeHistogram turns a stored histogram into cumulative buckets; false when it was
// stored with other bounds.
func decodeHistogram(v []byte) (CallHistogram, bool) {
	n := 2 + len(CallDurationBuckets) + 1
	if len(v) != 8*n {
		return CallHistogram{}, false
	}
	at := func(i int) uint64 { return binary.BigEndian.Uint64(v[8*i:]) }
	h := CallHistogram{Count: at(0), Sum: time.Duration(at(1)), Buckets: make([]uint64, len(CallDurationBuckets))}
	var cum uint64
	for i := range CallDurationBuckets {
		cum += at(2 + i)
		h.Buckets[i] = cum
	}
	return h, true
}
