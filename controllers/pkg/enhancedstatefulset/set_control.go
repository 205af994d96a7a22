package enhancedstatefulset

// The set's side of a sync (upstream's stateful_set_control.go): which pods and
// ControllerRevisions the set owns, its current and update revisions, the history it keeps,
// and the concurrent execution of a plan's actions through the pod control.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kcontroller "k8s.io/kubernetes/pkg/controller"
	"k8s.io/kubernetes/pkg/controller/history"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/apis/ordinal"
	"github.com/staticip/staticip/controllers/pkg/metrics"
	"github.com/staticip/staticip/controllers/pkg/staticip"
)

// claimPods returns the set's pods like the StatefulSet controller's getPodsForStatefulSet:
// the ControllerRefManager adopts orphans that match the selector and carry a pod name of the
// set (after re-reading the set from the API server, so a set being deleted adopts nothing),
// and releases owned pods that no longer match.
func (c *Controller) claimPods(ctx context.Context, set *jkev1alpha1.EnhancedStatefulSet, selector labels.Selector) ([]*corev1.Pod, error) {
	all, err := c.podLister.Pods(set.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	canAdopt := kcontroller.RecheckDeletionTimestamp(func(ctx context.Context) (metav1.Object, error) {
		fresh, err := c.client.JkeV1alpha1().EnhancedStatefulSets(set.Namespace).Get(ctx, set.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if fresh.UID != set.UID {
			return nil, fmt.Errorf("original EnhancedStatefulSet %s/%s is gone: got uid %v, wanted %v", set.Namespace, set.Name, fresh.UID, set.UID)
		}
		return fresh, nil
	})
	cm := kcontroller.NewPodControllerRefManager(c.podControl, set, selector, controllerKind, canAdopt)
	return cm.ClaimPods(ctx, all, func(pod *corev1.Pod) bool { return ordinal.Of(set.Name, pod.Name) >= 0 })
}

// selectorOf is the set's selector, or false (with a Warning Event) when it is empty, invalid
// or does not select the set's own template.
func (c *Controller) selectorOf(set *jkev1alpha1.EnhancedStatefulSet) (labels.Selector, bool) {
	selector, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
	if err != nil || selector.Empty() {
		c.recorder.Eventf(set, corev1.EventTypeWarning, "InvalidSelector", "spec.selector: %v", errOr(err, "must not be empty"))
		return nil, false
	}
	if !selector.Matches(labels.Set(set.Spec.Template.Labels)) {
		c.recorder.Event(set, corev1.EventTypeWarning, "InvalidSelector", "spec.selector does not match spec.template.metadata.labels")
		return nil, false
	}
	return selector, true
}

// setRevisions are the set's ControllerRevisions as one sync sees them.
type setRevisions struct {
	all             []*appsv1.ControllerRevision // owned, oldest first
	current, update *appsv1.ControllerRevision
	collisionCount  int32
	templates       map[string]*corev1.PodTemplateSpec // by revision name
}

// revisions lists (and adopts) the set's revisions, finds or creates the update revision and
// decodes their templates.
func (c *Controller) revisions(set *jkev1alpha1.EnhancedStatefulSet, selector labels.Selector) (*setRevisions, error) {
	all, err := c.ownedRevisions(set, selector)
	if err != nil {
		return nil, err
	}
	r := &setRevisions{all: all, templates: map[string]*corev1.PodTemplateSpec{}}
	r.current, r.update, r.collisionCount, err = c.getRevisions(set, all)
	if err != nil {
		c.recorder.Eventf(set, corev1.EventTypeWarning, "FailedRevision", "creating ControllerRevision: %v", err)
		return nil, err
	}
	for _, rev := range append(all, r.update) {
		if t, err := TemplateOf(rev); err == nil {
			r.templates[rev.Name] = t
		}
	}
	return r, nil
}

// ownedRevisions lists the set's ControllerRevisions and adopts orphans that match, as the
// StatefulSet controller does.
func (c *Controller) ownedRevisions(set *jkev1alpha1.EnhancedStatefulSet, selector labels.Selector) ([]*appsv1.ControllerRevision, error) {
	revs, err := c.history.ListControllerRevisions(set, controllerKind, selector)
	if err != nil {
		return nil, err
	}
	var out []*appsv1.ControllerRevision
	for _, r := range revs {
		if metav1.GetControllerOf(r) == nil {
			adopted, err := c.history.AdoptControllerRevision(set, controllerKind, r)
			if err != nil {
				continue
			}
			r = adopted
		}
		out = append(out, r)
	}
	history.SortControllerRevisions(out)
	return out, nil
}

// getRevisions is the StatefulSet controller's getStatefulSetRevisions: the update revision is
// the revision equal to the current template (re-used, and renumbered when it is an older
// one — that is how a rollback re-uses the old revision name); the current revision is
// status.currentRevision, or the update revision on the first sync.
func (c *Controller) getRevisions(set *jkev1alpha1.EnhancedStatefulSet, revisions []*appsv1.ControllerRevision) (current, update *appsv1.ControllerRevision, collisionCount int32, err error) {
	if set.Status.CollisionCount != nil {
		collisionCount = *set.Status.CollisionCount
	}
	update, err = newRevision(set, nextRevision(revisions), &collisionCount)
	if err != nil {
		return nil, nil, collisionCount, err
	}
	equal := history.FindEqualRevisions(revisions, update)
	switch n := len(equal); {
	case n > 0 && history.EqualRevision(revisions[len(revisions)-1], equal[n-1]):
		update = revisions[len(revisions)-1]
	case n > 0:
		update, err = c.history.UpdateControllerRevision(equal[n-1], update.Revision)
	default:
		update, err = c.history.CreateControllerRevision(set, update, &collisionCount)
	}
	if err != nil {
		return nil, nil, collisionCount, err
	}
	for _, r := range revisions {
		if r.Name == set.Status.CurrentRevision {
			current = r
		}
	}
	if current == nil {
		current = update
	}
	return current, update, collisionCount, nil
}

// truncateHistory deletes the oldest revisions beyond revisionHistoryLimit that no pod, and
// neither the current nor the update revision, uses.
func (c *Controller) truncateHistory(set *jkev1alpha1.EnhancedStatefulSet, pods []*corev1.Pod, revs *setRevisions) error {
	live := map[string]bool{revs.current.Name: true, revs.update.Name: true}
	for _, p := range pods {
		live[PodRevision(p)] = true
	}
	var history []*appsv1.ControllerRevision
	for _, r := range revs.all {
		if !live[r.Name] {
			history = append(history, r)
		}
	}
	limit := 10
	if set.Spec.RevisionHistoryLimit != nil {
		limit = int(*set.Spec.RevisionHistoryLimit)
	}
	for i := 0; i < len(history)-limit; i++ {
		if err := c.history.DeleteControllerRevision(history[i]); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// execute carries out the plan. Creations and deletions of one plan are independent, so they
// run concurrently: a batch of maxUnavailable pods starts at once.
func (c *Controller) execute(ctx context.Context, set *jkev1alpha1.EnhancedStatefulSet, plan *Plan, pods []*corev1.Pod, templates map[string]*corev1.PodTemplateSpec) (executed, error) {
	byName := map[string]*corev1.Pod{}
	for _, p := range pods {
		byName[p.Name] = p
	}
	var (
		mu        sync.Mutex
		errs      []error
		conflicts []string
		failures  []string
		wg        sync.WaitGroup
	)
	for _, a := range plan.Actions {
		wg.Go(func() {
			var err error
			switch a.Type {
			case ActionCreate:
				err = c.createPod(ctx, set, a, templates[a.Revision])
				var conflict *staticip.ConflictError
				if errors.As(err, &conflict) {
					mu.Lock()
					conflicts = append(conflicts, conflict.Error())
					mu.Unlock()
				}
				var failed *createError
				if errors.As(err, &failed) {
					mu.Lock()
					failures = append(failures, failed.Error())
					mu.Unlock()
				}
			case ActionDelete:
				err = c.deletePod(ctx, set, byName[a.Pod], a.Reason)
			case ActionInPlaceUpdate:
				err = c.updateInPlace(ctx, set, byName[a.Pod], a)
			case ActionInPlaceReady:
				err = c.finishInPlace(ctx, set, byName[a.Pod])
			}
			metrics.PodActions.WithLabelValues(string(a.Type), string(a.Reason), resultOf(err)).Inc()
			var conflict *staticip.ConflictError
			if errors.As(err, &conflict) {
				return // reported in the StaticIPConflict condition; retried on the slow requeue
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Go(func() { c.preclaimStaticIPs(ctx, set, plan.Terminating) })
	wg.Wait()
	sort.Strings(conflicts)
	sort.Strings(failures)
	return executed{conflicts: conflicts, createFailures: failures}, errors.Join(errs...)
}

// executed is what a plan's execution reports for status: StaticIP conflicts and pod
// creations a human must look at.
type executed struct {
	conflicts, createFailures []string
}
