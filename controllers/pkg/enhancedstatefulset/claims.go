package enhancedstatefulset

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
)

// The owner references of a set's PVCs follow persistentVolumeClaimRetentionPolicy exactly as
// the StatefulSet controller's do (isClaimOwnerUpToDate / updateClaimOwnerRefForSetAndPod in
// k8s.io/kubernetes/pkg/controller/statefulset/stateful_set_utils.go):
//
//	whenScaled Retain, whenDeleted Retain: no owner reference of the set or the pod
//	whenScaled Retain, whenDeleted Delete: the set is the controller
//	whenScaled Delete, whenDeleted Retain: the pod is the controller once it is scaled down
//	whenScaled Delete, whenDeleted Delete: the set while the pod is in range, then the pod
//
// so the garbage collector deletes a claim with its set or with its scaled-down pod, and a
// claim someone else controls is never touched.

var podKind = corev1.SchemeGroupVersion.WithKind("Pod")

// claimOwnersWant says which of set and pod should control a claim of pod's ordinal.
func claimOwnersWant(set *jkev1alpha1.EnhancedStatefulSet, ordinal int) (wantSet, wantPod bool) {
	policy := pvcRetention(set)
	scaledDown := ordinal >= replicasOf(set)
	if policy.WhenScaled == appsv1.DeletePersistentVolumeClaimRetentionPolicyType && scaledDown {
		return false, true
	}
	return policy.WhenDeleted == appsv1.DeletePersistentVolumeClaimRetentionPolicyType, false
}

func matchesRef(ref *metav1.OwnerReference, obj metav1.Object, gvk schema.GroupVersionKind) bool {
	return obj != nil && ref.APIVersion == gvk.GroupVersion().String() && ref.Kind == gvk.Kind && ref.Name == obj.GetName()
}

// claimOwnersUpToDate reports whether claim's owner references are what the policy wants for
// the pod of ordinal (pod may be nil: not created yet). A claim with a reference to an earlier
// set or pod of the same name (a UID that is not theirs), or controlled by something else, is
// left as it is, as upstream does; references of the set or pod that are not controller
// references are fixed.
func claimOwnersUpToDate(claim *corev1.PersistentVolumeClaim, set *jkev1alpha1.EnhancedStatefulSet, pod *corev1.Pod, ordinal int) bool {
	hasSet, hasPod := false, false
	for i := range claim.OwnerReferences {
		ref := &claim.OwnerReferences[i]
		isController := ref.Controller != nil && *ref.Controller
		switch {
		case matchesRef(ref, set, controllerKind):
			if ref.UID != set.UID {
				return true // stale: not ours to change
			}
			if !isController {
				return false
			}
			hasSet = true
		case matchesRef(ref, pod, podKind):
			if ref.UID != pod.UID {
				return true
			}
			if !isController {
				return false
			}
			hasPod = true
		case isController:
			// Another controller: ours must go (it cannot be a second controller); with no
			// reference of ours there is nothing to do.
			return !hasSetOrPodRef(claim, set, pod)
		}
	}
	wantSet, wantPod := claimOwnersWant(set, ordinal)
	return hasSet == wantSet && hasPod == (wantPod && pod != nil)
}

func hasSetOrPodRef(claim *corev1.PersistentVolumeClaim, set *jkev1alpha1.EnhancedStatefulSet, pod *corev1.Pod) bool {
	for i := range claim.OwnerReferences {
		if matchesRef(&claim.OwnerReferences[i], set, controllerKind) || matchesRef(&claim.OwnerReferences[i], pod, podKind) {
			return true
		}
	}
	return false
}

// hasOtherController: claim is controlled by something other than set and pod.
func hasOtherController(claim *corev1.PersistentVolumeClaim, set *jkev1alpha1.EnhancedStatefulSet, pod *corev1.Pod) bool {
	for i := range claim.OwnerReferences {
		ref := &claim.OwnerReferences[i]
		if ref.Controller != nil && *ref.Controller && !matchesRef(ref, set, controllerKind) && !matchesRef(ref, pod, podKind) {
			return true
		}
	}
	return false
}

// withClaimOwners returns the owner references claim should have (call it only when
// claimOwnersUpToDate is false): the set's and the pod's references are scrubbed, then the
// policy's controller is added unless something else controls the claim.
func withClaimOwners(claim *corev1.PersistentVolumeClaim, set *jkev1alpha1.EnhancedStatefulSet, pod *corev1.Pod, ordinal int) []metav1.OwnerReference {
	other := hasOtherController(claim, set, pod)
	refs := []metav1.OwnerReference{}
	for _, ref := range claim.OwnerReferences {
		if !matchesRef(&ref, set, controllerKind) && !matchesRef(&ref, pod, podKind) {
			refs = append(refs, ref)
		}
	}
	if other {
		return refs
	}
	wantSet, wantPod := claimOwnersWant(set, ordinal)
	if wantSet {
		refs = append(refs, *metav1.NewControllerRef(set, controllerKind))
	}
	if wantPod && pod != nil {
		refs = append(refs, *metav1.NewControllerRef(pod, podKind))
	}
	return refs
}

// claimOfGonePod: claim is controlled by a pod that is not live (not in pods with that UID).
// Such a claim goes with that pod (the garbage collector deletes it); a new pod must not start
// on it, so it waits, as upstream's PodClaimIsStale.
func claimOfGonePod(claim *corev1.PersistentVolumeClaim, livePodUIDs map[string]bool) bool {
	ref := metav1.GetControllerOf(claim)
	return ref != nil && ref.APIVersion == "v1" && ref.Kind == podKind.Kind && !livePodUIDs[string(ref.UID)]
}
