package enhancedstatefulset

// The own-writes overlay: this controller's writes the informer caches do not show yet.
// The planner must not run on a cache that still shows a pod it deleted as healthy (it would
// take more pods down than maxUnavailable allows), nor wait for the watch to catch up after
// every write; and a sync started by a pod event must not rewrite a status from a set cache
// one write behind. ownWrites remembers, per set, each pod write (an expectation) and the
// last status write, and lays them over what the caches show until the caches catch up.

import (
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/ownwrites"
)

// expectationTTL bounds how long a sync waits for the informer to see its own writes.
const expectationTTL = time.Minute

type expectation struct {
	// deleted: the pod with this UID must be gone or terminating; otherwise the pod must exist
	// with a resourceVersion other than those in staleRVs (none = just exist).
	deletedUID types.UID
	staleRVs   []string
	// written is the pod as the API server returned it from this controller's create or patch;
	// until the cache shows the write, the planner sees this copy instead. nil while the
	// write is in flight.
	written  *corev1.Pod
	deadline time.Time
}

// ownWrites is the overlay; one per controller, shared by its workers, keyed by set
// (namespace/name).
type ownWrites struct {
	podLister corelisters.PodLister
	now       func() time.Time

	mu sync.Mutex
	// expectations: per set, the pod writes of the last sync the pod cache has not shown yet.
	expectations map[string]map[string]expectation
	// statusWrites: per set, the object the last status write returned, until the set cache
	// shows it (controllers/pkg/ownwrites).
	statusWrites *ownwrites.Overlay[*jkev1alpha1.EnhancedStatefulSet]
	// gone: per set, pod name → UID of a pod the informer saw deleted while this controller's
	// write of that name was in flight (its UID not known yet); expect drops the expectation
	// of the written pod if it is the one already gone.
	gone map[string]map[string]types.UID
}

func newOwnWrites(podLister corelisters.PodLister, now func() time.Time) *ownWrites {
	return &ownWrites{podLister: podLister, now: now,
		expectations: map[string]map[string]expectation{}, statusWrites: ownwrites.New[*jkev1alpha1.EnhancedStatefulSet](expectationTTL, now),
		gone: map[string]map[string]types.UID{}}
}

// withStatus returns set (a copy of the cached object) with the status and
// resourceVersion of this controller's last status write while the cache still shows an
// older version. Pod events start the next sync before the set's own watch event for a write
// arrives; from the older copy that sync would find the status changed, write it again and
// fail with a conflict (30 of 198 writes in a 50-pod rollout). A newer version in the cache,
// or another generation, means the cache has caught up or someone else wrote the set: the
// cache wins.
func (w *ownWrites) withStatus(key string, set *jkev1alpha1.EnhancedStatefulSet) *jkev1alpha1.EnhancedStatefulSet {
	last := w.statusWrites.View(key, set)
	if last == set || last.Generation != set.Generation {
		return set
	}
	set.ResourceVersion = last.ResourceVersion
	set.Status = *last.Status.DeepCopy()
	return set
}

// rememberStatus records a successful status write.
func (w *ownWrites) rememberStatus(key string, written *jkev1alpha1.EnhancedStatefulSet) {
	w.statusWrites.Remember(key, written)
}

// expect registers a pod write of the set at key before it is sent, and what it wrote once
// the API server answered.
func (w *ownWrites) expect(key, pod string, e expectation) {
	e.deadline = w.now().Add(expectationTTL)
	w.mu.Lock()
	defer w.mu.Unlock()
	goneUID, gone := w.gone[key][pod]
	delete(w.gone[key], pod)
	if len(w.gone[key]) == 0 {
		delete(w.gone, key)
	}
	if gone && e.written != nil && e.written.UID == goneUID {
		// Deleted by someone else before this write's answer came back: the cache will
		// never show it, and the deletion's own sync has to see it gone.
		delete(w.expectations[key], pod)
		return
	}
	if w.expectations[key] == nil {
		w.expectations[key] = map[string]expectation{}
	}
	w.expectations[key][pod] = e
}

// forget drops the expectation of a pod write that failed.
func (w *ownWrites) forget(key, pod string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.expectations[key], pod)
}

// clear forgets a set that is gone.
func (w *ownWrites) clear(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.expectations, key)
	w.statusWrites.Forget(key)
	delete(w.gone, key)
}

// podDeleted is the pod informer's word that pod (of the set at key) is gone. An expectation
// that this controller's created or patched copy of it exists can no longer be met by the
// cache — the pod may be deleted (node failover deletes pending pods pinned to a failed node)
// before the cache ever showed it — so it ends here, before the deletion's sync runs: that
// sync sees the pod gone and creates it again, instead of waiting on a copy of a pod that no
// longer exists. A write still in flight is matched when its answer arrives (expect).
func (w *ownWrites) podDeleted(key string, pod *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.expectations[key][pod.Name]
	if !ok || e.deletedUID != "" {
		return // a deletion expectation is met by the cache itself
	}
	if e.written == nil {
		if w.gone[key] == nil {
			w.gone[key] = map[string]types.UID{}
		}
		w.gone[key][pod.Name] = pod.UID
		return
	}
	if e.written.UID == pod.UID {
		delete(w.expectations[key], pod.Name)
	}
}

// withPods returns pods (the set's pods in the cache) with the writes of this
// controller the cache does not show yet applied: a pod it deleted is terminating, a pod it
// created or patched is the object the API server returned. Planning on that view keeps the
// budget exact without waiting for the watch; the expectations only end when the cache has
// caught up (or after expectationTTL). wait is true only when a write is unknown (in flight
// in another goroutine: never while syncs of one key are serialized).
func (w *ownWrites) withPods(key string, pods []*corev1.Pod) (out []*corev1.Pod, wait bool) {
	ns, _, _ := cache.SplitMetaNamespaceKey(key)
	w.mu.Lock()
	defer w.mu.Unlock()
	out = pods
	cloned := false
	replace := func(name string, with *corev1.Pod) {
		if !cloned { // pods is the caller's slice
			out, cloned = slices.Clone(pods), true
		}
		for i, p := range out {
			if p.Name == name {
				out[i] = with
				return
			}
		}
		out = append(out, with)
	}
	for name, e := range w.expectations[key] {
		pod, err := w.podLister.Pods(ns).Get(name)
		var met bool
		switch {
		case e.deletedUID != "":
			met = err != nil || pod.UID != e.deletedUID || pod.DeletionTimestamp != nil
		case len(e.staleRVs) > 0:
			met = err != nil || !slices.Contains(e.staleRVs, pod.ResourceVersion)
		default:
			met = err == nil
		}
		if met || !w.now().Before(e.deadline) {
			delete(w.expectations[key], name)
			continue
		}
		switch {
		case e.deletedUID != "":
			if slices.ContainsFunc(pods, func(p *corev1.Pod) bool { return p.Name == name && p.UID == e.deletedUID }) {
				deleting := pod.DeepCopy()
				now := metav1.NewTime(w.now())
				deleting.DeletionTimestamp = &now
				replace(name, deleting)
			}
		case e.written != nil:
			replace(name, e.written)
		default:
			wait = true
		}
	}
	return out, wait
}

// untilExpiry is how long until the earliest open expectation of the set at key expires (0:
// none open). A sync must look again by then: an expectation the cache never meets (a pod
// deleted before the informer showed it, its deletion event lost to a relist) holds the set's
// view — a pod that is gone counted as present — and no event is left to sync the set again.
func (w *ownWrites) untilExpiry(key string) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first time.Duration
	for _, e := range w.expectations[key] {
		left := max(e.deadline.Sub(w.now()), time.Millisecond)
		if first == 0 || left < first {
			first = left
		}
	}
	return first
}
