package nodefailover

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/metrics"
	"github.com/staticip/staticip/controllers/pkg/nodegone"
)

// migration is one sync of one record.
type migration struct {
	c      *Controller
	rec    *jkev1alpha1.NodeFailover
	orig   jkev1alpha1.NodeFailoverStatus
	node   *corev1.Node // nil: deleted
	owned  []*jkev1.IPRange
	now    time.Time
	logger klog.Logger
	// target: the target Node as cached, read by openSpare on every pass after the commit.
	target *corev1.Node
	// deleted: this sync deleted the record; nothing is written back.
	deleted bool
	// deferred: a progress-only status change held back (progressWriteGap); look again then.
	deferred time.Duration
}

func (m *migration) st() *jkev1alpha1.NodeFailoverStatus { return &m.rec.Status }

func (m *migration) setCondition(t string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&m.rec.Status.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason,
		Message: msg, ObservedGeneration: m.rec.Generation})
}

// became reports whether condition t turned to status/reason in this sync (for one-shot Events).
func (m *migration) became(t string, status metav1.ConditionStatus, reason string) bool {
	old := meta.FindStatusCondition(m.orig.Conditions, t)
	return old == nil || old.Status != status || old.Reason != reason
}

func (m *migration) waiting(reason, msg string) {
	m.setCondition(jkev1alpha1.NodeFailoverConditionProgressing, metav1.ConditionTrue, reason, msg)
}

// setPhase records that step p is done, with its duration and an Event.
func (m *migration) setPhase(p jkev1alpha1.NodeFailoverPhase) {
	st := m.st()
	if Reached(st, p) {
		return
	}
	if st.PhaseTime != nil {
		metrics.NodeFailoverStepDuration.WithLabelValues(string(p)).Observe(m.now.Sub(st.PhaseTime.Time).Seconds())
	}
	now := metav1.NewTime(m.now)
	st.Phase, st.PhaseTime = p, &now
	st.LastError = ""
	m.c.recorder.Eventf(m.rec, corev1.EventTypeNormal, ReasonPhase, "step %s done (target %q)", p, st.Target)
	m.logger.Info("Node failover step done", "phase", p, "target", st.Target)
}

// writeStatus writes the status if this sync changed it.
func (m *migration) writeStatus(ctx context.Context) error {
	if m.deleted {
		return nil
	}
	m.rec.Status.ObservedGeneration = m.rec.Generation
	if apiequality.Semantic.DeepEqual(m.orig, m.rec.Status) {
		return nil
	}
	if OnlyProgressMessageChanged(m.orig, m.rec.Status) {
		if last, ok := m.c.statusWritten.Load(m.rec.Name); ok {
			if wait := last.(time.Time).Add(progressWriteGap).Sub(m.now); wait > 0 {
				m.deferred = wait
				return nil
			}
		}
	}
	updated, err := m.c.client.JkeV1alpha1().NodeFailovers().UpdateStatus(ctx, m.rec, metav1.UpdateOptions{})
	metrics.ObserveStatusWrite(Name, err)
	if err != nil {
		return err
	}
	m.c.statusWritten.Store(updated.Name, m.now)
	m.c.recordWrites.Remember(updated.Name, updated)
	m.rec = updated
	m.orig = *updated.Status.DeepCopy()
	return nil
}

func (m *migration) failedName() string { return m.rec.Spec.Node }

// OnlyProgressMessageChanged says whether cur differs from old only in the message of the
// Progressing condition (same status and reason: the same wait, with other counts or names).
func OnlyProgressMessageChanged(old, cur jkev1alpha1.NodeFailoverStatus) bool {
	o := meta.FindStatusCondition(old.Conditions, jkev1alpha1.NodeFailoverConditionProgressing)
	c := meta.FindStatusCondition(cur.Conditions, jkev1alpha1.NodeFailoverConditionProgressing)
	if o == nil || c == nil || o.Status != c.Status || o.Reason != c.Reason || o.Message == c.Message {
		return false
	}
	withOld := cur.DeepCopy()
	meta.SetStatusCondition(&withOld.Conditions, *o)
	return apiequality.Semantic.DeepEqual(old, *withOld)
}

// committed: a range write may have happened. From then on the migration only goes forward.
func (m *migration) committed() bool {
	return len(m.st().MovedRanges) > 0 || Reached(m.st(), jkev1alpha1.FailoverRangesMoved)
}

// fenceRules: the manager's settings, and the operator's node-off statement on the record of a
// deleted Node. node: the Node as just read (nil: deleted); for a deleted one the rule of
// controllers/pkg/nodegone decides, on its Lease (read live) and the pod objects.
func (m *migration) fenceRules(ctx context.Context, node *corev1.Node) (FenceRules, error) {
	r := FenceRules{Window: m.c.Window,
		NodeDeletionIsFence: m.c.NodeDeletionIsFence || m.rec.Annotations[jkev1alpha1.AnnotationNodeOff] == "true"}
	if node != nil {
		return r, nil
	}
	e := nodegone.Evidence{Node: m.failedName(), OperatorSaysOff: r.NodeDeletionIsFence, Now: m.now, GoneAfter: m.c.NodeGoneAfter}
	if st := m.st(); st.StartTime != nil {
		e.GoneSince = st.StartTime.Time
	}
	if err := nodegone.ReadLease(ctx, m.c.kube, &e); err != nil {
		return r, err
	}
	prefixes := prefixesOf(m.owned)
	pods, err := m.c.podsHolding(m.failedName(), prefixes)
	if err != nil {
		return r, err
	}
	e.HoldingPods = nodegone.HoldingPods(pods, m.failedName(), prefixes)
	v := nodegone.Decide(e)
	r.NodeGone = &v
	return r, nil
}

// handOverToAllocator deletes the record of a deleted node that moved nothing and owns only
// what the range allocator gives back (LeftToAllocator): records made before that rule, or
// before the last StaticIP of the node went. done: the record is gone.
func (m *migration) handOverToAllocator(ctx context.Context) (done bool, err error) {
	if m.node != nil || m.committed() || m.st().Target != "" || m.rec.DeletionTimestamp != nil {
		return false, nil
	}
	sips, err := m.c.staticIPsOf(m.failedName(), prefixesOf(m.owned))
	if err != nil || !LeftToAllocator(m.c.AllocatorRuns, m.owned, sips) {
		return false, err
	}
	why := fmt.Sprintf("the deleted node %s owns only pool blocks (%d) and no StaticIP: the range allocator returns them to the pool once the node is proven gone", m.failedName(), len(m.owned))
	m.c.recorder.Event(m.rec, corev1.EventTypeNormal, ReasonHandedToAllocator, why)
	return true, m.deleteRecord(ctx, why)
}

func (m *migration) paused() bool {
	if m.rec.Annotations[jkev1alpha1.AnnotationFailoverPaused] == "true" {
		return true
	}
	return m.node != nil && m.node.Annotations[jkev1alpha1.AnnotationFailoverPaused] == "true"
}

// run advances the migration as far as it can now.
func (m *migration) run(ctx context.Context) (time.Duration, error) {
	st := m.st()
	if st.Phase == "" { // created, but the first status write was lost
		now := metav1.NewTime(m.now)
		st.Phase, st.StartTime, st.PhaseTime = jkev1alpha1.FailoverDetected, &now, &now
		lbls := m.c.gone.get(m.failedName())
		if m.node != nil {
			lbls = m.node.Labels
		}
		st.Zone, st.InstanceType = lbls[LabelZone], lbls[LabelInstanceType]
	}
	if m.rec.DeletionTimestamp != nil {
		if done, err := m.deleting(ctx); done || err != nil {
			return 0, err
		}
	} else if !slices.Contains(m.rec.Finalizers, Finalizer) && st.Phase != jkev1alpha1.FailoverCompleted {
		// A record made before the finalizer existed, or one an operator stripped.
		if err := m.updateFinalizers(ctx, append(slices.Clone(m.rec.Finalizers), Finalizer)); err != nil {
			return 0, err
		}
	}
	if st.Phase == jkev1alpha1.FailoverCompleted {
		return 0, m.restartIfFailedAgain(ctx)
	}
	if m.paused() {
		if m.became(jkev1alpha1.NodeFailoverConditionPaused, metav1.ConditionTrue, ReasonPaused) {
			m.c.recorder.Eventf(m.rec, corev1.EventTypeNormal, ReasonPaused, "paused by the annotation %s", jkev1alpha1.AnnotationFailoverPaused)
		}
		m.setCondition(jkev1alpha1.NodeFailoverConditionPaused, metav1.ConditionTrue, ReasonPaused, "annotation "+jkev1alpha1.AnnotationFailoverPaused+" is \"true\" on the record or the node: nothing is written")
		return 0, nil
	}
	m.setCondition(jkev1alpha1.NodeFailoverConditionPaused, metav1.ConditionFalse, ReasonNotPaused, "")

	if done, err := m.handOverToAllocator(ctx); done || err != nil {
		return 0, err
	}
	if !m.committed() {
		done, requeue, err := m.beforeMoving(ctx)
		if !done || err != nil {
			return requeue, err
		}
	}
	return m.afterCommit(ctx)
}
