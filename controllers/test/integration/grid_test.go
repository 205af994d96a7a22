package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"k8s.io/apimachinery/pkg/api/meta"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
	"github.com/staticip/staticip/controllers/pkg/grid"
	"github.com/staticip/staticip/controllers/pkg/manager"
)

var gridControllers = []string{grid.DeploymentGridName, grid.StatefulSetGridName, grid.ServiceGridName}

// gridKey is a node label key of this test only (nodes are cluster-wide and shared by the
// tests of one API server); prefixed, so the label encoding is exercised on every test.
func (f *fixture) gridKey() string { return "grids.test/zone-" + f.ns }

// node creates a Node carrying key=value (value "" = without the key); deleted at the end.
func (f *fixture) node(name string, labels map[string]string) {
	f.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-" + name, Labels: labels}}
	if _, err := f.kube.CoreV1().Nodes().Create(f.ctx, n, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = f.kube.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{}) })
}

// relabel sets (value != "") or removes the test's key on a node.
func (f *fixture) relabel(name, value string) {
	f.t.Helper()
	var patch []byte
	if value == "" {
		patch, _ = json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{f.gridKey(): nil}}})
	} else {
		patch, _ = json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{f.gridKey(): value}}})
	}
	if _, err := f.kube.CoreV1().Nodes().Patch(f.ctx, f.ns+"-"+name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func podTemplate(image string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"appGrid": "echo"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "echo", Image: image}}},
	}
}

func (f *fixture) newDeploymentGrid(name string) *superedgev1.DeploymentGrid {
	return &superedgev1.DeploymentGrid{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: superedgev1.DeploymentGridSpec{GridUniqKey: f.gridKey(), Template: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"appGrid": "echo"}},
			Template: podTemplate("echo:v1"),
		}},
	}
}

func (f *fixture) deployments() map[string]*appsv1.Deployment {
	f.t.Helper()
	l, err := f.kube.AppsV1().Deployments(f.ns).List(f.ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]*appsv1.Deployment{}
	for i := range l.Items {
		out[l.Items[i].Name] = &l.Items[i]
	}
	return out
}

// updateDG changes a DeploymentGrid's spec as a user would: read, change, write, again on a
// conflict — the controller writes the grid's status concurrently, which moves its
// resourceVersion (and a conflict is checked before validation, so it would even hide an
// Invalid answer).
func (f *fixture) updateDG(name string, change func(*superedgev1.DeploymentGrid)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		g := f.getDG(name)
		change(g)
		_, err := f.client.SuperedgeV1().DeploymentGrids(f.ns).Update(f.ctx, g, metav1.UpdateOptions{})
		return err
	})
}

func (f *fixture) getDG(name string) *superedgev1.DeploymentGrid {
	f.t.Helper()
	g, err := f.client.SuperedgeV1().DeploymentGrids(f.ns).Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return g
}

// waitDeploymentsFor waits until the grid owns exactly the Deployments named, each pinned to
// its unit and built from the current template (image), and its status lists the units.
func (f *fixture) waitDeploymentsFor(g *superedgev1.DeploymentGrid, image string, units map[string]string) {
	f.t.Helper()
	f.eventually(time.Minute, fmt.Sprintf("DeploymentGrid %s has units %v at %s", g.Name, units, image), func() (bool, error) {
		owned := map[string]*appsv1.Deployment{}
		for n, d := range f.deployments() {
			if ref := metav1.GetControllerOf(d); ref != nil && ref.UID == g.UID {
				owned[n] = d
			}
		}
		if len(owned) != len(units) {
			return false, fmt.Errorf("owned %v", keysOf(owned))
		}
		for value, name := range units {
			d, ok := owned[name]
			if !ok {
				return false, fmt.Errorf("no Deployment %s", name)
			}
			if d.Spec.Template.Spec.NodeSelector[f.gridKey()] != value || d.Labels[superedgev1.LabelGridUnit] != value ||
				d.Spec.Template.Spec.Containers[0].Image != image {
				return false, fmt.Errorf("%s: nodeSelector %v labels %v image %s", name, d.Spec.Template.Spec.NodeSelector, d.Labels, d.Spec.Template.Spec.Containers[0].Image)
			}
		}
		cur := f.getDG(g.Name)
		if cur.Status.ObservedGeneration != cur.Generation || int(cur.Status.UnitCount) != len(units) {
			return false, fmt.Errorf("status %+v", cur.Status)
		}
		return true, nil
	})
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestDeploymentGridUnits: one Deployment per unit, pinned and labelled, owned by the grid;
// relabelling nodes adds and removes units; a template change reaches every unit; the status
// follows the Deployments' readiness.
func TestDeploymentGridUnits(t *testing.T) {
	f := newFixture(t)
	key := f.gridKey()
	f.node("n1", map[string]string{key: "zone-0"})
	f.node("n2", map[string]string{key: "zone-1"})
	f.node("n3", map[string]string{key: "zone-1"})
	f.node("n4", nil)
	f.startManager(gridControllers...)

	g, err := f.client.SuperedgeV1().DeploymentGrids(f.ns).Create(f.ctx, f.newDeploymentGrid("dg"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.waitDeploymentsFor(g, "echo:v1", map[string]string{"zone-0": "dg-zone-0", "zone-1": "dg-zone-1"})
	d := f.deployments()["dg-zone-0"]
	ref := metav1.GetControllerOf(d)
	if ref.Kind != "DeploymentGrid" || ref.APIVersion != "superedge.io/v1" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("controller reference %+v: the garbage collector would not delete it with the grid", ref)
	}
	if d.Labels[superedgev1.LabelGridSelector] != "dg" || d.Labels[superedgev1.LabelGridUniqKey] != strings.ReplaceAll(key, "/", "_") ||
		d.Annotations[superedgev1.AnnotationGridUniqKey] != key {
		t.Errorf("labels %v annotations %v", d.Labels, d.Annotations)
	}
	if c := meta.FindStatusCondition(f.getDG("dg").Status.Conditions, superedgev1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != grid.ReasonUnitsNotReady {
		t.Errorf("Ready before any Deployment is: %+v", c)
	}

	// The Deployments become ready (no kube-controller-manager here: write their status).
	for _, name := range []string{"dg-zone-0", "dg-zone-1"} {
		d := f.deployments()[name]
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}
		if _, err := f.kube.AppsV1().Deployments(f.ns).UpdateStatus(f.ctx, d, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.eventually(30*time.Second, "grid Ready", func() (bool, error) {
		st := f.getDG("dg").Status
		c := meta.FindStatusCondition(st.Conditions, superedgev1.ConditionReady)
		return holds(c != nil && c.Status == metav1.ConditionTrue && st.ReadyUnits == 2 && st.Units[0].ReadyReplicas == 2, fmt.Errorf("%+v", st))
	})

	// n3 moves into a new unit: zone-2 appears; zone-1 stays (n2).
	f.relabel("n3", "zone-2")
	f.waitDeploymentsFor(g, "echo:v1", map[string]string{"zone-0": "dg-zone-0", "zone-1": "dg-zone-1", "zone-2": "dg-zone-2"})
	// n1 leaves its unit: zone-0 has no node any more, its Deployment goes.
	f.relabel("n1", "")
	f.waitDeploymentsFor(g, "echo:v1", map[string]string{"zone-1": "dg-zone-1", "zone-2": "dg-zone-2"})

	// A template change reaches every unit.
	if err := f.updateDG("dg", func(g *superedgev1.DeploymentGrid) {
		g.Spec.Template.Template.Spec.Containers[0].Image = "echo:v2"
	}); err != nil {
		t.Fatal(err)
	}
	g = f.getDG("dg")
	f.waitDeploymentsFor(g, "echo:v2", map[string]string{"zone-1": "dg-zone-1", "zone-2": "dg-zone-2"})

	evs := f.gridEvents("dg")
	for _, want := range []string{"Created:created Deployment dg-zone-2", "Deleted:deleted Deployment dg-zone-0", "Updated:updated Deployment dg-zone-1"} {
		if !strings.Contains(evs, want) {
			t.Errorf("no Event %q in %s", want, evs)
		}
	}
}

// gridEvents joins "reason:message" of the Events about a grid.
func (f *fixture) gridEvents(name string) string {
	var out []string
	f.eventually(30*time.Second, "Events about "+name, func() (bool, error) {
		l, err := f.kube.CoreV1().Events(f.ns).List(f.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		out = out[:0]
		for _, e := range l.Items {
			out = append(out, e.Reason+":"+e.Message)
		}
		return err == nil && len(out) > 0, err
	})
	return strings.Join(out, "\n")
}

// TestGridAdoptionOrphaningAndConflicts: a matching orphan is adopted and brought to the
// template; a Deployment the grid does not own is never touched and is reported; one that
// loses the grid-selector label is released; two grids that map to one name do not fight;
// the grid's workloads carry the owner reference the garbage collector follows.
func TestGridAdoptionOrphaningAndConflicts(t *testing.T) {
	f := newFixture(t)
	key := f.gridKey()
	f.node("n1", map[string]string{key: "zone-0"})
	f.node("n2", map[string]string{key: "zone-1"})
	f.node("n3", map[string]string{key: "b-c"})
	f.node("n4", map[string]string{key: "c"})

	// Before the controllers run: an orphan of grid "dg" (as SuperEdge would have left it)
	// and an unrelated Deployment holding the name of unit zone-1.
	orphan := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "dg-zone-0", Namespace: f.ns, Labels: map[string]string{superedgev1.LabelGridSelector: "dg"}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"appGrid": "echo"}},
			Template: podTemplate("old:v0")},
	}
	unrelated := orphan.DeepCopy()
	unrelated.Name, unrelated.Labels = "dg-zone-1", map[string]string{"team": "other"}
	created, err := f.kube.AppsV1().Deployments(f.ns).Create(f.ctx, orphan, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.kube.AppsV1().Deployments(f.ns).Create(f.ctx, unrelated, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	unrelatedRV := f.deployments()["dg-zone-1"].ResourceVersion
	f.startManager(gridControllers...)
	g, err := f.client.SuperedgeV1().DeploymentGrids(f.ns).Create(f.ctx, f.newDeploymentGrid("dg"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Adopted and updated (same UID: not recreated); dg-zone-1 is a conflict.
	f.eventually(time.Minute, "orphan adopted and updated, conflict reported", func() (bool, error) {
		d := f.deployments()["dg-zone-0"]
		ref := metav1.GetControllerOf(d)
		if ref == nil || ref.UID != g.UID || d.UID != created.UID || d.Spec.Template.Spec.Containers[0].Image != "echo:v1" {
			return false, fmt.Errorf("dg-zone-0: ref %v image %s", ref, d.Spec.Template.Spec.Containers[0].Image)
		}
		c := meta.FindStatusCondition(f.getDG("dg").Status.Conditions, superedgev1.ConditionConflict)
		return holds(c != nil && c.Status == metav1.ConditionTrue && c.Reason == grid.ReasonNameTaken && strings.Contains(c.Message, "dg-zone-1"), fmt.Errorf("conflict %+v", c))
	})
	if d := f.deployments()["dg-zone-1"]; d.ResourceVersion != unrelatedRV || metav1.GetControllerOf(d) != nil {
		t.Errorf("the Deployment the grid does not own was changed: rv %s -> %s, owner %v", unrelatedRV, d.ResourceVersion, metav1.GetControllerOf(d))
	}
	if evs := f.gridEvents("dg"); !strings.Contains(evs, "Conflict:") || !strings.Contains(evs, "Adopted:") {
		t.Errorf("Events: %s", evs)
	}
	// Units b-c and c exist too: "dg-b-c" and "dg-c".
	f.eventually(30*time.Second, "dg-b-c and dg-c", func() (bool, error) {
		ds := f.deployments()
		return ds["dg-b-c"] != nil && ds["dg-c"] != nil, nil
	})

	// A second grid "dg-b" wants "dg-b-c" for its unit c: the name is taken by grid dg.
	g2 := f.newDeploymentGrid("dg-b")
	if _, err := f.client.SuperedgeV1().DeploymentGrids(f.ns).Create(f.ctx, g2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	owner := f.deployments()["dg-b-c"].OwnerReferences[0].UID
	f.eventually(time.Minute, "grid dg-b reports dg-b-c as taken", func() (bool, error) {
		c := meta.FindStatusCondition(f.getDG("dg-b").Status.Conditions, superedgev1.ConditionConflict)
		return holds(c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "DeploymentGrid/dg"), fmt.Errorf("%+v", c))
	})
	if d := f.deployments()["dg-b-c"]; d.OwnerReferences[0].UID != owner || d.Labels[superedgev1.LabelGridUnit] != "b-c" {
		t.Errorf("grid dg-b took over dg-b-c: %v %v", d.OwnerReferences, d.Labels)
	}

	// Orphaning: dg-zone-0 loses the grid-selector label -> released, then reported as taken.
	d := f.deployments()["dg-zone-0"]
	patch := []byte(`{"metadata":{"labels":{"superedge.io/grid-selector":null}}}`)
	if _, err := f.kube.AppsV1().Deployments(f.ns).Patch(f.ctx, d.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(30*time.Second, "dg-zone-0 released", func() (bool, error) {
		d := f.deployments()["dg-zone-0"]
		c := meta.FindStatusCondition(f.getDG("dg").Status.Conditions, superedgev1.ConditionConflict)
		return holds(metav1.GetControllerOf(d) == nil && c != nil && strings.Contains(c.Message, "dg-zone-0"), fmt.Errorf("refs %v, conflict %+v", d.OwnerReferences, c))
	})
	// And adopted again when the label comes back.
	patch = []byte(`{"metadata":{"labels":{"superedge.io/grid-selector":"dg"}}}`)
	if _, err := f.kube.AppsV1().Deployments(f.ns).Patch(f.ctx, d.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(30*time.Second, "dg-zone-0 adopted again", func() (bool, error) {
		ref := metav1.GetControllerOf(f.deployments()["dg-zone-0"])
		return ref != nil && ref.UID == g.UID, nil
	})

	// Grid deletion: testenv has no garbage collector; every workload of the grid carries the
	// controller reference with blockOwnerDeletion that the garbage collector follows (the e2e
	// test deletes a grid on a real cluster and sees its Deployments go).
	for _, name := range []string{"dg-zone-0", "dg-b-c", "dg-c"} {
		ref := metav1.GetControllerOf(f.deployments()[name])
		if ref == nil || ref.UID != g.UID || !ptr.Deref(ref.BlockOwnerDeletion, false) {
			t.Errorf("%s: controller reference %+v", name, ref)
		}
	}
}

// TestGridInvalidSpec: what CEL cannot reject (a selector that does not match the template's
// labels) gives Ready=False InvalidSpec and an Event, and nothing is created.
func TestGridInvalidSpec(t *testing.T) {
	f := newFixture(t)
	f.node("n1", map[string]string{f.gridKey(): "zone-0"})
	f.startManager(gridControllers...)
	g := f.newDeploymentGrid("bad")
	g.Spec.Template.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "appGrid", Operator: metav1.LabelSelectorOpIn, Values: []string{"other"}}}}
	if _, err := f.client.SuperedgeV1().DeploymentGrids(f.ns).Create(f.ctx, g, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(30*time.Second, "Ready=False InvalidSpec", func() (bool, error) {
		c := meta.FindStatusCondition(f.getDG("bad").Status.Conditions, superedgev1.ConditionReady)
		return holds(c != nil && c.Status == metav1.ConditionFalse && c.Reason == grid.ReasonInvalidSpec, fmt.Errorf("%+v", c))
	})
	if evs := f.gridEvents("bad"); !strings.Contains(evs, "InvalidSpec:") || !strings.Contains(evs, "does not match") {
		t.Errorf("Events: %s", evs)
	}
	if ds := f.deployments(); len(ds) != 0 {
		t.Errorf("created %v", keysOf(ds))
	}
	// The selector is immutable (CEL); fixing the labels brings the unit.
	if err := f.updateDG("bad", func(g *superedgev1.DeploymentGrid) {
		g.Spec.Template.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"appGrid": "echo"}}
	}); !apierrors.IsInvalid(err) {
		t.Fatalf("changing the selector: %v, want Invalid", err)
	}
	if err := f.updateDG("bad", func(g *superedgev1.DeploymentGrid) {
		g.Spec.Template.Template.Labels = map[string]string{"appGrid": "other"}
	}); err != nil {
		t.Fatal(err)
	}
	f.eventually(30*time.Second, "bad-zone-0 once the labels match", func() (bool, error) {
		_, ok := f.deployments()["bad-zone-0"]
		return ok, nil
	})
}

// TestServiceGridTopologyKeysRefused: topologyKeys every application-grid-wrapper would refuse
// (it would then pass the Service's endpoints unfiltered) are refused by the grid too:
// Ready=False InvalidSpec with the reason, a Warning Event, and no Service.
func TestServiceGridTopologyKeysRefused(t *testing.T) {
	f := newFixture(t)
	f.node("n1", map[string]string{f.gridKey(): "zone-0"})
	f.startManager(gridControllers...)
	for name, keys := range map[string]string{"dup": `["zone","zone"]`, "empty": `[""]`} {
		g := f.newServiceGrid(name)
		g.Annotations = map[string]string{superedgev1.AnnotationTopologyKeys: keys}
		if _, err := f.client.SuperedgeV1().ServiceGrids(f.ns).Create(f.ctx, g, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var c *metav1.Condition
		f.eventually(30*time.Second, name+": Ready=False InvalidSpec", func() (bool, error) {
			got, err := f.client.SuperedgeV1().ServiceGrids(f.ns).Get(f.ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			c = meta.FindStatusCondition(got.Status.Conditions, superedgev1.ConditionReady)
			return holds(c != nil && c.Reason == grid.ReasonInvalidSpec, fmt.Errorf("%+v", c))
		})
		if c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "topologyKeys") {
			t.Errorf("%s: condition %+v", name, c)
		}
		if evs := f.gridEvents(name); !strings.Contains(evs, "InvalidSpec:") || !strings.Contains(evs, "topologyKeys") {
			t.Errorf("%s: Events %s", name, evs)
		}
		if _, err := f.kube.CoreV1().Services(f.ns).Get(f.ctx, name+"-svc", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: Service %s-svc: %v, want NotFound", name, name, err)
		}
	}
	// spec.topologyKeys (the API server checks them, CEL) become the Service's annotation.
	g := f.newServiceGrid("good")
	g.Spec.TopologyKeys = []string{f.gridKey(), superedgev1.TopologyKeyAny}
	if _, err := f.client.SuperedgeV1().ServiceGrids(f.ns).Create(f.ctx, g, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := `["` + f.gridKey() + `","*"]`
	f.eventually(30*time.Second, "Service good-svc with spec.topologyKeys", func() (bool, error) {
		svc, err := f.kube.CoreV1().Services(f.ns).Get(f.ctx, "good-svc", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return holds(svc.Annotations[superedgev1.AnnotationTopologyKeys] == want, fmt.Errorf("annotations %v", svc.Annotations))
	})
}

func (f *fixture) newStatefulSetGrid(name string) *superedgev1.StatefulSetGrid {
	return &superedgev1.StatefulSetGrid{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Annotations: map[string]string{jkev1.AnnotationEnable: "true"}},
		Spec: superedgev1.StatefulSetGridSpec{GridUniqKey: f.gridKey(), Template: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](3), ServiceName: name + "-svc",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"appGrid": "echo"}},
			Template: podTemplate("echo:v1"),
		}},
	}
}

func (f *fixture) newServiceGrid(name string) *superedgev1.ServiceGrid {
	return &superedgev1.ServiceGrid{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: superedgev1.ServiceGridSpec{GridUniqKey: f.gridKey(), Template: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{"appGrid": "echo"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		}},
	}
}

// TestStatefulSetGridAndServiceGrid: StatefulSets per unit with the static-IP annotation on
// their pods, a safe name for a value that is not a DNS label, the 52-character limit; the
// ServiceGrid's Service with topologyKeys that keeps its clusterIP and nodePorts across
// template changes and reconciles; then the whole namespace (three grids) is left alone for
// 30 s while nodes keep changing unrelated labels: not one write.
func TestStatefulSetGridAndServiceGrid(t *testing.T) {
	f := newFixture(t)
	key := f.gridKey()
	f.node("n1", map[string]string{key: "zone-0"})
	f.node("n2", map[string]string{key: "Zone_B"})
	f.startManager(gridControllers...)

	long := strings.Repeat("s", 50)
	for _, name := range []string{"ssg", long} {
		if _, err := f.client.SuperedgeV1().StatefulSetGrids(f.ns).Create(f.ctx, f.newStatefulSetGrid(name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sg, err := f.client.SuperedgeV1().ServiceGrids(f.ns).Create(f.ctx, f.newServiceGrid("sg"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var sets map[string]*appsv1.StatefulSet
	f.eventually(time.Minute, "4 StatefulSets", func() (bool, error) {
		l, err := f.kube.AppsV1().StatefulSets(f.ns).List(f.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		sets = map[string]*appsv1.StatefulSet{}
		for i := range l.Items {
			sets[l.Items[i].Name] = &l.Items[i]
		}
		return holds(len(sets) == 4, fmt.Errorf("%v", keysOf(sets)))
	})
	s := sets["ssg-zone-0"]
	if s == nil || s.Spec.Template.Annotations[jkev1.AnnotationEnable] != "true" || s.Spec.Template.Spec.NodeSelector[key] != "zone-0" {
		t.Fatalf("ssg-zone-0: %+v", s)
	}
	for name, st := range sets {
		if len(name) > 52 || (name != "ssg-zone-0" && !strings.HasPrefix(name, "ssg-zone-b-") && !strings.HasPrefix(name, long[:40])) {
			t.Errorf("StatefulSet name %q (%d chars)", name, len(name))
		}
		if st.Labels[superedgev1.LabelGridUnit] == "Zone_B" && st.Spec.Template.Spec.NodeSelector[key] != "Zone_B" {
			t.Errorf("%s not pinned to Zone_B: %v", name, st.Spec.Template.Spec.NodeSelector)
		}
	}

	var svc *corev1.Service
	f.eventually(30*time.Second, "Service sg-svc", func() (bool, error) {
		svc, err = f.kube.CoreV1().Services(f.ns).Get(f.ctx, "sg-svc", metav1.GetOptions{})
		return err == nil && svc.Spec.Ports[0].NodePort != 0, err
	})
	if svc.Annotations[superedgev1.AnnotationTopologyKeys] != `["`+key+`"]` || metav1.GetControllerOf(svc).UID != sg.UID {
		t.Errorf("Service annotations %v owner %v", svc.Annotations, svc.OwnerReferences)
	}
	clusterIP, nodePort := svc.Spec.ClusterIP, svc.Spec.Ports[0].NodePort
	// A template change: the Service is updated, its clusterIP and nodePort stay.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error { // the controller writes its status
		sg, err = f.client.SuperedgeV1().ServiceGrids(f.ns).Get(f.ctx, "sg", metav1.GetOptions{})
		if err != nil {
			return err
		}
		sg.Spec.Template.Ports = append(sg.Spec.Template.Ports, corev1.ServicePort{Name: "metrics", Port: 9090})
		_, err = f.client.SuperedgeV1().ServiceGrids(f.ns).Update(f.ctx, sg, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	f.eventually(30*time.Second, "Service updated, clusterIP and nodePort kept", func() (bool, error) {
		svc, err = f.kube.CoreV1().Services(f.ns).Get(f.ctx, "sg-svc", metav1.GetOptions{})
		if err != nil || len(svc.Spec.Ports) != 2 {
			return false, err
		}
		if svc.Spec.ClusterIP != clusterIP || svc.Spec.Ports[0].NodePort != nodePort {
			t.Fatalf("clusterIP %s -> %s, nodePort %d -> %d", clusterIP, svc.Spec.ClusterIP, nodePort, svc.Spec.Ports[0].NodePort)
		}
		g, err := f.client.SuperedgeV1().ServiceGrids(f.ns).Get(f.ctx, "sg", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(g.Status.Conditions, superedgev1.ConditionReady)
		return holds(err == nil && c != nil && c.Status == metav1.ConditionTrue && g.Status.ServiceName == "sg-svc" && g.Status.ObservedGeneration == g.Generation, fmt.Errorf("%+v", g.Status))
	})
	// Someone edits the Service's topologyKeys: put back.
	patch := []byte(`{"metadata":{"annotations":{"topologyKeys":"[\"rack\"]"}}}`)
	if _, err := f.kube.CoreV1().Services(f.ns).Patch(f.ctx, "sg-svc", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(30*time.Second, "topologyKeys restored", func() (bool, error) {
		svc, err = f.kube.CoreV1().Services(f.ns).Get(f.ctx, "sg-svc", metav1.GetOptions{})
		return err == nil && svc.Annotations[superedgev1.AnnotationTopologyKeys] == `["`+key+`"]` && svc.Spec.ClusterIP == clusterIP, err
	})

	// The restore's Event and the grids' status writes are asynchronous: wait until the
	// namespace is quiet before counting (a CI run once saw the "Updated" Event land inside
	// the 3 s window below).
	f.settle(30 * time.Second)
	// The write counter sees writes: a label added to the Service by someone else is one
	// write (and nothing of the grid's is touched, so the controller does not answer it).
	seen := f.countWrites(3*time.Second, func() {
		p := []byte(`{"metadata":{"labels":{"someone":"else"}}}`)
		if _, err := f.kube.CoreV1().Services(f.ns).Patch(f.ctx, "sg-svc", types.MergePatchType, p, metav1.PatchOptions{}); err != nil {
			t.Error(err)
		}
	})
	if len(seen) != 1 || !strings.Contains(seen[0], "MODIFIED Service sg-svc") {
		t.Fatalf("the write counter saw %v, want exactly the one Service patch", seen)
	}

	// Steady state: let the status settle, then count every write in the namespace for 30 s.
	f.settle(30 * time.Second)
	writes := f.countWrites(30*time.Second, func() {
		// Node churn that is not a unit change: heartbeat-like status and label writes.
		for i := range 5 {
			p := []byte(fmt.Sprintf(`{"metadata":{"labels":{"unrelated":"v%d"},"annotations":{"beat":"%d"}}}`, i, i))
			if _, err := f.kube.CoreV1().Nodes().Patch(f.ctx, f.ns+"-n1", types.MergePatchType, p, metav1.PatchOptions{}); err != nil {
				t.Error(err)
			}
			time.Sleep(5 * time.Second)
		}
	})
	if len(writes) != 0 {
		t.Errorf("a steady namespace saw %d writes in 30 s:\n%s", len(writes), strings.Join(writes, "\n"))
	}
}

// settle waits until a 2 s window sees no write in the namespace (see countWrites), so a
// count that follows measures only what it provokes; it fails the test if the namespace never
// quiets within timeout.
func (f *fixture) settle(timeout time.Duration) {
	f.t.Helper()
	deadline := time.Now().Add(timeout)
	var last []string
	for time.Now().Before(deadline) {
		if last = f.countWrites(2*time.Second, func() {}); len(last) == 0 {
			return
		}
	}
	f.t.Fatalf("the namespace never quieted in %v; the last 2 s saw:\n%s", timeout, strings.Join(last, "\n"))
}

// countWrites watches the namespace's grids, workloads, Services and Events for d while
// during runs, and returns every change seen.
func (f *fixture) countWrites(d time.Duration, during func()) []string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, d)
	defer cancel()
	opts := metav1.ListOptions{}
	type starter func() (watch.Interface, error)
	starters := map[string]starter{
		"DeploymentGrid": func() (watch.Interface, error) {
			l, err := f.client.SuperedgeV1().DeploymentGrids(f.ns).List(ctx, opts)
			if err != nil {
				return nil, err
			}
			return f.client.SuperedgeV1().DeploymentGrids(f.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
		},
		"StatefulSetGrid": func() (watch.Interface, error) {
			l, err := f.client.SuperedgeV1().StatefulSetGrids(f.ns).List(ctx, opts)
			if err != nil {
				return nil, err
			}
			return f.client.SuperedgeV1().StatefulSetGrids(f.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
		},
		"ServiceGrid": func() (watch.Interface, error) {
			l, err := f.client.SuperedgeV1().ServiceGrids(f.ns).List(ctx, opts)
			if err != nil {
				return nil, err
			}
			return f.client.SuperedgeV1().ServiceGrids(f.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
		},
		"Deployment": func() (watch.Interface, error) {
			l, err := f.kube.AppsV1().Deployments(f.ns).List(ctx, opts)
			if err != nil {
				return nil, err
			}
			return f.kube.AppsV1().Deployments(f.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
		},
		"StatefulSet": func() (watch.Interface, error) {
			l, err := f.kube.AppsV1().StatefulSets(f.ns).List(ctx, opts)
			if err != nil {
				return nil, err
			}
			return f.kube.AppsV1().StatefulSets(f.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
		},
		"Service": func() (watch.Interface, error) {
			l, err := f.kube.CoreV1().Services(f.ns).List(ctx, opts)
			if err != nil {
				return nil, err
			}
			return f.kube.CoreV1().Services(f.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
		},
		"Event": func() (watch.Interface, error) {
			l, err := f.kube.CoreV1().Events(f.ns).List(ctx, opts)
			if err != nil {
				return nil, err
			}
			return f.kube.CoreV1().Events(f.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
		},
	}
	var mu sync.Mutex
	var writes []string
	var wg sync.WaitGroup
	for kind, start := range starters {
		w, err := start()
		if err != nil {
			f.t.Fatal(err)
		}
		wg.Go(func() {
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok {
						mu.Lock()
						writes = append(writes, kind+": watch closed early")
						mu.Unlock()
						return
					}
					if o, ok := ev.Object.(metav1.Object); ok {
						mu.Lock()
						writes = append(writes, fmt.Sprintf("%s %s %s (rv %s)", ev.Type, kind, o.GetName(), o.GetResourceVersion()))
						mu.Unlock()
					}
				}
			}
		})
	}
	during()
	<-ctx.Done()
	wg.Wait()
	return writes
}

// TestGridsRunWithTheirRBAC: the manager as its ServiceAccount, with only
// manifests/controller-manager/rbac.yaml, creates, adopts, updates and deletes unit workloads
// and the Service and writes the grids' status.
func TestGridsRunWithTheirRBAC(t *testing.T) {
	f := newFixture(t)
	f.applyRBAC()
	key := f.gridKey()
	f.node("n1", map[string]string{key: "zone-0"})
	f.node("n2", map[string]string{key: "zone-1"})
	cfg := rest.CopyConfig(f.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:staticip-system:staticip-controller-manager"}
	o := manager.NewOptions()
	o.LeaderElect = false
	o.Controllers = gridControllers
	o.MetricsBindAddress, o.HealthBindAddress = "0", "0"
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- manager.Run(ctx, o, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	orphan := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "ssg-zone-0", Namespace: f.ns, Labels: map[string]string{superedgev1.LabelGridSelector: "ssg"}},
		Spec: appsv1.StatefulSetSpec{ServiceName: "ssg-svc", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"appGrid": "echo"}},
			Template: podTemplate("old:v0")},
	}
	if _, err := f.kube.AppsV1().StatefulSets(f.ns).Create(f.ctx, orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ssg, err := f.client.SuperedgeV1().StatefulSetGrids(f.ns).Create(f.ctx, f.newStatefulSetGrid("ssg"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.SuperedgeV1().ServiceGrids(f.ns).Create(f.ctx, f.newServiceGrid("ssg"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.SuperedgeV1().DeploymentGrids(f.ns).Create(f.ctx, f.newDeploymentGrid("dg"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(time.Minute, "ssg-zone-1", func() (bool, error) {
		_, err := f.kube.AppsV1().StatefulSets(f.ns).Get(f.ctx, "ssg-zone-1", metav1.GetOptions{})
		return err == nil, err
	})
	f.relabel("n2", "")
	f.eventually(time.Minute, "adopted, updated, zone-1 deleted, Service created, status written", func() (bool, error) {
		s, err := f.kube.AppsV1().StatefulSets(f.ns).Get(f.ctx, "ssg-zone-0", metav1.GetOptions{})
		if err != nil || metav1.GetControllerOf(s) == nil || metav1.GetControllerOf(s).UID != ssg.UID || s.Spec.Template.Spec.Containers[0].Image != "echo:v1" {
			return false, fmt.Errorf("ssg-zone-0: %v", err)
		}
		if _, err := f.kube.AppsV1().StatefulSets(f.ns).Get(f.ctx, "ssg-zone-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("ssg-zone-1: %v", err)
		}
		if _, err := f.kube.CoreV1().Services(f.ns).Get(f.ctx, "ssg-svc", metav1.GetOptions{}); err != nil {
			return false, err
		}
		if _, ok := f.deployments()["dg-zone-0"]; !ok {
			return false, fmt.Errorf("no dg-zone-0")
		}
		g, err := f.client.SuperedgeV1().StatefulSetGrids(f.ns).Get(f.ctx, "ssg", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return holds(g.Status.UnitCount == 1 && g.Status.ObservedGeneration == g.Generation, fmt.Errorf("status %+v", g.Status))
	})
}

// holds turns a condition and the error that explains it when false into a poll result (an
// error makes the poll retry, so it is returned only while the condition does not hold).
func holds(ok bool, why error) (bool, error) {
	if ok {
		return true, nil
	}
	return false, why
}
