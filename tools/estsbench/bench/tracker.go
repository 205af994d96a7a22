package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	measuring      bool

	stop chan struct{}
}

func startPodTracker(ctx context.Context, client kubernetes.Interface, namespace, setName string, replicas int) (*podTracker, error) {
	t := &podTracker{setName: setName, replicas: replicas, pods: map[string]*corev1.Pod{}, stop: make(chan struct{})}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = setLabel + "=" + setName }))
	informer := factory.Core().V1().Pods().Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.observe(obj, false) },
		UpdateFunc: func(_, obj any) { t.observe(obj, false) },
		DeleteFunc: func(obj any) { t.observe(obj, true) },
	}); err != nil {
		return nil, err
	}
	factory.Start(t.stop)
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), informer.HasSynced) {
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
		delete(t.pods, p.Name)
	} else {
		t.pods[p.Name] = p
	}
	if t.measuring {
		t.maxUnavailable = max(t.maxUnavailable, Unavailable(t.setName, t.replicas, t.podsLocked()))
	}
}

func (t *podTracker) podsLocked() []*corev1.Pod {
	out := make([]*corev1.Pod, 0, len(t.pods))
	for _, p := range t.pods {
		out = append(out, p)
	}
	return out
}

// startMeasuring resets the largest unavailable count to the current one.
func (t *podTracker) startMeasuring() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.measuring = true
	t.maxUnavailable = Unavailable(t.setName, t.replicas, t.podsLocked())
}

// stopMeasuring returns the largest unavailable count since startMeasuring.
func (t *podTracker) stopMeasuring() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.measuring = false
	return t.maxUnavailable
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
