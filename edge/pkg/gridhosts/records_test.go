package gridhosts

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
)

func node(labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: labels}}
}

func grid(ns, name, key string) *superedgev1.StatefulSetGrid {
	return &superedgev1.StatefulSetGrid{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("grid-" + ns + "-" + name)},
		Spec:       superedgev1.StatefulSetGridSpec{GridUniqKey: key},
	}
}

// unitSet is the StatefulSet the grid controller writes for unit value of g.
func unitSet(g *superedgev1.StatefulSetGrid, name, value, service string) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: g.Namespace, Name: name, UID: types.UID("sts-" + g.Namespace + "-" + name),
			CreationTimestamp: metav1.NewTime(time.Unix(1000, 0)),
			Labels: map[string]string{superedgev1.LabelGridSelector: g.Name, superedgev1.LabelGridUniqKey: g.Spec.GridUniqKey,
				superedgev1.LabelGridUnit: value},
			Annotations:     map[string]string{superedgev1.AnnotationGridUniqKey: g.Spec.GridUniqKey},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(g, gridKind)},
		},
		Spec: appsv1.StatefulSetSpec{
			ServiceName: service,
			Template:    corev1.PodTemplateSpec{Spec: corev1.PodSpec{NodeSelector: map[string]string{g.Spec.GridUniqKey: value}}},
		},
	}
}

type podOpt func(*corev1.Pod)

func pod(s *appsv1.StatefulSet, ordinal, ip string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.Namespace, Name: s.Name + "-" + ordinal,
			Labels:          map[string]string{appsv1.PodIndexLabel: ordinal},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(s, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	if ip == "" {
		p.Status.PodIP = ""
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func notReady(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }
func terminating(p *corev1.Pod) {
	now := metav1.Now()
	p.DeletionTimestamp = &now
}
func failed(p *corev1.Pod)       { p.Status.Phase = corev1.PodFailed }
func noIndexLabel(p *corev1.Pod) { delete(p.Labels, appsv1.PodIndexLabel) }

func lines(rs []Record) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.IP+" "+r.Name)
	}
	return out
}

// TestCompute's fixtures: the published grid (two units), a grid whose unit value is a
// substring of another unit's name, a grid keyed by region, and a unit StatefulSet whose name the
// controller had to hash.
var (
	zone0 = node(map[string]string{"zone": "zone-0", "region": "r1"})
	demo  = grid("default", "statefulsetgrid-demo", "zone")
	demo0 = unitSet(demo, "statefulsetgrid-demo-zone-0", "zone-0", "servicegrid-demo-svc")
	demo1 = unitSet(demo, "statefulsetgrid-demo-zone-1", "zone-1", "servicegrid-demo-svc")
	// SuperEdge matched pods whose name contained the unit value: grid "data" in unit "a"
	// would then also have taken pods of "data-b" (it contains "a").
	data    = grid("db", "data", "unit")
	dataA   = unitSet(data, "data-a", "a", "data-svc")
	dataB   = unitSet(data, "data-b", "b", "data-svc")
	unitA   = node(map[string]string{"unit": "a"})
	other   = grid("other", "web", "region")
	otherR1 = unitSet(other, "web-r1", "r1", "web")
	hashed  = unitSet(demo, "statefulsetgrid-demo-zone-0-1a2b3c4d", "zone-0", "servicegrid-demo-svc") // a name the controller had to hash
)

// computeCase is a Compute input and the records (hosts lines) and skips it must give.
type computeCase struct {
	name      string
	in        Input
	want      []string
	wantSkips []string // "reason object"
}

var computeCases = []computeCase{
	{
		name: "published grid, this node's unit only",
		in: Input{Node: zone0, Grids: []*superedgev1.StatefulSetGrid{demo},
			StatefulSets: []*appsv1.StatefulSet{demo0, demo1},
			Pods: []*corev1.Pod{pod(demo0, "0", "10.0.0.10"), pod(demo0, "1", "10.0.0.11"), pod(demo0, "2", "10.0.0.12"),
				pod(demo1, "0", "10.0.1.10"), pod(demo1, "1", "10.0.1.11"), pod(demo1, "2", "10.0.1.12")}},
		want: []string{
			"10.0.0.10 statefulsetgrid-demo-0.servicegrid-demo-svc.default.svc.cluster.local",
			"10.0.0.11 statefulsetgrid-demo-1.servicegrid-demo-svc.default.svc.cluster.local",
			"10.0.0.12 statefulsetgrid-demo-2.servicegrid-demo-svc.default.svc.cluster.local",
		},
	},
	{
		name: "unit a of grid data: pods of data-b are not a's, though their names contain an a",
		in: Input{Node: unitA, Grids: []*superedgev1.StatefulSetGrid{data}, StatefulSets: []*appsv1.StatefulSet{dataA, dataB},
			Pods: []*corev1.Pod{pod(dataA, "0", "10.1.0.1"), pod(dataB, "0", "10.1.1.1"), pod(dataB, "1", "10.1.1.2")}},
		want: []string{"10.1.0.1 data-0.data-svc.db.svc.cluster.local"},
	},
	{
		name: "node without the grid's key: no records",
		in: Input{Node: node(map[string]string{"other": "x"}), Grids: []*superedgev1.StatefulSetGrid{demo},
			StatefulSets: []*appsv1.StatefulSet{demo0}, Pods: []*corev1.Pod{pod(demo0, "0", "10.0.0.10")}},
	},
	{
		name: "pods without IP, terminating, finished, not ready are left out",
		in: Input{Node: zone0, Grids: []*superedgev1.StatefulSetGrid{demo}, StatefulSets: []*appsv1.StatefulSet{demo0},
			Pods: []*corev1.Pod{pod(demo0, "0", ""), pod(demo0, "1", "10.0.0.11", terminating), pod(demo0, "2", "10.0.0.12", failed),
				pod(demo0, "3", "10.0.0.13", notReady), pod(demo0, "4", "10.0.0.14")}},
		want: []string{"10.0.0.14 statefulsetgrid-demo-4.servicegrid-demo-svc.default.svc.cluster.local"},
	},
	{
		name: "not ready published when the Service publishes not-ready addresses",
		in: Input{Node: zone0, Grids: []*superedgev1.StatefulSetGrid{demo}, StatefulSets: []*appsv1.StatefulSet{demo0},
			Pods:            []*corev1.Pod{pod(demo0, "3", "10.0.0.13", notReady), pod(demo0, "1", "10.0.0.11", terminating)},
			PublishNotReady: map[types.NamespacedName]bool{{Namespace: "default", Name: "servicegrid-demo-svc"}: true}},
		want: []string{"10.0.0.13 statefulsetgrid-demo-3.servicegrid-demo-svc.default.svc.cluster.local"},
	},
	{
		name: "several grids and namespaces, custom domain, sorted",
		in: Input{Node: zone0, ClusterDomain: "edge.example.", Grids: []*superedgev1.StatefulSetGrid{other, demo},
			StatefulSets: []*appsv1.StatefulSet{otherR1, demo0},
			Pods:         []*corev1.Pod{pod(otherR1, "1", "10.2.0.2"), pod(demo0, "0", "10.0.0.10"), pod(otherR1, "0", "10.2.0.1")}},
		want: []string{
			"10.0.0.10 statefulsetgrid-demo-0.servicegrid-demo-svc.default.svc.edge.example",
			"10.2.0.1 web-0.web.other.svc.edge.example",
			"10.2.0.2 web-1.web.other.svc.edge.example",
		},
	},
	{
		name: "hashed StatefulSet name: the record carries the grid's name, the IP the unit pod's",
		in: Input{Node: zone0, Grids: []*superedgev1.StatefulSetGrid{demo}, StatefulSets: []*appsv1.StatefulSet{hashed},
			Pods: []*corev1.Pod{pod(hashed, "0", "10.0.0.20")}},
		want: []string{"10.0.0.20 statefulsetgrid-demo-0.servicegrid-demo-svc.default.svc.cluster.local"},
	},
	{
		name: "collision: two StatefulSets of the grid in one unit, the older keeps the names",
		in: Input{Node: zone0, Grids: []*superedgev1.StatefulSetGrid{demo},
			StatefulSets: []*appsv1.StatefulSet{func() *appsv1.StatefulSet {
				s := hashed.DeepCopy()
				s.CreationTimestamp = metav1.NewTime(time.Unix(2000, 0))
				return s
			}(), demo0},
			Pods: []*corev1.Pod{pod(hashed, "0", "10.0.0.20"), pod(demo0, "0", "10.0.0.10")}},
		want:      []string{"10.0.0.10 statefulsetgrid-demo-0.servicegrid-demo-svc.default.svc.cluster.local"},
		wantSkips: []string{"DuplicateName statefulsetgrid-demo-0.servicegrid-demo-svc.default.svc.cluster.local (default/statefulsetgrid-demo-zone-0-1a2b3c4d, kept default/statefulsetgrid-demo-zone-0)"},
	},
	{
		name: "pods owned by another StatefulSet of the same name (recreated: new UID) are not taken",
		in: Input{Node: zone0, Grids: []*superedgev1.StatefulSetGrid{demo}, StatefulSets: []*appsv1.StatefulSet{demo0},
			Pods: []*corev1.Pod{func() *corev1.Pod {
				p := pod(demo0, "0", "10.0.0.10")
				p.OwnerReferences[0].UID = "old"
				return p
			}()}},
	},
	{
		name: "pod names that are not {set}-{ordinal}, and a pod-index label that disagrees",
		in: Input{Node: zone0, Grids: []*superedgev1.StatefulSetGrid{demo}, StatefulSets: []*appsv1.StatefulSet{demo0},
			Pods: []*corev1.Pod{pod(demo0, "01", "10.0.0.1", noIndexLabel), pod(demo0, "x", "10.0.0.2"),
				func() *corev1.Pod { p := pod(demo0, "5", "10.0.0.5"); p.Labels[appsv1.PodIndexLabel] = "6"; return p }(),
				pod(demo0, "7", "10.0.0.7", noIndexLabel)}},
		want: []string{"10.0.0.7 statefulsetgrid-demo-7.servicegrid-demo-svc.default.svc.cluster.local"},
	},
	{
		name: "grid gone, unit label against nodeSelector, no serviceName, not a grid's StatefulSet",
		in: Input{Node: zone0, Grids: nil,
			StatefulSets: []*appsv1.StatefulSet{demo0, func() *appsv1.StatefulSet {
				s := unitSet(other, "web-zone-0", "zone-0", "web")
				s.Spec.Template.Spec.NodeSelector["region"] = "r1"
				return s
			}(), func() *appsv1.StatefulSet {
				s := unitSet(demo, "plain", "zone-0", "x")
				s.OwnerReferences = nil
				return s
			}()},
			Pods: []*corev1.Pod{pod(demo0, "0", "10.0.0.10")}},
		wantSkips: []string{"GridMissing default/statefulsetgrid-demo-zone-0", "GridMissing other/web-zone-0"},
	},
	{
		name: "unit label disagrees with nodeSelector; empty serviceName",
		in: Input{Node: zone0, Grids: []*superedgev1.StatefulSetGrid{demo, other},
			StatefulSets: []*appsv1.StatefulSet{func() *appsv1.StatefulSet {
				s := demo0.DeepCopy()
				s.Labels[superedgev1.LabelGridUnit] = "zone-1"
				return s
			}(), unitSet(other, "web-r1", "r1", "")},
			Pods: []*corev1.Pod{pod(demo0, "0", "10.0.0.10")}},
		wantSkips: []string{"UnitMismatch default/statefulsetgrid-demo-zone-0", "NoServiceName other/web-r1"},
	},
	{
		name: "terminating grid or StatefulSet: its names go",
		in: Input{Node: zone0, Grids: []*superedgev1.StatefulSetGrid{func() *superedgev1.StatefulSetGrid {
			g := demo.DeepCopy()
			now := metav1.Now()
			g.DeletionTimestamp = &now
			return g
		}()}, StatefulSets: []*appsv1.StatefulSet{demo0}, Pods: []*corev1.Pod{pod(demo0, "0", "10.0.0.10")}},
		wantSkips: []string{"GridMissing default/statefulsetgrid-demo-zone-0"},
	},
	{
		name: "a name longer than a DNS label is skipped",
		in: func() Input {
			g := grid("default", strings.Repeat("g", 62), "zone")
			s := unitSet(g, "s", "zone-0", "svc")
			return Input{Node: zone0, Grids: []*superedgev1.StatefulSetGrid{g}, StatefulSets: []*appsv1.StatefulSet{s},
				Pods: []*corev1.Pod{pod(s, "10", "10.0.0.1")}}
		}(),
		wantSkips: []string{"InvalidName " + strings.Repeat("g", 62) + "-10.svc.default.svc.cluster.local"},
	},
	{
		name: "dual-stack pod: both addresses",
		in: Input{Node: zone0, Grids: []*superedgev1.StatefulSetGrid{demo}, StatefulSets: []*appsv1.StatefulSet{demo0},
			Pods: []*corev1.Pod{func() *corev1.Pod {
				p := pod(demo0, "0", "10.0.0.10")
				p.Status.PodIPs = []corev1.PodIP{{IP: "10.0.0.10"}, {IP: "fd00::10"}}
				return p
			}()}},
		want: []string{
			"10.0.0.10 statefulsetgrid-demo-0.servicegrid-demo-svc.default.svc.cluster.local",
			"fd00::10 statefulsetgrid-demo-0.servicegrid-demo-svc.default.svc.cluster.local",
		},
	},
}

func TestCompute(t *testing.T) {
	for _, tt := range computeCases {
		t.Run(tt.name, func(t *testing.T) {
			if tt.in.ClusterDomain == "" {
				tt.in.ClusterDomain = "cluster.local"
			}
			got, skips := Compute(tt.in)
			if diff := cmp.Diff(tt.want, lines(got)); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
			var gotSkips []string
			for _, s := range skips {
				gotSkips = append(gotSkips, s.Reason+" "+s.Object)
			}
			if diff := cmp.Diff(tt.wantSkips, gotSkips); diff != "" {
				t.Errorf("skips (-want +got):\n%s", diff)
			}
			// Same input in another order: same records (the file must not flap).
			rev := tt.in
			rev.Pods = reversed(tt.in.Pods)
			rev.StatefulSets = reversed(tt.in.StatefulSets)
			again, _ := Compute(rev)
			if diff := cmp.Diff(lines(got), lines(again)); diff != "" {
				t.Errorf("input order changed the records:\n%s", diff)
			}
		})
	}
}

func reversed[T any](s []T) []T {
	out := make([]T, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}

func TestRender(t *testing.T) {
	got := string(Render("node-1", []Record{{Name: "a-0.s.ns.svc.cluster.local", IP: "10.0.0.1"}, {Name: "a-1.s.ns.svc.cluster.local", IP: "10.0.0.2"}}))
	want := Header + "# node node-1: 2 records\n10.0.0.1 a-0.s.ns.svc.cluster.local\n10.0.0.2 a-1.s.ns.svc.cluster.local\n"
	if got != want {
		t.Errorf("Render:\n%s\nwant:\n%s", got, want)
	}
	if got := string(Render("node-1", nil)); got != Header+"# node node-1: 0 records\n" {
		t.Errorf("empty Render: %q", got)
	}
}
