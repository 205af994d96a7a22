package nodefailover

import (
	"context"
	"fmt"
	"github.com/staticip/staticip/controllers/pkg/nodegone"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/metrics"
)

// beforeMoving checks the fencing rule, the unhealthy share and the pods left, then reserves a
// target and records the range moves. Until a move is recorded everything here is undone if
// the node stops being fenced.
func (m *migration) beforeMoving(ctx context.Context) (done bool, requeue time.Duration, err error) {
	st := m.st()
	name := m.failedName()
	rules, err := m.fenceRules(ctx, m.node)
	if err != nil {
		return false, 0, err
	}
	fence := Fencing(m.node, st.StartTime.Time, m.now, rules)
	if !fence.Candidate {
		return false, 0, m.cancel(ctx, fence.Message)
	}
	if !fence.Fenced {
		m.setCondition(jkev1alpha1.NodeFailoverConditionFenced, metav1.ConditionFalse, fence.Reason, fence.Message)
		m.waiting(ReasonWaitingForFence, fence.Message)
		return false, fence.RecheckAfter, nil
	}

	nodes, err := m.c.nodes.List(labels.Everything())
	if err != nil {
		return false, 0, err
	}
	deleted := 0
	if m.node == nil {
		deleted = 1
	}
	notReady, total := Unhealthy(nodes, deleted)
	if TooManyUnhealthy(notReady, total, m.c.MaxUnhealthyPercent) {
		msg := fmt.Sprintf("%d of %d nodes are not Ready (more than %d%%): that looks like a partition, not a node failure; nothing is moved", notReady, total, m.c.MaxUnhealthyPercent)
		if m.became(jkev1alpha1.NodeFailoverConditionStopped, metav1.ConditionTrue, ReasonTooManyUnhealthy) {
			m.c.recorder.Event(m.rec, corev1.EventTypeWarning, ReasonTooManyUnhealthy, msg)
			if m.node != nil {
				m.c.recorder.Event(m.node, corev1.EventTypeWarning, ReasonTooManyUnhealthy, msg)
			}
			metrics.NodeFailoverMigrations.WithLabelValues("stopped_unhealthy").Inc()
		}
		m.setCondition(jkev1alpha1.NodeFailoverConditionStopped, metav1.ConditionTrue, ReasonTooManyUnhealthy, msg)
		m.waiting(ReasonTooManyUnhealthy, msg)
		return false, recheck, nil
	}
	m.setCondition(jkev1alpha1.NodeFailoverConditionStopped, metav1.ConditionFalse, ReasonHealthy,
		fmt.Sprintf("%d of %d nodes are not Ready (at most %d%% allowed)", notReady, total, m.c.MaxUnhealthyPercent))
	m.setPhase(jkev1alpha1.FailoverFenced)

	pods, err := m.c.podsHolding(name, prefixesOf(m.owned))
	if err != nil {
		return false, 0, err
	}
	pods = NeverStarted(pods, name, NotReadySince(m.node))
	if holding := nodegone.HoldingPods(pods, name, prefixesOf(m.owned)); len(holding) > 0 {
		// The grace runs from the fence as this controller saw it: a node NotReady for hours
		// and tainted a moment ago still gives the taint manager and pod GC the grace first.
		from := fence.FencedAt
		if st.StartTime != nil && st.StartTime.After(from) {
			from = st.StartTime.Time
		}
		doomed, wait := FencedPodDeletion(pods, name, prefixesOf(m.owned), from, m.now, m.c.FencedPodDeletionGrace)
		if err := m.deleteFencedPods(ctx, doomed); err != nil {
			return false, 0, err
		}
		msg := fmt.Sprintf("%s; waiting for %d pod objects that may hold its IPs to be deleted (the taint manager and pod GC delete those that do not tolerate the out-of-service taint; those still bound to the node are force-deleted %s after the fence): %s",
			fence.Message, len(holding), m.c.FencedPodDeletionGrace, shortList(holding))
		m.setCondition(jkev1alpha1.NodeFailoverConditionFenced, metav1.ConditionFalse, ReasonPodsRemain, msg)
		m.waiting(ReasonPodsRemain, msg)
		return false, wait, nil
	}
	m.setCondition(jkev1alpha1.NodeFailoverConditionFenced, metav1.ConditionTrue, ReasonFenced, fence.Message)
	m.setPhase(jkev1alpha1.FailoverSourceEmpty)

	sips, err := m.c.staticIPsOf(name, prefixesOf(m.owned))
	if err != nil {
		return false, 0, err
	}
	target, requeue, err := m.reserveTarget(ctx, sips)
	if target == "" || err != nil {
		return false, requeue, err
	}
	if !Reached(st, jkev1alpha1.FailoverTargetReserved) {
		st.MovedStaticIPs = nil
		for _, s := range sips {
			st.MovedStaticIPs = append(st.MovedStaticIPs, jkev1alpha1.MovedStaticIP{Namespace: s.Namespace, Name: s.Name, IP: s.Spec.IP, FromNode: s.Spec.Node})
		}
		m.setPhase(jkev1alpha1.FailoverTargetReserved)
	}
	// Record every move before the first range write: a restart finishes these moves at these
	// generations and never bumps a range twice.
	for _, r := range m.owned {
		st.MovedRanges = append(st.MovedRanges, jkev1alpha1.MovedRange{Name: r.Name, CIDR: r.Spec.CIDR, FromNode: name,
			ToNode: target, OwnerGeneration: r.Spec.OwnerGeneration + 1})
	}
	if err := m.writeStatus(ctx); err != nil {
		return false, 0, err
	}
	return true, 0, nil
}

// deleteFencedPods force-deletes (grace period 0, UID precondition: never a pod of the same
// name created since) the pod objects FencedPodDeletion chose: the machine is off, so nothing
// runs them, and their objects are all that keeps the node's IPs claimed. Their controllers
// recreate them (a DaemonSet's pod comes back when the node returns). The deletions go out in
// parallel (forEachParallel).
func (m *migration) deleteFencedPods(ctx context.Context, pods []*corev1.Pod) error {
	zero := int64(0)
	return forEachParallel(ctx, len(pods), func(ctx context.Context, i int) error {
		p := pods[i]
		uid := p.UID
		err := m.c.kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero,
			Preconditions: &metav1.Preconditions{UID: &uid}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil // gone, or another pod of that name: the next sync sees it
		} else if err != nil {
			return fmt.Errorf("force-delete pod %s/%s on fenced node %s: %w", p.Namespace, p.Name, m.failedName(), err)
		}
		msg := fmt.Sprintf("pod %s/%s was still bound to node %s %s after the node was fenced (out-of-service and not Ready): force-deleted so the node's IP ranges can move (its controller recreates it; a DaemonSet's pod comes back when the node returns)",
			p.Namespace, p.Name, m.failedName(), m.c.FencedPodDeletionGrace)
		m.c.recorder.Event(p, corev1.EventTypeWarning, ReasonFencedPodDeleted, msg)
		m.c.recorder.Event(m.rec, corev1.EventTypeNormal, ReasonFencedPodDeleted, msg)
		m.logger.Info("Force-deleted a pod bound to the fenced node", "pod", klog.KObj(p))
		return nil
	})
}
