// Package ownwrites lays a controller's own writes over its informer caches until the caches
// show them.
//
// A controller's next pass often starts before the watch event of its last write has reached
// its informer: a pass started by another object's event, or the next step of the same pass.
// Deciding from the older copy repeats or undoes writes: node failover marked a moved range
// report-routes and then, on the same pass, skipped taking the mark off because its range cache
// still showed none (the range stayed marked for good and the next migration went over the
// cap), and a pass on a record cache one status write behind ran a finished step again.
//
// An Overlay remembers the object each write returned, per key, and View gives the newer of the
// cached copy and the remembered one. Newer is decided by resourceVersion read as an integer —
// what etcd-backed API servers give and what client-go's MutationCache
// (NewIntegerResourceVersionMutationCache) relies on for the same purpose; a version that is
// not an integer makes the cache win. Every write is watched in order, so the cache reaches the
// written version (or a later one) and the entry ends; TTL bounds an entry whose object the
// cache never shows again (deleted, or a relist that skipped it).
package ownwrites

import (
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultTTL bounds how long a write is laid over the cache.
const DefaultTTL = time.Minute

// Overlay holds the objects of one resource that the controller wrote and its cache may not
// show yet, by key (the lister's key: name, or namespace/name). Safe for concurrent use.
type Overlay[T metav1.Object] struct {
	ttl time.Duration
	now func() time.Time

	mu     sync.Mutex
	writes map[string]write[T]
	// swept: when the expired entries were last dropped (Remember sweeps at most once per TTL).
	swept time.Time
}

type write[T metav1.Object] struct {
	written  T
	deadline time.Time
}

// New returns an empty overlay; ttl <= 0 means DefaultTTL, now nil means time.Now.
func New[T metav1.Object](ttl time.Duration, now func() time.Time) *Overlay[T] {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if now == nil {
		now = time.Now
	}
	return &Overlay[T]{ttl: ttl, now: now, writes: map[string]write[T]{}}
}

// Remember records written, the object a create, update or patch of key returned.
func (o *Overlay[T]) Remember(key string, written T) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.now()
	if now.Sub(o.swept) >= o.ttl {
		for k, w := range o.writes {
			if !now.Before(w.deadline) {
				delete(o.writes, k)
			}
		}
		o.swept = now
	}
	if last, ok := o.writes[key]; ok && newer(last.written, written) {
		return // an answer that arrived after a later write's
	}
	o.writes[key] = write[T]{written: written, deadline: now.Add(o.ttl)}
}

// Forget drops what is remembered for key (the object is gone, or a write failed in a way
// that leaves its outcome unknown).
func (o *Overlay[T]) Forget(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.writes, key)
}

// View returns the newer of cached (the informer's copy of key) and the last write of key.
// The result is shared: like an informer's object, it must not be modified (DeepCopy first).
func (o *Overlay[T]) View(key string, cached T) T {
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.writes[key]
	if !ok {
		return cached
	}
	if !newer(w.written, cached) || !o.now().Before(w.deadline) || w.written.GetUID() != cached.GetUID() {
		// The cache caught up (or moved past), the entry expired, or the object was
		// deleted and made again: the cache wins from now on.
		delete(o.writes, key)
		return cached
	}
	return w.written
}

// Unseen returns the remembered writes whose keys the cache does not hold (inCache says which
// it does): objects this controller created that the watch has not shown yet. Expired ones are
// dropped. The results are shared, like View's.
func (o *Overlay[T]) Unseen(inCache func(key string) bool) []T {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []T
	for k, w := range o.writes {
		switch {
		case !o.now().Before(w.deadline):
			delete(o.writes, k)
		case !inCache(k):
			out = append(out, w.written)
		}
	}
	return out
}

// Len is how many writes are remembered (metrics, tests).
func (o *Overlay[T]) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.writes)
}

// newer says whether a's resourceVersion is later than b's; false when either is not an
// integer.
func newer(a, b metav1.Object) bool {
	av, errA := strconv.ParseUint(a.GetResourceVersion(), 10, 64)
	bv, errB := strconv.ParseUint(b.GetResourceVersion(), 10, 64)
	return errA == nil && errB == nil && av > bv
}
