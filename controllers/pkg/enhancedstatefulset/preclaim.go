// Claiming a recreated pod's StaticIP while its predecessor terminates.
//
// Before a static-IP pod is created its StaticIP is claimed (staticip.Ensure: an
// optimistic-lock write, so a release decided on an older version of the record fails and a
// Released record is never put on a new pod). For an ordinal whose pod is being deleted — a
// user's delete, a ReCreate update, a failover — the set knows it will create that ordinal
// again, so it claims the record while the old pod terminates and the create finds it claimed:
// the pod's create is then the only write between "old pod gone" and "new pod exists", as for
// a StatefulSet (issue 30: the claim was 2–48 ms of every static-IP restart on that path).
//
// What the claim guarantees is unchanged. A release decided on a version older than the claim
// still fails; one decided after it (the set scaled down meanwhile) succeeds, as it could
// between a claim and a create before; and the create uses the early claim only if the cache
// still shows the record it claimed (same UID, same workload, not deleting, not Released),
// otherwise it claims again.

package enhancedstatefulset

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/staticip"
)

// preclaimTTL bounds how long an early claim stands in for the claim at creation: past it
// (a long grace period, a stuck termination) the create claims again, so the claim stays
// close to the create it protects.
const preclaimTTL = time.Minute

// preclaim is an early claim of one StaticIP.
type preclaim struct {
	oldPod types.UID // the terminating pod it was made for: claimed once per pod
	record types.UID // the StaticIP claimed
	at     time.Time
}

// preclaims holds the early claims by namespace/pod name. Entries are used once; one left by
// an ordinal that was not created again (scaled away) expires.
type preclaims struct {
	mu sync.Mutex
	m  map[string]preclaim
}

func (p *preclaims) get(key string) (preclaim, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.m[key]
	return e, ok
}

func (p *preclaims) put(key string, e preclaim) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]preclaim{}
	}
	p.m[key] = e
}

// take removes and returns the claim of key if it is younger than preclaimTTL at now;
// expired entries are dropped as they are met.
func (p *preclaims) take(key string, now time.Time) (preclaim, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, e := range p.m {
		if now.Sub(e.at) >= preclaimTTL {
			delete(p.m, k)
		}
	}
	e, ok := p.m[key]
	delete(p.m, key)
	return e, ok
}

// preclaimStaticIPs claims the StaticIPs of the set's terminating pods that the set will
// create again. Only existing records are claimed (a record is created for a pod about to be
// created, never for one that is going); a failure is left to the create, which claims again.
func (c *Controller) preclaimStaticIPs(ctx context.Context, set *jkev1alpha1.EnhancedStatefulSet, terminating []*corev1.Pod) {
	if len(terminating) == 0 || !staticip.Enabled(set.Annotations, set.Spec.Template.Annotations) {
		return
	}
	w := staticip.EnhancedStatefulSetWorkload(set)
	for _, pod := range terminating {
		key := pod.Namespace + "/" + pod.Name
		if e, ok := c.preclaimed.get(key); ok && e.oldPod == pod.UID {
			continue
		}
		if _, err := c.sipLister.StaticIPs(pod.Namespace).Get(pod.Name); err != nil {
			continue
		}
		sip, err := staticip.Ensure(ctx, c.client, c.sipLister, w, pod.Name, c.now())
		if err != nil {
			klog.FromContext(ctx).V(4).Info("Early claim of a StaticIP failed; the create claims it", "staticIP", key, "err", err)
			continue
		}
		c.preclaimed.put(key, preclaim{oldPod: pod.UID, record: sip.UID, at: c.now()})
	}
}

// preclaimedStaticIP returns the record of podName if the set claimed it while the old pod
// terminated and the cache still shows that record, of this workload, not being released.
func (c *Controller) preclaimedStaticIP(w staticip.Workload, podName string) (*jkev1.StaticIP, bool) {
	ns := w.Object.GetNamespace()
	e, ok := c.preclaimed.take(ns+"/"+podName, c.now())
	if !ok {
		return nil, false
	}
	sip, err := c.sipLister.StaticIPs(ns).Get(podName)
	if err != nil || sip.UID != e.record || !staticip.SameWorkload(sip, w) || staticip.Releasing(sip) {
		return nil, false
	}
	return sip, true
}
