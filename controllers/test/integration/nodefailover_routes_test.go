package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/nodefailover"
)

// The route report overlaps the move: the write that moves each range to the target marks it
// report-routes (the migration has its turn under the cap), so the agents report their routes
// to the target from their route-report Leases while the target's agent still reserves the
// ranges' addresses. RoutesConverged needs both: while the target has not reported Synced,
// routes reported everywhere open nothing — the StaticIPs stay on the failed node and the spare
// keeps its taint; once it has, the migration goes on, and the marks go once routes converged.
func TestNodeFailoverRoutesReportedWhileTheTargetSyncs(t *testing.T) {
	e := newFailoverEnv(t)
	ra, rb := e.threeNodesAndSpare()
	const window = 2 * time.Second
	e.startFailover(window)
	e.setHoldSync("spare1", true)
	e.setReady("n3", false)
	e.fence("n3")
	e.podGC("n3")
	e.waitRecord("n3", "ranges written, waiting for the target agent", waitingOn(nodefailover.ReasonWaitingForAgent))
	for _, r := range []string{ra, rb} {
		if got := e.getRange(r).Annotations[jkev1.AnnotationReportRoutes]; got != e.name("n3") {
			t.Fatalf("IPRange %s moved without the report-routes mark (%q): the agents report routes only after RangesMoved", r, got)
		}
	}
	// Every Ready node reports the moved ranges at the target (its Lease): still nothing opens
	// before the target's agent reserved the ranges' addresses.
	e.stays(3*time.Second, "routes reported, target not Synced", func() error {
		rec, err := e.record("n3")
		if err != nil {
			return err
		}
		if nodefailover.Reached(&rec.Status, jkev1alpha1.FailoverRangesMoved) {
			return fmt.Errorf("phase %s before the target reported Synced", rec.Status.Phase)
		}
		for _, name := range []string{"web-0", "web-1"} {
			if s, _ := e.staticIP(name); s.Spec.Node != e.name("n3") {
				return fmt.Errorf("StaticIP %s re-pointed to %s before the target reported Synced", name, s.Spec.Node)
			}
		}
		if !slices.ContainsFunc(e.getNode("spare1").Spec.Taints, func(t corev1.Taint) bool { return t.Key == jkev1alpha1.TaintSpare }) {
			return fmt.Errorf("spare taint removed before the target reported Synced")
		}
		return nil
	})
	e.setHoldSync("spare1", false)
	e.waitRecord("n3", "waiting for pods", waitingOn(nodefailover.ReasonWaitingForPods))
	for _, r := range []string{ra, rb} {
		if got, ok := e.getRange(r).Annotations[jkev1.AnnotationReportRoutes]; ok {
			t.Errorf("IPRange %s still marked %q after RoutesConverged", r, got)
		}
	}
}

// Upgrade: a node whose agent is of the previous release has no route-report Lease and reports
// its routes in its Node annotation ipranges-observed; the controller reads that node from it
// (and every other node from its Lease). While that node's report lags the migration waits,
// naming it; once it reports, the migration converges.
func TestNodeFailoverRoutesFromAPreviousReleaseAgent(t *testing.T) {
	e := newFailoverEnv(t)
	e.threeNodesAndSpare()
	const window = 2 * time.Second
	e.setLegacyRoutes(e.name("n1"), true)
	e.setHoldRoutes(true)
	e.startFailover(window)
	e.setReady("n3", false)
	e.fence("n3")
	e.podGC("n3")
	rec := e.waitRecord("n3", "waiting for routes", waitingOn(nodefailover.ReasonWaitingForRoutes))
	for _, c := range rec.Status.Conditions {
		if c.Type == jkev1alpha1.NodeFailoverConditionProgressing && !strings.Contains(c.Message, e.name("n1")) {
			t.Errorf("Progressing %q does not name the lagging node %s", c.Message, e.name("n1"))
		}
	}
	e.setHoldRoutes(false)
	e.waitRecord("n3", "waiting for pods", waitingOn(nodefailover.ReasonWaitingForPods))
	if n := e.getNode("n1"); !strings.Contains(n.Annotations[jkev1alpha1.AnnotationIPRangesObserved], e.name("spare1")) {
		t.Errorf("node n1 converged without its Node annotation naming the target: %q", n.Annotations[jkev1alpha1.AnnotationIPRangesObserved])
	}
	if _, err := e.kube.CoordinationV1().Leases(jkev1.NamespaceRouteReports).Get(e.ctx, e.name("n1"), metav1.GetOptions{}); err == nil {
		t.Errorf("node n1 (previous release) has a route-report Lease: the test does not exercise the fallback")
	}
}
