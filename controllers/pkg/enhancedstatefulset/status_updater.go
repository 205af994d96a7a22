package enhancedstatefulset

// The set's status (upstream's stateful_set_status_updater.go).

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/metrics"
)

// updateStatus writes the status nextStatus computes (when it changed) and records the Events
// it calls for. The written object is remembered by the own-writes overlay; a conflict requeues.
func (c *Controller) updateStatus(ctx context.Context, set *jkev1alpha1.EnhancedStatefulSet, plan *Plan, revs *setRevisions,
	selector labels.Selector, result executed) error {
	st, events := nextStatus(set, plan, revs, selector, result)
	for _, e := range events {
		c.recorder.Event(set, e.eventType, e.reason, e.message)
	}
	if apiequality.Semantic.DeepEqual(st, &set.Status) {
		return nil
	}
	upd := set.DeepCopy()
	upd.Status = *st
	written, err := c.client.JkeV1alpha1().EnhancedStatefulSets(set.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	metrics.ObserveStatusWrite(Name, err)
	key := setKey(set)
	if err == nil {
		c.writes.rememberStatus(key, written)
	}
	if apierrors.IsConflict(err) {
		c.queue.Add(key)
		return nil
	}
	return err
}

// statusEvent is an Event a status change calls for.
type statusEvent struct{ eventType, reason, message string }

// nextStatus is the observed status and conditions after a sync (pure), completing the rollout
// (current revision := update revision) once every replica runs the update revision and is
// ready; and the Events the change calls for.
func nextStatus(set *jkev1alpha1.EnhancedStatefulSet, plan *Plan, revs *setRevisions, selector labels.Selector,
	result executed) (*jkev1alpha1.EnhancedStatefulSetStatus, []statusEvent) {
	var events []statusEvent
	current, update, collisionCount := revs.current, revs.update, revs.collisionCount
	conflicts := result.conflicts
	replicas := int32(replicasOf(set))
	st := set.Status.DeepCopy()
	st.ObservedGeneration = set.Generation
	st.Replicas, st.ReadyReplicas, st.AvailableReplicas = plan.Replicas, plan.ReadyReplicas, plan.AvailableReplicas
	st.CurrentReplicas, st.UpdatedReplicas = plan.CurrentReplicas, plan.UpdatedReplicas
	st.CurrentRevision, st.UpdateRevision = current.Name, update.Name
	st.CollisionCount = &collisionCount
	st.LabelSelector = selector.String()
	if st.UpdatedReplicas == replicas && st.ReadyReplicas == replicas && st.Replicas == replicas {
		st.CurrentRevision, st.CurrentReplicas = update.Name, st.UpdatedReplicas
	}

	gen := set.Generation
	ru := set.Spec.UpdateStrategy.RollingUpdate
	paused := ru != nil && ru.Paused && set.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType
	if paused {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionPaused, Status: metav1.ConditionTrue, Reason: "Paused", Message: "updateStrategy.rollingUpdate.paused is true: no pod moves to a new revision", ObservedGeneration: gen})
	} else {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionPaused, Status: metav1.ConditionFalse, Reason: "NotPaused", ObservedGeneration: gen})
	}
	done := st.Replicas == replicas && st.ReadyReplicas == replicas && len(plan.Actions) == 0 && plan.Waiting == nil
	prev := meta.FindStatusCondition(set.Status.Conditions, ConditionProgressing)
	switch {
	case paused && !done:
		msg := "updateStrategy.rollingUpdate.paused is true"
		if plan.Waiting != nil {
			msg = plan.Waiting.Message
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionProgressing, Status: metav1.ConditionFalse, Reason: "Paused", Message: msg, ObservedGeneration: gen})
	case done:
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionProgressing, Status: metav1.ConditionFalse, Reason: "Settled",
			Message: fmt.Sprintf("%d/%d pods at revision %s", st.UpdatedReplicas, replicas, update.Name), ObservedGeneration: gen})
	case plan.Waiting != nil:
		// The message names the pods the rollout waits on and why: what a user needs to see when
		// a rollout does not move.
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionProgressing, Status: metav1.ConditionTrue, Reason: string(plan.Waiting.Reason),
			Message: plan.Waiting.Message, ObservedGeneration: gen})
		if plan.Waiting.Stuck && (prev == nil || prev.Reason != string(plan.Waiting.Reason) || prev.Message != plan.Waiting.Message) {
			events = append(events, statusEvent{corev1.EventTypeWarning, "RolloutWaiting", plan.Waiting.Message})
		}
	default:
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionProgressing, Status: metav1.ConditionTrue, Reason: "Updating",
			Message: fmt.Sprintf("%d/%d pods at revision %s, %d unavailable of budget %d", st.UpdatedReplicas, replicas, update.Name, plan.Unavailable, plan.MaxUnavailable), ObservedGeneration: gen})
	}
	if paused && plan.Waiting != nil && (prev == nil || prev.Reason != "Paused") {
		events = append(events, statusEvent{corev1.EventTypeNormal, "RolloutPaused", plan.Waiting.Message})
	}
	if st.AvailableReplicas >= replicas-int32(plan.MaxUnavailable) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionAvailable, Status: metav1.ConditionTrue, Reason: "MinimumReplicasAvailable", ObservedGeneration: gen})
	} else {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionAvailable, Status: metav1.ConditionFalse, Reason: "MinimumReplicasUnavailable",
			Message: fmt.Sprintf("%d available, %d required", st.AvailableReplicas, replicas-int32(plan.MaxUnavailable)), ObservedGeneration: gen})
	}
	if len(conflicts) > 0 {
		b, _ := json.Marshal(conflicts)
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionStaticIPConflict, Status: metav1.ConditionTrue, Reason: "StaticIPOwnedElsewhere", Message: string(b), ObservedGeneration: gen})
	} else if meta.FindStatusCondition(st.Conditions, ConditionStaticIPConflict) != nil && plan.Replicas == replicas {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionStaticIPConflict, Status: metav1.ConditionFalse, Reason: "NoConflict", ObservedGeneration: gen})
	}
	if len(result.createFailures) > 0 {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionReplicaFailure, Status: metav1.ConditionTrue, Reason: "FailedCreate",
			Message: strings.Join(result.createFailures, "; "), ObservedGeneration: gen})
	} else if meta.FindStatusCondition(st.Conditions, ConditionReplicaFailure) != nil && plan.Replicas >= replicas {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionReplicaFailure, Status: metav1.ConditionFalse, Reason: "AllCreated", ObservedGeneration: gen})
	}
	return st, events
}
