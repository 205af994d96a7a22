package enhancedstatefulset

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	jkefake "github.com/staticip/staticip/apis/generated/clientset/versioned/fake"
	jkeinformers "github.com/staticip/staticip/apis/generated/informers/externalversions"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
)

// staleCacheFixture is a controller whose informers are never started: the test puts objects
// into their caches by hand, so it decides exactly what the cache lags behind. The set web
// (3 replicas, Parallel, maxUnavailable 1) rolls from image v1 (revision old) to v2 (new).
type staleCacheFixture struct {
	c        *Controller
	kube     *kubefake.Clientset
	pods     map[string]*corev1.Pod
	podCache interface {
		Add(any) error
		Delete(any) error
	}
	// setCache and sipCache are the set and StaticIP informers' caches.
	setCache, sipCache interface{ Update(any) error }
	old, new           *appsv1.ControllerRevision
}

func newStaleCacheFixture(t *testing.T, ordinals ...int) *staleCacheFixture {
	t.Helper()
	set := &jkev1alpha1.EnhancedStatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "set-uid", Generation: 2},
		Spec: jkev1alpha1.EnhancedStatefulSetSpec{
			Replicas:            ptr.To[int32](3),
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			PodManagementPolicy: appsv1.ParallelPodManagement,
			UpdateStrategy: jkev1alpha1.EnhancedStatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &jkev1alpha1.RollingUpdateEnhancedStatefulSetStrategy{MaxUnavailable: ptr.To(intstr.FromInt32(1))}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img:v1"}}}},
		},
	}
	var collisions int32
	old, err := newRevision(set, 1, &collisions)
	if err != nil {
		t.Fatal(err)
	}
	set.Spec.Template.Spec.Containers[0].Image = "img:v2"
	updated, err := newRevision(set, 2, &collisions)
	if err != nil {
		t.Fatal(err)
	}
	set.Status.CurrentRevision, set.Status.UpdateRevision = old.Name, updated.Name

	f := &staleCacheFixture{pods: map[string]*corev1.Pod{}, old: old, new: updated}
	var objs []any
	for _, ord := range ordinals {
		pod := newPod(set, &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img:v1"}}}}, ord, old.Name)
		pod.UID = types.UID(fmt.Sprintf("uid-%d", ord))
		pod.ResourceVersion = "1"
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		f.pods[pod.Name] = pod
		objs = append(objs, pod)
	}
	var kubeObjs []any
	kubeObjs = append(kubeObjs, objs...)
	f.kube = kubefake.NewClientset()
	for _, o := range kubeObjs {
		if err := f.kube.Tracker().Add(o.(*corev1.Pod)); err != nil {
			t.Fatal(err)
		}
	}
	jke := jkefake.NewSimpleClientset(set)
	kubeInf := informers.NewSharedInformerFactory(f.kube, 0)
	jkeInf := jkeinformers.NewSharedInformerFactory(jke, 0)
	c, err := NewController(f.kube, jke, jkeInf.Jke().V1alpha1().EnhancedStatefulSets(), kubeInf.Core().V1().Pods(),
		kubeInf.Apps().V1().ControllerRevisions(), kubeInf.Core().V1().PersistentVolumeClaims(), jkeInf.Jke().V1().StaticIPs(), record.NewFakeRecorder(1000))
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(jkeInf.Jke().V1alpha1().EnhancedStatefulSets().Informer().GetIndexer().Add(set))
	must(kubeInf.Apps().V1().ControllerRevisions().Informer().GetIndexer().Add(old))
	must(kubeInf.Apps().V1().ControllerRevisions().Informer().GetIndexer().Add(updated))
	f.podCache = kubeInf.Core().V1().Pods().Informer().GetIndexer()
	f.setCache = jkeInf.Jke().V1alpha1().EnhancedStatefulSets().Informer().GetIndexer()
	f.sipCache = jkeInf.Jke().V1().StaticIPs().Informer().GetIndexer()
	for _, o := range objs {
		must(f.podCache.Add(o))
	}
	f.c = c
	return f
}

func (f *staleCacheFixture) sync(t *testing.T) {
	t.Helper()
	if _, err := f.c.sync(context.Background(), "ns/web"); err != nil {
		t.Fatalf("sync: %v", err)
	}
}

// podWrites lists the pod creations and deletions sent to the API server, in order.
func (f *staleCacheFixture) podWrites() []string {
	var out []string
	for _, a := range f.kube.Actions() {
		if a.GetResource().Resource != "pods" || a.GetSubresource() != "" {
			continue
		}
		switch a := a.(type) {
		case k8stesting.CreateAction:
			out = append(out, "create "+a.GetObject().(*corev1.Pod).Name)
		case k8stesting.DeleteAction:
			out = append(out, "delete "+a.GetName())
		}
	}
	return out
}

// TestSyncActsWhileThePodCacheLags: the sync that handles the next event does not wait for
// the pod cache to show the controller's last writes. web-2 was created by the first sync
// and the cache does not show it yet when web-1 goes away: the second sync creates web-1 at
// once (the old code waited for the cache, requeueing every 200 ms), and does not create
// web-2 again.
func TestSyncActsWhileThePodCacheLags(t *testing.T) {
	f := newStaleCacheFixture(t, 0, 1)
	f.sync(t)
	if got := fmt.Sprint(f.podWrites()); got != "[create web-2]" {
		t.Fatalf("first sync: pod writes %s, want [create web-2]", got)
	}
	// web-1 goes away (deleted by someone else); the cache still lacks web-2.
	if err := f.podCache.Delete(f.pods["web-1"]); err != nil {
		t.Fatal(err)
	}
	f.sync(t)
	if got := fmt.Sprint(f.podWrites()); got != "[create web-2 create web-1]" {
		t.Errorf("second sync on a cache without web-2: pod writes %s, want [create web-2 create web-1]", got)
	}
}

// TestSyncKeepsTheBudgetWhileThePodCacheLags: a pod the first sync deleted still looks Ready
// in the cache; the second sync counts it as terminating and takes no other pod down
// (maxUnavailable 1).
func TestSyncKeepsTheBudgetWhileThePodCacheLags(t *testing.T) {
	f := newStaleCacheFixture(t, 0, 1, 2)
	f.sync(t)
	if got := fmt.Sprint(f.podWrites()); got != "[delete web-2]" {
		t.Fatalf("first sync: pod writes %s, want [delete web-2]", got)
	}
	f.sync(t)
	f.sync(t)
	if got := fmt.Sprint(f.podWrites()); got != "[delete web-2]" {
		t.Errorf("syncs on a cache that still shows web-2 Ready: pod writes %s, want only [delete web-2] (maxUnavailable 1)", got)
	}
}

// TestSyncLooksAgainAtAPodThatVanishedBeforeTheCacheShowedIt: a pod the controller created is
// deleted by someone else (node failover deletes pending pods pinned to the failed node) before
// the pod cache ever showed it. Its expectation ("the pod must exist") can then never be met:
// the overlay keeps showing the created pod, the planner waits for it to become ready, and —
// with nothing asking to look again — the set was never synced again (scalebench at 1,000
// nodes: 26 of 110 pods never recreated). A sync that leaves an expectation open must ask to
// be run again by its deadline, and the sync after the deadline creates the pod again.
func TestSyncLooksAgainAtAPodThatVanishedBeforeTheCacheShowedIt(t *testing.T) {
	f := newStaleCacheFixture(t, 0, 1)
	now := time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)
	f.c.now = func() time.Time { return now }
	f.sync(t)
	if got := fmt.Sprint(f.podWrites()); got != "[create web-2]" {
		t.Fatalf("first sync: pod writes %s, want [create web-2]", got)
	}
	// Deleted from the API server before the cache ever showed it.
	if err := f.kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "ns", "web-2"); err != nil {
		t.Fatal(err)
	}
	requeue, err := f.c.sync(context.Background(), "ns/web")
	if err != nil {
		t.Fatalf("second sync: %v", err)
	}
	if requeue <= 0 || requeue > expectationTTL {
		t.Fatalf("second sync: requeueAfter %v with web-2 expected but not in the cache; want (0, %v]: otherwise nothing syncs the set again and web-2, gone, is never recreated", requeue, expectationTTL)
	}
	now = now.Add(requeue)
	f.sync(t)
	if got := fmt.Sprint(f.podWrites()); got != "[create web-2 create web-2]" {
		t.Errorf("sync %v later: pod writes %s, want [create web-2 create web-2]", requeue, got)
	}
}

// TestSyncRecreatesAtOnceAPodDeletedBeforeTheCacheShowedIt: the same, with the deletion event
// the pod informer delivers (it calls the delete handlers even for an object its cache never
// held): the sync that event starts creates web-2 again at once, not after expectationTTL.
func TestSyncRecreatesAtOnceAPodDeletedBeforeTheCacheShowedIt(t *testing.T) {
	f := newStaleCacheFixture(t, 0, 1)
	f.sync(t)
	created, err := f.kube.CoreV1().Pods("ns").Get(context.Background(), "web-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "ns", "web-2"); err != nil {
		t.Fatal(err)
	}
	f.c.podDeleted(created)
	f.sync(t)
	if got := fmt.Sprint(f.podWrites()); got != "[create web-2 create web-2]" {
		t.Errorf("sync after web-2's deletion event: pod writes %s, want [create web-2 create web-2]", got)
	}
}

// TestOwnWritesPodDeleted: which deletion events end an expectation that a pod exists.
func TestOwnWritesPodDeleted(t *testing.T) {
	pod := func(uid string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-2", Namespace: "ns", UID: types.UID(uid)}}
	}
	for _, tc := range []struct {
		name string
		// steps, in order: "inflight" (expect before the create is sent), "created uN" (the
		// API server's answer), "deleted uN" (the informer's deletion event), "deleting uN"
		// (this controller deletes the pod uN).
		steps []string
		shown bool // the overlay still shows web-2
	}{
		{name: "created, not yet in the cache", steps: []string{"inflight", "created u1"}, shown: true},
		{name: "created, then deleted", steps: []string{"inflight", "created u1", "deleted u1"}},
		{name: "created, the predecessor's deletion arrives late", steps: []string{"inflight", "created u1", "deleted u0"}, shown: true},
		{name: "deleted before the create's answer", steps: []string{"inflight", "deleted u1", "created u1"}},
		{name: "the predecessor's deletion while the create is in flight", steps: []string{"inflight", "deleted u0", "created u1"}, shown: true},
		{name: "our own deletion, the cache still shows the pod", steps: []string{"deleting u1", "deleted u1"}, shown: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cached := []*corev1.Pod{}
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			w := newOwnWrites(corelisters.NewPodLister(indexer), time.Now)
			for _, step := range tc.steps {
				verb, uid, _ := strings.Cut(step, " ")
				switch verb {
				case "inflight":
					w.expect("ns/web", "web-2", expectation{})
				case "created":
					w.expect("ns/web", "web-2", expectation{written: pod(uid)})
				case "deleted":
					w.podDeleted("ns/web", pod(uid))
				case "deleting":
					cached = []*corev1.Pod{pod(uid)} // the cache still has it, not terminating
					if err := indexer.Add(pod(uid)); err != nil {
						t.Fatal(err)
					}
					w.expect("ns/web", "web-2", expectation{deletedUID: types.UID(uid)})
				}
			}
			out, wait := w.withPods("ns/web", cached)
			if wait {
				t.Fatalf("withPods: wait, want a view")
			}
			shown := len(out) == 1
			if shown != tc.shown {
				t.Errorf("web-2 in the view: %v, want %v", shown, tc.shown)
			}
			if tc.steps[0] == "deleting" && shown && out[0].DeletionTimestamp == nil {
				t.Errorf("a pod this controller deleted is shown without a deletionTimestamp")
			}
		})
	}
}
