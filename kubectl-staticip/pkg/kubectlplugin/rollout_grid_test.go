package kubectlplugin

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
	"github.com/staticip/staticip/controllers/pkg/grid"
)

// ssg is StatefulSetGrid db (unit key zone) whose template runs image.
func ssg(image string) *superedgev1.StatefulSetGrid {
	return &superedgev1.StatefulSetGrid{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", UID: "uid-db", ResourceVersion: "9", Generation: 2},
		Spec: superedgev1.StatefulSetGridSpec{GridUniqKey: "zone", Template: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](2), ServiceName: "db-svc",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}}},
		}},
		Status: superedgev1.WorkloadGridStatus{ObservedGeneration: 2},
	}
}

// unitOf is the unit StatefulSet the grid controller makes for unit from g, with status.
func unitOf(g *superedgev1.StatefulSetGrid, unit string, status appsv1.StatefulSetStatus) *appsv1.StatefulSet {
	s := grid.DesiredStatefulSet(g, unit, g.Name+"-"+unit)
	s.UID = types.UID("uid-" + s.Name)
	s.Generation = 1
	s.Spec.UpdateStrategy.Type = appsv1.RollingUpdateStatefulSetStrategyType // the API server's default
	s.Status = status
	return s
}

// unitRevision is the ControllerRevision the StatefulSet controller keeps for unit s when g
// (at some earlier template) made it: {"spec":{"template":{..., "$patch":"replace"}}}.
func unitRevision(g *superedgev1.StatefulSetGrid, s *appsv1.StatefulSet, n int64) *appsv1.ControllerRevision {
	tpl := grid.DesiredStatefulSet(g, s.Labels[superedgev1.LabelGridUnit], s.Name).Spec.Template
	raw, _ := json.Marshal(tpl)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	m["$patch"] = "replace"
	data, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": m}})
	image := g.Spec.Template.Template.Spec.Containers[0].Image
	return &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name + "-" + image,
		Labels:          s.Spec.Template.Labels,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(s, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}},
		Revision: n, Data: runtime.RawExtension{Raw: data}}
}

// gridFixture: db at image v2 with unit a (revisions v1=1, v2=2) and unit b, which joined at
// v2 (revision 1); a StatefulSet of another grid and one of no grid.
func gridFixture() (*superedgev1.StatefulSetGrid, []appsv1.StatefulSet, []appsv1.ControllerRevision) {
	g1, g2 := ssg("v1"), ssg("v2")
	done := appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: 2, ReadyReplicas: 2, UpdatedReplicas: 2, CurrentReplicas: 2}
	a, b := unitOf(g2, "a", done), unitOf(g2, "b", done)
	other := ssg("v2")
	other.Name, other.UID = "other", "uid-other"
	o := unitOf(other, "a", done)
	plain := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "plain", UID: "uid-plain"}}
	revs := []appsv1.ControllerRevision{*unitRevision(g2, a, 2), *unitRevision(g1, a, 1), *unitRevision(g2, b, 1), *unitRevision(other, o, 1)}
	a.Status.CurrentRevision, a.Status.UpdateRevision = revs[0].Name, revs[0].Name
	return g2, []appsv1.StatefulSet{*b, *o, *plain, *a}, revs
}

func TestGridHistoryAndPickUnit(t *testing.T) {
	g, sets, revs := gridFixture()
	units := GridHistory(g, sets, revs)
	if len(units) != 2 || units[0].Unit != "a" || units[1].Unit != "b" {
		t.Fatalf("units %+v, want a and b of grid db only", units)
	}
	if n := len(units[0].Revisions); n != 2 || units[0].Revisions[0].Revision != 1 || units[0].Revisions[1].Revision != 2 {
		t.Errorf("unit a revisions %v, want 1, 2", units[0].Revisions)
	}
	for _, tc := range []struct {
		unit, want, err string
	}{
		{"", "a", ""}, // the longest history
		{"b", "b", ""},
		{"c", "", `no unit "c" (units: a, b)`},
	} {
		u, err := PickUnit(units, tc.unit)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("PickUnit(%q) error %v, want %q", tc.unit, err, tc.err)
			}
			continue
		}
		if err != nil || u.Unit != tc.want {
			t.Errorf("PickUnit(%q) = %v, %v; want %s", tc.unit, u, err, tc.want)
		}
	}
	if _, err := PickUnit(nil, ""); err == nil {
		t.Error("PickUnit of a grid without units: want an error")
	}
}

func TestGridUndoPatch(t *testing.T) {
	g, sets, revs := gridFixture()
	units := GridHistory(g, sets, revs)
	a := units[0]
	patch, done, err := GridUndoPatch(g, "a", a.Revisions[0]) // v1
	if err != nil || done {
		t.Fatalf("undo to v1: done %v err %v", done, err)
	}
	var ops []struct {
		Op, Path string
		Value    json.RawMessage
	}
	if err := json.Unmarshal(patch, &ops); err != nil || len(ops) != 2 || ops[0].Op != "test" || ops[1].Path != "/spec/template/template" {
		t.Fatalf("patch %s: %v", patch, err)
	}
	var tpl corev1.PodTemplateSpec
	if err := json.Unmarshal(ops[1].Value, &tpl); err != nil {
		t.Fatal(err)
	}
	// The grid's own template at v1: no unit pin, no grid labels.
	if tpl.Spec.Containers[0].Image != "v1" || tpl.Spec.NodeSelector != nil || len(tpl.Labels) != 1 || tpl.Labels["app"] != "db" {
		t.Errorf("restored template %+v", tpl)
	}
	if _, done, err := GridUndoPatch(g, "b", units[1].Revisions[0]); err != nil || !done {
		t.Errorf("undo to the running template: done %v err %v, want done", done, err)
	}
}

func TestGridRolloutStatus(t *testing.T) {
	g, sets, revs := gridFixture()
	units := GridHistory(g, sets, revs)
	msg, done, err := GridRolloutStatus(g, units)
	if err != nil || !done || !strings.Contains(msg, "rolling update complete in 2 units") {
		t.Errorf("settled: %q %v %v", msg, done, err)
	}
	units[1].StatefulSet.Status.ReadyReplicas = 1
	msg, done, err = GridRolloutStatus(g, units)
	if err != nil || done || msg != "unit b (statefulset db-b): Waiting for 1 pods to be ready...\n" {
		t.Errorf("unit b not ready: %q %v %v", msg, done, err)
	}
	g.Generation = 3
	if msg, done, _ = GridRolloutStatus(g, units); done || !strings.Contains(msg, "spec update to be observed") {
		t.Errorf("grid not observed: %q %v", msg, done)
	}
	g.Generation = 2
	units[0].StatefulSet.Spec.UpdateStrategy.Type = appsv1.OnDeleteStatefulSetStrategyType
	if _, _, err = GridRolloutStatus(g, units); err == nil || !strings.Contains(err.Error(), "unit a") {
		t.Errorf("OnDelete unit: %v, want an error naming unit a", err)
	}
}

func TestGridRolloutCommandsWithFakeClients(t *testing.T) {
	g, sets, revs := gridFixture()
	var kube []runtime.Object
	for i := range sets {
		kube = append(kube, &sets[i])
	}
	for i := range revs {
		kube = append(kube, &revs[i])
	}
	out, code, _ := run(t, kube, []runtime.Object{g}, "rollout", "history", "ssg/db", "-n", "ns")
	t.Logf("$ kubectl staticip rollout history ssg/db\n%s", out)
	for _, want := range []string{"statefulsetgrid.superedge.io/db", "UNIT", "db-a", "db-b"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("history: code %d, output lacks %q", code, want)
		}
	}
	if strings.Contains(out, "other-a") {
		t.Errorf("history shows another grid's unit:\n%s", out)
	}
	out, code, _ = run(t, kube, []runtime.Object{g}, "rollout", "history", "statefulsetgrid", "db", "-n", "ns", "-o", "wide")
	if code != 0 || !strings.Contains(out, "current,update") || !strings.Contains(out, "v1") {
		t.Errorf("history -o wide: code %d\n%s", code, out)
	}
	out, code, _ = run(t, kube, []runtime.Object{g}, "rollout", "history", "ssg/db", "-n", "ns", "--unit=a", "--revision=1")
	if code != 0 || !strings.Contains(out, "unit a (statefulset db-a) with revision #1") || !strings.Contains(out, "v1") {
		t.Errorf("history --revision=1: code %d\n%s", code, out)
	}
	out, code, c := run(t, kube, []runtime.Object{g}, "rollout", "undo", "ssg/db", "-n", "ns")
	got, err := c.StaticIP.SuperedgeV1().StatefulSetGrids("ns").Get(context.Background(), "db", metav1.GetOptions{})
	if code != 0 || !strings.Contains(out, "statefulsetgrid.superedge.io/db rolled back") || err != nil || got.Spec.Template.Template.Spec.Containers[0].Image != "v1" {
		t.Fatalf("undo: code %d, grid %v (%v)\n%s", code, got, err, out)
	}
	if out, code, _ = run(t, kube, []runtime.Object{g}, "rollout", "undo", "ssg/db", "-n", "ns", "--unit=b"); code != 1 || !strings.Contains(out, "unit b (statefulset db-b): no last revision") {
		t.Errorf("undo of unit b (one revision): code %d\n%s", code, out)
	}
	if out, code, _ = run(t, kube, []runtime.Object{g}, "rollout", "status", "ssg/db", "-n", "ns", "--watch=false"); code != 0 || !strings.Contains(out, "complete in 2 units") {
		t.Errorf("status: code %d\n%s", code, out)
	}
	out, code, c = run(t, kube, []runtime.Object{g}, "rollout", "restart", "ssg/db", "-n", "ns")
	got, _ = c.StaticIP.SuperedgeV1().StatefulSetGrids("ns").Get(context.Background(), "db", metav1.GetOptions{})
	if code != 0 || got.Spec.Template.Template.Annotations[RestartedAtAnnotation] != "2026-01-02T03:04:05Z" {
		t.Errorf("restart: code %d annotations %v\n%s", code, got.Spec.Template.Template.Annotations, out)
	}
	if out, code, _ = run(t, kube, []runtime.Object{g}, "rollout", "pause", "ssg/db", "-n", "ns"); code != 1 || !strings.Contains(out, "cannot be paused") {
		t.Errorf("pause: code %d\n%s", code, out)
	}
}
