package integration

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/manager"
	"github.com/staticip/staticip/controllers/pkg/nodefailover"
)

// TestNodeFailoverNoTarget: no spare qualifies (too little CPU, another zone) → condition and
// Event, nothing moved; a fitting spare appears → the migration goes on.
func TestNodeFailoverNoTarget(t *testing.T) {
	e := newFailoverEnv(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		e.addNode(n)
	}
	e.addNode("small", spare, withCPU("500m")) // web-0 + web-1 need 1 CPU
	e.addNode("faraway", spare, inZone("elsewhere-"+e.ns))
	ra := e.addRange("r3a", 1, "n3", 0)
	e.addStaticIP("web-0", "n3", e.ip(1, 10))
	e.addStaticIP("web-1", "n3", e.ip(1, 11))
	e.startFailover(time.Second)
	e.setReady("n3", false)
	e.fence("n3")
	e.podGC("n3")
	rec := e.waitRecord("n3", "NoTarget", func(r *jkev1alpha1.NodeFailover) bool {
		return hasCondition(r, jkev1alpha1.NodeFailoverConditionTargetReserved, metav1.ConditionFalse, nodefailover.ReasonNoTarget)
	})
	msg := meta.FindStatusCondition(rec.Status.Conditions, jkev1alpha1.NodeFailoverConditionTargetReserved).Message
	if !strings.Contains(msg, "cpu") || !strings.Contains(msg, "zone") {
		t.Errorf("NoTarget message does not say why each spare was rejected: %s", msg)
	}
	e.stays(2*time.Second, "nothing moves without a target", func() error {
		if r := e.getRange(ra); r.Spec.Node != e.name("n3") || r.Spec.OwnerGeneration != 0 {
			return fmt.Errorf("range moved to %s/%d", r.Spec.Node, r.Spec.OwnerGeneration)
		}
		for _, n := range []string{"small", "faraway"} {
			if l := e.getNode(n).Labels[jkev1alpha1.LabelFailoverFor]; l != "" {
				return fmt.Errorf("%s claimed (%s)", n, l)
			}
		}
		return nil
	})
	e.eventually(30*time.Second, "NoTarget Event", func() (bool, error) { return e.eventReasons()[nodefailover.ReasonNoTarget], nil })
	e.addNode("big", spare)
	e.waitRecord("n3", "waiting for pods on the new spare", waitingOn(nodefailover.ReasonWaitingForPods))
	e.assertRange(ra, "big", 1)
}

// TestNodeFailoverSecondFailure: two nodes fail during one migration and there is one spare:
// the first takes it, the second does not (the claim), and goes on once a second spare exists.
func TestNodeFailoverSecondFailure(t *testing.T) {
	e := newFailoverEnv(t)
	for _, n := range []string{"n1", "n2", "n3", "n4", "n5", "n6"} {
		e.addNode(n)
	}
	e.addNode("spare1", spare)
	r3 := e.addRange("r3", 1, "n3", 0)
	r4 := e.addRange("r4", 2, "n4", 0)
	e.addStaticIP("web-0", "n3", e.ip(1, 10))
	e.addStaticIP("web-1", "n4", e.ip(2, 10))
	e.setHoldSync("spare1", true) // keep the first migration in flight
	e.startFailover(time.Second)
	e.setReady("n3", false)
	e.fence("n3")
	e.podGC("n3")
	e.waitRecord("n3", "first migration in flight", waitingOn(nodefailover.ReasonWaitingForAgent))

	e.setReady("n4", false)
	e.fence("n4")
	e.podGC("n4")
	e.waitRecord("n4", "second failure finds no target", func(r *jkev1alpha1.NodeFailover) bool {
		return hasCondition(r, jkev1alpha1.NodeFailoverConditionTargetReserved, metav1.ConditionFalse, nodefailover.ReasonNoTarget)
	})
	e.assertRange(r4, "n4", 0)
	e.assertRange(r3, "spare1", 1)

	e.addNode("spare2", spare)
	e.setHoldSync("spare1", false)
	e.waitRecord("n3", "first waits for its pods", waitingOn(nodefailover.ReasonWaitingForPods))
	e.waitRecord("n4", "second waits for its pods", waitingOn(nodefailover.ReasonWaitingForPods))
	e.assertRange(r3, "spare1", 1)
	e.assertRange(r4, "spare2", 1)
	e.runPod("web-0", "spare1", e.ip(1, 10))
	e.runPod("web-1", "spare2", e.ip(2, 10))
	e.waitRecord("n3", "first completed", phaseIs(jkev1alpha1.FailoverCompleted))
	e.waitRecord("n4", "second completed", phaseIs(jkev1alpha1.FailoverCompleted))
}

// TestNodeFailoverTooManyUnhealthy: when more than the allowed share of nodes is NotReady,
// failover stops (condition + Event) even for a fenced node; it goes on once they recover.
func TestNodeFailoverTooManyUnhealthy(t *testing.T) {
	e := newFailoverEnv(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		e.addNode(n)
	}
	e.addNode("spare1", spare)
	ra := e.addRange("r3a", 1, "n3", 0)
	e.addStaticIP("web-0", "n3", e.ip(1, 10))
	e.startFailover(time.Second)
	// 2 of 4 NotReady = 50% > 34%.
	e.setReady("n2", false)
	e.setReady("n3", false)
	e.fence("n3")
	e.podGC("n3")
	e.waitRecord("n3", "stopped", func(r *jkev1alpha1.NodeFailover) bool {
		return hasCondition(r, jkev1alpha1.NodeFailoverConditionStopped, metav1.ConditionTrue, nodefailover.ReasonTooManyUnhealthy)
	})
	e.stays(2*time.Second, "nothing moves while too many nodes are unhealthy", func() error {
		if r := e.getRange(ra); r.Spec.Node != e.name("n3") {
			return fmt.Errorf("range moved to %s", r.Spec.Node)
		}
		return nil
	})
	e.eventually(30*time.Second, "TooManyUnhealthy Event", func() (bool, error) {
		return e.eventReasons()[nodefailover.ReasonTooManyUnhealthy], nil
	})
	e.setReady("n2", true)
	e.waitRecord("n3", "goes on once n2 is back", waitingOn(nodefailover.ReasonWaitingForPods))
	e.assertRange(ra, "spare1", 1)
}

// TestNodeFailoverPartitionWithoutTaint: a node NotReady for many windows but not fenced (a
// partition) gets no record and nothing of it moves. Fenced but then un-fenced before anything
// moved: the record is removed and the spare released.
func TestNodeFailoverPartitionWithoutTaint(t *testing.T) {
	e := newFailoverEnv(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		e.addNode(n)
	}
	e.addNode("spare1", spare)
	ra := e.addRange("r3a", 1, "n3", 0)
	e.addStaticIP("web-0", "n3", e.ip(1, 10))
	e.startFailover(500 * time.Millisecond)
	e.setReady("n3", false)
	e.podGC("n3") // even with its pods gone
	e.stays(3*time.Second, "a partitioned node without the taint keeps everything", func() error {
		if _, err := e.record("n3"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("record exists (%v)", err)
		}
		if r := e.getRange(ra); r.Spec.Node != e.name("n3") || r.Spec.OwnerGeneration != 0 {
			return fmt.Errorf("range moved to %s/%d", r.Spec.Node, r.Spec.OwnerGeneration)
		}
		if s, _ := e.staticIP("web-0"); s.Spec.Node != e.name("n3") {
			return fmt.Errorf("StaticIP moved to %s", s.Spec.Node)
		}
		if l := e.getNode("spare1").Labels[jkev1alpha1.LabelFailoverFor]; l != "" {
			return fmt.Errorf("spare claimed for %s", l)
		}
		return nil
	})

	// Paused on the Node, then fenced: recorded, nothing written.
	e.retry(func() error {
		n := e.getNode("n3")
		n.Annotations = map[string]string{jkev1alpha1.AnnotationFailoverPaused: "true"}
		_, err := e.kube.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{})
		return err
	})
	e.fence("n3")
	e.waitRecord("n3", "paused", func(r *jkev1alpha1.NodeFailover) bool {
		return hasCondition(r, jkev1alpha1.NodeFailoverConditionPaused, metav1.ConditionTrue, "")
	})
	e.stays(time.Second, "paused: nothing moves", func() error {
		if r := e.getRange(ra); r.Spec.Node != e.name("n3") {
			return fmt.Errorf("range moved to %s", r.Spec.Node)
		}
		return nil
	})
	// The operator un-fences instead (it was a partition after all) and unpauses.
	e.retry(func() error {
		n := e.getNode("n3")
		n.Spec.Taints = nil
		n.Annotations = nil
		_, err := e.kube.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{})
		return err
	})
	e.eventually(30*time.Second, "record removed after un-fencing", func() (bool, error) {
		_, err := e.record("n3")
		return apierrors.IsNotFound(err), nil
	})
	e.assertRange(ra, "n3", 0)
}

// TestNodeFailoverNodeDeleted: with --node-deletion-is-fence, a Node object deleted (a cloud
// node controller removed the instance) fences it too — once its range was served by an
// agent. A range whose node never joined is left alone.
func TestNodeFailoverNodeDeleted(t *testing.T) {
	e := newFailoverEnv(t)
	e.options = func(o *manager.Options) { o.NodeDeletionIsFence = true }
	ra, _ := e.threeNodesAndSpare()
	never := e.addRange("rnever", 9, "not-joined-yet", 0)
	e.eventually(30*time.Second, "n3's range served by its agent", func() (bool, error) {
		return nodefailover.RangeSynced(e.getRange(ra)), nil
	})
	watchers := e.nodeWatches()
	e.startFailover(time.Second)
	// The manager must have listed the Nodes before n3 goes: a Node deleted before the manager
	// ever saw it leaves no zone to remember (documented). Its informers watch after they list.
	e.eventually(time.Minute, "the manager watches Nodes", func() (bool, error) { return e.nodeWatches() > watchers, nil })
	e.podGC("n3")
	if err := e.kube.CoreV1().Nodes().Delete(e.ctx, e.name("n3"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec := e.waitRecord("n3", "waiting for pods on the spare", waitingOn(nodefailover.ReasonWaitingForPods))
	if rec.Status.Zone != e.zone {
		t.Errorf("zone %q not kept from the deleted Node, want %q", rec.Status.Zone, e.zone)
	}
	e.assertRange(ra, "spare1", 1)
	if _, err := e.record("not-joined-yet"); !apierrors.IsNotFound(err) {
		t.Errorf("a record for a node that never joined: %v", err)
	}
	if r := e.getRange(never); r.Spec.Node != e.name("not-joined-yet") {
		t.Errorf("range of a node that never joined moved to %s", r.Spec.Node)
	}
}

// TestNodeFailoverMarksAtMostTheCap: two nodes fail at once with
// --node-failover-max-marked-ranges=1: only one migration's range carries report-routes (the
// agents report routes to marked ranges only, so the cap bounds every node's annotation), the
// other waits for its turn (WaitingForRouteTurn) and marks its range once the first's routes
// converged. A watch on the ranges checks the cap at every event, not by sampling.
func TestNodeFailoverMarksAtMostTheCap(t *testing.T) {
	e := newFailoverEnv(t)
	e.options = func(o *manager.Options) { o.NodeFailoverMaxMarkedRanges = 1 }
	for _, n := range []string{"n1", "n2", "n3", "n4", "n5", "n6"} {
		e.addNode(n)
	}
	e.addNode("spare1", spare)
	e.addNode("spare2", spare)
	r3 := e.addRange("r3", 1, "n3", 0)
	r4 := e.addRange("r4", 2, "n4", 0)
	e.addStaticIP("web-0", "n3", e.ip(1, 10))
	e.addStaticIP("web-1", "n4", e.ip(2, 10))

	w, err := e.client.JkeV1().IPRanges().Watch(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	marked, maxMarked, everMarked := map[string]string{}, 0, map[string]bool{}
	go func() {
		for ev := range w.ResultChan() {
			r, ok := ev.Object.(*jkev1.IPRange)
			if !ok || (r.Name != r3 && r.Name != r4) {
				continue
			}
			mu.Lock()
			if v := r.Annotations[jkev1.AnnotationReportRoutes]; v != "" && ev.Type != watch.Deleted {
				marked[r.Name], everMarked[r.Name] = v, true
			} else {
				delete(marked, r.Name)
			}
			maxMarked = max(maxMarked, len(marked))
			mu.Unlock()
		}
	}()

	e.setHoldRoutes(true)
	e.startFailover(time.Second)
	for _, n := range []string{"n3", "n4"} {
		e.setReady(n, false)
		e.fence(n)
		e.podGC(n)
	}
	var first, second string
	e.eventually(60*time.Second, "one migration waits for routes, the other for its turn", func() (bool, error) {
		a, errA := e.record("n3")
		b, errB := e.record("n4")
		if errA != nil || errB != nil {
			return false, nil
		}
		switch {
		case waitingOn(nodefailover.ReasonWaitingForRoutes)(a) && waitingOn(nodefailover.ReasonWaitingForRouteTurn)(b):
			first, second = "n3", "n4"
		case waitingOn(nodefailover.ReasonWaitingForRoutes)(b) && waitingOn(nodefailover.ReasonWaitingForRouteTurn)(a):
			first, second = "n4", "n3"
		default:
			return false, nil
		}
		return true, nil
	})
	secondRange := map[string]string{"n3": r3, "n4": r4}[second]
	e.stays(2*time.Second, "the waiting migration's range is not marked", func() error {
		if v := e.getRange(secondRange).Annotations[jkev1.AnnotationReportRoutes]; v != "" {
			return fmt.Errorf("%s marked %s=%s while %s's migration holds the only slot", secondRange, jkev1.AnnotationReportRoutes, v, e.name(first))
		}
		return nil
	})

	e.setHoldRoutes(false)
	e.waitRecord("n3", "n3's pods awaited", waitingOn(nodefailover.ReasonWaitingForPods))
	e.waitRecord("n4", "n4's pods awaited", waitingOn(nodefailover.ReasonWaitingForPods))
	for _, r := range []string{r3, r4} {
		if v := e.getRange(r).Annotations[jkev1.AnnotationReportRoutes]; v != "" {
			t.Errorf("%s still marked %s=%s after its routes converged", r, jkev1.AnnotationReportRoutes, v)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if maxMarked != 1 || !everMarked[r3] || !everMarked[r4] {
		t.Errorf("ranges marked at once: at most %d (want 1: the cap); marked at some point: %v (want both)", maxMarked, everMarked)
	}
}
