package grid

import (
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
)

func TestWorkloadName(t *testing.T) {
	long := strings.Repeat("a", 60)
	for _, tc := range []struct {
		grid, value string
		max         int
		want        string // exact, or "" to check only validity and the prefix
		prefix      string
	}{
		{grid: "statefulsetgrid-demo", value: "zone-0", max: MaxStatefulSetNameLen, want: "statefulsetgrid-demo-zone-0"},
		{grid: "dg", value: "cn-beijing", max: MaxDeploymentNameLen, want: "dg-cn-beijing"},
		{grid: "dg", value: "Zone_A", max: MaxDeploymentNameLen, prefix: "dg-zone-a-"},
		{grid: "dg", value: "zone.a", max: MaxDeploymentNameLen, prefix: "dg-zone-a-"},
		{grid: "my.grid", value: "z", max: MaxDeploymentNameLen, prefix: "my-grid-z-"},
		{grid: "g", value: "-x-", max: MaxDeploymentNameLen, prefix: "g-x-"},
		{grid: long, value: "zone-0", max: MaxStatefulSetNameLen, prefix: long[:43]},
		{grid: "g", value: "___", max: MaxDeploymentNameLen, prefix: "g-"},
	} {
		got := WorkloadName(tc.grid, tc.value, tc.max)
		if tc.want != "" && got != tc.want {
			t.Errorf("WorkloadName(%q, %q) = %q, want %q", tc.grid, tc.value, got, tc.want)
		}
		if errs := validation.IsDNS1123Label(got); len(errs) > 0 || len(got) > tc.max {
			t.Errorf("WorkloadName(%q, %q) = %q: invalid (%v) or longer than %d", tc.grid, tc.value, got, errs, tc.max)
		}
		if !strings.HasPrefix(got, tc.prefix) {
			t.Errorf("WorkloadName(%q, %q) = %q, want prefix %q", tc.grid, tc.value, got, tc.prefix)
		}
		if again := WorkloadName(tc.grid, tc.value, tc.max); again != got {
			t.Errorf("not deterministic: %q then %q", got, again)
		}
	}
	// Values that sanitise alike still get different names.
	if a, b := WorkloadName("g", "Zone_A", 63), WorkloadName("g", "zone.a", 63); a == b {
		t.Errorf("Zone_A and zone.a both map to %q", a)
	}
}

func TestServiceName(t *testing.T) {
	for grid, want := range map[string]string{"servicegrid-demo": "servicegrid-demo-svc", "1st": "", "a.b": "", strings.Repeat("s", 70): ""} {
		got := ServiceName(grid)
		if want != "" && got != want {
			t.Errorf("ServiceName(%q) = %q, want %q", grid, got, want)
		}
		if errs := validation.IsDNS1035Label(got); len(errs) > 0 {
			t.Errorf("ServiceName(%q) = %q: %v", grid, got, errs)
		}
	}
}

func TestLabelValue(t *testing.T) {
	for in, want := range map[string]string{
		"zone":                        "zone",
		"topology.kubernetes.io/zone": "topology.kubernetes.io_zone",
		"a.io/B_c":                    "a.io_B_c",
	} {
		if got := LabelValue(in); got != want {
			t.Errorf("LabelValue(%q) = %q, want %q", in, got, want)
		}
	}
	long := strings.Repeat("p", 250) + "/zone"
	got := LabelValue(long)
	if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
		t.Errorf("LabelValue(long) = %q: %v", got, errs)
	}
	if LabelValue(strings.Repeat("p", 250)+"/zonf") == got {
		t.Error("two long keys encode alike")
	}
}

func node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func TestNodeUnits(t *testing.T) {
	nodes := []*corev1.Node{
		node("n1", map[string]string{"zone": "zone-1"}),
		node("n2", map[string]string{"zone": "zone-0"}),
		node("n3", map[string]string{"zone": "zone-1", "topology.kubernetes.io/zone": "a"}),
		node("n4", nil),
		node("n5", map[string]string{"zone": ""}),
	}
	for key, want := range map[string][]string{
		"zone":                        {"", "zone-0", "zone-1"},
		"topology.kubernetes.io/zone": {"a"},
		"rack":                        {},
	} {
		if got := NodeUnits(nodes, key); !reflect.DeepEqual(got, want) {
			t.Errorf("NodeUnits(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestAssignNames(t *testing.T) {
	dup := "g-" + "x-y-" + shortHash("g", "x_y") // the hashed name of "x_y", used literally as a value
	for _, tc := range []struct {
		name          string
		values        []string
		holders       map[string]Holder
		wantNames     map[string]string // value -> name
		wantConflicts map[string]string // value -> reason
	}{
		{name: "one per unit", values: []string{"zone-0", "zone-1"},
			wantNames: map[string]string{"zone-0": "g-zone-0", "zone-1": "g-zone-1"}},
		{name: "own workloads keep their names", values: []string{"zone-0"}, holders: map[string]Holder{"g-zone-0": {Owned: true, Unit: "zone-0"}},
			wantNames: map[string]string{"zone-0": "g-zone-0"}},
		{name: "name held by another controller", values: []string{"zone-0", "zone-1"},
			holders:   map[string]Holder{"g-zone-0": {Controller: "DeploymentGrid/other"}},
			wantNames: map[string]string{"zone-1": "g-zone-1"}, wantConflicts: map[string]string{"zone-0": ReasonNameTaken}},
		{name: "name held by an orphan", values: []string{"zone-0"}, holders: map[string]Holder{"g-zone-0": {}},
			wantNames: map[string]string{}, wantConflicts: map[string]string{"zone-0": ReasonNameTaken}},
		{name: "two units one name: smallest wins", values: []string{"x_y", strings.TrimPrefix(dup, "g-")},
			wantNames:     map[string]string{strings.TrimPrefix(dup, "g-"): dup},
			wantConflicts: map[string]string{"x_y": ReasonDuplicateName}},
		{name: "two units one name: the owner of the existing workload keeps it", values: []string{"x_y", strings.TrimPrefix(dup, "g-")},
			holders:       map[string]Holder{dup: {Owned: true, Unit: "x_y"}},
			wantNames:     map[string]string{"x_y": dup},
			wantConflicts: map[string]string{strings.TrimPrefix(dup, "g-"): ReasonDuplicateName}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, conflicts := AssignNames("g", "Deployment", tc.values, 63, tc.holders)
			names := map[string]string{}
			for _, a := range got {
				names[a.Value] = a.Name
			}
			if tc.wantNames == nil {
				tc.wantNames = map[string]string{}
			}
			if !reflect.DeepEqual(names, tc.wantNames) {
				t.Errorf("names %v, want %v", names, tc.wantNames)
			}
			gotC := map[string]string{}
			for _, c := range conflicts {
				gotC[c.Value] = c.Reason
				if c.Message == "" {
					t.Errorf("conflict %+v without a message", c)
				}
			}
			if tc.wantConflicts == nil {
				tc.wantConflicts = map[string]string{}
			}
			if !reflect.DeepEqual(gotC, tc.wantConflicts) {
				t.Errorf("conflicts %v, want %v", gotC, tc.wantConflicts)
			}
		})
	}
}

func TestValidateWorkloadTemplate(t *testing.T) {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}
	for _, tc := range []struct {
		name     string
		key      string
		selector *metav1.LabelSelector
		labels   map[string]string
		wantErr  string
	}{
		{name: "ok", key: "zone", selector: sel, labels: map[string]string{"app": "a", "x": "y"}},
		{name: "prefixed key ok", key: "topology.kubernetes.io/zone", selector: sel, labels: map[string]string{"app": "a"}},
		{name: "bad key", key: "zone 1", selector: sel, labels: map[string]string{"app": "a"}, wantErr: "not a valid label key"},
		{name: "empty key", key: "", selector: sel, labels: map[string]string{"app": "a"}, wantErr: "not a valid label key"},
		{name: "no selector", key: "zone", labels: map[string]string{"app": "a"}, wantErr: "required"},
		{name: "empty selector", key: "zone", selector: &metav1.LabelSelector{}, labels: map[string]string{"app": "a"}, wantErr: "empty"},
		{name: "mismatch", key: "zone", selector: sel, labels: map[string]string{"app": "b"}, wantErr: "does not match"},
		{name: "expression mismatch", key: "zone", selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"db"}}}}, labels: map[string]string{"tier": "web"}, wantErr: "does not match"},
		{name: "bad operator", key: "zone", selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "tier", Operator: "Near"}}}, labels: map[string]string{"tier": "web"}, wantErr: "template.selector"},
	} {
		err := ValidateWorkloadTemplate(tc.key, tc.selector, tc.labels)
		if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.wantErr)
		}
	}
}

func deploymentGrid() *superedgev1.DeploymentGrid {
	return &superedgev1.DeploymentGrid{
		ObjectMeta: metav1.ObjectMeta{Name: "dg", Namespace: "ns", UID: "uid-dg", Generation: 3},
		Spec: superedgev1.DeploymentGridSpec{GridUniqKey: "topology.kubernetes.io/zone", Template: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "a"}},
				Spec: corev1.PodSpec{NodeSelector: map[string]string{"disk": "ssd", "topology.kubernetes.io/zone": "wrong"},
					Containers: []corev1.Container{{Name: "c", Image: "i:1"}}},
			},
		}},
	}
}

func TestDesiredDeployment(t *testing.T) {
	g := deploymentGrid()
	before := g.DeepCopy()
	d := DesiredDeployment(g, "z1", "dg-z1")
	if !reflect.DeepEqual(g, before) {
		t.Fatal("DesiredDeployment modified the grid (it is an informer's object)")
	}
	if want := map[string]string{"disk": "ssd", "topology.kubernetes.io/zone": "z1"}; !reflect.DeepEqual(d.Spec.Template.Spec.NodeSelector, want) {
		t.Errorf("nodeSelector %v, want %v", d.Spec.Template.Spec.NodeSelector, want)
	}
	wantLabels := map[string]string{superedgev1.LabelGridSelector: "dg", superedgev1.LabelGridUniqKey: "topology.kubernetes.io_zone", superedgev1.LabelGridUnit: "z1"}
	if !reflect.DeepEqual(d.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", d.Labels, wantLabels)
	}
	if d.Annotations[superedgev1.AnnotationGridUniqKey] != "topology.kubernetes.io/zone" || d.Annotations[superedgev1.AnnotationTemplateHash] == "" {
		t.Errorf("annotations %v", d.Annotations)
	}
	ref := metav1.GetControllerOf(d)
	if ref == nil || ref.UID != "uid-dg" || ref.Kind != "DeploymentGrid" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("controller ref %+v", ref)
	}
	if d.Name != "dg-z1" || d.Namespace != "ns" {
		t.Errorf("name %s/%s", d.Namespace, d.Name)
	}
	// Same input, same object (and hash); another template, another hash.
	if again := DesiredDeployment(g, "z1", "dg-z1"); !reflect.DeepEqual(again, d) {
		t.Error("not deterministic")
	}
	g.Spec.Template.Template.Spec.Containers[0].Image = "i:2"
	if DesiredDeployment(g, "z1", "dg-z1").Annotations[superedgev1.AnnotationTemplateHash] == d.Annotations[superedgev1.AnnotationTemplateHash] {
		t.Error("template change kept the hash")
	}
}

func TestDesiredStatefulSetStaticIP(t *testing.T) {
	g := &superedgev1.StatefulSetGrid{
		ObjectMeta: metav1.ObjectMeta{Name: "ssg", Namespace: "ns", UID: "u"},
		Spec: superedgev1.StatefulSetGridSpec{GridUniqKey: "zone", Template: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "a"}}},
		}},
	}
	if s := DesiredStatefulSet(g, "zone-0", "ssg-zone-0"); s.Spec.Template.Annotations[jkev1.AnnotationEnable] != "" {
		t.Errorf("static IPs enabled without the annotation: %v", s.Spec.Template.Annotations)
	}
	g.Annotations = map[string]string{jkev1.AnnotationEnable: "true"}
	s := DesiredStatefulSet(g, "zone-0", "ssg-zone-0")
	if s.Spec.Template.Annotations[jkev1.AnnotationEnable] != "true" || s.Annotations[jkev1.AnnotationEnable] != "true" {
		t.Errorf("grid annotation not passed to the pods: %v / %v", s.Annotations, s.Spec.Template.Annotations)
	}
	if g.Spec.Template.Template.Annotations != nil {
		t.Error("the grid's template was modified")
	}
	if s.Spec.Template.Spec.NodeSelector["zone"] != "zone-0" {
		t.Errorf("nodeSelector %v", s.Spec.Template.Spec.NodeSelector)
	}
	// The pods carry the grid labels (statefulset-grid-daemon's pod informer selects on them).
	want := map[string]string{"app": "a", superedgev1.LabelGridSelector: "ssg", superedgev1.LabelGridUniqKey: "zone", superedgev1.LabelGridUnit: "zone-0"}
	if !maps.Equal(s.Spec.Template.Labels, want) {
		t.Errorf("pod template labels %v, want %v", s.Spec.Template.Labels, want)
	}
	if len(g.Spec.Template.Template.Labels) != 1 {
		t.Errorf("the grid's template labels were modified: %v", g.Spec.Template.Template.Labels)
	}
}

func TestDeploymentUpdate(t *testing.T) {
	g := deploymentGrid()
	desired := DesiredDeployment(g, "z1", "dg-z1")
	// What the API server returns: defaults filled in, extra labels from others.
	existing := desired.DeepCopy()
	existing.ResourceVersion = "7"
	existing.Labels["team"] = "x"
	existing.Spec.RevisionHistoryLimit = ptr.To[int32](10)
	existing.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
	existing.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromString("25%"))}}
	if u := DeploymentUpdate(existing, desired, g.Spec.GridUniqKey); u != nil {
		t.Fatalf("server defaults caused an update: %+v", u)
	}
	unpinned := existing.DeepCopy()
	delete(unpinned.Spec.Template.Spec.NodeSelector, g.Spec.GridUniqKey)
	if DeploymentUpdate(unpinned, desired, g.Spec.GridUniqKey) == nil {
		t.Error("a workload that lost its unit nodeSelector is not repinned")
	}
	g.Spec.Template.Template.Spec.Containers[0].Image = "i:2"
	g.Spec.Template.Replicas = nil
	existing.Spec.Replicas = ptr.To[int32](5) // an autoscaler's
	snapshot := existing.DeepCopy()
	u := DeploymentUpdate(existing, DesiredDeployment(g, "z1", "dg-z1"), g.Spec.GridUniqKey)
	if u == nil {
		t.Fatal("template change: no update")
	}
	if !reflect.DeepEqual(existing, snapshot) {
		t.Error("DeploymentUpdate modified the cached object")
	}
	if u.Spec.Template.Spec.Containers[0].Image != "i:2" || u.Labels["team"] != "x" || u.ResourceVersion != "7" || *u.Spec.Replicas != 5 {
		t.Errorf("update %+v", u)
	}
}

func TestUnitStatus(t *testing.T) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Generation: 2}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3)},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 3, AvailableReplicas: 3}}
	if st := DeploymentUnitStatus("z", d); !st.Ready || st.Name != "d" || st.ReadyReplicas != 3 {
		t.Errorf("%+v", st)
	}
	d.Generation = 3
	if DeploymentUnitStatus("z", d).Ready {
		t.Error("ready before the Deployment saw its spec")
	}
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "s", Generation: 1}, Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](3)},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: 3, UpdatedReplicas: 2, ReadyReplicas: 3, AvailableReplicas: 3}}
	if StatefulSetUnitStatus("z", s).Ready {
		t.Error("ready in the middle of a rolling update")
	}
}

func TestPlanWorkloads(t *testing.T) {
	g := deploymentGrid()
	g.Spec.GridUniqKey = "zone"
	f := workloadFuncs{kind: "Deployment", maxNameLen: 63,
		desired: func(v, n string) metav1.Object { return DesiredDeployment(g, v, n) },
		update: func(e, d metav1.Object) metav1.Object {
			if u := DeploymentUpdate(e.(*appsv1.Deployment), d.(*appsv1.Deployment), "zone"); u != nil {
				return u
			}
			return nil
		},
		unitStatus: func(v string, w metav1.Object) superedgev1.GridUnitStatus {
			return DeploymentUnitStatus(v, w.(*appsv1.Deployment))
		},
	}
	current := DesiredDeployment(g, "zone-0", "dg-zone-0")
	stale := DesiredDeployment(g, "zone-1", "dg-zone-1")
	stale.Annotations[superedgev1.AnnotationTemplateHash] = "old"
	gone := DesiredDeployment(g, "zone-9", "dg-zone-9")
	deleting := DesiredDeployment(g, "zone-3", "dg-zone-3")
	deleting.DeletionTimestamp = &metav1.Time{}
	owned := []metav1.Object{current, stale, gone, deleting}
	holders := map[string]Holder{
		"dg-zone-0": {Owned: true, Unit: "zone-0"}, "dg-zone-1": {Owned: true, Unit: "zone-1"},
		"dg-zone-9": {Owned: true, Unit: "zone-9"}, "dg-zone-3": {Owned: true, Unit: "zone-3"},
		"dg-zone-4": {Controller: "Foo/bar"},
	}
	p := planWorkloads(f, "dg", []string{"zone-0", "zone-1", "zone-2", "zone-3", "zone-4"}, owned, holders)
	names := func(objs []metav1.Object) []string {
		var out []string
		for _, o := range objs {
			out = append(out, o.GetName())
		}
		return out
	}
	if got := names(p.create); !reflect.DeepEqual(got, []string{"dg-zone-2"}) {
		t.Errorf("create %v", got)
	}
	if got := names(p.update); !reflect.DeepEqual(got, []string{"dg-zone-1"}) {
		t.Errorf("update %v", got)
	}
	if got := names(p.delete); !reflect.DeepEqual(got, []string{"dg-zone-9"}) {
		t.Errorf("delete %v (a deleting one is waited for, not deleted again)", got)
	}
	if len(p.conflicts) != 1 || p.conflicts[0].Value != "zone-4" {
		t.Errorf("conflicts %+v", p.conflicts)
	}
	var values []string
	for _, u := range p.units {
		values = append(values, u.Value)
	}
	if !reflect.DeepEqual(values, []string{"zone-0", "zone-1", "zone-2", "zone-3", "zone-4"}) {
		t.Errorf("unit statuses %v", values)
	}
	// Steady state: every unit current -> no writes at all.
	p = planWorkloads(f, "dg", []string{"zone-0"}, []metav1.Object{current}, map[string]Holder{"dg-zone-0": {Owned: true, Unit: "zone-0"}})
	if len(p.create)+len(p.update)+len(p.delete) != 0 {
		t.Errorf("steady state plans writes: %+v", p)
	}
}

func TestWorkloadGridStatus(t *testing.T) {
	units := []superedgev1.GridUnitStatus{{Value: "a", Name: "g-a", Ready: true}, {Value: "b", Name: "g-b"}}
	st := workloadGridStatus(&superedgev1.WorkloadGridStatus{}, 4, "zone", units, nil, nil, nil)
	if st.UnitCount != 2 || st.ReadyUnits != 1 || st.ObservedGeneration != 4 {
		t.Errorf("%+v", st)
	}
	if c := meta.FindStatusCondition(st.Conditions, superedgev1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonUnitsNotReady {
		t.Errorf("ready %+v", c)
	}
	// Recomputing from the written status changes nothing (no write at steady state).
	if again := workloadGridStatus(&st, 4, "zone", units, nil, nil, nil); !reflect.DeepEqual(again, st) {
		t.Errorf("status not stable:\n%+v\n%+v", st, again)
	}
	units[1].Ready = true
	st2 := workloadGridStatus(&st, 4, "zone", units, []UnitConflict{{Value: "c", Reason: ReasonNameTaken, Message: "taken"}}, nil, nil)
	if c := meta.FindStatusCondition(st2.Conditions, superedgev1.ConditionConflict); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "taken") {
		t.Errorf("conflict %+v", c)
	}
	if c := meta.FindStatusCondition(st2.Conditions, superedgev1.ConditionReady); c.Status != metav1.ConditionTrue {
		t.Errorf("ready %+v", c)
	}
	inv := workloadGridStatus(&st2, 5, "zone", nil, nil, errors.New("bad selector"), nil)
	if c := meta.FindStatusCondition(inv.Conditions, superedgev1.ConditionReady); c.Status != metav1.ConditionFalse || c.Reason != ReasonInvalidSpec {
		t.Errorf("invalid %+v", c)
	}
	if inv.UnitCount != 2 || len(inv.Units) != 2 {
		t.Error("an invalid spec erased the units' status")
	}
	none := workloadGridStatus(&superedgev1.WorkloadGridStatus{}, 1, "zone", nil, nil, nil, nil)
	if c := meta.FindStatusCondition(none.Conditions, superedgev1.ConditionReady); c.Reason != ReasonNoNodeUnits {
		t.Errorf("no units %+v", c)
	}
}

func TestServiceTopologyKeys(t *testing.T) {
	g := &superedgev1.ServiceGrid{Spec: superedgev1.ServiceGridSpec{GridUniqKey: "zone"}}
	if got, err := ServiceTopologyKeys(g); err != nil || got != `["zone"]` {
		t.Errorf("%q %v", got, err)
	}
	for ann, want := range map[string]string{`["zone","*"]`: `["zone","*"]`, `[ "a", "b" ]`: `["a","b"]`, `"zone"`: "", `[]`: "", `["*","zone"]`: "",
		// The wrapper refuses these (and then passes the endpoints unfiltered): so must the grid.
		`["zone","zone"]`: "", `[""]`: "", `["zone",""]`: ""} {
		g.Annotations = map[string]string{superedgev1.AnnotationTopologyKeys: ann}
		got, err := ServiceTopologyKeys(g)
		if (want == "") != (err != nil) || got != want {
			t.Errorf("%s: %q %v, want %q", ann, got, err, want)
		}
	}
	// spec.topologyKeys: used when set; not together with the annotation.
	g.Annotations = nil
	g.Spec.TopologyKeys = []string{"zone", "*"}
	if got, err := ServiceTopologyKeys(g); err != nil || got != `["zone","*"]` {
		t.Errorf("spec: %q %v", got, err)
	}
	g.Spec.TopologyKeys = []string{"zone", "zone"}
	if got, err := ServiceTopologyKeys(g); err == nil || !strings.Contains(err.Error(), "appears twice") {
		t.Errorf("spec duplicates: %q %v", got, err)
	}
	g.Spec.TopologyKeys = []string{"zone"}
	g.Annotations = map[string]string{superedgev1.AnnotationTopologyKeys: `["zone"]`}
	if got, err := ServiceTopologyKeys(g); err == nil || !strings.Contains(err.Error(), "both set") {
		t.Errorf("spec and annotation: %q %v", got, err)
	}
}

func TestServiceUpdateKeepsAllocatedFields(t *testing.T) {
	g := &superedgev1.ServiceGrid{ObjectMeta: metav1.ObjectMeta{Name: "sg", Namespace: "ns", UID: "u"},
		Spec: superedgev1.ServiceGridSpec{GridUniqKey: "zone", Template: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
			Selector: map[string]string{"app": "a"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}, {Port: 81}}}}}
	desired := DesiredService(g, "sg-svc", `["zone"]`)
	if desired.Annotations[superedgev1.AnnotationTopologyKeys] != `["zone"]` {
		t.Fatalf("annotations %v", desired.Annotations)
	}
	existing := desired.DeepCopy()
	existing.Spec.ClusterIP, existing.Spec.ClusterIPs = "10.0.0.7", []string{"10.0.0.7"}
	existing.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	existing.Spec.Ports[0].NodePort, existing.Spec.Ports[1].NodePort = 30080, 30081
	existing.Spec.Ports[0].Protocol, existing.Spec.Ports[1].Protocol = corev1.ProtocolTCP, corev1.ProtocolTCP
	existing.Spec.SessionAffinity = corev1.ServiceAffinityNone
	if u := ServiceUpdate(existing, desired); u != nil {
		t.Fatalf("allocated fields caused an update: %+v", u.Spec)
	}
	g.Spec.Template.Ports = append(g.Spec.Template.Ports, corev1.ServicePort{Name: "extra", Port: 90})
	g.Spec.Template.Ports[0].Port = 8080 // same name: keeps its nodePort
	u := ServiceUpdate(existing, DesiredService(g, "sg-svc", `["zone"]`))
	if u == nil {
		t.Fatal("template change: no update")
	}
	if u.Spec.ClusterIP != "10.0.0.7" || !reflect.DeepEqual(u.Spec.ClusterIPs, []string{"10.0.0.7"}) ||
		u.Spec.Ports[0].NodePort != 30080 || u.Spec.Ports[1].NodePort != 30081 || u.Spec.Ports[2].NodePort != 0 {
		t.Errorf("update lost allocated fields: %+v", u.Spec)
	}
	// To ClusterIP: nodePorts must go (the API rejects them), the clusterIP stays.
	g.Spec.Template.Type = corev1.ServiceTypeClusterIP
	u = ServiceUpdate(existing, DesiredService(g, "sg-svc", `["zone"]`))
	if u.Spec.ClusterIP != "10.0.0.7" || u.Spec.Ports[0].NodePort != 0 {
		t.Errorf("to ClusterIP: %+v", u.Spec)
	}
	// The topologyKeys annotation is put back if someone changes it.
	edited := existing.DeepCopy()
	edited.Annotations[superedgev1.AnnotationTopologyKeys] = `["rack"]`
	if u := ServiceUpdate(edited, desired); u == nil || u.Annotations[superedgev1.AnnotationTopologyKeys] != `["zone"]` {
		t.Errorf("annotation not restored: %v", u)
	}
}

func TestChangedKeys(t *testing.T) {
	got := changedKeys(map[string]string{"a": "1", "b": "2", "c": "3"}, map[string]string{"a": "1", "b": "9", "d": "4"})
	want := map[string]bool{"b": true, "c": true, "d": true}
	if len(got) != 3 {
		t.Fatalf("%v", got)
	}
	for _, k := range got {
		if !want[k] {
			t.Errorf("%v", got)
		}
	}
	if len(changedKeys(map[string]string{"a": "1"}, map[string]string{"a": "1"})) != 0 {
		t.Error("no change reported as change")
	}
}

// TestGridTemplateOfUndoesDesiredStatefulSet: the grid template a unit's pod template came
// from is found again, whatever the grid template holds of its own (a nodeSelector, the enable
// annotation) and whether the grid enables static IPs.
func TestGridTemplateOfUndoesDesiredStatefulSet(t *testing.T) {
	base := func() *superedgev1.StatefulSetGrid {
		return &superedgev1.StatefulSetGrid{
			ObjectMeta: metav1.ObjectMeta{Name: "ssg", Namespace: "ns", UID: "u"},
			Spec: superedgev1.StatefulSetGridSpec{GridUniqKey: "zone", Template: appsv1.StatefulSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "a"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img:v1"}}}},
			}},
		}
	}
	for _, tc := range []struct {
		name   string
		change func(g *superedgev1.StatefulSetGrid)
	}{
		{"plain template", func(*superedgev1.StatefulSetGrid) {}},
		{"own nodeSelector kept", func(g *superedgev1.StatefulSetGrid) {
			g.Spec.Template.Template.Spec.NodeSelector = map[string]string{"disk": "ssd"}
		}},
		{"static IPs from the grid annotation", func(g *superedgev1.StatefulSetGrid) {
			g.Annotations = map[string]string{jkev1.AnnotationEnable: "true"}
		}},
		{"static IPs from the template annotation", func(g *superedgev1.StatefulSetGrid) {
			g.Spec.Template.Template.Annotations = map[string]string{jkev1.AnnotationEnable: "true", "x": "y"}
		}},
		{"both", func(g *superedgev1.StatefulSetGrid) {
			g.Annotations = map[string]string{jkev1.AnnotationEnable: "true"}
			g.Spec.Template.Template.Annotations = map[string]string{jkev1.AnnotationEnable: "true"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := base()
			tc.change(g)
			for _, unit := range []string{"zone-0", "zone-1"} {
				s := DesiredStatefulSet(g, unit, "ssg-"+unit)
				got := GridTemplateOf(g, unit, &s.Spec.Template)
				if !apiequality.Semantic.DeepEqual(*got, g.Spec.Template.Template) {
					t.Errorf("unit %s: got %+v, want %+v", unit, got, g.Spec.Template.Template)
				}
				// Put back into the grid, it gives the unit the same template.
				back := g.DeepCopy()
				back.Spec.Template.Template = *got
				if again := DesiredStatefulSet(back, unit, "ssg-"+unit); !apiequality.Semantic.DeepEqual(again.Spec.Template, s.Spec.Template) {
					t.Errorf("unit %s: round trip changed the unit template: %+v, want %+v", unit, again.Spec.Template, s.Spec.Template)
				}
			}
		})
	}
}
