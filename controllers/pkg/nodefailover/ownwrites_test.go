package nodefailover

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	jkev1listers "github.com/staticip/staticip/apis/generated/listers/jke/v1"
	jkev1alpha1listers "github.com/staticip/staticip/apis/generated/listers/jke/v1alpha1"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/internal/testsupport"
)

// TestOwnWritesOnStaleCaches: what this controller wrote and its caches do not show yet must
// not decide its next writes (the CI flake of TestNodeFailoverMarksAtMostTheCap: two ranges
// marked at once under a cap of one, both left marked after their routes converged).
//   - A pass marks a moved range report-routes and finds the routes in place already (the
//     nodes' cache is ahead of the ranges' cache): it must take the mark off again, though its
//     range cache never showed the mark.
//   - A pass on a record cache one status write behind (routes converged, not shown yet) must
//     not mark the ranges again, nor fail its status write on the older copy.
//
// The caches are frozen copies here, so the outcome does not depend on the informers' timing.
func TestOwnWritesOnStaleCaches(t *testing.T) {
	long := time.Now().Add(-time.Hour)
	failed := node("n3").ready(corev1.ConditionUnknown, long).taint(jkev1alpha1.TaintOutOfService, corev1.TaintEffectNoExecute).n
	sp := node("spare").ready(corev1.ConditionTrue, long).spare().n
	n1 := node("n1").ready(corev1.ConditionTrue, long).n
	for _, n := range []*corev1.Node{n1, sp} { // every Ready node routes the moved range already
		n.Annotations = map[string]string{jkev1alpha1.AnnotationIPRangesObserved: `{"r3":"spare/1"}`}
	}
	r3 := syncedRange("r3", "10.1.3.0/24", "spare")
	r3.Spec.OwnerGeneration = 1
	since := metav1.NewTime(long)
	rec := &jkev1alpha1.NodeFailover{ObjectMeta: metav1.ObjectMeta{Name: "n3", Finalizers: []string{Finalizer}},
		Spec: jkev1alpha1.NodeFailoverSpec{Node: "n3"},
		Status: jkev1alpha1.NodeFailoverStatus{Phase: jkev1alpha1.FailoverRangesMoved, StartTime: &since, PhaseTime: &since, Target: "spare",
			MovedRanges: []jkev1alpha1.MovedRange{{Name: "r3", CIDR: "10.1.3.0/24", FromNode: "n3", ToNode: "spare", OwnerGeneration: 1}}}}
	r3.ResourceVersion, rec.ResourceVersion = "1", "2"
	// Caches that never move: the range unmarked, the record at RangesMoved (copies of what
	// the fake clients are seeded with).
	frozenRanges := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := frozenRanges.Add(r3.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	frozenRecords := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{activeIndex: activeRecordIndex})
	if err := frozenRecords.Add(rec.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	tc := newTestController(t, []runtime.Object{failed, sp, n1}, []runtime.Object{r3, rec}, func(tc *testController) {
		testsupport.StampResourceVersions(tc.jke)
		tc.useRangeCache(jkev1listers.NewIPRangeLister(frozenRanges))
		tc.useRecordCache(jkev1alpha1listers.NewNodeFailoverLister(frozenRecords), frozenRecords)
	})
	ctx := context.Background()

	if _, err := tc.sync(ctx, "n3"); err != nil {
		t.Fatal(err)
	}
	got, err := tc.jke.JkeV1().IPRanges().Get(ctx, "r3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := got.Annotations[jkev1.AnnotationReportRoutes]; ok {
		t.Fatalf("after the pass that found the routes converged, r3 still marked %s=%q", jkev1.AnnotationReportRoutes, v)
	}
	after, err := tc.jke.JkeV1alpha1().NodeFailovers().Get(ctx, "n3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !Reached(&after.Status, jkev1alpha1.FailoverRoutesConverged) {
		t.Fatalf("record at %s after the pass, want RoutesConverged reached; %+v", after.Status.Phase, after.Status)
	}

	// The next pass still sees the record at RangesMoved in its cache.
	tc.jke.ClearActions()
	if _, err := tc.sync(ctx, "n3"); err != nil {
		t.Errorf("pass on the record cache one write behind: %v", err)
	}
	for _, a := range tc.jke.Actions() {
		if a.GetResource().Resource == "ipranges" && a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			p, _ := a.(clienttesting.PatchAction)
			var body string
			if p != nil {
				body = string(p.GetPatch())
			}
			t.Errorf("pass on the record cache one write behind wrote IPRange %s again: %s %s", r3.Name, a.GetVerb(), body)
		}
	}
}

// useRangeCache makes the controller read IPRanges from l instead of its informer (only
// before the informers start: newTestController's before).
func (tc *testController) useRangeCache(l jkev1listers.IPRangeLister) {
	tc.ranges = rangeView{IPRangeLister: l, writes: tc.rangeWrites}
}

// useRecordCache makes the controller read its records from l and idx instead of its informer
// (only before the informers start: newTestController's before).
func (tc *testController) useRecordCache(l jkev1alpha1listers.NodeFailoverLister, idx cache.Indexer) {
	tc.records, tc.activeRecords = recordView{NodeFailoverLister: l, writes: tc.recordWrites}, idx
}
