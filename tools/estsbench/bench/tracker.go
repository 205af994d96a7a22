package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// podTracker follows the pods of one set through a watch. It keeps its own copy of the pods,
// updated in event order, so the unavailable count is computed for every state the watch
// shows — not for a later state the informer cache may already be at when a handler runs.
type podTracker struct {
	setName  string
	replicas int

	mu             sync.Mutex
	pods           map[string]*corev1.Pod
	maxUnavailable int
	// atMax names the unavailable pods when maxUnavailable was first reached.
	atMax     []string
	measuring bool
	// image is the one the measured rollout moves to; lives what happened to each pod (UID).
	image string
	lives map[types.UID]*podLife

	stop chan struct{}
}

func startPodTracker(ctx context.Context, client kubernetes.Interface, namespace, setName string, replicas int) (*podTracker, error) {
	t := &podTracker{setName: setName, replicas: replicas, pods: map[string]*corev1.Pod{}, stop: make(chan struct{})}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = setLabel + "=" + setName }))
	informer := factory.Core().V1().Pods().Informer()
	registration, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.observe(obj, false) },
		UpdateFunc: func(_, obj any) { t.observe(obj, false) },
		DeleteFunc: func(obj any) { t.observe(obj, true) },
	})
	if err != nil {
		return nil, err
	}
	factory.Start(t.stop)
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// The registration has synced once our handler has seen the initial list, not just the
	// informer's store.
	if !cache.WaitForCacheSync(syncCtx.Done(), registration.HasSynced) {
		close(t.stop)
		return nil, fmt.Errorf("pod informer of %s did not sync", setName)
	}
	return t, nil
}

func (t *podTracker) observe(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if deleted {
		// A late delete of an earlier pod with this name must not remove its successor.
		if cur, ok := t.pods[p.Name]; ok && cur.UID == p.UID {
			delete(t.pods, p.Name)
		}
	} else {
		t.pods[p.Name] = p
	}
	if t.measuring {
		if down := UnavailablePods(t.setName, t.replicas, t.podsLocked()); len(down) > t.maxUnavailable {
			t.maxUnavailable, t.atMax = len(down), down
		}
		t.recordLocked(p, deleted, time.Now())
	}
}

func (t *podTracker) recordLocked(p *corev1.Pod, deleted bool, now time.Time) {
	l := t.lives[p.UID]
	if l == nil {
		l = &podLife{Name: p.Name, Created: now}
		t.lives[p.UID] = l
	}
	if deleted && l.Gone.IsZero() {
		l.Gone = now
	}
	if p.DeletionTimestamp != nil && l.Deleting.IsZero() {
		l.Deleting = now
	}
	if l.Old && l.Patched.IsZero() && len(p.Spec.Containers) > 0 && p.Spec.Containers[0].Image == t.image {
		l.Patched = now
	}
	if deleted {
		return
	}
	if !l.Old && l.Scheduled.IsZero() && p.Spec.NodeName != "" {
		l.Scheduled = now
	}
	if !l.Old && l.Addressed.IsZero() && p.Status.PodIP != "" {
		l.Addressed = now
	}
	if live(p) && runsImage(p, t.image) {
		if l.Running.IsZero() {
			l.Running = now
		}
		if l.Ready.IsZero() && ready(p) {
			l.Ready = now
		}
	}
}

func (t *podTracker) podsLocked() []*corev1.Pod {
	out := make([]*corev1.Pod, 0, len(t.pods))
	for _, p := range t.pods {
		out = append(out, p)
	}
	return out
}

// startMeasuring resets the largest unavailable count to the current one and starts
// recording the pods' lives during a rollout to image.
func (t *podTracker) startMeasuring(image string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.measuring = true
	t.image = image
	t.atMax = UnavailablePods(t.setName, t.replicas, t.podsLocked())
	t.maxUnavailable = len(t.atMax)
	t.lives = map[types.UID]*podLife{}
	for _, p := range t.pods {
		t.lives[p.UID] = &podLife{Name: p.Name, Old: true}
	}
}

// stopMeasuring returns the largest unavailable count since startMeasuring, the pods
// unavailable at that moment, and what happened to each pod.
func (t *podTracker) stopMeasuring() (int, []string, []podLife) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.measuring = false
	lives := make([]podLife, 0, len(t.lives))
	for _, l := range t.lives {
		lives = append(lives, *l)
	}
	return t.maxUnavailable, t.atMax, lives
}

func (t *podTracker) maxSoFar() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.maxUnavailable
}

func (t *podTracker) rolledOut(image string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return RolledOut(t.setName, t.replicas, image, t.podsLocked())
}

func (t *podTracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pods)
}

func (t *podTracker) close() { close(t.stop) }
