package enhancedstatefulset

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/apis/ordinal"
)

// TestClaimOwners walks the retention policies of upstream's isClaimOwnerUpToDate table: which
// controller a claim wants, that a stale or foreign controller is respected, and that
// withClaimOwners makes an out-of-date claim up to date.
func TestClaimOwners(t *testing.T) {
	const retain, del = appsv1.RetainPersistentVolumeClaimRetentionPolicyType, appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	setWith := func(whenDeleted, whenScaled appsv1.PersistentVolumeClaimRetentionPolicyType) *jkev1alpha1.EnhancedStatefulSet {
		s := &jkev1alpha1.EnhancedStatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "set-uid"}}
		s.Spec.Replicas = new(int32(2))
		s.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: whenDeleted, WhenScaled: whenScaled}
		return s
	}
	pod := func(ord string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-" + ord, UID: types.UID("pod-uid-" + ord)}}
	}
	setRef := *metav1.NewControllerRef(setWith(retain, retain), controllerKind)
	staleSetRef := setRef
	staleSetRef.UID = "old-set-uid"
	plainSetRef := setRef
	plainSetRef.Controller = nil
	foreign := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: "sts-uid", Controller: new(true)}
	for _, tc := range []struct {
		name                     string
		whenDeleted, whenScaled  appsv1.PersistentVolumeClaimRetentionPolicyType
		ordinal                  string
		refs                     []metav1.OwnerReference
		upToDate                 bool
		wantSetCtrl, wantPodCtrl bool
	}{
		{"retain/retain, none", retain, retain, "0", nil, true, false, false},
		{"retain/retain, set ref removed", retain, retain, "0", []metav1.OwnerReference{setRef}, false, false, false},
		{"whenDeleted Delete adds the set", del, retain, "0", nil, false, true, false},
		{"non-controller set ref becomes controller", del, retain, "0", []metav1.OwnerReference{plainSetRef}, false, true, false},
		{"whenScaled Delete, in range: nothing", retain, del, "1", nil, true, false, false},
		{"whenScaled Delete, scaled down: the pod", retain, del, "2", nil, false, false, true},
		{"both Delete, scaled down: pod replaces set", del, del, "2", []metav1.OwnerReference{setRef}, false, false, true},
		{"both Delete, in range: set", del, del, "1", nil, false, true, false},
		{"stale set ref is left alone", del, del, "1", []metav1.OwnerReference{staleSetRef}, true, false, false},
		{"foreign controller, no ref of ours: left alone", del, retain, "0", []metav1.OwnerReference{foreign}, true, false, false},
		{"foreign controller: our ref goes", del, retain, "0", []metav1.OwnerReference{foreign, plainSetRef}, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set, p := setWith(tc.whenDeleted, tc.whenScaled), pod(tc.ordinal)
			ord := ordinal.Of("web", p.Name)
			claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data-" + p.Name, OwnerReferences: tc.refs}}
			if got := claimOwnersUpToDate(claim, set, p, ord); got != tc.upToDate {
				t.Fatalf("claimOwnersUpToDate = %v, want %v", got, tc.upToDate)
			}
			if tc.upToDate {
				return
			}
			claim.OwnerReferences = withClaimOwners(claim, set, p, ord)
			if !claimOwnersUpToDate(claim, set, p, ord) {
				t.Errorf("not up to date after withClaimOwners: %+v", claim.OwnerReferences)
			}
			ctrl := metav1.GetControllerOf(claim)
			gotSet := ctrl != nil && ctrl.UID == set.UID
			gotPod := ctrl != nil && ctrl.UID == p.UID
			if gotSet != tc.wantSetCtrl || gotPod != tc.wantPodCtrl {
				t.Errorf("controller %+v: want set %v pod %v", ctrl, tc.wantSetCtrl, tc.wantPodCtrl)
			}
			if tc.refs != nil && tc.refs[0].UID == foreign.UID && (len(claim.OwnerReferences) != 1 || claim.OwnerReferences[0].UID != foreign.UID) {
				t.Errorf("foreign controller not kept alone: %+v", claim.OwnerReferences)
			}
		})
	}
}
