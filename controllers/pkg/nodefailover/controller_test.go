package nodefailover

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"

	jkefake "github.com/staticip/staticip/apis/generated/clientset/versioned/fake"
	jkeinformers "github.com/staticip/staticip/apis/generated/informers/externalversions"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/internal/testsupport"
)

// These tests run the controller's sync on fake clients and real informers (the integration
// tests run it on a real API server): they look at what a sync reads, not at the API.

// countingPods counts the lists of every pod.
type countingPods struct {
	corelisters.PodLister
	lists atomic.Int32
}

func (c *countingPods) List(sel labels.Selector) ([]*corev1.Pod, error) {
	c.lists.Add(1)
	return c.PodLister.List(sel)
}

type testController struct {
	*Controller
	kube *kubefake.Clientset
	jke  *jkefake.Clientset
	pods *countingPods
}

// newTestController builds the controller on fake clients seeded with kubeObjs and jkeObjs,
// runs each of before on it, then starts the informers and waits for their caches. What
// replaces a field the informers' event handlers read (a cache, a lister) belongs in before:
// set after the informers start, it races with the handlers (the race detector fails the test).
func newTestController(t *testing.T, kubeObjs, jkeObjs []runtime.Object, before ...func(*testController)) *testController {
	t.Helper()
	kube := kubefake.NewClientset(kubeObjs...)
	jke := jkefake.NewSimpleClientset(jkeObjs...)
	ki := kubeinformers.NewSharedInformerFactory(kube, 0)
	ji := jkeinformers.NewSharedInformerFactory(jke, 0)
	c, err := NewController(kube, jke, ki.Core().V1().Nodes(), ki.Core().V1().Pods(), ji.Jke().V1().IPRanges(),
		ji.Jke().V1().StaticIPs(), ji.Jke().V1alpha1().NodeFailovers(), record.NewFakeRecorder(100))
	if err != nil {
		t.Fatal(err)
	}
	c.Window = time.Minute
	tc := &testController{Controller: c, kube: kube, jke: jke, pods: &countingPods{PodLister: c.pods}}
	c.pods = tc.pods
	for _, f := range before {
		f(tc)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ki.Start(ctx.Done())
	ji.Start(ctx.Done())
	go c.routeLeases.Run(ctx.Done()) // Run starts it
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for _, s := range c.synced {
			if !s() {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatal("informers did not sync")
	}
	return tc
}

func podAt(name, node, ip string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: k8stypes.UID("uid-" + name)},
		Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}}
}

func syncedRange(name, cidr, node string) *jkev1.IPRange {
	r := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: jkev1.IPRangeSpec{CIDR: cidr, Node: node}}
	r.Status.Conditions = []metav1.Condition{{Type: "Synced", Status: metav1.ConditionTrue, Reason: "Served", LastTransitionTime: metav1.Now()}}
	return r
}

// TestSyncReadsPodsThroughIndexes: deciding whether pods still hold a fenced node's IPs and
// how much room the spares have takes no list of every pod. A pod on another node with an IP
// of the node's range is still found (IP block index); a pod elsewhere with another IP is not.
func TestSyncReadsPodsThroughIndexes(t *testing.T) {
	long := time.Now().Add(-time.Hour)
	failed := node("n3").ready(corev1.ConditionUnknown, long).taint(jkev1alpha1.TaintOutOfService, corev1.TaintEffectNoExecute).n
	sp := node("spare").ready(corev1.ConditionTrue, long).label(jkev1alpha1.LabelSpare, "true").n
	sp.Spec.Taints = []corev1.Taint{SpareTaint}
	tc := newTestController(t,
		[]runtime.Object{failed, sp, node("n1").ready(corev1.ConditionTrue, long).n,
			podAt("stray", "n1", "10.1.3.7"), podAt("other", "n1", "10.1.1.7"), podAt("elsewhere", "n1", "10.9.0.7")},
		[]runtime.Object{syncedRange("r3", "10.1.3.0/24", "n3"), syncedRange("r3wide", "10.2.0.0/16", "n3"), syncedRange("r1", "10.1.1.0/24", "n1"),
			&jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "ns"}, Spec: jkev1.StaticIPSpec{Node: "n3", IP: "10.1.3.10", Pod: "web-0"}}})
	ctx := context.Background()

	if _, err := tc.sync(ctx, "n3"); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(context.Background(), t, 30*time.Second, "the record in the cache", testsupport.True(func() bool { _, err := tc.records.Get("n3"); return err == nil }))
	if _, err := tc.sync(ctx, "n3"); err != nil {
		t.Fatal(err)
	}
	rec, err := tc.jke.JkeV1alpha1().NodeFailovers().Get(ctx, "n3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(rec.Status.Conditions, jkev1alpha1.NodeFailoverConditionProgressing)
	if c == nil || c.Reason != ReasonPodsRemain || !strings.Contains(c.Message, "ns/stray") || strings.Contains(c.Message, "other") || strings.Contains(c.Message, "elsewhere") {
		t.Fatalf("Progressing %+v, want PodsRemain naming ns/stray only", c)
	}

	// The stray pod goes (pod GC): the migration reserves the spare and moves the ranges.
	if err := tc.kube.CoreV1().Pods("ns").Delete(ctx, "stray", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(context.Background(), t, 30*time.Second, "the pod gone from the cache", testsupport.True(func() bool { _, err := tc.Controller.pods.Pods("ns").Get("stray"); return err != nil }))
	for range 3 {
		if _, err := tc.sync(ctx, "n3"); err != nil {
			t.Fatal(err)
		}
		testsupport.Eventually(context.Background(), t, 30*time.Second, "the record's writes in the cache", testsupport.True(func() bool {
			cached, err := tc.records.Get("n3")
			cur, _ := tc.jke.JkeV1alpha1().NodeFailovers().Get(ctx, "n3", metav1.GetOptions{})
			return err == nil && cur != nil && cached.ResourceVersion == cur.ResourceVersion
		}))
	}
	r3, _ := tc.jke.JkeV1().IPRanges().Get(ctx, "r3", metav1.GetOptions{})
	if r3.Spec.Node != "spare" || r3.Spec.OwnerGeneration != 1 {
		t.Fatalf("r3: node %s generation %d, want spare 1", r3.Spec.Node, r3.Spec.OwnerGeneration)
	}
	if n := tc.pods.lists.Load(); n != 0 {
		t.Errorf("the syncs listed every pod %d times; want index lookups only", n)
	}
}

// TestDeletedNodesAreForgotten: the zone memory keeps a Node's labels only while it may be
// needed: a deleted Node with nothing to move is forgotten at its next sync, one with a
// record once the record's status holds its zone.
func TestDeletedNodesAreForgotten(t *testing.T) {
	long := time.Now().Add(-time.Hour)
	zoned := func(name string) *corev1.Node {
		return node(name).ready(corev1.ConditionTrue, long).label(LabelZone, "z1").n
	}
	tc := newTestController(t, []runtime.Object{zoned("n1"), zoned("n2"), zoned("n3")},
		[]runtime.Object{syncedRange("r3", "10.1.3.0/24", "n3"),
			&jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "ns"}, Spec: jkev1.StaticIPSpec{Node: "n3", IP: "10.1.3.10"}}})
	ctx := context.Background()
	if got := memorySize(tc.gone); got != 3 {
		t.Fatalf("memory holds %d nodes, want 3", got)
	}
	for _, n := range []string{"n2", "n3"} {
		if err := tc.kube.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testsupport.Eventually(context.Background(), t, 30*time.Second, "the Nodes gone from the cache", testsupport.True(func() bool { ns, _ := tc.nodes.List(labels.Everything()); return len(ns) == 1 }))
	// n2 owned nothing: forgotten. n3 owns a range: remembered until its record has the zone.
	// The informer updates its store before it runs the handlers, so n2's delete handler may
	// remember it again after a sync forgot it (and enqueue it: the next sync forgets it, as
	// here).
	testsupport.Eventually(ctx, t, 30*time.Second, "n2 (deleted, nothing to move) forgotten by a sync", testsupport.True(func() bool {
		if _, err := tc.sync(ctx, "n2"); err != nil {
			t.Fatal(err)
		}
		return tc.gone.get("n2") == nil
	}))
	if _, err := tc.sync(ctx, "n3"); err != nil {
		t.Fatal(err)
	}
	rec, err := tc.jke.JkeV1alpha1().NodeFailovers().Get(ctx, "n3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status.Zone != "z1" {
		t.Errorf("record zone %q, want z1", rec.Status.Zone)
	}
	testsupport.Eventually(context.Background(), t, 30*time.Second, "the record in the cache", testsupport.True(func() bool { r, err := tc.records.Get("n3"); return err == nil && r.Status.Zone != "" }))
	if _, err := tc.sync(ctx, "n3"); err != nil {
		t.Fatal(err)
	}
	if tc.gone.get("n3") != nil {
		t.Error("n3 still remembered after its record holds the zone")
	}
	if tc.gone.get("n1") == nil {
		t.Error("n1 (not deleted) forgotten")
	}
}

func memorySize(l *labelMemory) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}
