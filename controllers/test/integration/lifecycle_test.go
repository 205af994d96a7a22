package integration

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/apis/workloadref"
	ests "github.com/staticip/staticip/controllers/pkg/enhancedstatefulset"
)

// enableOnSetOnly is the published example's way: the enable annotation on the set, not on
// the pod template (so the pods do not carry it).
func enableOnSetOnly(s *jkev1alpha1.EnhancedStatefulSet) {
	enableStaticIP(s)
}

func ownerRefsTo(rec *jkev1.StaticIP, uid string) bool {
	for _, r := range rec.OwnerReferences {
		if string(r.UID) == uid {
			return true
		}
	}
	return false
}

// TestRetentionFollowsSpec: switching staticIPRetentionPolicy.whenDeleted reconciles the owner
// references of the records that already exist (Retain removes them, Delete adds them back),
// so deleting the set after a switch to Retain keeps records and IPs, and the set applied
// again gives the same pods the same IPs.
func TestRetentionFollowsSpec(t *testing.T) {
	f := newFixture(t)
	f.startKubelet("node-r", 100*time.Millisecond, nil)
	f.startManager()
	set := f.createSet(newSet("ret", 2, enableOnSetOnly))
	f.waitSettled("ret", time.Minute)
	ips := f.recordedIPs("ret", 2)
	for name := range ips {
		if rec, _ := f.staticIP(name); !ownerRefsTo(rec, string(set.UID)) {
			t.Fatalf("%s: whenDeleted Delete but no owner reference: %+v", name, rec.OwnerReferences)
		}
	}

	f.updateSet("ret", func(s *jkev1alpha1.EnhancedStatefulSet) {
		s.Spec.StaticIPRetentionPolicy = &jkev1.StaticIPRetentionPolicy{WhenDeleted: jkev1.RetainStaticIP, WhenScaled: jkev1.DeleteStaticIP}
	})
	f.eventually(30*time.Second, "owner references removed after the switch to Retain", func() (bool, error) {
		for name := range ips {
			rec, err := f.staticIP(name)
			if err != nil || len(rec.OwnerReferences) != 0 || rec.Spec.RetentionPolicy == nil || rec.Spec.RetentionPolicy.WhenDeleted != jkev1.RetainStaticIP {
				return false, err
			}
		}
		return true, nil
	})
	f.updateSet("ret", func(s *jkev1alpha1.EnhancedStatefulSet) {
		s.Spec.StaticIPRetentionPolicy = &jkev1.StaticIPRetentionPolicy{WhenDeleted: jkev1.DeleteStaticIP}
	})
	f.eventually(30*time.Second, "owner references back after the switch to Delete", func() (bool, error) {
		for name := range ips {
			if rec, err := f.staticIP(name); err != nil || !ownerRefsTo(rec, string(set.UID)) {
				return false, err
			}
		}
		return true, nil
	})
	f.updateSet("ret", func(s *jkev1alpha1.EnhancedStatefulSet) {
		s.Spec.StaticIPRetentionPolicy = &jkev1.StaticIPRetentionPolicy{WhenDeleted: jkev1.RetainStaticIP}
	})
	f.eventually(30*time.Second, "owner references removed again", func() (bool, error) {
		for name := range ips {
			if rec, err := f.staticIP(name); err != nil || len(rec.OwnerReferences) != 0 {
				return false, err
			}
		}
		return true, nil
	})

	// Delete the set and its pods (what the garbage collector does; the records carry no owner
	// reference, so it would leave them), then apply it again.
	if err := f.client.JkeV1alpha1().EnhancedStatefulSets(f.ns).Delete(f.ctx, "ret", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for name := range ips {
		_ = f.kube.CoreV1().Pods(f.ns).Delete(f.ctx, name, metav1.DeleteOptions{})
	}
	f.eventually(30*time.Second, "pods gone", func() (bool, error) { return len(f.pods()) == 0, nil })
	f.createSet(newSet("ret", 2, enableOnSetOnly, func(s *jkev1alpha1.EnhancedStatefulSet) {
		s.Spec.StaticIPRetentionPolicy = &jkev1.StaticIPRetentionPolicy{WhenDeleted: jkev1.RetainStaticIP}
	}))
	f.waitSettled("ret", time.Minute)
	if again := f.recordedIPs("ret", 2); again["ret-0"] != ips["ret-0"] || again["ret-1"] != ips["ret-1"] {
		t.Errorf("IPs after re-creating the set: %v, before %v", again, ips)
	}
}

// TestReleasedRecordNeverDecoratesANewPod: a record the retention policy is releasing (phase
// Released, about to be deleted) is not used for a new pod: the pod waits, and gets a fresh
// record once the old one is gone. The StaticIP controller is not running here, so nothing
// else moves the record.
func TestReleasedRecordNeverDecoratesANewPod(t *testing.T) {
	f := newFixture(t)
	f.startKubelet("node-s", 100*time.Millisecond, nil)
	f.startManager(ests.Name)
	rec := &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: "rel-0"},
		Spec: jkev1.StaticIPSpec{Ref: "rel", Kind: "EnhancedStatefulSet", Pod: "rel-0", IP: "10.99.0.9", Node: "node-old"}}
	rec, err := f.client.JkeV1().StaticIPs(f.ns).Create(f.ctx, rec, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec.Status.Phase = jkev1.StaticIPReleased
	if _, err := f.client.JkeV1().StaticIPs(f.ns).UpdateStatus(f.ctx, rec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.createSet(newSet("rel", 1, enableOnSetOnly))
	time.Sleep(2 * time.Second)
	if p := f.pods()["rel-0"]; p != nil {
		t.Fatalf("rel-0 created from a record being released: ip-address %q, affinity node %q", p.Annotations[podip.AnnotationIPAddress], affinityNode(p))
	}
	if err := f.client.JkeV1().StaticIPs(f.ns).Delete(f.ctx, "rel-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitSettled("rel", time.Minute)
	if p := f.pods()["rel-0"]; p.Annotations[podip.AnnotationIPAddress] == "10.99.0.9" || affinityNode(p) == "node-old" {
		t.Errorf("rel-0 got the released record's IP or node: %v %q", p.Annotations, affinityNode(p))
	}
}

// TestRecordSelfHealing: the record of a live pod of an enabled set (enable annotation on the
// set only) is deleted; the StaticIP controller creates it again and records the pod's IP.
func TestRecordSelfHealing(t *testing.T) {
	f := newFixture(t)
	f.startKubelet("node-h", 100*time.Millisecond, nil)
	f.startManager()
	f.createSet(newSet("heal", 1, enableOnSetOnly))
	f.waitSettled("heal", time.Minute)
	ips := f.recordedIPs("heal", 1)
	if err := f.client.JkeV1().StaticIPs(f.ns).Delete(f.ctx, "heal-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(30*time.Second, "heal-0 recorded again", func() (bool, error) {
		rec, err := f.staticIP("heal-0")
		return err == nil && rec.Spec.IP == ips["heal-0"] && rec.Status.Phase == jkev1.StaticIPBound, nil
	})
}

// TestNoTakeoverAcrossWorkloads: a record retained from EnhancedStatefulSet "tk" is not taken
// by a native StatefulSet "tk": Conflict condition and an Event on the record, and the native
// pod gets no ip-address annotation from it.
func TestNoTakeoverAcrossWorkloads(t *testing.T) {
	f := newFixture(t)
	f.startManager()
	rec := &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: "tk-0"},
		Spec: jkev1.StaticIPSpec{Ref: "tk", Kind: "EnhancedStatefulSet", Pod: "tk-0", IP: "10.98.0.5", Node: "node-a",
			RetentionPolicy: &jkev1.StaticIPRetentionPolicy{WhenScaled: jkev1.RetainStaticIP, WhenDeleted: jkev1.RetainStaticIP}}}
	if _, err := f.client.JkeV1().StaticIPs(f.ns).Create(f.ctx, rec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "tk"},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "tk"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "tk"}, Annotations: map[string]string{jkev1.AnnotationEnable: "true"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:v1"}}}}},
	}
	sts, err := f.kube.AppsV1().StatefulSets(f.ns).Create(f.ctx, sts, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Stand in for the StatefulSet controller.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "tk-0", Labels: map[string]string{"app": "tk"},
		Annotations:     map[string]string{jkev1.AnnotationEnable: "true"},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}},
		Spec: sts.Spec.Template.Spec}
	if _, err := f.kube.CoreV1().Pods(f.ns).Create(f.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.expectNoTakeover(rec, "pod tk-0 belongs to StatefulSet.apps tk")
}

// expectNoTakeover waits for the WorkloadMismatch conflict on record want (its message
// containing msg, and an Event), then checks the record kept its workload, IP and owner
// references and its pod got no ip-address annotation from it.
func (f *fixture) expectNoTakeover(want *jkev1.StaticIP, msg string) {
	f.t.Helper()
	f.eventually(30*time.Second, "Conflict on "+want.Name+" and an Event", func() (bool, error) {
		rec, err := f.staticIP(want.Name)
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(rec.Status.Conditions, jkev1.StaticIPConditionConflict)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, msg) &&
			anyContains(f.events(want.Name), "WorkloadMismatch"), nil
	})
	time.Sleep(time.Second)
	rec, err := f.staticIP(want.Name)
	if err != nil {
		f.t.Fatal(err)
	}
	if rec.Spec.Kind != want.Spec.Kind || rec.Spec.Ref != want.Spec.Ref || rec.Spec.IP != want.Spec.IP ||
		(rec.Spec.APIGroup != "" && rec.Spec.APIGroup != workloadref.ImpliedGroup(want.Spec.Kind)) || len(rec.OwnerReferences) != 0 {
		f.t.Errorf("record taken over: %+v %+v", rec.Spec, rec.OwnerReferences)
	}
	p, err := f.kube.CoreV1().Pods(f.ns).Get(f.ctx, want.Spec.Pod, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		f.t.Fatal(err)
	}
	if err == nil && p.Annotations[podip.AnnotationIPAddress] != "" {
		f.t.Errorf("pod %s of another workload got the record's IP: %v", p.Name, p.Annotations)
	}
}

// TestNoTakeoverAcrossAPIGroups: the same kind and name in another API group is another
// workload. A record retained from apps' StatefulSet "og" (without spec.apiGroup, as records
// were written before it existed: its kind implies apps) is not handed to pod og-0 of
// OpenKruise's StatefulSet "og" (apps.kruise.io): Conflict and an Event, no ip-address
// annotation on the pod, the record untouched.
func TestNoTakeoverAcrossAPIGroups(t *testing.T) {
	f := newFixture(t)
	f.startManager()
	rec := &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: "og-0"},
		Spec: jkev1.StaticIPSpec{Ref: "og", Kind: "StatefulSet", Pod: "og-0", IP: "10.98.0.6", Node: "node-a",
			RetentionPolicy: &jkev1.StaticIPRetentionPolicy{WhenScaled: jkev1.RetainStaticIP, WhenDeleted: jkev1.RetainStaticIP}}}
	if _, err := f.client.JkeV1().StaticIPs(f.ns).Create(f.ctx, rec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Stand in for OpenKruise's Advanced StatefulSet controller (its CRD is not installed here:
	// only the pod's controller reference matters).
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "og-0", Labels: map[string]string{"app": "og"},
		Annotations: map[string]string{jkev1.AnnotationEnable: "true"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps.kruise.io/v1beta1", Kind: "StatefulSet", Name: "og",
			UID: "0f0e0d0c-0000-0000-0000-00000000000a", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:v1"}}}}
	if _, err := f.kube.CoreV1().Pods(f.ns).Create(f.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.expectNoTakeover(rec, "pod og-0 belongs to StatefulSet.apps.kruise.io og but StaticIP og-0 is retained for StatefulSet.apps og")
}
