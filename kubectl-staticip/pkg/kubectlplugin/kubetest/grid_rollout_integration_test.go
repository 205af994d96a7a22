package kubetest

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
	"k8s.io/kubernetes/pkg/controller/history"
	"k8s.io/utils/ptr"

	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
	"github.com/staticip/staticip/controllers/pkg/grid"
)

// TestGridRolloutHistoryUndo: the real StatefulSetGrid controller makes unit StatefulSet db of
// unit a; no kube-controller-manager runs here, so the test keeps that StatefulSet's
// ControllerRevisions as the StatefulSet controller would (image v1, then v2). history lists
// them per unit; undo puts v1 into the grid's template and the grid controller hands it to the
// unit; restart reaches the unit too; pause is refused.
func TestGridRolloutHistoryUndo(t *testing.T) {
	f := newFixture(t)
	f.namespace("grid-roll")
	key := "kubetest.staticip/unit"
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "grid-roll-a", Labels: map[string]string{key: "a"}}}
	if _, err := f.kube.CoreV1().Nodes().Create(f.ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.kube.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	f.startManager(grid.StatefulSetGridName)

	labels := map[string]string{"app": "db"}
	g := &superedgev1.StatefulSetGrid{ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: superedgev1.StatefulSetGridSpec{GridUniqKey: key, Template: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1), ServiceName: "db-svc", Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "db:v1"}}}}}}}
	grids := f.sip.SuperedgeV1().StatefulSetGrids("grid-roll")
	if _, err := grids.Create(f.ctx, g, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	revision := 0
	unitAt := func(image string) *appsv1.StatefulSet { // waits for the unit at image, keeps its revision
		t.Helper()
		var unit *appsv1.StatefulSet
		f.eventually("unit a at "+image, func() (bool, error) {
			l, err := f.kube.AppsV1().StatefulSets("grid-roll").List(f.ctx, metav1.ListOptions{LabelSelector: superedgev1.LabelGridUnit + "=a"})
			if err != nil || len(l.Items) != 1 {
				return false, err
			}
			unit = &l.Items[0]
			return unit.Spec.Template.Spec.Containers[0].Image == image, nil
		})
		revision++
		f.keepRevision(unit, int64(revision))
		return unit
	}
	unit := unitAt("db:v1")
	if _, err := grids.Patch(f.ctx, "db", types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/template/template/spec/containers/0/image","value":"db:v2"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	unitAt("db:v2")

	out, code := f.plugin("rollout", "history", "ssg/db", "-n", "grid-roll", "-o", "wide")
	t.Logf("$ kubectl staticip rollout history ssg/db -n grid-roll -o wide  (exit %d)\n%s", code, out)
	if code != 0 || !strings.Contains(out, "UNIT") || !strings.Contains(out, unit.Name) || !strings.Contains(out, "db:v1") || !strings.Contains(out, "db:v2") {
		t.Fatalf("history: exit %d", code)
	}
	out, code = f.plugin("rollout", "undo", "ssg/db", "-n", "grid-roll")
	t.Logf("$ kubectl staticip rollout undo ssg/db -n grid-roll  (exit %d)\n%s", code, out)
	if code != 0 || !strings.Contains(out, "statefulsetgrid.superedge.io/db rolled back") {
		t.Fatalf("undo: exit %d", code)
	}
	got, err := grids.Get(f.ctx, "db", metav1.GetOptions{})
	if err != nil || got.Spec.Template.Template.Spec.Containers[0].Image != "db:v1" || got.Spec.Template.Template.Spec.NodeSelector != nil {
		t.Fatalf("after undo the grid template is %+v (%v), want db:v1 without the unit's pin", got.Spec.Template.Template, err)
	}
	f.eventually("the grid controller hands v1 to unit a", func() (bool, error) {
		s, err := f.kube.AppsV1().StatefulSets("grid-roll").Get(f.ctx, unit.Name, metav1.GetOptions{})
		return err == nil && s.Spec.Template.Spec.Containers[0].Image == "db:v1", err
	})
	if out, code = f.plugin("rollout", "undo", "ssg/db", "-n", "grid-roll", "--to-revision=1"); code != 0 || !strings.Contains(out, "skipped rollback") {
		t.Errorf("undo to the running template: exit %d\n%s", code, out)
	}
	f.eventually("the grid controller observes the undo", func() (bool, error) {
		g, err := grids.Get(f.ctx, "db", metav1.GetOptions{})
		return err == nil && g.Status.ObservedGeneration == g.Generation, err
	})
	// No StatefulSet controller: the unit's status is never observed, which status reports.
	out, code = f.plugin("rollout", "status", "ssg/db", "-n", "grid-roll", "--watch=false")
	t.Logf("$ kubectl staticip rollout status ssg/db -n grid-roll --watch=false  (exit %d)\n%s", code, out)
	if code != 0 || !strings.Contains(out, "unit a (statefulset "+unit.Name+"): Waiting for statefulset spec update to be observed") {
		t.Errorf("status --watch=false: exit %d", code)
	}
	if out, code = f.plugin("rollout", "restart", "ssg/db", "-n", "grid-roll"); code != 0 || !strings.Contains(out, "restarted") {
		t.Fatalf("restart: exit %d\n%s", code, out)
	}
	f.eventually("the restart reaches unit a", func() (bool, error) {
		s, err := f.kube.AppsV1().StatefulSets("grid-roll").Get(f.ctx, unit.Name, metav1.GetOptions{})
		return err == nil && s.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] != "", err
	})
	if out, code = f.plugin("rollout", "pause", "ssg/db", "-n", "grid-roll"); code != 1 || !strings.Contains(out, "cannot be paused") {
		t.Errorf("pause: exit %d, want 1\n%s", code, out)
	}
}

// keepRevision creates the ControllerRevision the StatefulSet controller keeps for s's
// template (its getPatch format: {"spec":{"template":{..., "$patch":"replace"}}}).
func (f *fixture) keepRevision(s *appsv1.StatefulSet, n int64) {
	f.t.Helper()
	raw, err := json.Marshal(s.Spec.Template)
	if err != nil {
		f.t.Fatal(err)
	}
	var tpl map[string]any
	if err := json.Unmarshal(raw, &tpl); err != nil {
		f.t.Fatal(err)
	}
	tpl["$patch"] = "replace"
	data, err := json.Marshal(map[string]any{"spec": map[string]any{"template": tpl}})
	if err != nil {
		f.t.Fatal(err)
	}
	cr, err := history.NewControllerRevision(s, appsv1.SchemeGroupVersion.WithKind("StatefulSet"), s.Spec.Template.Labels, runtime.RawExtension{Raw: data}, n, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.kube.AppsV1().ControllerRevisions(s.Namespace).Create(f.ctx, cr, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}
