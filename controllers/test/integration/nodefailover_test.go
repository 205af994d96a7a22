package integration

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/controllers/pkg/nodefailover"
)

// The node failover tests' simulated nodes, agents and pods: nodefailover_env_test.go. These
// run whole migrations; nodefailover_guards_test.go has those that wait or refuse.

// TestNodeFailoverLifecycleWithRestarts runs one migration through every step and restarts the
// controller at each of them: it resumes from the record, and every range's ownerGeneration is
// bumped exactly once.
func TestNodeFailoverLifecycleWithRestarts(t *testing.T) {
	e := newFailoverEnv(t)
	ra, rb := e.threeNodesAndSpare()
	const window = 2 * time.Second
	e.startFailover(window)

	// Power off n3, fence it. Its pods still exist: Detected/Fenced, nothing moves.
	e.setReady("n3", false)
	e.fence("n3")
	e.waitRecord("n3", "pods remaining block the move", waitingOn(nodefailover.ReasonPodsRemain))
	e.restart(window)
	e.waitRecord("n3", "still blocked by the pods after a restart", waitingOn(nodefailover.ReasonPodsRemain))
	e.assertRange(ra, "n3", 0)
	e.assertRange(rb, "n3", 4)

	// Pod GC removes them; the spare's agent does not report Synced yet.
	e.setHoldSync("spare1", true)
	e.setHoldRoutes(true)
	e.podGC("n3")
	rec := e.waitRecord("n3", "ranges written, waiting for the target agent", waitingOn(nodefailover.ReasonWaitingForAgent))
	if rec.Status.Target != e.name("spare1") || rec.Spec.Target != e.name("spare1") {
		t.Fatalf("target %q/%q, want %s", rec.Spec.Target, rec.Status.Target, e.name("spare1"))
	}
	if got := e.getNode("spare1").Labels[jkev1alpha1.LabelFailoverFor]; got != e.name("n3") {
		t.Fatalf("spare not claimed: label %q", got)
	}
	e.assertRange(ra, "spare1", 1)
	e.assertRange(rb, "spare1", 5)
	for range 2 { // twice at the same step
		e.restart(window)
		e.waitRecord("n3", "still waiting for the target agent after a restart", waitingOn(nodefailover.ReasonWaitingForAgent))
		e.assertRange(ra, "spare1", 1)
		e.assertRange(rb, "spare1", 5)
	}
	if !slices.ContainsFunc(e.getNode("spare1").Spec.Taints, func(t corev1.Taint) bool { return t.Key == jkev1alpha1.TaintSpare }) {
		t.Fatal("spare taint removed before ranges and routes are in place")
	}

	// The target reports Synced; routes are not converged yet.
	e.setHoldSync("spare1", false)
	e.waitRecord("n3", "waiting for routes", waitingOn(nodefailover.ReasonWaitingForRoutes))
	e.restart(window)
	e.waitRecord("n3", "still waiting for routes after a restart", waitingOn(nodefailover.ReasonWaitingForRoutes))
	for _, name := range []string{"web-0", "web-1"} {
		if s, _ := e.staticIP(name); s.Spec.Node != e.name("n3") {
			t.Fatalf("StaticIP %s re-pointed to %s before the routes converged", name, s.Spec.Node)
		}
	}

	// Routes converge: StaticIPs re-pointed, spare opened, waiting for the pods.
	e.setHoldRoutes(false)
	rec = e.waitRecord("n3", "waiting for pods", waitingOn(nodefailover.ReasonWaitingForPods))
	if rec.Status.Phase != jkev1alpha1.FailoverStaticIPsRebound {
		t.Fatalf("phase %s, want StaticIPsRebound", rec.Status.Phase)
	}
	for _, name := range []string{"web-0", "web-1"} {
		if s, _ := e.staticIP(name); s.Spec.Node != e.name("spare1") {
			t.Fatalf("StaticIP %s names %s, want the target", name, s.Spec.Node)
		}
	}
	if slices.ContainsFunc(e.getNode("spare1").Spec.Taints, func(t corev1.Taint) bool { return t.Key == jkev1alpha1.TaintSpare }) {
		t.Fatal("spare taint still on the target after StaticIPsRebound")
	}
	e.restart(window)
	e.waitRecord("n3", "still waiting for pods after a restart", waitingOn(nodefailover.ReasonWaitingForPods))

	// The workload controllers recreate the pods on the target with their IPs.
	e.runPod("web-0", "spare1", e.ip(1, 10))
	e.runPod("web-1", "spare1", e.ip(2, 10))
	rec = e.waitRecord("n3", "completed", phaseIs(jkev1alpha1.FailoverCompleted))
	e.waitRecord("n3", "a completed record keeps no finalizer", func(r *jkev1alpha1.NodeFailover) bool {
		return !slices.Contains(r.Finalizers, nodefailover.Finalizer)
	})
	e.restart(window)
	e.stays(2*time.Second, "a completed migration stays as it is", func() error {
		r, err := e.record("n3")
		if err != nil || r.Status.Phase != jkev1alpha1.FailoverCompleted {
			return fmt.Errorf("record %v %v", r, err)
		}
		if g := e.getRange(rb).Spec.OwnerGeneration; g != 5 {
			return fmt.Errorf("ownerGeneration of %s is %d, want 5", rb, g)
		}
		return nil
	})
	e.assertRange(ra, "spare1", 1)
	e.assertRange(rb, "spare1", 5)
	if got := e.getNode("spare1").Labels[jkev1alpha1.LabelFailoverFor]; got != "" {
		t.Errorf("claim label left on the target after completion: %q", got)
	}
	want := []jkev1alpha1.MovedRange{
		{Name: ra, CIDR: e.cidr(1), FromNode: e.name("n3"), ToNode: e.name("spare1"), OwnerGeneration: 1},
		{Name: rb, CIDR: e.cidr(2), FromNode: e.name("n3"), ToNode: e.name("spare1"), OwnerGeneration: 5},
	}
	if !slices.Equal(rec.Status.MovedRanges, want) {
		t.Errorf("movedRanges %+v, want %+v", rec.Status.MovedRanges, want)
	}
	if len(rec.Status.MovedStaticIPs) != 2 || !rec.Status.MovedStaticIPs[0].Rebound || !rec.Status.MovedStaticIPs[1].Rebound {
		t.Errorf("movedStaticIPs %+v", rec.Status.MovedStaticIPs)
	}
	e.assertRange(e.name("r1"), "n1", 0) // n1's range never touched
	// Events on the record, the failed node, the target and the pods.
	e.eventually(30*time.Second, "events", func() (bool, error) {
		reasons := e.eventReasons()
		for _, want := range []string{nodefailover.ReasonDetected, nodefailover.ReasonClaimed, nodefailover.ReasonSpareReleased, nodefailover.ReasonPodMoved, nodefailover.ReasonCompleted, "RangeMoved"} {
			if !reasons[want] {
				return false, fmt.Errorf("no %s Event yet (have %v)", want, reasons)
			}
		}
		return true, nil
	})
}

// TestNodeFailoverResumesARecordedMove: a crash after the move was recorded but before the
// IPRange write finishes it at the recorded generation; a crash after the write does not bump
// it again.
func TestNodeFailoverResumesARecordedMove(t *testing.T) {
	e := newFailoverEnv(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		e.addNode(n)
	}
	e.addNode("spare1", spare)
	written := e.addRange("r3a", 1, "n3", 0)
	pending := e.addRange("r3b", 2, "n3", 7)
	e.setReady("n3", false)
	e.fence("n3")
	// What a previous leader left: spare claimed, both moves recorded, only the first written.
	e.leftByDeadLeader("n3", "spare1", nil, []jkev1alpha1.MovedRange{
		{Name: written, CIDR: e.cidr(1), FromNode: e.name("n3"), ToNode: e.name("spare1"), OwnerGeneration: 1},
		{Name: pending, CIDR: e.cidr(2), FromNode: e.name("n3"), ToNode: e.name("spare1"), OwnerGeneration: 8},
	})
	e.retry(func() error {
		r := e.getRange(written)
		r.Spec.Node, r.Spec.OwnerGeneration = e.name("spare1"), 1
		_, err := e.client.JkeV1().IPRanges().Update(e.ctx, r, metav1.UpdateOptions{})
		return err
	})
	e.startFailover(time.Second)
	e.waitRecord("n3", "completed (no StaticIPs to wait for)", phaseIs(jkev1alpha1.FailoverCompleted))
	e.assertRange(written, "spare1", 1)
	e.assertRange(pending, "spare1", 8)
}

// TestNodeFailoverWithItsRBAC runs a whole migration as the manager's ServiceAccount with only
// the permissions of manifests/controller-manager/rbac.yaml.
func TestNodeFailoverWithItsRBAC(t *testing.T) {
	e := newFailoverEnv(t)
	e.asManagerServiceAccount()
	ra, rb := e.threeNodesAndSpare()
	e.startFailover(time.Second)
	e.setReady("n3", false)
	e.fence("n3")
	e.podGC("n3")
	e.waitRecord("n3", "waiting for pods", waitingOn(nodefailover.ReasonWaitingForPods))
	e.runPod("web-0", "spare1", e.ip(1, 10))
	e.runPod("web-1", "spare1", e.ip(2, 10))
	e.waitRecord("n3", "completed", phaseIs(jkev1alpha1.FailoverCompleted))
	e.assertRange(ra, "spare1", 1)
	e.assertRange(rb, "spare1", 5)
	e.eventually(30*time.Second, "events written with the manager's RBAC", func() (bool, error) {
		return e.eventReasons()[nodefailover.ReasonCompleted], nil
	})
}

// TestNodeFailoverRecordDeletedMidMigration: deleting a record after its ranges were written
// does not forget the migration: the record stays (finalizer) and the migration completes —
// the target keeps its spare taint until its agent has reserved the ranges — then it goes. A
// record deleted before anything moved goes at once and releases its claim.
func TestNodeFailoverRecordDeletedMidMigration(t *testing.T) {
	e := newFailoverEnv(t)
	ra, rb := e.threeNodesAndSpare()
	e.setHoldSync("spare1", true)
	e.startFailover(time.Second)
	e.setReady("n3", false)
	e.fence("n3")
	e.podGC("n3")
	e.waitRecord("n3", "ranges written, waiting for the target agent", waitingOn(nodefailover.ReasonWaitingForAgent))
	if err := e.client.JkeV1alpha1().NodeFailovers().Delete(e.ctx, e.name("n3"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.stays(3*time.Second, "a record deleted mid-migration is held and nothing skips ahead", func() error {
		r, err := e.record("n3")
		if err != nil {
			return fmt.Errorf("record gone mid-migration: %v", err)
		}
		if len(r.Status.MovedRanges) != 2 {
			return fmt.Errorf("record lost its moves: %+v (uid %s)", r.Status.MovedRanges, r.UID)
		}
		if !slices.ContainsFunc(e.getNode("spare1").Spec.Taints, func(t corev1.Taint) bool { return t.Key == jkev1alpha1.TaintSpare }) {
			return fmt.Errorf("spare taint removed before the target's agent reserved the ranges")
		}
		for _, name := range []string{"web-0", "web-1"} {
			if s, _ := e.staticIP(name); s.Spec.Node != e.name("n3") {
				return fmt.Errorf("StaticIP %s re-pointed to %s before the ranges were served", name, s.Spec.Node)
			}
		}
		return nil
	})
	rec := e.waitRecord("n3", "deletion held", func(r *jkev1alpha1.NodeFailover) bool {
		return r.DeletionTimestamp != nil && hasCondition(r, jkev1alpha1.NodeFailoverConditionProgressing, metav1.ConditionTrue, "")
	})
	if !slices.Contains(rec.Finalizers, nodefailover.Finalizer) {
		t.Errorf("finalizers %v", rec.Finalizers)
	}
	e.eventually(30*time.Second, "DeletionHeld Event", func() (bool, error) { return e.eventReasons()[nodefailover.ReasonDeletionHeld], nil })

	e.setHoldSync("spare1", false)
	e.waitRecord("n3", "waiting for pods", waitingOn(nodefailover.ReasonWaitingForPods))
	e.runPod("web-0", "spare1", e.ip(1, 10))
	e.runPod("web-1", "spare1", e.ip(2, 10))
	e.eventually(time.Minute, "the record goes once the migration completed", func() (bool, error) {
		_, err := e.record("n3")
		return apierrors.IsNotFound(err), nil
	})
	e.assertRange(ra, "spare1", 1)
	e.assertRange(rb, "spare1", 5)
	if got := e.getNode("spare1").Labels[jkev1alpha1.LabelFailoverFor]; got != "" {
		t.Errorf("claim label left: %q", got)
	}

	// Before anything moved: deleting goes at once (the node is still fenced, so it is
	// detected again — with a new record, which carries the finalizer too).
	e.addNode("n4")
	e.addNode("spare2", spare)
	r4 := e.addRange("r4", 4, "n4", 0)
	e.addStaticIP("db-0", "n4", e.ip(4, 10))
	e.setReady("n4", false)
	e.fence("n4")
	old := e.waitRecord("n4", "pods remaining block the move", waitingOn(nodefailover.ReasonPodsRemain))
	if !slices.Contains(old.Finalizers, nodefailover.Finalizer) {
		t.Errorf("finalizers %v", old.Finalizers)
	}
	if err := e.client.JkeV1alpha1().NodeFailovers().Delete(e.ctx, e.name("n4"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually(30*time.Second, "the uncommitted record goes", func() (bool, error) {
		r, err := e.record("n4")
		return apierrors.IsNotFound(err) || (err == nil && r.UID != old.UID), nil
	})
	e.assertRange(r4, "n4", 0)
}

// TestNodeFailoverDeletesAPodPinnedToTheFailedNodeAfterTheRebind: a workload controller whose
// StaticIP cache has not seen the rebind yet creates the pod pinned (required node affinity)
// to the failed node after the rebind pass looked for such pods. The failover must delete it
// (so that it is recreated pinned to the target) while it waits for the pods, not leave it
// Pending forever on a node that is off (issue 37: at 100 kwok nodes one such pod kept a
// 110-pod failover waiting for 5 minutes).
func TestNodeFailoverDeletesAPodPinnedToTheFailedNodeAfterTheRebind(t *testing.T) {
	e := newFailoverEnv(t)
	e.threeNodesAndSpare()
	const window = 2 * time.Second
	e.startFailover(window)
	e.setReady("n3", false)
	e.fence("n3")
	e.podGC("n3")
	e.waitRecord("n3", "waiting for pods", waitingOn(nodefailover.ReasonWaitingForPods))

	// web-0 comes back on the target; web-1 is created from the stale record, pinned to n3.
	e.runPod("web-0", "spare1", e.ip(1, 10))
	pinned := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: e.ns, Annotations: map[string]string{podip.AnnotationIPAddress: e.ip(2, 10)}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:v1"}},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
					{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{e.name("n3")}}}}}}}}}}
	created, err := e.kube.CoreV1().Pods(e.ns).Create(e.ctx, pinned, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.eventually(30*time.Second, "the pod pinned to the failed node deleted by the failover", func() (bool, error) {
		p, err := e.kube.CoreV1().Pods(e.ns).Get(e.ctx, "web-1", metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && (p.UID != created.UID || p.DeletionTimestamp != nil)) {
			return true, nil
		}
		return false, fmt.Errorf("web-1 (uid %s) still pending, pinned to %s: %v", created.UID, e.name("n3"), err)
	})
	// Recreated pinned to the target, it runs there: the failover completes.
	e.runPod("web-1", "spare1", e.ip(2, 10))
	e.waitRecord("n3", "completed", phaseIs(jkev1alpha1.FailoverCompleted))
}
