package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/apis/podip"
	ests "github.com/staticip/staticip/controllers/pkg/enhancedstatefulset"
	"github.com/staticip/staticip/controllers/pkg/staticip"
)

func (f *fixture) staticIP(name string) (*jkev1.StaticIP, error) {
	return f.client.JkeV1().StaticIPs(f.ns).Get(f.ctx, name, metav1.GetOptions{})
}

// recordedIPs waits until every pod of set has its IP recorded (Bound) and returns pod -> IP.
func (f *fixture) recordedIPs(set string, replicas int) map[string]string {
	f.t.Helper()
	out := map[string]string{}
	f.eventually(time.Minute, "StaticIPs of "+set+" Bound", func() (bool, error) {
		pods := f.pods()
		for i := 0; i < replicas; i++ {
			name := ests.PodName(set, i)
			sip, err := f.staticIP(name)
			if err != nil {
				return false, err
			}
			p := pods[name]
			if p == nil || sip.Status.Phase != jkev1.StaticIPBound || sip.Spec.IP == "" || sip.Spec.IP != p.Status.PodIP || sip.Status.PodUID != p.UID {
				return false, fmt.Errorf("%s: phase %q ip %q", name, sip.Status.Phase, sip.Spec.IP)
			}
			out[name] = sip.Spec.IP
		}
		return true, nil
	})
	return out
}

// waitConflict waits until the StaticIP's Conflict condition has status and its message
// contains mention.
func (f *fixture) waitConflict(name string, status metav1.ConditionStatus, mention string) {
	f.t.Helper()
	f.eventually(30*time.Second, fmt.Sprintf("%s: Conflict=%s mentioning %q", name, status, mention), func() (bool, error) {
		rec, err := f.staticIP(name)
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(rec.Status.Conditions, jkev1.StaticIPConditionConflict)
		return c != nil && c.Status == status && strings.Contains(c.Message, mention), nil
	})
}

func enableStaticIP(s *jkev1alpha1.EnhancedStatefulSet) {
	s.Annotations = map[string]string{jkev1.AnnotationEnable: "true"}
	s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
	s.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(2))
}

func TestStaticIPLifecycleWithEnhancedStatefulSet(t *testing.T) {
	f := newFixture(t)
	// Every pod must find its StaticIP already there when it appears.
	check := func(pod *corev1.Pod) error {
		if _, err := f.staticIP(pod.Name); err != nil {
			return fmt.Errorf("pod %s exists before its StaticIP: %v", pod.Name, err)
		}
		return nil
	}
	f.startKubelet("node-a", 100*time.Millisecond, check)
	f.startManager()
	set := f.createSet(newSet("sip", 3, enableStaticIP))
	f.waitSettled("sip", time.Minute)
	ips := f.recordedIPs("sip", 3)

	checkSetRecords(t, f, set, 3)

	// ReCreate rollout: every recreated pod carries its IP and is pinned to its node.
	before := f.pods()
	f.updateSet("sip", func(s *jkev1alpha1.EnhancedStatefulSet) { s.Spec.Template.Spec.Containers[0].Image = "app:v2" })
	f.waitSettled("sip", time.Minute)
	f.eventually(time.Minute, "all pods recreated", func() (bool, error) {
		now := f.pods()
		for name, p := range before {
			if now[name] == nil || now[name].UID == p.UID {
				return false, nil
			}
		}
		return true, nil
	})
	after := f.recordedIPs("sip", 3)
	pods := f.pods()
	for name, ip := range ips {
		p := pods[name]
		if p.Annotations[podip.AnnotationIPAddress] != ip {
			t.Errorf("%s: annotation %q, want %s", name, p.Annotations[podip.AnnotationIPAddress], ip)
		}
		if !staticip.NodeAffinityRequired(p, "node-a") {
			t.Errorf("%s: no required node affinity to node-a: %+v", name, p.Spec.Affinity)
		}
		if after[name] != ip {
			t.Errorf("%s: IP changed across the rollout: %s -> %s", name, ip, after[name])
		}
	}

	// Scale-down with whenScaled=Delete (default) deletes the removed ordinal's record.
	f.updateSet("sip", func(s *jkev1alpha1.EnhancedStatefulSet) { s.Spec.Replicas = ptr.To[int32](2) })
	f.eventually(time.Minute, "StaticIP sip-2 deleted on scale-down", func() (bool, error) {
		_, err := f.staticIP("sip-2")
		return apierrors.IsNotFound(err), nil
	})
	for _, name := range []string{"sip-0", "sip-1"} {
		if _, err := f.staticIP(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	// Duplicate IP: a second record claiming sip-0's IP marks a conflict; nothing is rewritten.
	dup := &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: "intruder"}, Spec: jkev1.StaticIPSpec{IP: ips["sip-0"], Node: "node-b"}}
	if _, err := f.client.JkeV1().StaticIPs(f.ns).Create(f.ctx, dup, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sip-0", "intruder"} {
		f.waitConflict(name, metav1.ConditionTrue, ips["sip-0"])
	}
	if rec, _ := f.staticIP("sip-0"); rec.Spec.IP != ips["sip-0"] || rec.Spec.Node != "node-a" {
		t.Errorf("conflict rewrote sip-0: %+v", rec.Spec)
	}
	f.eventually(30*time.Second, "a ConflictDuplicateIP Event", func() (bool, error) {
		evs, err := f.kube.CoreV1().Events(f.ns).List(f.ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", "Conflict"+staticip.ConflictDuplicateIP).String()})
		return err == nil && len(evs.Items) > 0, err
	})
	if err := f.client.JkeV1().StaticIPs(f.ns).Delete(f.ctx, "intruder", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitConflict("sip-0", metav1.ConditionFalse, "")

	// An annotation that disagrees with the record is a conflict, not a new truth.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"10.99.99.99"}}}`, podip.AnnotationIPAddress)
	if _, err := f.kube.CoreV1().Pods(f.ns).Patch(f.ctx, "sip-1", "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitConflict("sip-1", metav1.ConditionTrue, "10.99.99.99") // the annotation's IP
	if rec, _ := f.staticIP("sip-1"); rec.Spec.IP != ips["sip-1"] {
		t.Errorf("annotation mismatch rewrote the record: %s", rec.Spec.IP)
	}
}

// checkSetRecords checks the StaticIPs of the n pods of set sip on node-a: what they record
// (node, pod, workload, the pod's cpu request) and the owner reference the garbage collector
// needs (whenDeleted=Delete).
func checkSetRecords(t *testing.T, f *fixture, set *jkev1alpha1.EnhancedStatefulSet, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		name := ests.PodName("sip", i)
		rec, err := f.staticIP(name)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Spec.Node != "node-a" || rec.Spec.Pod != name || rec.Spec.Kind != "EnhancedStatefulSet" || rec.Spec.Ref != "sip" {
			t.Errorf("%s: spec %+v", name, rec.Spec)
		}
		if q := rec.Spec.Resources[corev1.ResourceCPU]; q.Cmp(resource.MustParse("100m")) != 0 {
			t.Errorf("%s: recorded cpu %v, want 100m", name, q.String())
		}
		if len(rec.OwnerReferences) != 1 || rec.OwnerReferences[0].UID != set.UID {
			t.Errorf("%s: whenDeleted=Delete needs an owner reference to the set for the GC, got %v", name, rec.OwnerReferences)
		}
	}
}

func TestStaticIPRetainedAndReused(t *testing.T) {
	f := newFixture(t)
	f.startKubelet("node-a", 100*time.Millisecond, nil)
	f.startManager()
	f.createSet(newSet("keep", 2, enableStaticIP, func(s *jkev1alpha1.EnhancedStatefulSet) {
		s.Spec.StaticIPRetentionPolicy = &jkev1.StaticIPRetentionPolicy{WhenScaled: jkev1.RetainStaticIP, WhenDeleted: jkev1.RetainStaticIP}
	}))
	f.waitSettled("keep", time.Minute)
	ips := f.recordedIPs("keep", 2)
	if rec, _ := f.staticIP("keep-1"); len(rec.OwnerReferences) != 0 || rec.Spec.RetentionPolicy == nil || rec.Spec.RetentionPolicy.WhenScaled != jkev1.RetainStaticIP {
		t.Errorf("whenDeleted=Retain: record must carry no owner reference and the policy: %+v %+v", rec.OwnerReferences, rec.Spec.RetentionPolicy)
	}

	f.updateSet("keep", func(s *jkev1alpha1.EnhancedStatefulSet) { s.Spec.Replicas = ptr.To[int32](1) })
	f.eventually(time.Minute, "keep-1 Reserved after scale-down", func() (bool, error) {
		rec, err := f.staticIP("keep-1")
		return err == nil && rec.Status.Phase == jkev1.StaticIPReserved && f.pods()["keep-1"] == nil, err
	})
	// Scale back: the retained record is re-used, the pod gets its old IP and node.
	f.updateSet("keep", func(s *jkev1alpha1.EnhancedStatefulSet) { s.Spec.Replicas = ptr.To[int32](2) })
	f.waitSettled("keep", time.Minute)
	again := f.recordedIPs("keep", 2)
	p := f.pods()["keep-1"]
	if again["keep-1"] != ips["keep-1"] || p.Annotations[podip.AnnotationIPAddress] != ips["keep-1"] || !staticip.NodeAffinityRequired(p, "node-a") {
		t.Errorf("retained record not re-used: ip %s -> %s, annotation %q, affinity %+v", ips["keep-1"], again["keep-1"], p.Annotations[podip.AnnotationIPAddress], p.Spec.Affinity)
	}

	// A record of another workload with a pod's name is never taken over: that pod is not
	// created and the set reports the conflict.
	foreign := &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: "keep-2"}, Spec: jkev1.StaticIPSpec{Ref: "someone-else", Kind: "StatefulSet"}}
	if _, err := f.client.JkeV1().StaticIPs(f.ns).Create(f.ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.updateSet("keep", func(s *jkev1alpha1.EnhancedStatefulSet) { s.Spec.Replicas = ptr.To[int32](3) })
	f.eventually(30*time.Second, "StaticIPConflict condition on the set", func() (bool, error) {
		c := meta.FindStatusCondition(f.getSet("keep").Status.Conditions, ests.ConditionStaticIPConflict)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "someone-else"), nil
	})
	if f.pods()["keep-2"] != nil {
		t.Error("keep-2 was created although its StaticIP belongs to another workload")
	}
	if rec, _ := f.staticIP("keep-2"); rec.Spec.Ref != "someone-else" {
		t.Errorf("foreign record taken over: %+v", rec.Spec)
	}
}

// TestStaticIPNativeStatefulSet: the StatefulSet controller creates pods without asking us.
// What works: the StaticIP controller creates the record when it sees a pod carrying the
// enable annotation (from the template), records IP and node, keeps it Reserved while the
// pod is gone, tells a recreated, not yet scheduled pod its IP through the annotation, and
// deletes the record when the StatefulSet scales below its ordinal.
func TestStaticIPNativeStatefulSet(t *testing.T) {
	f := newFixture(t)
	f.startManager(staticip.Name)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "nat"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "nat"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "nat"}, Annotations: map[string]string{jkev1.AnnotationEnable: "true"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:v1"}}},
			},
		},
	}
	sts, err := f.kube.AppsV1().StatefulSets(f.ns).Create(f.ctx, sts, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Stand in for the StatefulSet controller (no kube-controller-manager here).
	newPod := func() *corev1.Pod {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "nat-0", Labels: map[string]string{"app": "nat"},
				Annotations:     map[string]string{jkev1.AnnotationEnable: "true"},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}},
			Spec: sts.Spec.Template.Spec,
		}
		pod, err := f.kube.CoreV1().Pods(f.ns).Create(f.ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return pod
	}
	pod := newPod()
	f.eventually(30*time.Second, "StaticIP nat-0 created for the native pod", func() (bool, error) {
		rec, err := f.staticIP("nat-0")
		return err == nil && rec.Spec.Kind == "StatefulSet" && rec.Spec.Ref == "nat" && rec.Status.Phase == jkev1.StaticIPPending &&
			len(rec.OwnerReferences) == 1 && rec.OwnerReferences[0].UID == sts.UID, err
	})
	// Scheduler + CNI: bind and give it an IP of node-n's range.
	nodeRange := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-node-n"}, Spec: jkev1.IPRangeSpec{CIDR: "10.88.0.0/24", Node: "node-n"}}
	if _, err := f.client.JkeV1().IPRanges().Create(f.ctx, nodeRange, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.client.JkeV1().IPRanges().Delete(context.Background(), nodeRange.Name, metav1.DeleteOptions{})
	})
	if err := f.kube.CoreV1().Pods(f.ns).Bind(f.ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "nat-0"},
		Target: corev1.ObjectReference{Kind: "Node", Name: "node-n"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, _ = f.kube.CoreV1().Pods(f.ns).Get(f.ctx, "nat-0", metav1.GetOptions{})
	pod.Status.Phase, pod.Status.PodIP, pod.Status.PodIPs = corev1.PodRunning, "10.88.0.7", []corev1.PodIP{{IP: "10.88.0.7"}}
	if _, err := f.kube.CoreV1().Pods(f.ns).UpdateStatus(f.ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(30*time.Second, "nat-0 recorded", func() (bool, error) {
		rec, err := f.staticIP("nat-0")
		return err == nil && rec.Spec.IP == "10.88.0.7" && rec.Spec.Node == "node-n" && rec.Status.Phase == jkev1.StaticIPBound, err
	})
	if err := f.kube.CoreV1().Pods(f.ns).Delete(f.ctx, "nat-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	f.eventually(30*time.Second, "nat-0 Reserved", func() (bool, error) {
		rec, err := f.staticIP("nat-0")
		return err == nil && rec.Status.Phase == jkev1.StaticIPReserved, err
	})
	newPod()
	f.eventually(30*time.Second, "recreated native pod told its IP", func() (bool, error) {
		p, err := f.kube.CoreV1().Pods(f.ns).Get(f.ctx, "nat-0", metav1.GetOptions{})
		return err == nil && p.Annotations[podip.AnnotationIPAddress] == "10.88.0.7", err
	})
	if err := f.kube.CoreV1().Pods(f.ns).Delete(f.ctx, "nat-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	sts, _ = f.kube.AppsV1().StatefulSets(f.ns).Get(f.ctx, "nat", metav1.GetOptions{})
	sts.Spec.Replicas = ptr.To[int32](0)
	if _, err := f.kube.AppsV1().StatefulSets(f.ns).Update(f.ctx, sts, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(30*time.Second, "nat-0 deleted after scale to 0", func() (bool, error) {
		_, err := f.staticIP("nat-0")
		return apierrors.IsNotFound(err), nil
	})
}

// TestStaticIPDualStack: a native StatefulSet's pod running with an IPv4 and an IPv6 address
// (status.podIPs, as the kubelet reports the staticip CNI's two IPConfigs). The StaticIP records
// both (spec.ip the primary, spec.ips both), keeps both while the pod is gone, and tells the
// recreated pod both through the annotation; a single-stack record gains the IPv6 address once
// its pod runs with one; a pod that comes back with another IPv6 address is a conflict, and
// nothing is rewritten.
func TestStaticIPDualStack(t *testing.T) {
	f := newFixture(t)
	f.startManager(staticip.Name)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "ds"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ds"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "ds"}, Annotations: map[string]string{jkev1.AnnotationEnable: "true"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:v1"}}},
			},
		},
	}
	sts, err := f.kube.AppsV1().StatefulSets(f.ns).Create(f.ctx, sts, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*jkev1.IPRange{
		{ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-ds-v4"}, Spec: jkev1.IPRangeSpec{CIDR: "10.89.0.0/24", Node: "node-d"}},
		{ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-ds-v6"}, Spec: jkev1.IPRangeSpec{CIDR: "fd00:89::/120", Node: "node-d"}},
	} {
		if _, err := f.client.JkeV1().IPRanges().Create(f.ctx, r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		name := r.Name
		t.Cleanup(func() { _ = f.client.JkeV1().IPRanges().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	// Stand in for the StatefulSet controller, the scheduler and the CNI + kubelet.
	newPod := func(name string) {
		t.Helper()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "ds"},
				Annotations:     map[string]string{jkev1.AnnotationEnable: "true"},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}},
			Spec: sts.Spec.Template.Spec,
		}
		if _, err := f.kube.CoreV1().Pods(f.ns).Create(f.ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	run := func(name string, ips ...string) {
		t.Helper()
		if err := f.kube.CoreV1().Pods(f.ns).Bind(f.ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name},
			Target: corev1.ObjectReference{Kind: "Node", Name: "node-d"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod, err := f.kube.CoreV1().Pods(f.ns).Get(f.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Status.Phase, pod.Status.PodIP, pod.Status.PodIPs = corev1.PodRunning, ips[0], nil
		for _, ip := range ips {
			pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		if _, err := f.kube.CoreV1().Pods(f.ns).UpdateStatus(f.ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	gone := func(name string) {
		t.Helper()
		if err := f.kube.CoreV1().Pods(f.ns).Delete(f.ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		f.eventually(30*time.Second, name+" Reserved", func() (bool, error) {
			rec, err := f.staticIP(name)
			return err == nil && rec.Status.Phase == jkev1.StaticIPReserved, err
		})
	}
	recorded := func(name, ip string, ips ...string) {
		t.Helper()
		f.eventually(30*time.Second, fmt.Sprintf("%s records %s %v", name, ip, ips), func() (bool, error) {
			rec, err := f.staticIP(name)
			if err != nil {
				return false, err
			}
			if rec.Spec.IP == ip && strings.Join(rec.Spec.IPs, ",") == strings.Join(ips, ",") && rec.Spec.Node == "node-d" && rec.Status.Phase == jkev1.StaticIPBound {
				return true, nil
			}
			return false, fmt.Errorf("ip %q ips %v node %q phase %q", rec.Spec.IP, rec.Spec.IPs, rec.Spec.Node, rec.Status.Phase)
		})
	}
	toldOnRecreate := func(name, want string) {
		t.Helper()
		newPod(name)
		f.eventually(30*time.Second, "recreated "+name+" told "+want, func() (bool, error) {
			p, err := f.kube.CoreV1().Pods(f.ns).Get(f.ctx, name, metav1.GetOptions{})
			return err == nil && p.Annotations[podip.AnnotationIPAddress] == want, err
		})
	}

	// ds-0: dual-stack from its first start; both kept through delete/recreate.
	newPod("ds-0")
	run("ds-0", "10.89.0.7", "fd00:89::7")
	recorded("ds-0", "10.89.0.7", "10.89.0.7", "fd00:89::7")
	gone("ds-0")
	if rec, _ := f.staticIP("ds-0"); strings.Join(rec.Spec.IPs, ",") != "10.89.0.7,fd00:89::7" {
		t.Fatalf("the Reserved record lost an address: %+v", rec.Spec)
	}
	toldOnRecreate("ds-0", "10.89.0.7,fd00:89::7")
	// It comes back with another IPv6 address: a conflict naming both, the record unchanged.
	run("ds-0", "10.89.0.7", "fd00:89::9")
	f.waitConflict("ds-0", metav1.ConditionTrue, "runs with IP 10.89.0.7,fd00:89::9 but StaticIP ds-0 records 10.89.0.7,fd00:89::7")
	if rec, _ := f.staticIP("ds-0"); strings.Join(rec.Spec.IPs, ",") != "10.89.0.7,fd00:89::7" {
		t.Fatalf("a mismatching pod rewrote the record: %+v", rec.Spec)
	}

	// ds-1: single-stack first (the node had no IPv6 range yet), then it runs with both: the
	// record gains the IPv6 address.
	newPod("ds-1")
	run("ds-1", "10.89.0.8")
	recorded("ds-1", "10.89.0.8")
	gone("ds-1")
	toldOnRecreate("ds-1", "10.89.0.8")
	run("ds-1", "10.89.0.8", "fd00:89::8")
	recorded("ds-1", "10.89.0.8", "10.89.0.8", "fd00:89::8")
}
