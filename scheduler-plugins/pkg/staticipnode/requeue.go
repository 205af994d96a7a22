package staticipnode

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// Change is one StaticIP or IPRange change the cache applied (exactly one field set). Old is
// nil for an add, New nil for a deletion.
type Change struct {
	StaticIP *StaticIPEvent
	IPRange  *IPRangeEvent
}

// Listen calls f after each change the cache's informers apply (status-only updates are not
// changes), on the informer's goroutine: f must be quick.
func (c *Cache) Listen(f func(Change)) {
	c.listenersMu.Lock()
	defer c.listenersMu.Unlock()
	c.listeners = append(c.listeners, f)
}

func (c *Cache) notify(ch Change) {
	c.listenersMu.RLock()
	defer c.listenersMu.RUnlock()
	for _, f := range c.listeners {
		f(ch)
	}
}

// Activator moves pods back to the scheduling queue's active queue (the framework handle's
// PodActivator; a pod in its scheduling cycle is requeued when the cycle ends).
type Activator interface {
	Activate(logger klog.Logger, pods map[string]*v1.Pod)
}

// Requeue brings back the pods a plugin rejected when a StaticIP or IPRange change may let
// them fit. The scheduler learns of these changes from no informer of its own: registering
// the custom resources as cluster events would make kube-scheduler build a second, dynamic
// informer for each and hold every StaticIP and IPRange twice (and wait for both before
// scheduling). Instead the plugin records the pods whose placement StaticIPs or IPRanges
// decide — the pods it rejects, and the pods it pins to a node — (Wait), forgets those placed
// (Placed), and after each change the cache applies asks its hint, per waiting pod, whether
// the change may help; those it says yes to are activated (a pod in its scheduling cycle is
// requeued as soon as the cycle ends). The hint runs after the
// change is applied, so a requeued pod is never retried against a cache that lags behind.
type Requeue struct {
	activator Activator
	hint      func(logger klog.Logger, pod *v1.Pod, ch Change) bool
	logger    klog.Logger
	// ttl: a waiting pod not placed, not retried and not activated for this long is
	// forgotten (deleted while it waited); the scheduler's own flush of unschedulable pods
	// (5 min by default) retries it anyway.
	ttl time.Duration
	now func() time.Time

	mu   sync.Mutex
	pods map[types.UID]waitingPod
}

type waitingPod struct {
	pod   *v1.Pod
	since time.Time
}

// NewRequeue registers a plugin's hint with the cache; activator is the plugin's framework
// handle.
func (c *Cache) NewRequeue(logger klog.Logger, activator Activator, hint func(logger klog.Logger, pod *v1.Pod, ch Change) bool) *Requeue {
	r := &Requeue{activator: activator, hint: hint, logger: logger, ttl: 10 * time.Minute, now: time.Now, pods: map[types.UID]waitingPod{}}
	c.Listen(r.onChange)
	return r
}

// Wait records that pod's placement waits on StaticIPs or IPRanges: the plugin rejected it,
// or pinned it to a node, in its current scheduling cycle (again: the record is renewed, so a
// pod the scheduler keeps retrying never expires).
func (r *Requeue) Wait(pod *v1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pods[pod.UID] = waitingPod{pod: pod, since: r.now()}
}

// Placed forgets pod (it was given a node, or is being retried).
func (r *Requeue) Placed(pod *v1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pods) > 0 {
		delete(r.pods, pod.UID)
	}
}

// Waiting is how many pods wait (tests).
func (r *Requeue) Waiting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pods)
}

func (r *Requeue) onChange(ch Change) {
	r.mu.Lock()
	if len(r.pods) == 0 {
		r.mu.Unlock()
		return
	}
	now := r.now()
	var activate map[string]*v1.Pod
	for uid, w := range r.pods {
		switch {
		case r.hint(r.logger, w.pod, ch):
			if activate == nil {
				activate = map[string]*v1.Pod{}
			}
			activate[w.pod.Namespace+"/"+w.pod.Name] = w.pod
			delete(r.pods, uid)
		case now.Sub(w.since) > r.ttl:
			delete(r.pods, uid)
		}
	}
	r.mu.Unlock()
	if len(activate) > 0 {
		r.activator.Activate(r.logger, activate)
	}
}
