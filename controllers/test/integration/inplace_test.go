package integration

import (
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	ests "github.com/staticip/staticip/controllers/pkg/enhancedstatefulset"
	"github.com/staticip/staticip/controllers/pkg/manager"
)

func inPlaceSet(name string, replicas int32) *jkev1alpha1.EnhancedStatefulSet {
	return newSet(name, replicas, func(s *jkev1alpha1.EnhancedStatefulSet) {
		s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
		s.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(1))
		s.Spec.UpdateStrategy.RollingUpdate.PodUpdatePolicy = jkev1alpha1.InPlaceIfPossiblePodUpdatePolicy
	})
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

// gateMonitor records, from the pod watch, every container image change that a pod showed
// while its InPlaceUpdateReady condition was not False: Services would still send it traffic
// while its container restarts.
type gateMonitor struct {
	mu         sync.Mutex
	violations []string
}

func (f *fixture) monitorReadinessGate() *gateMonitor {
	m := &gateMonitor{}
	factory := informers.NewSharedInformerFactoryWithOptions(f.kube, 0, informers.WithNamespace(f.ns))
	inf := factory.Core().V1().Pods().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(o, n any) {
		old, cur := o.(*corev1.Pod), n.(*corev1.Pod)
		if old.Spec.Containers[0].Image != cur.Spec.Containers[0].Image && podCondition(cur, ests.InPlaceUpdateReady) != corev1.ConditionFalse {
			m.mu.Lock()
			m.violations = append(m.violations, cur.Name+" -> "+cur.Spec.Containers[0].Image)
			m.mu.Unlock()
		}
	}})
	stop := make(chan struct{})
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	f.t.Cleanup(func() { close(stop) })
	return m
}

// TestInPlaceRollback: A -> B where B cannot be pulled, then back to A, in place. The kubelet
// still reports the last container that ran (image A) while B fails, so an update counted done
// by image alone would be "pending" forever after the rollback; it is done when a new
// container runs A. The readiness gate goes False before every image patch, and status does
// not count a pod whose in-place update is pending.
func TestInPlaceRollback(t *testing.T) {
	f := newFixture(t)
	f.startKubelet("", 100*time.Millisecond, nil)
	f.startManager(ests.Name)
	gates := f.monitorReadinessGate()
	f.createSet(inPlaceSet("inrb", 3))
	v1 := f.waitSettled("inrb", time.Minute)
	before := f.pods()
	for name, p := range before {
		if !slices.ContainsFunc(p.Spec.ReadinessGates, func(g corev1.PodReadinessGate) bool { return g.ConditionType == ests.InPlaceUpdateReady }) {
			t.Errorf("%s has no %s readiness gate", name, ests.InPlaceUpdateReady)
		}
	}

	f.updateSet("inrb", func(s *jkev1alpha1.EnhancedStatefulSet) { s.Spec.Template.Spec.Containers[0].Image = "app:broken" })
	f.eventually(time.Minute, "inrb-2 patched to the broken image and failing", func() (bool, error) {
		p := f.pods()["inrb-2"]
		return p != nil && p.Spec.Containers[0].Image == "app:broken" && len(p.Status.ContainerStatuses) > 0 &&
			p.Status.ContainerStatuses[0].State.Waiting != nil, nil
	})
	time.Sleep(time.Second) // syncs with the pod failing
	set := f.getSet("inrb")
	if set.Status.ReadyReplicas != 2 || set.Status.UpdatedReplicas != 0 {
		t.Errorf("a pod whose in-place update is pending was counted: ready %d updated %d (want 2 and 0)", set.Status.ReadyReplicas, set.Status.UpdatedReplicas)
	}

	f.updateSet("inrb", func(s *jkev1alpha1.EnhancedStatefulSet) { s.Spec.Template = v1.Spec.Template })
	set = f.waitSettled("inrb", time.Minute)
	if set.Status.UpdateRevision != v1.Status.UpdateRevision || set.Status.UpdatedReplicas != 3 {
		t.Errorf("after the rollback: update revision %s updated %d", set.Status.UpdateRevision, set.Status.UpdatedReplicas)
	}
	after := f.pods()
	for name, p := range before {
		if after[name] == nil || after[name].UID != p.UID {
			t.Errorf("%s was recreated; the rollback must stay in place", name)
		} else if _, ok := after[name].Annotations[ests.AnnotationInPlaceUpdate]; ok || podCondition(after[name], ests.InPlaceUpdateReady) != corev1.ConditionTrue {
			t.Errorf("%s: in-place update not finished: annotation %q, %s %q", name, after[name].Annotations[ests.AnnotationInPlaceUpdate],
				ests.InPlaceUpdateReady, podCondition(after[name], ests.InPlaceUpdateReady))
		}
	}
	gates.mu.Lock()
	defer gates.mu.Unlock()
	if len(gates.violations) > 0 {
		t.Errorf("images changed while %s was not False: %v", ests.InPlaceUpdateReady, gates.violations)
	}
}

// TestInPlaceUpdateTimeout: an in-place update the kubelet never carries out is given up after
// --inplace-update-timeout: a Warning Event names the pod and the pod is recreated.
func TestInPlaceUpdateTimeout(t *testing.T) {
	f := newFixture(t)
	f.startKubelet("", 100*time.Millisecond, nil)
	f.startManagerWith(func(o *manager.Options) { o.InPlaceUpdateTimeout = 2 * time.Second }, ests.Name)
	f.createSet(inPlaceSet("into", 2))
	f.waitSettled("into", time.Minute)
	before := f.pods()
	f.updateSet("into", func(s *jkev1alpha1.EnhancedStatefulSet) { s.Spec.Template.Spec.Containers[0].Image = "app:broken" })
	f.eventually(time.Minute, "into-1 recreated after the in-place timeout", func() (bool, error) {
		p := f.pods()["into-1"]
		return p != nil && p.UID != before["into-1"].UID && p.Spec.Containers[0].Image == "app:broken", nil
	})
	if !anyContains(f.events("into"), "InPlaceUpdateTimeout", "into-1") {
		t.Errorf("no InPlaceUpdateTimeout Event names into-1: %q", f.events("into"))
	}
	if p := f.pods()["into-0"]; p.UID != before["into-0"].UID || p.Spec.Containers[0].Image != "app:v1" {
		t.Errorf("into-0 moved although into-1 is down (budget 1)")
	}
}
