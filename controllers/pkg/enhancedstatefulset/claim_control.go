package enhancedstatefulset

// PersistentVolumeClaim writes: a pod's claims before the pod, owner references as the
// retention policy wants (claims.go decides them), and the claims of scaled-down ordinals.

import (
	"context"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/apis/ordinal"
)

// ensureClaims creates the missing PVCs of an ordinal, with the owner references the retention
// policy wants. Like upstream, a PVC that is going away is never used: one that is terminating,
// or that a deleted pod controls (the garbage collector deletes it with that pod, upstream's
// PodClaimIsStale). The pod waits (errClaimGoing) until it is gone, then a new one is created.
// livePod is the ordinal's pod if it exists.
func (c *Controller) ensureClaims(ctx context.Context, set *jkev1alpha1.EnhancedStatefulSet, ordinal int, livePod *corev1.Pod) error {
	live := map[string]bool{}
	if livePod != nil {
		live[string(livePod.UID)] = true
	}
	for _, tmpl := range set.Spec.VolumeClaimTemplates {
		name := ClaimName(set, tmpl.Name, ordinal)
		if existing, err := c.pvcLister.PersistentVolumeClaims(set.Namespace).Get(name); err == nil {
			if existing.DeletionTimestamp != nil || claimOfGonePod(existing, live) {
				return fmt.Errorf("%w: %s", errClaimGoing, name)
			}
			continue
		}
		claim := tmpl.DeepCopy()
		claim.ObjectMeta = metav1.ObjectMeta{Name: name, Namespace: set.Namespace, Labels: map[string]string{}, Annotations: tmpl.Annotations}
		for k, v := range set.Spec.Selector.MatchLabels {
			claim.Labels[k] = v
		}
		for k, v := range tmpl.Labels {
			claim.Labels[k] = v
		}
		claim.OwnerReferences = withClaimOwners(claim, set, livePod, ordinal)
		if _, err := c.kubeClient.CoreV1().PersistentVolumeClaims(set.Namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// errClaimGoing: a pod waits for its PVC to finish going away before a new one is made.
var errClaimGoing = errors.New("PersistentVolumeClaim is being deleted (terminating, or controlled by a deleted pod); the pod waits for it to go")

// ensurePendingPodClaims recreates the missing PVCs of pods that are not scheduled yet (a PVC
// deleted under a Pending pod would keep it Pending forever), as upstream's processReplica.
func (c *Controller) ensurePendingPodClaims(ctx context.Context, set *jkev1alpha1.EnhancedStatefulSet, pods []*corev1.Pod) error {
	if len(set.Spec.VolumeClaimTemplates) == 0 {
		return nil
	}
	var errs []error
	for _, pod := range pods {
		if pod.Status.Phase == corev1.PodPending && pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil {
			if ord := ordinal.Of(set.Name, pod.Name); ord >= 0 {
				if err := c.ensureClaims(ctx, set, ord, pod); err != nil && !errors.Is(err, errClaimGoing) {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// reconcileClaimOwners gives the existing claims of the set's pods the owner references the
// retention policy wants (upstream's UpdatePodClaimForRetentionPolicy), so a policy change
// applies to claims made before it and a scaled-down pod controls its claims before it is
// deleted (whenScaled: Delete).
func (c *Controller) reconcileClaimOwners(ctx context.Context, set *jkev1alpha1.EnhancedStatefulSet, pods []*corev1.Pod) error {
	var errs []error
	for _, pod := range pods {
		ord := ordinal.Of(set.Name, pod.Name)
		if ord < 0 {
			continue
		}
		for _, tmpl := range set.Spec.VolumeClaimTemplates {
			claim, err := c.pvcLister.PersistentVolumeClaims(set.Namespace).Get(ClaimName(set, tmpl.Name, ord))
			if err != nil || claim.DeletionTimestamp != nil || claimOwnersUpToDate(claim, set, pod, ord) {
				continue // a missing claim is created (or waited for) with the pod
			}
			if hasOtherController(claim, set, pod) {
				c.recorder.Eventf(set, corev1.EventTypeWarning, "ConflictingController",
					"PersistentVolumeClaim %s is controlled by %s %s: the retention policy is ignored for it", claim.Name, metav1.GetControllerOf(claim).Kind, metav1.GetControllerOf(claim).Name)
			}
			claim = claim.DeepCopy()
			claim.OwnerReferences = withClaimOwners(claim, set, pod, ord)
			if _, err := c.kubeClient.CoreV1().PersistentVolumeClaims(set.Namespace).Update(ctx, claim, metav1.UpdateOptions{}); err != nil {
				if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
					c.recorder.Eventf(set, corev1.EventTypeWarning, "FailedUpdateClaim", "owner references of PersistentVolumeClaim %s for pod %s: %v", claim.Name, pod.Name, err)
				}
				errs = append(errs, fmt.Errorf("update owner references of PersistentVolumeClaim %s: %w", claim.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// claimsByControllerIndex indexes PersistentVolumeClaims by their controller: its UID, and for a
// pod controller also podsOfSetKey of the set the pod's name says it belongs to (a set's pod is
// {set}-{ordinal}), so the claims handed to scaled-down pods are found after the pods are gone.
const claimsByControllerIndex = "staticip.enhancedstatefulset/claims-by-controller"

func addClaimsByControllerIndex(informer cache.SharedIndexInformer) error {
	if _, ok := informer.GetIndexer().GetIndexers()[claimsByControllerIndex]; ok {
		return nil
	}
	return informer.AddIndexers(cache.Indexers{claimsByControllerIndex: func(obj any) ([]string, error) {
		claim, ok := obj.(*corev1.PersistentVolumeClaim)
		if !ok {
			return nil, nil
		}
		ref := metav1.GetControllerOf(claim)
		if ref == nil {
			return nil, nil
		}
		keys := []string{string(ref.UID)}
		if parent, _, ok := ordinal.Parse(ref.Name); ok && ref.Kind == podKind.Kind && ref.APIVersion == "v1" {
			keys = append(keys, podsOfSetKey(claim.Namespace, parent))
		}
		return keys, nil
	}})
}

// deleteScaledPVCs, when persistentVolumeClaimRetentionPolicy.whenScaled is Delete, deletes the
// claims of the set that are found by their controller, never by name alone (a claim the set
// does not control is never deleted):
//   - claims this set controls whose ordinal is scaled down and whose pod is gone (a pod that
//     went before its claims were handed to it);
//   - claims controlled by a pod of this set that is gone. Those are the claims handed to
//     scaled-down pods: the garbage collector deletes them too, this only does not wait for it
//     (a scaled-up pod waits for such a claim to go, errClaimGoing).
func (c *Controller) deleteScaledPVCs(ctx context.Context, set *jkev1alpha1.EnhancedStatefulSet, pods []*corev1.Pod) error {
	if len(set.Spec.VolumeClaimTemplates) == 0 || pvcRetention(set).WhenScaled != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
		return nil
	}
	present := map[int]bool{}
	live := map[types.UID]bool{}
	for _, p := range pods {
		present[ordinal.Of(set.Name, p.Name)] = true
		live[p.UID] = true
	}
	ofSet, err := c.pvcIndexer.ByIndex(claimsByControllerIndex, string(set.UID))
	if err != nil {
		return err
	}
	ofPods, err := c.pvcIndexer.ByIndex(claimsByControllerIndex, podsOfSetKey(set.Namespace, set.Name))
	if err != nil {
		return err
	}
	var errs []error
	for _, obj := range append(ofSet, ofPods...) {
		claim := obj.(*corev1.PersistentVolumeClaim)
		ref := metav1.GetControllerOf(claim)
		if claim.Namespace != set.Namespace || claim.DeletionTimestamp != nil || ref == nil {
			continue
		}
		ord := -1
		for _, tmpl := range set.Spec.VolumeClaimTemplates {
			if o := ordinal.Of(tmpl.Name+"-"+set.Name, claim.Name); o >= 0 {
				ord = o
			}
		}
		if ord < 0 {
			continue
		}
		switch {
		case ref.UID == set.UID:
			if ord < replicasOf(set) || present[ord] {
				continue
			}
		case ref.Kind == podKind.Kind && ref.Name == PodName(set.Name, ord):
			if live[ref.UID] {
				continue
			}
		default:
			continue
		}
		err := c.kubeClient.CoreV1().PersistentVolumeClaims(set.Namespace).Delete(ctx, claim.Name,
			metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &claim.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
