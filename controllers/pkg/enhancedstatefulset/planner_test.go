package enhancedstatefulset

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
)

var now = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// podState is a compact pod description: ordinal, revision and health.
type podState struct {
	ord         int
	rev         string
	state       string // "ready" (default), "notready", "pending", "failed", "terminating", "inplace", "justready"
	readySecAgo int    // for minReadySeconds cases; default 1h
}

func mkPod(p podState) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: PodName("web", p.ord), Labels: map[string]string{RevisionLabel: p.rev}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	ago := time.Hour
	if p.readySecAgo > 0 {
		ago = time.Duration(p.readySecAgo) * time.Second
	}
	ready := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-ago))}
	switch p.state {
	case "", "ready":
	case "notready":
		ready.Status = corev1.ConditionFalse
	case "pending":
		pod.Status.Phase = corev1.PodPending
		ready.Status = corev1.ConditionFalse
	case "failed":
		pod.Status.Phase = corev1.PodFailed
		ready.Status = corev1.ConditionFalse
	case "terminating":
		pod.DeletionTimestamp = ptr.To(metav1.NewTime(now))
	case "inplace", "inplace-old", "inplace-done", "inplace-rollback":
		// Patched in place 1 min ago (10 min for inplace-old) from container c1 running img:v1
		// to img:v2; the kubelet runs: c1/img:v1 (pending), c2/img:v2 (done). inplace-rollback:
		// patched back to img:v1 while the kubelet still reported c1 of img:v1 (img:v2 never
		// started): the update is done only once a container other than c1 runs img:v1.
		at, target, old, id, img := now.Add(-time.Minute), "img:v2", "c1", "c1", "img:v1"
		switch p.state {
		case "inplace-old":
			at = now.Add(-10 * time.Minute)
		case "inplace-done":
			id, img = "c2", "docker.io/library/img:v2"
		case "inplace-rollback":
			target, old, id, img = "img:v1", "c1", "c1", "img:v1"
		}
		raw, _ := json.Marshal(InPlaceUpdateState{Revision: p.rev, UpdateTimestamp: metav1.NewTime(at),
			Containers: map[string]InPlaceContainer{"app": {OldContainerID: old, Image: target}}})
		pod.Annotations = map[string]string{AnnotationInPlaceUpdate: string(raw)}
		pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: InPlaceUpdateReady}}
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: InPlaceUpdateReady, Status: corev1.ConditionFalse})
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Image: img, ContainerID: id, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	case "gated":
		// The controller set the InPlaceUpdateReady gate False for an in-place update (the
		// kubelet then made the pod not Ready) and its image patch did not land: no update
		// record, still at its old revision.
		ready.Status = corev1.ConditionFalse
		pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: InPlaceUpdateReady}}
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: InPlaceUpdateReady, Status: corev1.ConditionFalse, Reason: "InPlaceUpdating"})
	case "imagepull":
		pod.Status.Phase = corev1.PodPending
		ready.Status = corev1.ConditionFalse
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull"}}}}
	}
	pod.Status.Conditions = append([]corev1.PodCondition{ready}, pod.Status.Conditions...)
	return pod
}

func tmpl(image, env string) *corev1.PodTemplateSpec {
	t := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}}}
	if env != "" {
		t.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "X", Value: env}}
	}
	return t
}

type specOpt func(*jkev1alpha1.EnhancedStatefulSetSpec)

func replicas(n int32) specOpt {
	return func(s *jkev1alpha1.EnhancedStatefulSetSpec) { s.Replicas = ptr.To(n) }
}
func parallel(s *jkev1alpha1.EnhancedStatefulSetSpec) {
	s.PodManagementPolicy = appsv1.ParallelPodManagement
}
func onDelete(s *jkev1alpha1.EnhancedStatefulSetSpec) {
	s.UpdateStrategy.Type = appsv1.OnDeleteStatefulSetStrategyType
	s.UpdateStrategy.RollingUpdate = nil
}
func partition(n int32) specOpt {
	return func(s *jkev1alpha1.EnhancedStatefulSetSpec) { s.UpdateStrategy.RollingUpdate.Partition = ptr.To(n) }
}
func maxUnav(v intstr.IntOrString) specOpt {
	return func(s *jkev1alpha1.EnhancedStatefulSetSpec) { s.UpdateStrategy.RollingUpdate.MaxUnavailable = &v }
}
func paused(s *jkev1alpha1.EnhancedStatefulSetSpec) { s.UpdateStrategy.RollingUpdate.Paused = true }
func inPlace(s *jkev1alpha1.EnhancedStatefulSetSpec) {
	s.UpdateStrategy.RollingUpdate.PodUpdatePolicy = jkev1alpha1.InPlaceIfPossiblePodUpdatePolicy
}
func minReady(n int32) specOpt {
	return func(s *jkev1alpha1.EnhancedStatefulSetSpec) { s.MinReadySeconds = n }
}

// ready pods 0..n-1 at rev.
func readyPods(n int, rev string) []podState {
	var out []podState
	for i := 0; i < n; i++ {
		out = append(out, podState{ord: i, rev: rev})
	}
	return out
}

func with(base []podState, changes ...podState) []podState {
	out := append([]podState(nil), base...)
	for _, c := range changes {
		found := false
		for i := range out {
			if out[i].ord == c.ord {
				out[i], found = c, true
			}
		}
		if !found {
			out = append(out, c)
		}
	}
	return out
}

func without(base []podState, ords ...int) []podState {
	var out []podState
	for _, p := range base {
		drop := false
		for _, o := range ords {
			drop = drop || p.ord == o
		}
		if !drop {
			out = append(out, p)
		}
	}
	return out
}

// planTemplates are the revisions computePlanCases refer to: r2 changes only the image of r1
// (in place), r3 also the environment.
var planTemplates = map[string]*corev1.PodTemplateSpec{
	"r1": tmpl("img:v1", ""), "r2": tmpl("img:v2", ""), "r3": tmpl("img:v2", "changed"),
}

func pct(s string) intstr.IntOrString { return intstr.FromString(s) }
func num(n int) intstr.IntOrString    { return intstr.FromInt32(int32(n)) }

// computePlanCase: a set's spec (opts), its pods and revisions, and the actions the planner
// must decide (Action.String), with the budget it counts.
type computePlanCase struct {
	name            string
	opts            []specOpt
	pods            []podState
	current, update string
	want            []string
	wantUnavailable int
	wantMax         int
}

// computePlanCases is TestComputePlan's table.
var computePlanCases = []computePlanCase{
	{name: "empty set OrderedReady creates ordinal 0 only", opts: []specOpt{replicas(3)},
		current: "r1", update: "r1", want: []string{"create 0@r1"}, wantUnavailable: 3, wantMax: 1},
	{name: "empty set Parallel creates all", opts: []specOpt{replicas(3), parallel},
		current: "r1", update: "r1", want: []string{"create 0@r1", "create 1@r1", "create 2@r1"}, wantUnavailable: 3, wantMax: 1},
	{name: "OrderedReady waits for a not ready lower ordinal", opts: []specOpt{replicas(3)},
		pods: []podState{{ord: 0, rev: "r1", state: "notready"}}, current: "r1", update: "r1", want: nil, wantUnavailable: 3, wantMax: 1},
	{name: "OrderedReady creates next when lower is ready", opts: []specOpt{replicas(3)},
		pods: readyPods(1, "r1"), current: "r1", update: "r1", want: []string{"create 1@r1"}, wantUnavailable: 2, wantMax: 1},
	{name: "steady state does nothing", opts: []specOpt{replicas(3)},
		pods: readyPods(3, "r1"), current: "r1", update: "r1", want: nil, wantMax: 1},
	{name: "failed pod is replaced", opts: []specOpt{replicas(3)},
		pods: with(readyPods(3, "r1"), podState{ord: 1, rev: "r1", state: "failed"}), current: "r1", update: "r1",
		want: []string{"delete 1 (Failed)"}, wantUnavailable: 1, wantMax: 1},
	{name: "terminating pod is waited for, not recreated", opts: []specOpt{replicas(3), parallel},
		pods: with(readyPods(3, "r1"), podState{ord: 1, rev: "r1", state: "terminating"}), current: "r1", update: "r1",
		want: nil, wantUnavailable: 1, wantMax: 1},
	{name: "OrderedReady scale down deletes highest condemned only", opts: []specOpt{replicas(2)},
		pods: readyPods(5, "r1"), current: "r1", update: "r1", want: []string{"delete 4 (Condemned)"}, wantMax: 1},
	{name: "OrderedReady scale down waits for unhealthy replica", opts: []specOpt{replicas(2)},
		pods: with(readyPods(4, "r1"), podState{ord: 0, rev: "r1", state: "notready"}), current: "r1", update: "r1", want: nil, wantUnavailable: 1, wantMax: 1},
	{name: "Parallel scale down deletes all condemned", opts: []specOpt{replicas(2), parallel},
		pods: readyPods(5, "r1"), current: "r1", update: "r1",
		want: []string{"delete 4 (Condemned)", "delete 3 (Condemned)", "delete 2 (Condemned)"}, wantMax: 1},
	{name: "default rolling update: one pod, highest ordinal", opts: []specOpt{replicas(3)},
		pods: readyPods(3, "r1"), current: "r1", update: "r2", want: []string{"delete 2 (Update)"}, wantMax: 1},
	{name: "maxUnavailable 2 updates two highest", opts: []specOpt{replicas(6), maxUnav(num(2))},
		pods: readyPods(6, "r1"), current: "r1", update: "r2", want: []string{"delete 5 (Update)", "delete 4 (Update)"}, wantMax: 2},
	{name: "partition 3 maxUnavailable 2 (published scenario, first batch)", opts: []specOpt{replicas(6), parallel, partition(3), maxUnav(num(2))},
		pods: readyPods(6, "r1"), current: "r1", update: "r2", want: []string{"delete 5 (Update)", "delete 4 (Update)"}, wantMax: 2},
	{name: "partition 3: second batch only ordinal 3 (0-2 stay)", opts: []specOpt{replicas(6), parallel, partition(3), maxUnav(num(2))},
		pods: with(readyPods(6, "r1"), podState{ord: 4, rev: "r2"}, podState{ord: 5, rev: "r2"}), current: "r1", update: "r2",
		want: []string{"delete 3 (Update)"}, wantMax: 2},
	{name: "partition 3 done: nothing below the partition moves", opts: []specOpt{replicas(6), parallel, partition(3), maxUnav(num(2))},
		pods: with(readyPods(6, "r1"), podState{ord: 3, rev: "r2"}, podState{ord: 4, rev: "r2"}, podState{ord: 5, rev: "r2"}), current: "r1", update: "r2",
		want: nil, wantMax: 2},
	{name: "partition 0 finishes the rest", opts: []specOpt{replicas(6), parallel, partition(0), maxUnav(num(2))},
		pods: with(readyPods(6, "r1"), podState{ord: 3, rev: "r2"}, podState{ord: 4, rev: "r2"}, podState{ord: 5, rev: "r2"}), current: "r1", update: "r2",
		want: []string{"delete 2 (Update)", "delete 1 (Update)"}, wantMax: 2},
	{name: "recreated pod above partition created at update revision", opts: []specOpt{replicas(6), parallel, partition(3), maxUnav(num(2))},
		pods: without(readyPods(6, "r1"), 5, 4), current: "r1", update: "r2",
		want: []string{"create 4@r2", "create 5@r2"}, wantUnavailable: 2, wantMax: 2},
	{name: "missing pod below partition created at current revision", opts: []specOpt{replicas(6), parallel, partition(3), maxUnav(num(2))},
		pods: without(readyPods(6, "r1"), 1), current: "r1", update: "r2",
		want: []string{"create 1@r1", "delete 5 (Update)"}, wantUnavailable: 1, wantMax: 2},
	{name: "two already down with budget 2: only they are replaced, nothing healthy goes down", opts: []specOpt{replicas(6), parallel, partition(0), maxUnav(num(2))},
		pods: with(readyPods(6, "r1"), podState{ord: 0, rev: "r1", state: "notready"}, podState{ord: 1, rev: "r1", state: "notready"}), current: "r1", update: "r2",
		want: []string{"delete 1 (Unavailable)", "delete 0 (Unavailable)"}, wantUnavailable: 2, wantMax: 2},
	{name: "one already down with budget 3: two updates", opts: []specOpt{replicas(6), parallel, maxUnav(num(3))},
		pods: with(readyPods(6, "r1"), podState{ord: 0, rev: "r1", state: "notready"}), current: "r1", update: "r2",
		want: []string{"delete 0 (Unavailable)", "delete 5 (Update)", "delete 4 (Update)"}, wantUnavailable: 1, wantMax: 3},
	{name: "updated pods not yet ready consume the budget", opts: []specOpt{replicas(6), parallel, maxUnav(num(2))},
		pods: with(readyPods(6, "r1"), podState{ord: 5, rev: "r2", state: "pending"}), current: "r1", update: "r2",
		want: []string{"delete 4 (Update)"}, wantUnavailable: 1, wantMax: 2},
	{name: "broken new revision stops at the budget", opts: []specOpt{replicas(6), parallel, maxUnav(num(2))},
		pods: with(readyPods(6, "r1"), podState{ord: 5, rev: "r2", state: "notready"}, podState{ord: 4, rev: "r2", state: "notready"}), current: "r1", update: "r2",
		want: nil, wantUnavailable: 2, wantMax: 2},
	{name: "percent 50% of 6 = 3", opts: []specOpt{replicas(6), parallel, maxUnav(pct("50%"))},
		pods: readyPods(6, "r1"), current: "r1", update: "r2",
		want: []string{"delete 5 (Update)", "delete 4 (Update)", "delete 3 (Update)"}, wantMax: 3},
	{name: "percent rounds down: 40% of 6 = 2", opts: []specOpt{replicas(6), parallel, maxUnav(pct("40%"))},
		pods: readyPods(6, "r1"), current: "r1", update: "r2",
		want: []string{"delete 5 (Update)", "delete 4 (Update)"}, wantMax: 2},
	{name: "percent at least 1: 10% of 3", opts: []specOpt{replicas(3), parallel, maxUnav(pct("10%"))},
		pods: readyPods(3, "r1"), current: "r1", update: "r2", want: []string{"delete 2 (Update)"}, wantMax: 1},
	{name: "paused: no updates", opts: []specOpt{replicas(6), parallel, maxUnav(num(2)), paused},
		pods: readyPods(6, "r1"), current: "r1", update: "r2", want: nil, wantMax: 2},
	{name: "paused: scale up still works, new pods at update revision", opts: []specOpt{replicas(8), parallel, maxUnav(num(2)), paused},
		pods: readyPods(6, "r1"), current: "r1", update: "r2", want: []string{"create 6@r2", "create 7@r2"}, wantUnavailable: 2, wantMax: 2},
	{name: "paused: scale down still works", opts: []specOpt{replicas(4), parallel, maxUnav(num(2)), paused},
		pods: readyPods(6, "r1"), current: "r1", update: "r2", want: []string{"delete 5 (Condemned)", "delete 4 (Condemned)"}, wantMax: 2},
	{name: "OrderedReady update waits while a recreated pod is not ready", opts: []specOpt{replicas(6), maxUnav(num(2))},
		pods: with(readyPods(6, "r1"), podState{ord: 5, rev: "r2", state: "pending"}), current: "r1", update: "r2",
		want: nil, wantUnavailable: 1, wantMax: 2},
	{name: "OrderedReady recreates missing updated pods lowest first, one at a time", opts: []specOpt{replicas(6), maxUnav(num(2))},
		pods: without(readyPods(6, "r1"), 4, 5), current: "r1", update: "r2",
		want: []string{"create 4@r2"}, wantUnavailable: 2, wantMax: 2},
	{name: "scale up during update: new ordinals at update revision, budget counts them", opts: []specOpt{replicas(6), parallel, maxUnav(num(3))},
		pods: readyPods(4, "r1"), current: "r1", update: "r2",
		want: []string{"create 4@r2", "create 5@r2", "delete 3 (Update)"}, wantUnavailable: 2, wantMax: 3},
	{name: "scale down during update: condemned deleted, update continues within budget", opts: []specOpt{replicas(3), parallel, maxUnav(num(1))},
		pods: with(readyPods(5, "r1"), podState{ord: 4, rev: "r2"}), current: "r1", update: "r2",
		want: []string{"delete 4 (Condemned)", "delete 3 (Condemned)", "delete 2 (Update)"}, wantMax: 1},
	{name: "rollback: update revision back to r1, pods at r2 recreated", opts: []specOpt{replicas(4), parallel, maxUnav(num(2))},
		pods: with(readyPods(4, "r1"), podState{ord: 3, rev: "r2"}, podState{ord: 2, rev: "r2"}), current: "r2", update: "r1",
		want: []string{"delete 3 (Update)", "delete 2 (Update)"}, wantMax: 2},
	{name: "rollback respects an already unavailable pod", opts: []specOpt{replicas(4), parallel, maxUnav(num(2))},
		pods: with(readyPods(4, "r1"), podState{ord: 3, rev: "r2", state: "notready"}, podState{ord: 2, rev: "r2"}), current: "r2", update: "r1",
		want: []string{"delete 3 (Unavailable)", "delete 2 (Update)"}, wantUnavailable: 1, wantMax: 2},
	{name: "rollback of a broken rollout: pods down on the abandoned revision are replaced without budget", opts: []specOpt{replicas(6), parallel, maxUnav(num(2))},
		pods: with(readyPods(6, "r2"), podState{ord: 5, rev: "r3", state: "pending"}, podState{ord: 4, rev: "r3", state: "pending"}), current: "r2", update: "r1",
		want: []string{"delete 5 (Unavailable)", "delete 4 (Unavailable)"}, wantUnavailable: 2, wantMax: 2},
	{name: "abandoned revision: a ready pod still uses the budget, a down one does not", opts: []specOpt{replicas(6), parallel, maxUnav(num(2))},
		pods: with(readyPods(6, "r2"), podState{ord: 5, rev: "r3"}, podState{ord: 4, rev: "r3", state: "notready"}), current: "r2", update: "r1",
		want: []string{"delete 4 (Unavailable)", "delete 5 (Update)"}, wantUnavailable: 1, wantMax: 2},
	{name: "broken rollout, template unchanged: nothing more goes down", opts: []specOpt{replicas(6), parallel, maxUnav(num(2))},
		pods: with(readyPods(6, "r2"), podState{ord: 5, rev: "r3", state: "pending"}, podState{ord: 4, rev: "r3", state: "pending"}), current: "r2", update: "r3",
		want: nil, wantUnavailable: 2, wantMax: 2},
	{name: "rollback while paused: nothing moves", opts: []specOpt{replicas(6), parallel, maxUnav(num(2)), paused},
		pods: with(readyPods(6, "r2"), podState{ord: 5, rev: "r3", state: "pending"}, podState{ord: 4, rev: "r3", state: "pending"}), current: "r2", update: "r1",
		want: nil, wantUnavailable: 2, wantMax: 2},
	{name: "OnDelete: no updates, recreated pods at update revision", opts: []specOpt{replicas(3), parallel, onDelete},
		pods: without(readyPods(3, "r1"), 0), current: "r1", update: "r2", want: []string{"create 0@r2"}, wantUnavailable: 1, wantMax: 1},
	{name: "OnDelete ignores partition-like state", opts: []specOpt{replicas(3), onDelete},
		pods: readyPods(3, "r1"), current: "r1", update: "r2", want: nil, wantMax: 1},
	{name: "minReadySeconds: just ready pod is unavailable and blocks the budget", opts: []specOpt{replicas(4), parallel, maxUnav(num(1)), minReady(30)},
		pods: with(readyPods(4, "r1"), podState{ord: 3, rev: "r2", readySecAgo: 5}), current: "r1", update: "r2",
		want: nil, wantUnavailable: 1, wantMax: 1},
	{name: "minReadySeconds: pod ready long enough frees the budget", opts: []specOpt{replicas(4), parallel, maxUnav(num(1)), minReady(30)},
		pods: with(readyPods(4, "r1"), podState{ord: 3, rev: "r2", readySecAgo: 31}), current: "r1", update: "r2",
		want: []string{"delete 2 (Update)"}, wantMax: 1},
	{name: "InPlaceIfPossible: image only change patches in place", opts: []specOpt{replicas(4), parallel, maxUnav(num(2)), inPlace},
		pods: readyPods(4, "r1"), current: "r1", update: "r2", want: []string{"inplace 3@r2", "inplace 2@r2"}, wantMax: 2},
	{name: "InPlaceIfPossible: other changes recreate", opts: []specOpt{replicas(4), parallel, maxUnav(num(2)), inPlace},
		pods: readyPods(4, "r1"), current: "r1", update: "r3", want: []string{"delete 3 (Update)", "delete 2 (Update)"}, wantMax: 2},
	{name: "InPlaceIfPossible: unknown old revision recreates", opts: []specOpt{replicas(2), parallel, inPlace},
		pods: readyPods(2, "r0"), current: "r0", update: "r2", want: []string{"delete 1 (Update)"}, wantMax: 1},
	// The image patch after the gate went False conflicted with the kubelet's status write:
	// the pod is patched again, never readied in between (once both went out concurrently, the
	// gate flapped False → True → False and the kubelet reported the pod Ready for a second
	// while its container was about to restart).
	{name: "InPlaceIfPossible: a gated pod whose patch did not land is patched again, not readied", opts: []specOpt{replicas(4), parallel, maxUnav(num(2)), inPlace},
		pods: with(readyPods(4, "r1"), podState{ord: 3, rev: "r1", state: "gated"}), current: "r1", update: "r2",
		want: []string{"inplace 3@r2", "inplace 2@r2"}, wantUnavailable: 1, wantMax: 2},
	{name: "InPlaceIfPossible: a gated pod of a paused rollout is readied", opts: []specOpt{replicas(4), parallel, maxUnav(num(2)), inPlace, paused},
		pods: with(readyPods(4, "r1"), podState{ord: 3, rev: "r1", state: "gated"}), current: "r1", update: "r2",
		want: []string{"ready 3"}, wantUnavailable: 1, wantMax: 2},
	{name: "InPlaceIfPossible: pending in-place update counts as unavailable", opts: []specOpt{replicas(4), parallel, maxUnav(num(2)), inPlace},
		pods: with(readyPods(4, "r1"), podState{ord: 3, rev: "r2", state: "inplace"}), current: "r1", update: "r2",
		want: []string{"inplace 2@r2"}, wantUnavailable: 1, wantMax: 2},
	// Forced rollback under OrderedReady: the published example (partition 3, maxUnavailable
	// 2) rolled to a broken image left ordinal 4 Pending and 5 missing; the template is back
	// at r1. Ordinal 4 is replaced at once, without budget.
	{name: "OrderedReady rollback replaces the pod stuck on the abandoned revision", opts: []specOpt{replicas(6), partition(3), maxUnav(num(2))},
		pods: with(without(readyPods(6, "r1"), 5), podState{ord: 4, rev: "r2", state: "imagepull"}), current: "r1", update: "r1",
		want: []string{"delete 4 (Unavailable)"}, wantUnavailable: 2, wantMax: 2},
	{name: "OrderedReady rollback does not wait for an unready lower ordinal", opts: []specOpt{replicas(6), maxUnav(num(1))},
		pods: with(readyPods(6, "r1"), podState{ord: 1, rev: "r1", state: "notready"}, podState{ord: 5, rev: "r2", state: "imagepull"}), current: "r1", update: "r1",
		want: []string{"delete 5 (Unavailable)"}, wantUnavailable: 2, wantMax: 1},
	{name: "forced rollback respects the partition", opts: []specOpt{replicas(6), parallel, partition(3), maxUnav(num(2))},
		pods: with(readyPods(6, "r1"), podState{ord: 1, rev: "r2", state: "imagepull"}), current: "r1", update: "r1",
		want: nil, wantUnavailable: 1, wantMax: 2},
	// Upstream counts condemned pods that are unavailable against maxUnavailable.
	{name: "unavailable condemned pod uses the budget", opts: []specOpt{replicas(4), parallel, maxUnav(num(2))},
		pods: with(readyPods(5, "r1"), podState{ord: 4, rev: "r1", state: "notready"}), current: "r1", update: "r2",
		want: []string{"delete 4 (Condemned)", "delete 3 (Update)"}, wantUnavailable: 1, wantMax: 2},
	{name: "terminating condemned pod uses the budget", opts: []specOpt{replicas(4), parallel, maxUnav(num(1))},
		pods: with(readyPods(5, "r1"), podState{ord: 4, rev: "r1", state: "terminating"}), current: "r1", update: "r2",
		want: nil, wantUnavailable: 1, wantMax: 1},
	// In place: done only when a new container runs the target image.
	{name: "InPlaceIfPossible: rollback of a pending in-place update goes back in place, free", opts: []specOpt{replicas(4), parallel, maxUnav(num(1)), inPlace},
		pods: with(readyPods(4, "r1"), podState{ord: 3, rev: "r2", state: "inplace"}), current: "r1", update: "r1",
		want: []string{"inplace 3@r1"}, wantUnavailable: 1, wantMax: 1},
	{name: "InPlaceIfPossible: an old container of the target image is not the update", opts: []specOpt{replicas(4), parallel, maxUnav(num(1)), inPlace},
		pods: with(readyPods(4, "r1"), podState{ord: 3, rev: "r1", state: "inplace-rollback"}), current: "r1", update: "r1",
		want: nil, wantUnavailable: 1, wantMax: 1},
	{name: "InPlaceIfPossible: a new container of the target image finishes the update", opts: []specOpt{replicas(4), parallel, maxUnav(num(1)), inPlace},
		pods: with(readyPods(4, "r1"), podState{ord: 3, rev: "r2", state: "inplace-done"}), current: "r1", update: "r2",
		want: []string{"ready 3", "inplace 2@r2"}, wantUnavailable: 0, wantMax: 1},
	{name: "InPlaceIfPossible: an update that did not reach the kubelet in time is recreated", opts: []specOpt{replicas(4), parallel, maxUnav(num(1)), inPlace},
		pods: with(readyPods(4, "r1"), podState{ord: 3, rev: "r2", state: "inplace-old"}), current: "r1", update: "r2",
		want: []string{"delete 3 (InPlaceUpdateTimeout)"}, wantUnavailable: 1, wantMax: 1},
	{name: "pods with foreign names are ignored", opts: []specOpt{replicas(1)},
		pods: readyPods(1, "r1"), current: "r1", update: "r1", want: nil, wantMax: 1},
	{name: "scale to zero Parallel", opts: []specOpt{replicas(0), parallel},
		pods: readyPods(2, "r1"), current: "r1", update: "r2", want: []string{"delete 1 (Condemned)", "delete 0 (Condemned)"}, wantMax: 1},
}

func TestComputePlan(t *testing.T) {
	for _, tc := range computePlanCases {
		t.Run(tc.name, func(t *testing.T) {
			spec := &jkev1alpha1.EnhancedStatefulSetSpec{
				UpdateStrategy: jkev1alpha1.EnhancedStatefulSetUpdateStrategy{
					Type:          appsv1.RollingUpdateStatefulSetStrategyType,
					RollingUpdate: &jkev1alpha1.RollingUpdateEnhancedStatefulSetStrategy{},
				},
			}
			for _, o := range tc.opts {
				o(spec)
			}
			var pods []*corev1.Pod
			for _, p := range tc.pods {
				pods = append(pods, mkPod(p))
			}
			pods = append(pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-x"}}, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other-0"}})
			plan, err := ComputePlan(PlanInput{Spec: spec, SetName: "web", Pods: pods, CurrentRevision: tc.current,
				UpdateRevision: tc.update, Templates: planTemplates, Now: now, InPlaceUpdateTimeout: 5 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, a := range plan.Actions {
				got = append(got, a.String())
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("actions:\n got  %s\n want %s", strings.Join(got, ", "), strings.Join(tc.want, ", "))
			}
			if plan.Unavailable != tc.wantUnavailable || plan.MaxUnavailable != tc.wantMax {
				t.Errorf("unavailable/max = %d/%d, want %d/%d", plan.Unavailable, plan.MaxUnavailable, tc.wantUnavailable, tc.wantMax)
			}
			// Invariant: pods taken down by this plan never push unavailability past the budget
			// (replacing a pod that is already down takes nothing more down).
			healthy := map[int]bool{}
			for _, p := range tc.pods {
				healthy[p.ord] = p.state == "" || p.state == "ready"
			}
			down := 0
			for _, a := range plan.Actions {
				if (a.Reason == ReasonUpdate || a.Type == ActionInPlaceUpdate) && healthy[a.Ordinal] {
					down++
				}
			}
			if down > 0 && plan.Unavailable+down > plan.MaxUnavailable {
				t.Errorf("plan takes %d pods down with %d unavailable, budget %d", down, plan.Unavailable, plan.MaxUnavailable)
			}
		})
	}
}

func TestComputePlanStatusAndRequeue(t *testing.T) {
	spec := &jkev1alpha1.EnhancedStatefulSetSpec{Replicas: ptr.To[int32](4), MinReadySeconds: 10}
	pods := []*corev1.Pod{
		mkPod(podState{ord: 0, rev: "r1"}),
		mkPod(podState{ord: 1, rev: "r1", readySecAgo: 4}),
		mkPod(podState{ord: 2, rev: "r2", state: "notready"}),
		mkPod(podState{ord: 3, rev: "r2"}),
	}
	plan, err := ComputePlan(PlanInput{Spec: spec, SetName: "web", Pods: pods, CurrentRevision: "r1", UpdateRevision: "r2", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	got := []int32{plan.Replicas, plan.ReadyReplicas, plan.AvailableReplicas, plan.CurrentReplicas, plan.UpdatedReplicas}
	if want := []int32{4, 3, 2, 2, 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("replicas/ready/available/current/updated = %v, want %v", got, want)
	}
	if plan.RequeueAfter < 5*time.Second || plan.RequeueAfter > 7*time.Second {
		t.Errorf("RequeueAfter = %v, want about 6s (pod 1 becomes available then)", plan.RequeueAfter)
	}
}

func TestResolveMaxUnavailableRejectsGarbage(t *testing.T) {
	v := intstr.FromString("lots")
	if _, err := ResolveMaxUnavailable(&v, 5); err == nil {
		t.Fatal("want an error for maxUnavailable \"lots\"")
	}
}

func TestImageOnlyChange(t *testing.T) {
	if imgs, ok := ImageOnlyChange(tmpl("a:1", ""), tmpl("a:2", "")); !ok || imgs["app"] != "a:2" {
		t.Errorf("image change: %v %v", imgs, ok)
	}
	if _, ok := ImageOnlyChange(tmpl("a:1", ""), tmpl("a:2", "e")); ok {
		t.Error("env change must not be in place")
	}
	if _, ok := ImageOnlyChange(nil, tmpl("a:2", "")); ok {
		t.Error("unknown revision must not be in place")
	}
}

// While a rollout waits, the plan names the pods it waits on and why.
func TestComputePlanWaiting(t *testing.T) {
	templates := map[string]*corev1.PodTemplateSpec{"r1": tmpl("img:v1", ""), "r2": tmpl("img:v2", "")}
	cases := []struct {
		name      string
		opts      []specOpt
		pods      []podState
		want      WaitReason
		wantStuck bool
		wantInMsg []string
	}{
		{name: "OrderedReady waits for the broken pod", opts: []specOpt{replicas(6), maxUnav(intstr.FromInt32(2))},
			pods: with(without(readyPods(6, "r1"), 5), podState{ord: 4, rev: "r2", state: "imagepull"}),
			want: WaitPod, wantStuck: true, wantInMsg: []string{"web-4", "ErrImagePull"}},
		{name: "Parallel waits for the budget", opts: []specOpt{replicas(6), parallel, maxUnav(intstr.FromInt32(2))},
			pods: with(readyPods(6, "r1"), podState{ord: 5, rev: "r2", state: "imagepull"}, podState{ord: 4, rev: "r2", state: "notready"}),
			want: WaitBudget, wantStuck: true, wantInMsg: []string{"web-5 (Pending: app ErrImagePull)", "web-4 (not Ready)"}},
		{name: "paused names the pods left", opts: []specOpt{replicas(3), parallel, paused},
			pods: readyPods(3, "r1"), want: WaitPaused, wantInMsg: []string{"web-2, web-1, web-0"}},
		{name: "a normal batch waits on nothing stuck", opts: []specOpt{replicas(3), parallel},
			pods: with(readyPods(3, "r1"), podState{ord: 2, rev: "r2", state: "notready"}), want: WaitBudget, wantInMsg: []string{"web-2 (not Ready)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := &jkev1alpha1.EnhancedStatefulSetSpec{UpdateStrategy: jkev1alpha1.EnhancedStatefulSetUpdateStrategy{
				Type: appsv1.RollingUpdateStatefulSetStrategyType, RollingUpdate: &jkev1alpha1.RollingUpdateEnhancedStatefulSetStrategy{}}}
			for _, o := range tc.opts {
				o(spec)
			}
			var pods []*corev1.Pod
			for _, p := range tc.pods {
				pods = append(pods, mkPod(p))
			}
			plan, err := ComputePlan(PlanInput{Spec: spec, SetName: "web", Pods: pods, CurrentRevision: "r1", UpdateRevision: "r2", Templates: templates, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			if plan.Waiting == nil {
				t.Fatalf("waiting on nothing; actions %v", plan.Actions)
			}
			if plan.Waiting.Reason != tc.want || plan.Waiting.Stuck != tc.wantStuck {
				t.Errorf("reason %s stuck %v, want %s %v", plan.Waiting.Reason, plan.Waiting.Stuck, tc.want, tc.wantStuck)
			}
			for _, sub := range tc.wantInMsg {
				if !strings.Contains(plan.Waiting.Message, sub) {
					t.Errorf("message %q does not name %q", plan.Waiting.Message, sub)
				}
			}
		})
	}
}
