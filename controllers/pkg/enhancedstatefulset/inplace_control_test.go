package enhancedstatefulset

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
)

// TestInPlacePatchRetriedAfterTheKubeletsStatusWrite: the kubelet answers the
// InPlaceUpdateReady gate going False with a status write of its own, so the image patch made
// on the version the gate write returned conflicts. The controller makes it again on the
// pod as it is now, in the same sync: the pod does not stay gated without its patch (which
// the next sync once readied and re-gated within 100 ms: the kubelet reported it Ready while
// its container was about to restart).
func TestInPlacePatchRetriedAfterTheKubeletsStatusWrite(t *testing.T) {
	f := newStaleCacheFixture(t, 0, 1, 2)
	set, err := f.c.setLister.EnhancedStatefulSets("ns").Get("web")
	if err != nil {
		t.Fatal(err)
	}
	set = set.DeepCopy()
	set.Spec.UpdateStrategy.RollingUpdate.PodUpdatePolicy = jkev1alpha1.InPlaceIfPossiblePodUpdatePolicy
	if err := f.setCache.Update(set); err != nil {
		t.Fatal(err)
	}
	podsGVR := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	for _, name := range []string{"web-0", "web-1", "web-2"} {
		pod := f.pods[name].DeepCopy()
		pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: InPlaceUpdateReady}}
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: InPlaceUpdateReady, Status: corev1.ConditionTrue})
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", ContainerID: "containerd://old-" + name, Image: "img:v1",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}, Ready: true}}
		if err := f.kube.Tracker().Update(podsGVR, pod, "ns"); err != nil {
			t.Fatal(err)
		}
		if err := f.podCache.(interface{ Update(any) error }).Update(pod); err != nil {
			t.Fatal(err)
		}
		f.pods[name] = pod
	}
	// The first spec patch conflicts, as when the kubelet wrote the pod's status in between.
	specPatches := 0
	f.kube.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "" {
			return false, nil, nil
		}
		specPatches++
		if specPatches == 1 {
			return true, nil, apierrors.NewConflict(podsGVR.GroupResource(), "web-2", nil)
		}
		return false, nil, nil
	})
	f.sync(t)
	if specPatches != 2 {
		t.Fatalf("spec patches of web-2: %d, want 2 (the conflicted one made again)", specPatches)
	}
	obj, err := f.kube.Tracker().Get(podsGVR, "ns", "web-2")
	if err != nil {
		t.Fatal(err)
	}
	pod := obj.(*corev1.Pod)
	if img := pod.Spec.Containers[0].Image; img != "img:v2" {
		t.Errorf("web-2 image %s after the sync, want img:v2", img)
	}
	if st := InPlaceState(pod); st == nil || st.Containers["c"].OldContainerID != "containerd://old-web-2" {
		t.Errorf("web-2 update record %+v, want one naming the container it replaces", st)
	}
	if !conditionFalse(pod, InPlaceUpdateReady) {
		t.Errorf("web-2 %s not False during its update", InPlaceUpdateReady)
	}
	// Ready went False in the gate's write (the kubelet has nothing to reconcile).
	if !conditionFalse(pod, corev1.PodReady) {
		t.Errorf("web-2 Ready not False after the gate went False: %+v", pod.Status.Conditions)
	}
	if !conditionTrue(f.pods["web-1"], corev1.PodReady) {
		t.Error("web-1 (not updated) lost its Ready condition")
	}
}
