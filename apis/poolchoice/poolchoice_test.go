package poolchoice_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/labels"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	. "github.com/staticip/staticip/apis/poolchoice"
	"github.com/staticip/staticip/apis/poolchoice/poolchoiceapi"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ipPool(name string, age int, cidr string, sel *metav1.LabelSelector) *jkev1.IPPool {
	return &jkev1.IPPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Minute))},
		Spec:       jkev1.IPPoolSpec{CIDRs: []string{cidr}, NamespaceSelector: sel},
	}
}

func tenant(v string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": v}}
}

func poolsOf(t *testing.T, ps ...*jkev1.IPPool) map[string]Pool {
	t.Helper()
	out := map[string]Pool{}
	for _, p := range ps {
		v, err := poolchoiceapi.FromIPPool(p)
		if err != nil {
			t.Fatal(err)
		}
		out[p.Name] = v
	}
	return out
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    string
		wantErr string
	}{
		{in: `["db-pool"]`, want: "db-pool"},
		{in: `["a","b"]`, want: "a,b"},
		{in: `db-pool`, wantErr: "must be a JSON list"},
		{in: `[]`, wantErr: "1 to 8"},
		{in: `["a","b","c","d","e","f","g","h","i"]`, wantErr: "not 9"},
		{in: `["Bad_Name"]`, wantErr: `"Bad_Name" is not an IPPool name`},
		{in: `["a","a"]`, wantErr: `names IPPool "a" twice`},
	} {
		got, err := Parse(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Parse(%s) = %v, %v; want error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || strings.Join(got, ",") != tc.want {
			t.Errorf("Parse(%s) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestChoose(t *testing.T) {
	deleting := ipPool("going", 5, "10.9.0.0/16", nil)
	now := metav1.NewTime(t0)
	deleting.DeletionTimestamp = &now
	pools := poolsOf(t,
		ipPool("default", 0, "10.244.0.0/16", nil),
		ipPool("blue", 1, "10.1.0.0/16", tenant("blue")),
		ipPool("blue-late", 2, "10.2.0.0/16", tenant("blue")),
		ipPool("blue6", 3, "fd00:1::/112", tenant("blue")),
		ipPool("green", 4, "10.3.0.0/16", tenant("green")),
		deleting,
	)
	nsPools := NamespacePools(pools)
	blueNS := Namespace{Name: "shop", Labels: map[string]string{"tenant": "blue"}}
	plainNS := Namespace{Name: "plain"}
	ann := func(v string) map[string]string { return map[string]string{jkev1.AnnotationIPPools: v} }
	for _, tc := range []struct {
		name    string
		pod     map[string]string
		ns      Namespace
		want    string
		src     Source
		wantErr string
	}{
		{name: "no annotation, no selecting pool: the node's pool", ns: plainNS, want: "", src: SourceNone},
		{name: "no annotation: oldest selecting pool per family", ns: blueNS, want: "blue,blue6", src: SourceNamespaceSelector},
		{name: "pod annotation", pod: ann(`["blue-late"]`), ns: blueNS, want: "blue-late", src: SourcePod},
		{name: "pod may name a pool without selector", pod: ann(`["default"]`), ns: blueNS, want: "default", src: SourcePod},
		{name: "namespace annotation", ns: Namespace{Name: "shop", Labels: blueNS.Labels, Annotations: ann(`["blue-late"]`)}, want: "blue-late", src: SourceNamespace},
		{name: "pod wins over namespace", pod: ann(`["blue"]`), ns: Namespace{Name: "shop", Labels: blueNS.Labels, Annotations: ann(`["blue-late"]`)}, want: "blue", src: SourcePod},
		{name: "pool does not exist", pod: ann(`["nope"]`), ns: blueNS, wantErr: `IPPool "nope" does not exist`},
		{name: "pool does not select the namespace", pod: ann(`["green"]`), ns: blueNS, wantErr: `IPPool "green" does not select namespace "shop" (spec.namespaceSelector tenant=green)`},
		{name: "every problem named", pod: ann(`["green","nope"]`), ns: blueNS, wantErr: `IPPool "green" does not select namespace "shop" (spec.namespaceSelector tenant=green); IPPool "nope" does not exist`},
		{name: "pool being deleted", pod: ann(`["going"]`), ns: plainNS, wantErr: `IPPool "going" is being deleted`},
		{name: "namespace's bad annotation names the namespace", ns: Namespace{Name: "x", Annotations: ann(`["green"]`)}, wantErr: `namespace "x"'s staticip.jke.jdcloud.com/ippools ["green"]: IPPool "green" does not select namespace "x"`},
		{name: "malformed", pod: ann(`green`), ns: plainNS, wantErr: "must be a JSON list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Choose(tc.pod, tc.ns, pools, nsPools)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Choose = %+v, %v; want error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got.Pools, ",") != tc.want || got.Source != tc.src {
				t.Fatalf("Choose = %+v; want pools %q from %q", got, tc.want, tc.src)
			}
			if got.Explicit() != (tc.src == SourcePod || tc.src == SourceNamespace) {
				t.Fatalf("Explicit() = %v for source %q", got.Explicit(), got.Source)
			}
		})
	}
}

func TestOverlaps(t *testing.T) {
	pools := poolsOf(t,
		ipPool("default", 0, "10.244.0.0/16", nil),
		ipPool("blue", 1, "10.1.0.0/16", tenant("blue")),
		ipPool("blue-late", 2, "10.2.0.0/16", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tenant", Operator: metav1.LabelSelectorOpIn, Values: []string{"blue", "red"}}}}),
		ipPool("blue6", 3, "fd00:1::/112", tenant("blue")),
		ipPool("green", 4, "10.3.0.0/16", tenant("green")),
		ipPool("red", 5, "10.4.0.0/16", tenant("red")),
	)
	got := Overlaps(pools, []Namespace{
		{Name: "shop-b", Labels: map[string]string{"tenant": "blue"}},
		{Name: "shop-a", Labels: map[string]string{"tenant": "blue"}},
		{Name: "mill", Labels: map[string]string{"tenant": "red"}},
		{Name: "farm", Labels: map[string]string{"tenant": "green"}},
		{Name: "plain"},
	})
	// blue-late overlaps blue (shop-a, shop-b); red overlaps blue-late (mill); blue6 is another
	// family; default has no selector; green selects only farm.
	want := map[string]string{"blue-late": "blue:shop-a,shop-b", "red": "blue-late:mill"}
	if len(got) != len(want) {
		t.Fatalf("Overlaps = %+v; want %v", got, want)
	}
	for name, w := range want {
		o := got[name]
		if o.Older+":"+strings.Join(o.Namespaces, ",") != w {
			t.Errorf("Overlaps[%s] = %+v; want %s", name, o, w)
		}
	}
	if msg := got["blue-late"].Message("blue-late"); !strings.Contains(msg, `IPPool "blue" (older)`) || !strings.Contains(msg, "shop-a, shop-b") {
		t.Errorf("message %q names neither the older pool nor the namespaces", msg)
	}
	// No namespace selected by both: no overlap (selectors are compared over existing namespaces).
	if got := Overlaps(pools, []Namespace{{Name: "plain"}}); len(got) != 0 {
		t.Errorf("Overlaps without shared namespaces = %+v; want none", got)
	}
}

// BenchmarkChooseNoAnnotation is the per-pod cost for pods that name no pool in a cluster whose
// pools select no namespace: what the scheduler and CNI pay for every ordinary pod.
func BenchmarkChooseNoAnnotation(b *testing.B) {
	pools := map[string]Pool{"default": {Name: "default", V4: true}}
	nsPools := NamespacePools(pools)
	ns := Namespace{Name: "plain"}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if c, _ := Choose(nil, ns, pools, nsPools); len(c.Pools) != 0 {
			b.Fatal(c)
		}
	}
}

func TestAnnotationKeysAgree(t *testing.T) {
	if AnnotationIPPools != jkev1.AnnotationIPPools {
		t.Errorf("poolchoice reads %q, the API defines %q", AnnotationIPPools, jkev1.AnnotationIPPools)
	}
}

// NewPool's selector (built without metav1, for the CNI plugin) selects exactly what the API
// machinery's LabelSelectorAsSelector selects, and refuses what it refuses (but for nil: a pool
// without namespaceSelector selects every namespace).
func TestSelectorAgreesWithTheAPIMachinery(t *testing.T) {
	req := func(k string, op metav1.LabelSelectorOperator, vs ...string) metav1.LabelSelectorRequirement {
		return metav1.LabelSelectorRequirement{Key: k, Operator: op, Values: vs}
	}
	sets := []map[string]string{nil, {"tenant": "blue"}, {"tenant": "red"}, {"tenant": "blue", "tier": "db"}, {"tier": "db"}, {"x/y": "z"}}
	for _, sel := range []*metav1.LabelSelector{
		nil, {},
		{MatchLabels: map[string]string{"tenant": "blue"}},
		{MatchLabels: map[string]string{"tenant": "blue", "tier": "db"}},
		{MatchExpressions: []metav1.LabelSelectorRequirement{req("tenant", metav1.LabelSelectorOpIn, "blue", "red")}},
		{MatchExpressions: []metav1.LabelSelectorRequirement{req("tenant", metav1.LabelSelectorOpNotIn, "blue")}},
		{MatchExpressions: []metav1.LabelSelectorRequirement{req("tier", metav1.LabelSelectorOpExists)}},
		{MatchLabels: map[string]string{"x/y": "z"}, MatchExpressions: []metav1.LabelSelectorRequirement{req("tier", metav1.LabelSelectorOpDoesNotExist)}},
		{MatchExpressions: []metav1.LabelSelectorRequirement{req("tenant", "Near", "blue")}},
		{MatchExpressions: []metav1.LabelSelectorRequirement{req("tenant", metav1.LabelSelectorOpIn)}},
		{MatchLabels: map[string]string{"bad key!": "v"}},
	} {
		want, wantErr := metav1.LabelSelectorAsSelector(sel)
		if sel == nil {
			want = labels.Everything() // an absent namespaceSelector selects every namespace (metav1: nothing)
		}
		p, err := NewPool("p", t0, false, []string{"10.0.0.0/8"}, poolchoiceapi.Selector(sel))
		if (err != nil) != (wantErr != nil) {
			t.Errorf("selector %v: NewPool error %v, API machinery error %v", sel, err, wantErr)
			continue
		}
		if err != nil {
			continue
		}
		for _, set := range sets {
			if got, w := p.SelectsNamespace(set), want.Matches(labels.Set(set)); got != w {
				t.Errorf("selector %v on labels %v: selects %v, the API machinery says %v", sel, set, got, w)
			}
		}
	}
}
