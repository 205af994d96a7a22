package bench

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const (
	v1 = "localhost/staticip/testserver:v1"
	v2 = "localhost/staticip/testserver:v2"
)

type podOpt func(*corev1.Pod)

func notReady(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }
func terminating(p *corev1.Pod) {
	now := metav1.Now()
	p.DeletionTimestamp = &now
}
func pending(p *corev1.Pod) {
	p.Status.Phase = corev1.PodPending
	p.Status.ContainerStatuses = nil
}

// specImage is a pod whose spec was patched to image while the kubelet still runs the old one.
func specImage(image string) podOpt {
	return func(p *corev1.Pod) { p.Spec.Containers[0].Image = image }
}

// pod is a running, Ready pod of image.
func pod(name, image string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "testserver", Image: image}}},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "testserver", Image: image, Ready: true,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func TestUnavailable(t *testing.T) {
	cases := []struct {
		name string
		pods []*corev1.Pod
		want int
	}{
		{"all ready", []*corev1.Pod{pod("s-0", v1), pod("s-1", v1), pod("s-2", v1)}, 0},
		{"none", nil, 3},
		{"missing ordinal", []*corev1.Pod{pod("s-0", v1), pod("s-2", v1)}, 1},
		{"not ready", []*corev1.Pod{pod("s-0", v1), pod("s-1", v1, notReady), pod("s-2", v2)}, 1},
		{"terminating but still ready", []*corev1.Pod{pod("s-0", v1, terminating), pod("s-1", v1), pod("s-2", v1)}, 1},
		{"pending replacement", []*corev1.Pod{pod("s-0", v2, pending), pod("s-1", v1), pod("s-2", v1)}, 1},
		{"condemned ordinal and other sets ignored", []*corev1.Pod{pod("s-0", v1), pod("s-1", v1), pod("s-2", v1, notReady), pod("s-3", v1), pod("t-2", v1)}, 1},
	}
	for _, c := range cases {
		if got := Unavailable("s", 3, c.pods); got != c.want {
			t.Errorf("%s: Unavailable = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestUnavailablePods(t *testing.T) {
	pods := []*corev1.Pod{pod("s-0", v1, terminating), pod("s-1", v1), pod("s-3", v2, notReady), pod("s-4", v2, pending)}
	got := strings.Join(UnavailablePods("s", 5, pods), ", ")
	if want := "s-0 terminating, s-2 missing, s-3 not ready, s-4 not ready"; got != want {
		t.Errorf("UnavailablePods = %q, want %q", got, want)
	}
}

func TestRolledOut(t *testing.T) {
	cases := []struct {
		name string
		pods []*corev1.Pod
		want bool
	}{
		{"all at v2 and ready", []*corev1.Pod{pod("s-0", v2), pod("s-1", v2)}, true},
		{"one still v1", []*corev1.Pod{pod("s-0", v2), pod("s-1", v1)}, false},
		{"one v2 not ready", []*corev1.Pod{pod("s-0", v2), pod("s-1", v2, notReady)}, false},
		{"one missing", []*corev1.Pod{pod("s-0", v2)}, false},
		{"old one terminating beside", []*corev1.Pod{pod("s-0", v2), pod("s-1", v2, terminating)}, false},
		{"in-place patched, kubelet still runs v1", []*corev1.Pod{pod("s-0", v2), pod("s-1", v1, specImage(v2))}, false},
		{"condemned pod left", []*corev1.Pod{pod("s-0", v2), pod("s-1", v2), pod("s-2", v1)}, false},
		{"pods of another set ignored", []*corev1.Pod{pod("s-0", v2), pod("s-1", v2), pod("t-0", v1)}, true},
	}
	for _, c := range cases {
		if got := RolledOut("s", 2, v2, c.pods); got != c.want {
			t.Errorf("%s: RolledOut = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestMedian(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		in   []time.Duration
		want time.Duration
	}{
		{nil, 0},
		{[]time.Duration{3 * s}, 3 * s},
		{[]time.Duration{9 * s, 1 * s, 5 * s}, 5 * s},
		{[]time.Duration{4 * s, 1 * s, 2 * s, 10 * s}, 3 * s},
	} {
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	in := []time.Duration{3, 1, 2}
	Median(in)
	if in[0] != 3 || in[1] != 1 {
		t.Errorf("Median sorted its argument: %v", in)
	}
}

func TestPrintTable(t *testing.T) {
	s := time.Second
	results := []Result{
		{Round: 1, Workload: "ests", Rollout: 20 * s, MaxUnavailable: 10, CreateAll: 9 * s, DeleteAll: 5 * s},
		{Round: 1, Workload: "statefulset", Rollout: 150 * s, MaxUnavailable: 1, CreateAll: 11 * s, DeleteAll: 6 * s},
		{Round: 2, Workload: "statefulset", Rollout: 130 * s, MaxUnavailable: 1, CreateAll: 10 * s, DeleteAll: 8 * s},
		{Round: 2, Workload: "ests", Rollout: 30 * s, MaxUnavailable: 9}, // failed deletion: not counted
	}
	sums := Summarize(results)
	if len(sums) != 2 || sums[0].Workload != "ests" || sums[0].Median != 25*s || sums[0].MaxUnavailable != 10 || sums[1].Median != 140*s {
		t.Fatalf("Summarize = %+v", sums)
	}
	budget := func(w string) int { return Budget(w, 10) }
	cases := []struct {
		name          string
		results       []Result
		want, wantNot []string
	}{
		{"only the budget-1 StatefulSet: no ratio", results,
			[]string{"round 1", "round 2", "25.0s", "140.0s", "no ratio statefulset / ests: budgets differ (1 and 10)",
				"created and Ready 10.0s, deleted and gone 6.0s; replacing every pod cannot take much less than 16.0s", "by more than about 8.8x"},
			[]string{"ratio statefulset / ests (medians"}},
		{"equal budgets compared, the budget-1 set listed only", append(results,
			Result{Round: 1, Workload: "statefulset-maxunavailable", Rollout: 40 * s, MaxUnavailable: 10},
			Result{Round: 2, Workload: "statefulset-maxunavailable", Rollout: 60 * s, MaxUnavailable: 10}),
			[]string{"ratio statefulset-maxunavailable / ests (medians, budget 10 both): 2.00x",
				"no ratio statefulset-maxunavailable / statefulset: budgets differ (10 and 1)"},
			[]string{"ratio statefulset / ests"}},
	}
	for _, c := range cases {
		var out bytes.Buffer
		PrintTable(&out, c.results, budget)
		got := out.String()
		for _, want := range c.want {
			if !strings.Contains(got, want) {
				t.Errorf("%s: table lacks %q:\n%s", c.name, want, got)
			}
		}
		for _, not := range c.wantNot {
			if strings.Contains(got, not) {
				t.Errorf("%s: table has %q:\n%s", c.name, not, got)
			}
		}
	}
	if _, _, ok := ReplacementFloor(results[3:]); ok {
		t.Error("ReplacementFloor of a result without creation and deletion times")
	}
	if r := Ratio(10*s, 0); r != 0 {
		t.Errorf("Ratio by zero = %v", r)
	}
}

func TestBreakdown(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	lives := []podLife{
		// s-0 and s-1 recreated: deleting → gone → new pod → ready.
		{Name: "s-0", Old: true, Deleting: at(0), Gone: at(1000)},
		{Name: "s-0", Created: at(1200), Scheduled: at(1300), Addressed: at(1600), Running: at(2200), Ready: at(3200)},
		{Name: "s-1", Old: true, Deleting: at(0), Gone: at(2000)},
		// s-1's IP and its running container arrived in one watch event.
		{Name: "s-1", Created: at(2400), Scheduled: at(2500), Addressed: at(3000), Running: at(3000), Ready: at(4000)},
		// s-2 updated in place.
		{Name: "s-2", Old: true, Patched: at(100), Running: at(700), Ready: at(1100)},
		// s-4's new pod was never seen scheduled: it counts for created→ready, not for the steps.
		{Name: "s-4", Old: true, Deleting: at(0), Gone: at(100)},
		{Name: "s-4", Created: at(200), Running: at(1000), Ready: at(1400)},
		// s-3 never touched; a pod of another set.
		{Name: "s-3", Old: true},
		{Name: "t-0", Old: true, Deleting: at(0), Gone: at(10)},
	}
	ph := Breakdown("s", lives, 4*time.Second)
	if ph.Recreated != 3 || ph.InPlace != 1 {
		t.Fatalf("recreated %d, in place %d", ph.Recreated, ph.InPlace)
	}
	ms := time.Millisecond
	// delete→gone 1 s, 2 s, 0.1 s; gone→created 200, 400, 100 ms; created→ready 2, 1.6, 1.2 s.
	if ph.DeleteToGone != 1000*ms || ph.GoneToCreate != 200*ms || ph.CreateToReady != 1600*ms || ph.PatchToReady != 1000*ms {
		t.Errorf("phases %+v", ph)
	}
	// The steps of s-0 and s-1 only (s-4 lacks one): →scheduled 100, 100; →IP 300, 500;
	// →running 600, 0; →ready 1000, 1000 (ms), medians of two = their means.
	if ph.CreateToScheduled != 100*ms || ph.ScheduledToAddressed != 400*ms || ph.AddressedToRunning != 300*ms || ph.RunningToReady != 1000*ms {
		t.Errorf("steps of created→ready %+v", ph)
	}
	if ph.PatchToRunning != 600*ms || ph.InPlaceRunningToReady != 400*ms {
		t.Errorf("steps of patch→ready %+v", ph)
	}
	// per pod: 3.2 s, 4 s, 1 s, 1.4 s → median 2.3 s; in flight (3.2+4+1+1.4)/4 = 2.4.
	if ph.PerPod != 2300*ms || ph.Concurrency < 2.39 || ph.Concurrency > 2.41 {
		t.Errorf("per pod %s, concurrency %.3f", ph.PerPod, ph.Concurrency)
	}
	if !strings.Contains(ph.String(), "3 recreated") || !strings.Contains(ph.String(), "1 in place") || !strings.Contains(ph.String(), "→IP 400ms") {
		t.Errorf("String() = %s", ph)
	}
}

// TestTrackerReplaysEvents feeds a rollout's watch events to the tracker in order: the peak
// is counted at the event that reached it, and a late delete of a replaced pod does not
// remove its successor.
func TestTrackerReplaysEvents(t *testing.T) {
	tr := &podTracker{setName: "s", replicas: 3, pods: map[string]*corev1.Pod{}}
	withUID := func(p *corev1.Pod, uid string) *corev1.Pod { p.UID = types.UID(uid); return p }
	for i, name := range []string{"s-0", "s-1", "s-2"} {
		tr.observe(withUID(pod(name, v1), "old"+fmt.Sprint(i)), false)
	}
	tr.startMeasuring(v2)
	events := []struct {
		pod     *corev1.Pod
		deleted bool
	}{
		{withUID(pod("s-2", v1, terminating), "old2"), false},
		{withUID(pod("s-1", v1, terminating), "old1"), false}, // two down: the peak
		{withUID(pod("s-2", v1, terminating), "old2"), true},
		{withUID(pod("s-2", v2, pending), "new2"), false},
		{withUID(pod("s-2", v2), "new2"), false},
		{withUID(pod("s-1", v1, terminating), "old1"), true},
		{withUID(pod("s-1", v2), "new1"), false},
		{withUID(pod("s-2", v1, terminating), "old2"), true}, // a late repeat of the old delete
	}
	for _, e := range events {
		tr.observe(e.pod, e.deleted)
	}
	if n := tr.count(); n != 3 {
		t.Errorf("%d pods tracked, want 3 (the late delete removed a successor?)", n)
	}
	maxUnavailable, atMax, lives := tr.stopMeasuring()
	if maxUnavailable != 2 || strings.Join(atMax, ",") != "s-1 terminating,s-2 terminating" {
		t.Errorf("max unavailable %d at %v", maxUnavailable, atMax)
	}
	ph := Breakdown("s", lives, time.Second)
	if ph.Recreated != 2 {
		t.Errorf("recreated %d, want 2 (lives %+v)", ph.Recreated, lives)
	}
	if tr.rolledOut(v2) {
		t.Error("rolled out with s-0 still at v1")
	}
}

// TestReactionTimes: each start after some ready counts from the latest ready before it; the
// first wave (nothing ready yet) is not counted.
func TestReactionTimes(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	got := reactionTimes([]time.Time{at(0), at(0), at(1300), at(2050)}, []time.Time{at(1000), at(2000), at(1200)})
	want := []time.Duration{100 * time.Millisecond, 50 * time.Millisecond}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("reactionTimes = %v, want %v", got, want)
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 10; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Second)
	}
	if p := Percentile(ds, 90); p != 9*time.Second {
		t.Errorf("p90 of 1..10 s = %s, want 9s", p)
	}
	if p := Percentile(ds, 50); p != 5*time.Second {
		t.Errorf("p50 of 1..10 s = %s, want 5s", p)
	}
	if p := Percentile(nil, 90); p != 0 {
		t.Errorf("p90 of nothing = %s", p)
	}
}
