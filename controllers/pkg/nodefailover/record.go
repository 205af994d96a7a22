package nodefailover

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/metrics"
)

// deleting handles a record whose deletion was requested. Before the first range write nothing
// moved: the claim is released and the record goes (done). A Completed record goes too. In
// between, ranges are half-moved and only this record knows from where: the deletion is held
// (finalizer) and the migration goes on; the record goes once Completed (see sync). An
// operator who really wants it gone removes the finalizer by hand and finishes the moves.
func (m *migration) deleting(ctx context.Context) (done bool, err error) {
	if !slices.Contains(m.rec.Finalizers, Finalizer) {
		m.deleted = true // someone removed the finalizer: the API server deletes it
		return true, nil
	}
	if m.st().Phase == jkev1alpha1.FailoverCompleted {
		return true, m.deleteRecord(ctx, "its migration completed")
	}
	if !m.committed() {
		if err := m.releaseClaim(ctx); err != nil {
			return true, err
		}
		return true, m.deleteRecord(ctx, "nothing had moved yet")
	}
	msg := fmt.Sprintf("deletion requested while %d IP ranges are half-moved to %s: held (finalizer %s) until the migration completes; the record goes then",
		len(m.st().MovedRanges), m.st().Target, Finalizer)
	if !meta.IsStatusConditionTrue(m.orig.Conditions, jkev1alpha1.NodeFailoverConditionDeleting) {
		m.c.recorder.Event(m.rec, corev1.EventTypeWarning, ReasonDeletionHeld, msg)
		if m.node != nil {
			m.c.recorder.Event(m.node, corev1.EventTypeWarning, ReasonDeletionHeld, msg)
		}
		m.logger.Info("NodeFailover deletion held until the migration completes", "movedRanges", len(m.st().MovedRanges))
	}
	m.setCondition(jkev1alpha1.NodeFailoverConditionDeleting, metav1.ConditionTrue, ReasonDeletionHeld, msg)
	return false, nil
}

// updateFinalizers writes the record's finalizers (optimistic lock on its resourceVersion).
func (m *migration) updateFinalizers(ctx context.Context, finalizers []string) error {
	rec := m.rec.DeepCopy()
	rec.Finalizers = finalizers
	updated, err := m.c.client.JkeV1alpha1().NodeFailovers().Update(ctx, rec, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	m.c.recordWrites.Remember(updated.Name, updated)
	m.rec.Finalizers, m.rec.ResourceVersion = updated.Finalizers, updated.ResourceVersion
	return nil
}

func withoutFinalizer(fs []string) []string {
	return slices.DeleteFunc(slices.Clone(fs), func(f string) bool { return f == Finalizer })
}

// deleteRecord removes the record: its finalizer first, then the object (UID precondition).
func (m *migration) deleteRecord(ctx context.Context, why string) error {
	if slices.Contains(m.rec.Finalizers, Finalizer) {
		err := m.updateFinalizers(ctx, withoutFinalizer(m.rec.Finalizers))
		if apierrors.IsNotFound(err) {
			m.deleted = true
			return nil
		}
		if err != nil {
			return err
		}
	}
	m.deleted = true
	if m.rec.DeletionTimestamp != nil {
		// The deletion was requested: without the finalizer the API server completes it.
		m.c.recorder.Eventf(m.rec, corev1.EventTypeNormal, ReasonDeleted, "record deleted: %s", why)
		m.logger.Info("NodeFailover record deleted", "reason", why)
		return nil
	}
	uid := m.rec.UID
	err := m.c.client.JkeV1alpha1().NodeFailovers().Delete(ctx, m.rec.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	m.c.recordWrites.Forget(m.rec.Name)
	return nil
}

// cancel undoes a migration that moved nothing because the node is no longer fenced (the taint
// was removed): the spare's claim is released and the record deleted.
func (m *migration) cancel(ctx context.Context, why string) error {
	if err := m.releaseClaim(ctx); err != nil {
		return err
	}
	if err := m.deleteRecord(ctx, "cancelled: "+why); err != nil {
		return err
	}
	msg := "failover cancelled before anything moved: " + why
	if m.node != nil {
		m.c.recorder.Event(m.node, corev1.EventTypeNormal, ReasonCancelled, msg)
	}
	metrics.NodeFailoverMigrations.WithLabelValues("cancelled").Inc()
	m.logger.Info("Node failover cancelled", "reason", why)
	return nil
}

// restartIfFailedAgain: a Completed record whose node fails again (it owns ranges or static IPs
// and is fenced once more) is deleted, so the next sync starts a new migration.
func (m *migration) restartIfFailedAgain(ctx context.Context) error {
	if m.node != nil && !jkev1alpha1.NodeOutOfService(m.node) {
		return nil
	}
	sips, err := m.c.staticIPsOf(m.failedName(), prefixesOf(m.owned))
	if err != nil {
		return err
	}
	if len(m.owned) == 0 && len(sips) == 0 {
		return nil
	}
	if m.node == nil {
		// The Node is gone and its labels were forgotten: the new record takes them from this one.
		m.c.gone.put(m.failedName(), map[string]string{LabelZone: m.st().Zone, LabelInstanceType: m.st().InstanceType})
	}
	if err := m.deleteRecord(ctx, "the node failed again; a new migration starts"); err != nil {
		return err
	}
	m.logger.Info("Node failed again after a completed failover; starting a new one")
	m.c.queue.Add(m.rec.Name)
	return nil
}
