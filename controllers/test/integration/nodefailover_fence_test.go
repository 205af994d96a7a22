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
	"github.com/staticip/staticip/controllers/pkg/manager"
	"github.com/staticip/staticip/controllers/pkg/nodefailover"
)

// Issue 25: failover that completes in a real cluster. Pods that never leave a fenced node by
// themselves, a fence withdrawn between recording a move and writing it, and a deleted Node.

// runPodWith creates a pod Running on node with ip, shaped by mutate.
func (e *failoverEnv) runPodWith(name, node, ip string, mutate func(*corev1.Pod)) *corev1.Pod {
	e.t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: corev1.PodSpec{NodeName: e.name(node), Containers: []corev1.Container{{Name: "app", Image: "app:v1"}}}}
	mutate(p)
	created, err := e.kube.CoreV1().Pods(e.ns).Create(e.ctx, p, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	updated, err := e.kube.CoreV1().Pods(e.ns).UpdateStatus(e.ctx, created, metav1.UpdateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return updated
}

// tolerateEverything is the shape of a log shipper's or monitoring agent's DaemonSet pod: it
// tolerates every taint, so the taint manager never evicts it and pod GC never deletes it.
func tolerateEverything(p *corev1.Pod) {
	p.Labels = map[string]string{"app": "logship"}
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "logship", UID: "ds-uid", Controller: ptrTrue()}}
	p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
}

func ptrTrue() *bool { t := true; return &t }

// deletePods deletes the named pods at once (what the taint manager and pod GC do to the
// pods of an out-of-service node that do not tolerate the taint).
func (e *failoverEnv) deletePods(names ...string) {
	e.t.Helper()
	zero := int64(0)
	for _, n := range names {
		if err := e.kube.CoreV1().Pods(e.ns).Delete(e.ctx, n, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
			e.t.Fatal(err)
		}
	}
}

// TestNodeFailoverPodsThatNeverLeave: a DaemonSet-like pod that tolerates every taint (not on
// the host network, with an IP of the node's range) stays bound to the fenced node, since
// nothing in Kubernetes deletes it. After --fenced-pod-deletion-grace the controller
// force-deletes it (UID precondition, Events on the pod and the record) and the migration
// completes. A hostNetwork pod on the node neither blocks nor is deleted. The manager runs
// with its RBAC and is restarted between the steps.
func TestNodeFailoverPodsThatNeverLeave(t *testing.T) {
	e := newFailoverEnv(t)
	// As the manager's ServiceAccount: its ClusterRole must allow the pod deletion.
	e.asManagerServiceAccount()
	ra, rb := e.threeNodesAndSpare()
	e.options = func(o *manager.Options) { o.FencedPodDeletionGrace = 3 * time.Second }
	const window = time.Second
	e.startFailover(window)
	ds := e.runPodWith("logship-n3", "n3", e.ip(1, 50), tolerateEverything)
	hostNet := e.runPodWith("node-exporter-n3", "n3", "192.0.2.3", func(p *corev1.Pod) {
		tolerateEverything(p)
		p.Spec.HostNetwork = true
	})

	e.setReady("n3", false)
	e.fence("n3")
	// The taint manager evicts the static-IP pods and pod GC removes them; the DaemonSet pod
	// and the hostNetwork pod tolerate the taint and stay.
	e.deletePods("web-0", "web-1")
	e.restart(window)
	rec := e.waitRecord("n3", "ranges moved, waiting for the pods on the target", waitingOn(nodefailover.ReasonWaitingForPods))
	e.assertRange(ra, "spare1", 1)
	e.assertRange(rb, "spare1", 5)
	if _, err := e.kube.CoreV1().Pods(e.ns).Get(e.ctx, ds.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the DaemonSet pod on the fenced node still exists: %v", err)
	}
	if p, err := e.kube.CoreV1().Pods(e.ns).Get(e.ctx, hostNet.Name, metav1.GetOptions{}); err != nil || p.UID != hostNet.UID || p.DeletionTimestamp != nil {
		t.Fatalf("the hostNetwork pod was deleted or is terminating: %v %v", p, err)
	}
	e.restart(window)
	e.runPod("web-0", "spare1", e.ip(1, 10))
	e.runPod("web-1", "spare1", e.ip(2, 10))
	e.waitRecord("n3", "completed", phaseIs(jkev1alpha1.FailoverCompleted))
	e.eventually(30*time.Second, "FencedPodDeleted Events on the pod and the record", func() (bool, error) {
		list, err := e.kube.CoreV1().Events("").List(e.ctx, metav1.ListOptions{FieldSelector: "reason=" + nodefailover.ReasonFencedPodDeleted})
		if err != nil {
			return false, err
		}
		var onPod, onRecord bool
		for _, ev := range list.Items {
			onPod = onPod || (ev.InvolvedObject.Kind == "Pod" && ev.InvolvedObject.Name == ds.Name && ev.InvolvedObject.Namespace == e.ns)
			onRecord = onRecord || (ev.InvolvedObject.Kind == "NodeFailover" && ev.InvolvedObject.Name == rec.Name)
		}
		if !onPod || !onRecord {
			return false, fmt.Errorf("Event on the pod %v, on the record %v", onPod, onRecord)
		}
		return true, nil
	})
}

// TestNodeFailoverFenceWithdrawnBeforeRangeWrite: a leader recorded the moves and died before
// writing them (the record was paused meanwhile); the node came back Ready, the operator
// removed the taint and pods run there again. Unpaused, the migration is cancelled with
// nothing moved: no range is bumped under running pods. The manager is restarted between the
// steps.
func TestNodeFailoverFenceWithdrawnBeforeRangeWrite(t *testing.T) {
	e := newFailoverEnv(t)
	ra, rb := e.threeNodesAndSpare()
	e.setReady("n3", false)
	e.fence("n3")
	e.podGC("n3")
	// What a leader left that recorded both moves and died before the first range write; the
	// record was paused meanwhile.
	e.leftByDeadLeader("n3", "spare1", map[string]string{jkev1alpha1.AnnotationFailoverPaused: "true"}, []jkev1alpha1.MovedRange{
		{Name: ra, CIDR: e.cidr(1), FromNode: e.name("n3"), ToNode: e.name("spare1"), OwnerGeneration: 1},
		{Name: rb, CIDR: e.cidr(2), FromNode: e.name("n3"), ToNode: e.name("spare1"), OwnerGeneration: 5},
	})
	const window = time.Second
	e.startFailover(window)
	e.waitRecord("n3", "paused", func(r *jkev1alpha1.NodeFailover) bool {
		return hasCondition(r, jkev1alpha1.NodeFailoverConditionPaused, metav1.ConditionTrue, "")
	})
	e.restart(window)

	// The node was not off after all: it is back, the taint goes, its pods run again.
	e.setReady("n3", true)
	e.retry(func() error {
		n := e.getNode("n3")
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == jkev1alpha1.TaintOutOfService })
		_, err := e.kube.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{})
		return err
	})
	e.runPod("web-0", "n3", e.ip(1, 10))
	e.runPod("web-1", "n3", e.ip(2, 10))
	e.restart(window)

	// Unpaused: nothing may move.
	e.retry(func() error {
		r, err := e.record("n3")
		if err != nil {
			return err
		}
		delete(r.Annotations, jkev1alpha1.AnnotationFailoverPaused)
		_, err = e.client.JkeV1alpha1().NodeFailovers().Update(e.ctx, r, metav1.UpdateOptions{})
		return err
	})
	e.stays(3*time.Second, "an un-fenced node's ranges are never bumped under its running pods", func() error {
		for name, gen := range map[string]int64{ra: 0, rb: 4} {
			if r := e.getRange(name); r.Spec.Node != e.name("n3") || r.Spec.OwnerGeneration != gen {
				return fmt.Errorf("IPRange %s moved to %s at generation %d while its node runs again", name, r.Spec.Node, r.Spec.OwnerGeneration)
			}
		}
		for _, name := range []string{"web-0", "web-1"} {
			if s, _ := e.staticIP(name); s.Spec.Node != e.name("n3") {
				return fmt.Errorf("StaticIP %s re-pointed to %s", name, s.Spec.Node)
			}
		}
		return nil
	})
	e.eventually(30*time.Second, "the record is cancelled and the spare released", func() (bool, error) {
		_, err := e.record("n3")
		if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("record still there (%v)", err)
		}
		if l := e.getNode("spare1").Labels[jkev1alpha1.LabelFailoverFor]; l != "" {
			return false, fmt.Errorf("spare still claimed for %s", l)
		}
		if !e.eventReasons()[nodefailover.ReasonCancelled] {
			return false, fmt.Errorf("no %s Event", nodefailover.ReasonCancelled)
		}
		return true, nil
	})
	e.assertRange(ra, "n3", 0)
	e.assertRange(rb, "n3", 4)
}

// TestNodeFailoverDeletedNodeIsNotAFence: a partitioned node deleted by automation (kubectl
// delete node): pod GC removes its pod objects, but its containers may still run. Without
// --node-deletion-is-fence nothing of it moves: the record says why and what to do. The
// operator's confirmation on the record (the machine is off) lets it go on. The manager is
// restarted between the steps.
func TestNodeFailoverDeletedNodeIsNotAFence(t *testing.T) {
	e := newFailoverEnv(t)
	ra, rb := e.threeNodesAndSpare()
	e.eventually(30*time.Second, "n3's range served by its agent", func() (bool, error) {
		return nodefailover.RangeSynced(e.getRange(ra)), nil
	})
	const window = time.Second
	watchers := e.nodeWatches()
	e.startFailover(window)
	e.eventually(time.Minute, "the manager watches Nodes", func() (bool, error) { return e.nodeWatches() > watchers, nil })
	e.setReady("n3", false) // partitioned
	e.podGC("n3")
	if err := e.kube.CoreV1().Nodes().Delete(e.ctx, e.name("n3"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.stays(4*time.Second, "a deleted node's ranges stay where they are", func() error {
		for name, gen := range map[string]int64{ra: 0, rb: 4} {
			if r := e.getRange(name); r.Spec.Node != e.name("n3") || r.Spec.OwnerGeneration != gen {
				return fmt.Errorf("IPRange %s of the deleted (maybe partitioned) node moved to %s at generation %d", name, r.Spec.Node, r.Spec.OwnerGeneration)
			}
		}
		return nil
	})
	e.waitRecord("n3", "waiting for a fence", func(r *jkev1alpha1.NodeFailover) bool {
		return hasCondition(r, jkev1alpha1.NodeFailoverConditionFenced, metav1.ConditionFalse, nodefailover.ReasonNodeDeleted) &&
			waitingOn(nodefailover.ReasonWaitingForFence)(r)
	})
	e.restart(window)
	e.stays(2*time.Second, "still nothing moves after a restart", func() error {
		if r := e.getRange(ra); r.Spec.Node != e.name("n3") {
			return fmt.Errorf("IPRange %s moved to %s", ra, r.Spec.Node)
		}
		return nil
	})
	// The operator made sure the machine is off and says so on the record.
	e.retry(func() error {
		r, err := e.record("n3")
		if err != nil {
			return err
		}
		if r.Annotations == nil {
			r.Annotations = map[string]string{}
		}
		r.Annotations[jkev1alpha1.AnnotationNodeOff] = "true"
		_, err = e.client.JkeV1alpha1().NodeFailovers().Update(e.ctx, r, metav1.UpdateOptions{})
		return err
	})
	e.restart(window)
	e.waitRecord("n3", "moved once confirmed", waitingOn(nodefailover.ReasonWaitingForPods))
	e.assertRange(ra, "spare1", 1)
	e.assertRange(rb, "spare1", 5)
}
