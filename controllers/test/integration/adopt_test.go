package integration

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	ests "github.com/staticip/staticip/controllers/pkg/enhancedstatefulset"
)

// orphanDelete does what `kubectl delete ests NAME --cascade=orphan` and the garbage collector
// do together (testenv runs no garbage collector): the set is deleted with the orphan
// finalizer, its dependents lose their owner reference, then the finalizer goes.
func (f *fixture) orphanDelete(name string) {
	f.t.Helper()
	set := f.getSet(name)
	if err := f.client.JkeV1alpha1().EnhancedStatefulSets(f.ns).Delete(f.ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)}); err != nil {
		f.t.Fatal(err)
	}
	for _, p := range f.pods() {
		if ref := metav1.GetControllerOf(p); ref != nil && ref.UID == set.UID {
			patch := `{"metadata":{"ownerReferences":null}}`
			if _, err := f.kube.CoreV1().Pods(f.ns).Patch(f.ctx, p.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				f.t.Fatal(err)
			}
		}
	}
	f.eventually(30*time.Second, "set "+name+" gone", func() (bool, error) {
		cur, err := f.client.JkeV1alpha1().EnhancedStatefulSets(f.ns).Get(f.ctx, name, metav1.GetOptions{})
		if err != nil {
			return true, nil
		}
		cur.Finalizers = nil
		_, err = f.client.JkeV1alpha1().EnhancedStatefulSets(f.ns).Update(f.ctx, cur, metav1.UpdateOptions{})
		return false, err
	})
}

// TestAdoptAndRelease: a set deleted with --cascade=orphan and applied again adopts its pods
// (same pods, no recreation) and then scales and updates them; a pod whose labels stop
// matching is released, and the AlreadyExists that its name then causes is reported, not
// swallowed.
func TestAdoptAndRelease(t *testing.T) {
	f := newFixture(t)
	f.startKubelet("", 100*time.Millisecond, nil)
	f.startManager(ests.Name)
	f.createSet(newSet("web", 3))
	f.waitSettled("web", time.Minute)
	before := f.pods()

	f.orphanDelete("web")
	set := f.createSet(newSet("web", 3))
	f.eventually(time.Minute, "the pods adopted by the new set", func() (bool, error) {
		for name, p := range f.pods() {
			if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != set.UID {
				return false, nil
			} else if before[name] == nil || before[name].UID != p.UID {
				t.Errorf("%s was recreated instead of adopted", name)
			}
		}
		return true, nil
	})
	f.waitSettled("web", time.Minute)
	f.updateSet("web", func(s *jkev1alpha1.EnhancedStatefulSet) {
		s.Spec.Replicas = ptr.To[int32](4)
		s.Spec.Template.Spec.Containers[0].Image = "app:v2"
	})
	f.waitSettled("web", time.Minute)
	if got := podImages(f.pods(), "web", 4); strings.Join(got, ",") != "app:v2,app:v2,app:v2,app:v2" {
		t.Errorf("adopted pods not scaled and updated: %v", got)
	}

	// Release: web-1 stops matching the selector.
	patch := `{"metadata":{"labels":{"app":"detached"}}}`
	if _, err := f.kube.CoreV1().Pods(f.ns).Patch(f.ctx, "web-1", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(30*time.Second, "web-1 released and the name clash reported", func() (bool, error) {
		p := f.pods()["web-1"]
		c := meta.FindStatusCondition(f.getSet("web").Status.Conditions, ests.ConditionReplicaFailure)
		return p != nil && metav1.GetControllerOf(p) == nil && c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "web-1") &&
			anyContains(f.events("web"), "FailedCreate", "web-1", "already exists"), nil
	})
	// Removing the detached pod lets the set run ordinal 1 again.
	if err := f.kube.CoreV1().Pods(f.ns).Delete(f.ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitSettled("web", time.Minute)
	f.eventually(30*time.Second, "ReplicaFailure cleared", func() (bool, error) {
		c := meta.FindStatusCondition(f.getSet("web").Status.Conditions, ests.ConditionReplicaFailure)
		return c != nil && c.Status == metav1.ConditionFalse, nil
	})
	if p := f.pods()["web-1"]; p == nil || p.Labels["app"] != "web" || p.Status.Phase != corev1.PodRunning {
		t.Errorf("web-1 not recreated by the set: %+v", p)
	}
}
