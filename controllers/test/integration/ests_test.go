package integration

import (
	"fmt"
	"k8s.io/apimachinery/pkg/api/meta"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"k8s.io/utils/ptr"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/apis/ordinal"
	ests "github.com/staticip/staticip/controllers/pkg/enhancedstatefulset"
	"github.com/staticip/staticip/controllers/pkg/metrics"
)

func newSet(name string, replicas int32, mutate ...func(*jkev1alpha1.EnhancedStatefulSet)) *jkev1alpha1.EnhancedStatefulSet {
	set := &jkev1alpha1.EnhancedStatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: jkev1alpha1.EnhancedStatefulSetSpec{
			Replicas:    ptr.To(replicas),
			Selector:    &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			ServiceName: name + "-svc",
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:v1",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}},
			},
			UpdateStrategy: jkev1alpha1.EnhancedStatefulSetUpdateStrategy{
				Type:          appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &jkev1alpha1.RollingUpdateEnhancedStatefulSetStrategy{},
			},
		},
	}
	for _, m := range mutate {
		m(set)
	}
	return set
}

func (f *fixture) createSet(set *jkev1alpha1.EnhancedStatefulSet) *jkev1alpha1.EnhancedStatefulSet {
	f.t.Helper()
	out, err := f.client.JkeV1alpha1().EnhancedStatefulSets(f.ns).Create(f.ctx, set, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

func (f *fixture) getSet(name string) *jkev1alpha1.EnhancedStatefulSet {
	f.t.Helper()
	set, err := f.client.JkeV1alpha1().EnhancedStatefulSets(f.ns).Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return set
}

// updateSet applies mutate to the newest version, retrying on conflicts.
func (f *fixture) updateSet(name string, mutate func(*jkev1alpha1.EnhancedStatefulSet)) *jkev1alpha1.EnhancedStatefulSet {
	f.t.Helper()
	for range 20 {
		set := f.getSet(name)
		mutate(set)
		out, err := f.client.JkeV1alpha1().EnhancedStatefulSets(f.ns).Update(f.ctx, set, metav1.UpdateOptions{})
		if err == nil {
			return out
		}
	}
	f.t.Fatalf("could not update %s", name)
	return nil
}

// waitSettled waits until the status describes generation and every replica is ready at
// the update revision (or, with a partition, until the pods at or above it are).
func (f *fixture) waitSettled(name string, timeout time.Duration) *jkev1alpha1.EnhancedStatefulSet {
	f.t.Helper()
	var set *jkev1alpha1.EnhancedStatefulSet
	f.eventually(timeout, "set "+name+" settled", func() (bool, error) {
		set = f.getSet(name)
		st := set.Status
		replicas := *set.Spec.Replicas
		partition := int32(0)
		if ru := set.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
			partition = min(*ru.Partition, replicas)
		}
		return st.ObservedGeneration == set.Generation && st.Replicas == replicas && st.ReadyReplicas == replicas &&
			st.AvailableReplicas == replicas && st.UpdatedReplicas >= replicas-partition && st.UpdateRevision != "", nil
	})
	return set
}

// budgetMonitor watches the pods of a set and computes, after every event, how many of
// ordinals [0, replicas) are unavailable. Watch events arrive in resourceVersion order, so
// the maximum it records is the true maximum over the rollout, not a sample.
type budgetMonitor struct {
	mu       sync.Mutex
	set      string
	replicas int
	pods     map[string]*corev1.Pod
	max      int
	stop     chan struct{}
}

func (f *fixture) monitorBudget(set string, replicas int) *budgetMonitor {
	m := &budgetMonitor{set: set, replicas: replicas, pods: map[string]*corev1.Pod{}, stop: make(chan struct{})}
	factory := informers.NewSharedInformerFactoryWithOptions(f.kube, 0, informers.WithNamespace(f.ns))
	inf := factory.Core().V1().Pods().Informer()
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { m.observe(o, false) },
		UpdateFunc: func(_, o any) { m.observe(o, false) },
		DeleteFunc: func(o any) { m.observe(o, true) },
	})
	if err != nil {
		f.t.Fatal(err)
	}
	factory.Start(m.stop)
	// The handler must have seen the initial list, or those adds would count as a rollout.
	if !cache.WaitForCacheSync(m.stop, reg.HasSynced) {
		f.t.Fatal("budget monitor did not sync")
	}
	m.reset(replicas)
	f.t.Cleanup(func() { close(m.stop); factory.Shutdown() })
	return m
}

func (m *budgetMonitor) observe(obj any, deleted bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod := obj.(*corev1.Pod)
	m.mu.Lock()
	defer m.mu.Unlock()
	if deleted {
		delete(m.pods, pod.Name)
	} else {
		m.pods[pod.Name] = pod
	}
	if u := m.unavailableLocked(); u > m.max {
		m.max = u
	}
}

func (m *budgetMonitor) unavailableLocked() int {
	u := 0
	for i := 0; i < m.replicas; i++ {
		p := m.pods[ests.PodName(m.set, i)]
		if p == nil || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || !podutil.IsPodReady(p) {
			u++
		}
	}
	return u
}

// reset starts a new measurement for replicas pods.
func (m *budgetMonitor) reset(replicas int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.replicas = replicas
	m.max = m.unavailableLocked()
}

func (m *budgetMonitor) maxUnavailable() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.max
}

func podRevisions(pods map[string]*corev1.Pod, set string, replicas int) []string {
	var out []string
	for i := 0; i < replicas; i++ {
		if p := pods[ests.PodName(set, i)]; p != nil {
			out = append(out, p.Labels[ests.RevisionLabel])
		} else {
			out = append(out, "<none>")
		}
	}
	return out
}

func podImages(pods map[string]*corev1.Pod, set string, replicas int) []string {
	var out []string
	for i := 0; i < replicas; i++ {
		if p := pods[ests.PodName(set, i)]; p != nil {
			out = append(out, p.Spec.Containers[0].Image)
		} else {
			out = append(out, "<none>")
		}
	}
	return out
}

func TestOrderedReadyScalingRevisionsAndStatus(t *testing.T) {
	f := newFixture(t)
	// OrderedReady: when pod n appears, every lower ordinal must already be Ready.
	check := func(pod *corev1.Pod) error {
		ord := ordinal.Of("web", pod.Name)
		pods := f.pods()
		for i := 0; i < ord; i++ {
			p := pods[ests.PodName("web", i)]
			if p == nil || !podutil.IsPodReady(p) {
				return fmt.Errorf("OrderedReady violated: %s created while %s is not ready", pod.Name, ests.PodName("web", i))
			}
		}
		return nil
	}
	f.startKubelet("", 100*time.Millisecond, check)
	f.startManager()
	set := f.createSet(newSet("web", 3, func(s *jkev1alpha1.EnhancedStatefulSet) {
		s.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{
			ObjectMeta: metav1.ObjectMeta{Name: "data"},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}}
		s.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
			WhenScaled: appsv1.DeletePersistentVolumeClaimRetentionPolicyType, WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType}
	}))
	set = f.waitSettled("web", time.Minute)

	st := set.Status
	if st.CurrentReplicas != 3 || st.UpdatedReplicas != 3 || st.CurrentRevision != st.UpdateRevision || st.CurrentRevision == "" {
		t.Errorf("status after creation: %+v", st)
	}
	if st.LabelSelector != "app=web" {
		t.Errorf("labelSelector = %q, want app=web (scale subresource)", st.LabelSelector)
	}
	checkNewPods(t, f, set, 3)

	// Scale through the scale subresource, as kubectl scale does.
	scale, err := f.client.JkeV1alpha1().EnhancedStatefulSets(f.ns).GetScale(f.ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scale.Spec.Replicas = 5
	if _, err := f.client.JkeV1alpha1().EnhancedStatefulSets(f.ns).UpdateScale(f.ctx, "web", scale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitSettled("web", time.Minute)
	f.updateSet("web", func(s *jkev1alpha1.EnhancedStatefulSet) { s.Spec.Replicas = ptr.To[int32](2) })
	set = f.waitSettled("web", time.Minute)
	pods := f.pods()
	if len(pods) != 2 || pods["web-0"] == nil || pods["web-1"] == nil {
		t.Errorf("after scale to 2: pods %v", slices.Collect(mapKeys(pods)))
	}
	f.eventually(30*time.Second, "claims of ordinals 2-4 deleted (whenScaled=Delete)", func() (bool, error) {
		list, err := f.kube.CoreV1().PersistentVolumeClaims(f.ns).List(f.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		var names []string
		for _, c := range list.Items {
			if c.DeletionTimestamp == nil {
				names = append(names, c.Name)
			}
		}
		slices.Sort(names)
		return slices.Equal(names, []string{"data-web-0", "data-web-1"}), nil
	})

	// Template change → new revision; revisionHistoryLimit 1 keeps one old revision at most.
	for i, img := range []string{"app:v2", "app:v3", "app:v4"} {
		f.updateSet("web", func(s *jkev1alpha1.EnhancedStatefulSet) {
			s.Spec.Template.Spec.Containers[0].Image = img
			s.Spec.RevisionHistoryLimit = ptr.To[int32](1)
		})
		set = f.waitSettled("web", time.Minute)
		if set.Status.CurrentRevision != set.Status.UpdateRevision {
			t.Errorf("update %d: current %s != update %s after the rollout", i, set.Status.CurrentRevision, set.Status.UpdateRevision)
		}
	}
	if got := podImages(f.pods(), "web", 2); !slices.Equal(got, []string{"app:v4", "app:v4"}) {
		t.Errorf("images %v", got)
	}
	f.eventually(30*time.Second, "history truncated to the limit", func() (bool, error) {
		revs, err := f.kube.AppsV1().ControllerRevisions(f.ns).List(f.ctx, metav1.ListOptions{LabelSelector: "app=web"})
		return err == nil && len(revs.Items) == 2, err
	})
	if set.Status.ObservedGeneration != set.Generation {
		t.Errorf("observedGeneration %d, generation %d", set.Status.ObservedGeneration, set.Generation)
	}
}

// checkNewPods checks the n pods of a settled set web as the StatefulSet controller makes them:
// hostname and subdomain, controller reference, labels, a volume and a PVC (whenDeleted=Retain:
// no owner) per ordinal, and one ControllerRevision, the update revision.
func checkNewPods(t *testing.T, f *fixture, set *jkev1alpha1.EnhancedStatefulSet, n int) {
	t.Helper()
	pods := f.pods()
	for i := 0; i < n; i++ {
		name := ests.PodName("web", i)
		p := pods[name]
		if p == nil {
			t.Fatalf("pod %s missing", name)
		}
		if p.Spec.Hostname != name || p.Spec.Subdomain != "web-svc" {
			t.Errorf("%s: hostname/subdomain = %s/%s", name, p.Spec.Hostname, p.Spec.Subdomain)
		}
		if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != set.UID || ref.Kind != "EnhancedStatefulSet" {
			t.Errorf("%s: controller ref %+v", name, ref)
		}
		if p.Labels[ests.RevisionLabel] != set.Status.UpdateRevision || p.Labels[ests.PodNameLabel] != name || p.Labels[ests.PodIndexLabel] != fmt.Sprint(i) {
			t.Errorf("%s: labels %v", name, p.Labels)
		}
		claim := fmt.Sprintf("data-web-%d", i)
		found := false
		for _, v := range p.Spec.Volumes {
			found = found || (v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim)
		}
		if !found {
			t.Errorf("%s: no volume for claim %s", name, claim)
		}
		pvc, err := f.kube.CoreV1().PersistentVolumeClaims(f.ns).Get(f.ctx, claim, metav1.GetOptions{})
		if err != nil {
			t.Errorf("claim %s: %v", claim, err)
		} else if len(pvc.OwnerReferences) != 0 {
			t.Errorf("claim %s: whenDeleted=Retain but owner refs %v", claim, pvc.OwnerReferences)
		}
	}
	revs, err := f.kube.AppsV1().ControllerRevisions(f.ns).List(f.ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil || len(revs.Items) != 1 || revs.Items[0].Name != set.Status.UpdateRevision {
		t.Fatalf("ControllerRevisions: %v %v", revs, err)
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestRollingUpdateBudgetPartitionPausedRollback is the published scenario on the API
// server: 6 replicas, partition 3, maxUnavailable 2.
func TestRollingUpdateBudgetPartitionPausedRollback(t *testing.T) {
	f := newFixture(t)
	k := f.startKubelet("", 300*time.Millisecond, nil)
	f.startManager()
	f.createSet(newSet("roll", 6, func(s *jkev1alpha1.EnhancedStatefulSet) {
		s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
		s.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To[int32](3)
		s.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(2))
	}))
	v1 := f.waitSettled("roll", time.Minute)
	rev1 := v1.Status.UpdateRevision
	mon := f.monitorBudget("roll", 6)

	// v1 -> v2 with partition 3: only 3-5 move, at most 2 unavailable at any time.
	f.updateSet("roll", func(s *jkev1alpha1.EnhancedStatefulSet) { s.Spec.Template.Spec.Containers[0].Image = "app:v2" })
	set := f.waitSettled("roll", time.Minute)
	rev2 := set.Status.UpdateRevision
	if rev2 == rev1 {
		t.Fatal("template change made no new revision")
	}
	if got := podRevisions(f.pods(), "roll", 6); !slices.Equal(got, []string{rev1, rev1, rev1, rev2, rev2, rev2}) {
		t.Errorf("partition 3: revisions %v", got)
	}
	if set.Status.CurrentRevision != rev1 || set.Status.CurrentReplicas != 3 || set.Status.UpdatedReplicas != 3 {
		t.Errorf("partition 3 status: current %s(%d) updated %d", set.Status.CurrentRevision, set.Status.CurrentReplicas, set.Status.UpdatedReplicas)
	}
	if m := mon.maxUnavailable(); m > 2 {
		t.Errorf("budget exceeded: %d pods unavailable at once, maxUnavailable 2", m)
	} else if m < 2 {
		t.Errorf("max unavailable %d: the update did not run 2 pods in parallel", m)
	}

	// Partition 0 finishes the rest under the same budget.
	mon.reset(6)
	f.updateSet("roll", func(s *jkev1alpha1.EnhancedStatefulSet) {
		s.Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To[int32](0)
	})
	set = f.waitSettled("roll", time.Minute)
	if got := podRevisions(f.pods(), "roll", 6); !slices.Equal(got, slices.Repeat([]string{rev2}, 6)) {
		t.Errorf("partition 0: revisions %v", got)
	}
	f.eventually(30*time.Second, "currentRevision = updateRevision", func() (bool, error) {
		set = f.getSet("roll")
		return set.Status.CurrentRevision == rev2 && set.Status.CurrentReplicas == 6, nil
	})
	if m := mon.maxUnavailable(); m > 2 {
		t.Errorf("budget exceeded after partition 0: %d", m)
	}

	// Two pods already down: a new revision replaces them (they are down anyway) and takes no
	// healthy pod down.
	k.setNotReady("roll-0", true)
	k.setNotReady("roll-1", true)
	f.eventually(30*time.Second, "2 pods unavailable in status", func() (bool, error) {
		return f.getSet("roll").Status.AvailableReplicas == 4, nil
	})
	before := f.pods()
	set = f.updateSet("roll", func(s *jkev1alpha1.EnhancedStatefulSet) { s.Spec.Template.Spec.Containers[0].Image = "app:v3" })
	f.eventually(30*time.Second, "the controller saw the v3 template", func() (bool, error) {
		s := f.getSet("roll")
		return s.Status.ObservedGeneration == set.Generation && s.Status.UpdateRevision != rev2, nil
	})
	time.Sleep(2 * time.Second) // several sync opportunities; no healthy pod may move
	after := f.pods()
	for name, p := range before {
		if name == "roll-0" || name == "roll-1" {
			continue // down and not at the update revision: replaced at once, without budget
		}
		if after[name] == nil || after[name].UID != p.UID || after[name].DeletionTimestamp != nil {
			t.Errorf("%s was touched although 2 pods were already down (budget 2)", name)
		}
	}
	k.setNotReady("roll-0", false)
	k.setNotReady("roll-1", false)
	set = f.waitSettled("roll", time.Minute)
	rev3 := set.Status.UpdateRevision

	// Paused: a new template moves nothing; scaling still works.
	f.updateSet("roll", func(s *jkev1alpha1.EnhancedStatefulSet) {
		s.Spec.UpdateStrategy.RollingUpdate.Paused = true
		s.Spec.Template.Spec.Containers[0].Image = "app:v4"
	})
	f.updateSet("roll", func(s *jkev1alpha1.EnhancedStatefulSet) { s.Spec.Replicas = ptr.To[int32](7) })
	f.eventually(time.Minute, "scale to 7 while paused", func() (bool, error) {
		s := f.getSet("roll")
		return s.Status.ReadyReplicas == 7 && s.Status.ObservedGeneration == s.Generation, nil
	})
	set = f.getSet("roll")
	rev4 := set.Status.UpdateRevision
	got := podRevisions(f.pods(), "roll", 7)
	if !slices.Equal(got[:6], slices.Repeat([]string{rev3}, 6)) || got[6] != rev4 {
		t.Errorf("paused: revisions %v (want 6×%s then the new pod at %s)", got, rev3, rev4)
	}
	if c := meta.FindStatusCondition(set.Status.Conditions, ests.ConditionPaused); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Paused condition: %+v", c)
	}

	// Rollback to v1 under the same budget: the old revision is re-used, not copied.
	mon.reset(7)
	f.updateSet("roll", func(s *jkev1alpha1.EnhancedStatefulSet) {
		s.Spec.UpdateStrategy.RollingUpdate.Paused = false
		s.Spec.Template = v1.Spec.Template
	})
	set = f.waitSettled("roll", time.Minute)
	if set.Status.UpdateRevision != rev1 {
		t.Errorf("rollback: updateRevision %s, want the original %s", set.Status.UpdateRevision, rev1)
	}
	if got := podImages(f.pods(), "roll", 7); !slices.Equal(got, slices.Repeat([]string{"app:v1"}, 7)) {
		t.Errorf("rollback: images %v", got)
	}
	if m := mon.maxUnavailable(); m > 2 {
		t.Errorf("rollback exceeded the budget: %d", m)
	}
}

func TestInPlaceIfPossible(t *testing.T) {
	f := newFixture(t)
	f.startKubelet("", 100*time.Millisecond, nil)
	f.startManager(ests.Name)
	f.createSet(newSet("inpl", 3, func(s *jkev1alpha1.EnhancedStatefulSet) {
		s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
		s.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromString("100%"))
		s.Spec.UpdateStrategy.RollingUpdate.PodUpdatePolicy = jkev1alpha1.InPlaceIfPossiblePodUpdatePolicy
	}))
	f.waitSettled("inpl", time.Minute)
	before := f.pods()

	f.updateSet("inpl", func(s *jkev1alpha1.EnhancedStatefulSet) { s.Spec.Template.Spec.Containers[0].Image = "app:v2" })
	f.eventually(time.Minute, "images patched in place", func() (bool, error) {
		s := f.getSet("inpl")
		return s.Status.UpdatedReplicas == 3 && s.Status.AvailableReplicas == 3 && s.Status.ObservedGeneration == s.Generation &&
			slices.Equal(podImages(f.pods(), "inpl", 3), []string{"app:v2", "app:v2", "app:v2"}), nil
	})
	after := f.pods()
	for name, p := range before {
		if after[name].UID != p.UID {
			t.Errorf("%s was recreated; an image-only change must be in place", name)
		}
	}

	// Anything beyond images recreates.
	f.updateSet("inpl", func(s *jkev1alpha1.EnhancedStatefulSet) {
		s.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "X", Value: "1"}}
	})
	f.eventually(time.Minute, "pods recreated for an env change", func() (bool, error) {
		s := f.getSet("inpl")
		if !(s.Status.UpdatedReplicas == 3 && s.Status.AvailableReplicas == 3 && s.Status.ObservedGeneration == s.Generation) {
			return false, nil
		}
		now := f.pods()
		for name, p := range after {
			if now[name] == nil || now[name].UID == p.UID {
				return false, nil
			}
		}
		return true, nil
	})
}

// A rollout's status writes start from the controller's own last write, not from a cache
// that has not shown it yet: pod events (which start the next sync) often arrive before the
// set's own watch event for that write, and every such write failed with a conflict. Nobody
// else writes the set during the rollout, so no write may conflict.
func TestRolloutStatusWritesDoNotConflict(t *testing.T) {
	f := newFixture(t)
	f.startKubelet("", 100*time.Millisecond, nil)
	f.startManager()
	f.createSet(newSet("writes", 12, func(s *jkev1alpha1.EnhancedStatefulSet) {
		s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
		s.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(4))
	}))
	f.waitSettled("writes", time.Minute)
	time.Sleep(time.Second) // the syncs that follow "settled" finish
	success := metrics.StatusWrites.WithLabelValues(ests.Name, "success")
	conflict := metrics.StatusWrites.WithLabelValues(ests.Name, "conflict")

	updated := f.updateSet("writes", func(s *jkev1alpha1.EnhancedStatefulSet) { s.Spec.Template.Spec.Containers[0].Image = "app:v2" })
	// The first sync after the update may have started from the older set: let it pass before
	// counting, then count the whole rollout.
	f.eventually(30*time.Second, "the controller saw the update", func() (bool, error) {
		return f.getSet("writes").Status.ObservedGeneration == updated.Generation, nil
	})
	successBefore, conflictBefore := testutil.ToFloat64(success), testutil.ToFloat64(conflict)
	f.waitSettled("writes", time.Minute)
	time.Sleep(time.Second)
	writes, conflicts := testutil.ToFloat64(success)-successBefore, testutil.ToFloat64(conflict)-conflictBefore
	t.Logf("rollout of 12 pods: %.0f status writes, %.0f conflicts", writes, conflicts)
	if writes < 12 {
		t.Errorf("%.0f status writes for 12 pods updated: the status did not follow the rollout", writes)
	}
	if conflicts != 0 {
		t.Errorf("%.0f of %.0f status writes conflicted", conflicts, writes+conflicts)
	}
}
