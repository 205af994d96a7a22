package agent

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

func TestNamespacePools(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	ipp := func(name string, age int, cidr string, sel map[string]string) *jkev1.IPPool {
		p := &jkev1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(-time.Duration(age) * time.Hour))},
			Spec: jkev1.IPPoolSpec{CIDRs: []string{cidr}}}
		if sel != nil {
			p.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: sel}
		}
		return p
	}
	ns := func(name string, lbl map[string]string, pools string) *corev1.Namespace {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl}}
		if pools != "" {
			n.Annotations = map[string]string{jkev1.AnnotationIPPools: pools}
		}
		return n
	}
	blue := map[string]string{"tenant": "blue"}
	for _, tc := range []struct {
		name       string
		pools      []*jkev1.IPPool
		namespaces []*corev1.Namespace
		want       map[string][]string
	}{
		{name: "no namespace pool, no annotation: empty", pools: []*jkev1.IPPool{ipp("default", 9, "10.244.0.0/16", nil)},
			namespaces: []*corev1.Namespace{ns("a", blue, "")}, want: map[string][]string{}},
		{name: "a pool selecting a namespace", pools: []*jkev1.IPPool{ipp("default", 9, "10.244.0.0/16", nil), ipp("blue", 5, "10.1.0.0/16", blue)},
			namespaces: []*corev1.Namespace{ns("a", blue, ""), ns("b", nil, "")}, want: map[string][]string{"a": {"blue"}}},
		{name: "the namespace's annotation wins; of two selecting pools of a family the older",
			pools:      []*jkev1.IPPool{ipp("default", 9, "10.244.0.0/16", nil), ipp("blue", 5, "10.1.0.0/16", blue), ipp("blue2", 1, "10.2.0.0/16", blue)},
			namespaces: []*corev1.Namespace{ns("a", blue, ""), ns("c", blue, `["blue2"]`), ns("d", nil, `["default"]`)},
			want:       map[string][]string{"a": {"blue"}, "c": {"blue2"}, "d": {"default"}}},
		{name: "an annotation naming a pool the namespace may not use: left out (admission refuses its pods)",
			pools:      []*jkev1.IPPool{ipp("blue", 5, "10.1.0.0/16", blue)},
			namespaces: []*corev1.Namespace{ns("e", nil, `["blue"]`)}, want: map[string][]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := namespacePools(tc.pools, tc.namespaces); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
