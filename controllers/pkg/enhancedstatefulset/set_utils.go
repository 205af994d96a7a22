package enhancedstatefulset

// Small helpers over an EnhancedStatefulSet's spec and names, shared by the control files
// (upstream's stateful_set_utils.go).

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/apis/ordinal"
)

// errOr is err's text, or msg when err is nil.
func errOr(err error, msg string) string {
	if err != nil {
		return err.Error()
	}
	return msg
}

// resultOf is the result label of the pod action metric.
func resultOf(err error) string {
	if err != nil {
		return "error"
	}
	return "success"
}

// describeOwner says who controls pod, for a FailedCreate message.
func describeOwner(pod *corev1.Pod) string {
	if pod == nil {
		return "unknown"
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		return fmt.Sprintf("controlled by %s %s", ref.Kind, ref.Name)
	}
	return "no controller, labels " + labels.Set(pod.Labels).String()
}

// ClaimName is the PVC of claim template claim for ordinal n: {claim}-{set}-{n}.
func ClaimName(set *jkev1alpha1.EnhancedStatefulSet, claim string, n int) string {
	return ordinal.Name(claim+"-"+set.Name, n)
}

// pvcRetention is spec.persistentVolumeClaimRetentionPolicy with the API's defaults (Retain).
func pvcRetention(set *jkev1alpha1.EnhancedStatefulSet) appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy {
	p := appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType, WhenScaled: appsv1.RetainPersistentVolumeClaimRetentionPolicyType}
	if r := set.Spec.PersistentVolumeClaimRetentionPolicy; r != nil {
		if r.WhenDeleted != "" {
			p.WhenDeleted = r.WhenDeleted
		}
		if r.WhenScaled != "" {
			p.WhenScaled = r.WhenScaled
		}
	}
	return p
}

func podsOfSetKey(namespace, setName string) string { return "pods-of/" + namespace + "/" + setName }

// replicasOf is spec.replicas, 1 when unset (the API default).
func replicasOf(set *jkev1alpha1.EnhancedStatefulSet) int {
	if set.Spec.Replicas == nil {
		return 1
	}
	return int(*set.Spec.Replicas)
}

// setKey is the work queue key of set, the key of its own-writes overlay.
func setKey(set *jkev1alpha1.EnhancedStatefulSet) string { return set.Namespace + "/" + set.Name }
