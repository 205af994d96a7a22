package integration

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	ests "github.com/staticip/staticip/controllers/pkg/enhancedstatefulset"
)

func withClaim(s *jkev1alpha1.EnhancedStatefulSet) {
	s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
	s.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}}
}

// TestClaimsLikeUpstream: a PVC that is terminating is never reused (the pod waits, then a new
// PVC is made), and a Pending pod whose PVC went missing gets it back, as the StatefulSet
// controller does.
func TestClaimsLikeUpstream(t *testing.T) {
	f := newFixture(t)
	f.startKubelet("", 100*time.Millisecond, nil)
	f.startManager(ests.Name)

	held := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data-pv-1", Finalizers: []string{"test.staticip/hold"}},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	held, err := f.kube.CoreV1().PersistentVolumeClaims(f.ns).Create(f.ctx, held, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.kube.CoreV1().PersistentVolumeClaims(f.ns).Delete(f.ctx, held.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.createSet(newSet("pv", 2, withClaim))
	f.eventually(time.Minute, "pv-0 running", func() (bool, error) {
		p := f.pods()["pv-0"]
		return p != nil && p.Status.Phase == corev1.PodRunning, nil
	})
	time.Sleep(2 * time.Second) // several syncs
	if p := f.pods()["pv-1"]; p != nil {
		t.Fatalf("pv-1 created while its PVC data-pv-1 is terminating")
	}
	patch := `{"metadata":{"finalizers":null}}`
	if _, err := f.kube.CoreV1().PersistentVolumeClaims(f.ns).Patch(f.ctx, held.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitSettled("pv", time.Minute)
	if c, err := f.kube.CoreV1().PersistentVolumeClaims(f.ns).Get(f.ctx, "data-pv-1", metav1.GetOptions{}); err != nil || c.UID == held.UID || c.DeletionTimestamp != nil {
		t.Errorf("data-pv-1 not recreated: %v %+v", err, c)
	}

	// A Pending pod (its image cannot be pulled, and here nothing schedules it) whose PVC is
	// deleted gets the PVC back.
	f.createSet(newSet("pvb", 1, withClaim, func(s *jkev1alpha1.EnhancedStatefulSet) { s.Spec.Template.Spec.Containers[0].Image = "app:broken" }))
	var first types.UID
	f.eventually(time.Minute, "pvb-0 Pending with its PVC", func() (bool, error) {
		p := f.pods()["pvb-0"]
		c, err := f.kube.CoreV1().PersistentVolumeClaims(f.ns).Get(f.ctx, "data-pvb-0", metav1.GetOptions{})
		if err == nil {
			first = c.UID
		}
		return p != nil && p.Status.Phase == corev1.PodPending && err == nil, nil
	})
	if err := f.kube.CoreV1().PersistentVolumeClaims(f.ns).Delete(f.ctx, "data-pvb-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server's StorageObjectInUseProtection put kubernetes.io/pvc-protection on it;
	// nothing here removes it, so do what its controller (or a forced removal) would.
	if _, err := f.kube.CoreV1().PersistentVolumeClaims(f.ns).Patch(f.ctx, "data-pvb-0", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	f.eventually(30*time.Second, "data-pvb-0 recreated for the Pending pod", func() (bool, error) {
		c, err := f.kube.CoreV1().PersistentVolumeClaims(f.ns).Get(f.ctx, "data-pvb-0", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && c.UID != first, err
	})
}

// controllerUID is the UID of claim's controller owner reference of kind, "" if none.
func controllerUID(claim *corev1.PersistentVolumeClaim, kind string) types.UID {
	if ref := metav1.GetControllerOf(claim); ref != nil && ref.Kind == kind {
		return ref.UID
	}
	return ""
}

// TestClaimOwnersFollowRetentionPolicy: like the StatefulSet controller
// (isClaimOwnerUpToDate / updateClaimOwnerRefForSetAndPod), changing
// persistentVolumeClaimRetentionPolicy reconciles the owner references of existing claims:
// whenDeleted=Delete makes the set their controller, Retain removes it, and with
// whenScaled=Delete a scaled-down pod becomes its claims' controller before it is deleted (so
// the garbage collector deletes them with it; the controller deletes them too once the pod is
// gone). A claim the set does not control is never deleted, even when its name looks like one
// of the set's.
func TestClaimOwnersFollowRetentionPolicy(t *testing.T) {
	f := newFixture(t)
	f.startKubelet("", 100*time.Millisecond, nil)
	f.startManager(ests.Name)

	// A user's claim that only looks like ordinal 5's (same name pattern, same labels).
	users := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data-pvo-5", Labels: map[string]string{"app": "pvo"}},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	users, err := f.kube.CoreV1().PersistentVolumeClaims(f.ns).Create(f.ctx, users, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	retain, del := appsv1.RetainPersistentVolumeClaimRetentionPolicyType, appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	policy := func(whenDeleted, whenScaled appsv1.PersistentVolumeClaimRetentionPolicyType) func(*jkev1alpha1.EnhancedStatefulSet) {
		return func(s *jkev1alpha1.EnhancedStatefulSet) {
			s.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: whenDeleted, WhenScaled: whenScaled}
		}
	}
	set := f.createSet(newSet("pvo", 2, withClaim, policy(retain, retain)))
	f.waitSettled("pvo", time.Minute)
	claim := func(name string) *corev1.PersistentVolumeClaim {
		c, err := f.kube.CoreV1().PersistentVolumeClaims(f.ns).Get(f.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("claim %s: %v", name, err)
		}
		return c
	}
	for _, name := range []string{"data-pvo-0", "data-pvo-1"} {
		if refs := claim(name).OwnerReferences; len(refs) != 0 {
			t.Fatalf("%s has owners under Retain/Retain: %+v", name, refs)
		}
	}

	f.updateSet("pvo", policy(del, retain))
	f.eventually(30*time.Second, "the set controls its claims after whenDeleted: Delete", func() (bool, error) {
		return controllerUID(claim("data-pvo-0"), "EnhancedStatefulSet") == set.UID &&
			controllerUID(claim("data-pvo-1"), "EnhancedStatefulSet") == set.UID, nil
	})

	f.updateSet("pvo", policy(retain, del))
	f.eventually(30*time.Second, "no owner on the claims after whenDeleted: Retain", func() (bool, error) {
		return len(claim("data-pvo-0").OwnerReferences) == 0 && len(claim("data-pvo-1").OwnerReferences) == 0, nil
	})

	scaled := f.pods()["pvo-1"]
	if scaled == nil {
		t.Fatal("pvo-1 missing")
	}
	f.updateSet("pvo", func(s *jkev1alpha1.EnhancedStatefulSet) { s.Spec.Replicas = new(int32(1)) })
	f.waitSettled("pvo", time.Minute)
	// The claim was handed to the scaled-down pod, then deleted once the pod was gone (the
	// controller does not wait for the garbage collector, which does not run here). The
	// API server's pvc-protection finalizer keeps it visible while terminating.
	f.eventually(30*time.Second, "data-pvo-1 deleted after its pod", func() (bool, error) {
		c := claim("data-pvo-1")
		return c.DeletionTimestamp != nil, nil
	})
	if got := controllerUID(claim("data-pvo-1"), "Pod"); got != scaled.UID {
		t.Errorf("data-pvo-1 controller pod UID %q, want the scaled-down pod's %q (whenScaled: Delete): %+v", got, scaled.UID, claim("data-pvo-1").OwnerReferences)
	}
	if refs := claim("data-pvo-0").OwnerReferences; len(refs) != 0 {
		t.Errorf("data-pvo-0 (in range) has owners under whenDeleted Retain: %+v", refs)
	}
	time.Sleep(2 * time.Second) // several syncs
	c, err := f.kube.CoreV1().PersistentVolumeClaims(f.ns).Get(f.ctx, users.Name, metav1.GetOptions{})
	if err != nil || c.UID != users.UID || c.DeletionTimestamp != nil {
		t.Errorf("the user's claim data-pvo-5, which the set does not control, was deleted: %v", errOr(err, c))
	}
}

func errOr(err error, c *corev1.PersistentVolumeClaim) any {
	if err != nil {
		return err
	}
	return c.ObjectMeta
}
