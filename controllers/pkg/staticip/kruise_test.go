package staticip

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

func kruiseSetWith(spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps.kruise.io/v1beta1", "kind": "StatefulSet",
		"metadata": map[string]any{"name": "kr", "namespace": "ns"},
		"spec":     spec,
	}}
}

// TestKruiseWants: the ordinals an Advanced StatefulSet keeps are Kruise's
// (getStatefulSetReplicasRange): the first replicas ordinals from ordinals.start that are not
// reserved; an unparsable range reserves nothing (as Kruise does).
func TestKruiseWants(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec map[string]any
		want []int // of ordinals 0..7
	}{
		{"replicas 3", map[string]any{"replicas": int64(3)}, []int{0, 1, 2}},
		{"replicas unset: 1", map[string]any{}, []int{0}},
		{"replicas 0", map[string]any{"replicas": int64(0)}, nil},
		{"start 2", map[string]any{"replicas": int64(3), "ordinals": map[string]any{"start": int64(2)}}, []int{2, 3, 4}},
		{"ordinal 1 reserved: pod-3 replaces pod-1", map[string]any{"replicas": int64(3), "reserveOrdinals": []any{int64(1)}}, []int{0, 2, 3}},
		{"range 1-2 reserved", map[string]any{"replicas": int64(2), "reserveOrdinals": []any{"1-2"}}, []int{0, 3}},
		{"number and range", map[string]any{"replicas": int64(3), "reserveOrdinals": []any{int64(0), "4-5"}}, []int{1, 2, 3}},
		{"reserved and scaled down", map[string]any{"replicas": int64(2), "reserveOrdinals": []any{int64(1)}}, []int{0, 2}},
		{"bad range reserves nothing", map[string]any{"replicas": int64(2), "reserveOrdinals": []any{int64(0), "3-1"}}, []int{0, 1}},
		{"start and reserved", map[string]any{"replicas": int64(2), "ordinals": map[string]any{"start": int64(1)}, "reserveOrdinals": []any{int64(1)}}, []int{2, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := kruiseOrdinalsOf(kruiseSetWith(tc.spec))
			var got []int
			for n := 0; n < 8; n++ {
				if o.wants(n) {
					got = append(got, n)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("wanted ordinals %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("wanted ordinals %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// TestKruiseScaledAway: the record's own policy decides; a set being deleted releases nothing
// (the garbage collector's job).
func TestKruiseScaledAway(t *testing.T) {
	set := kruiseSetWith(map[string]any{"replicas": int64(1)})
	del := jkev1.StaticIPRetentionPolicy{WhenScaled: jkev1.DeleteStaticIP}
	keep := jkev1.StaticIPRetentionPolicy{WhenScaled: jkev1.RetainStaticIP}
	if !kruiseScaledAway(set, 1, del) || kruiseScaledAway(set, 0, del) {
		t.Fatal("replicas 1, whenScaled Delete: ordinal 1 is scaled away, 0 is not")
	}
	if kruiseScaledAway(set, 1, keep) {
		t.Fatal("whenScaled Retain: nothing is scaled away")
	}
	now := metav1.Now()
	set.SetDeletionTimestamp(&now)
	if kruiseScaledAway(set, 1, del) {
		t.Fatal("a set being deleted scales nothing away")
	}
}

// TestTrimKruiseStatefulSet keeps what the controller reads and drops the rest.
func TestTrimKruiseStatefulSet(t *testing.T) {
	set := kruiseSetWith(map[string]any{"replicas": int64(2), "reserveOrdinals": []any{int64(1)},
		"template": map[string]any{"metadata": map[string]any{"annotations": map[string]any{"x": "y"}}}})
	set.SetUID("u-1")
	set.SetAnnotations(map[string]string{jkev1.AnnotationEnable: "true"})
	out, err := trimKruiseStatefulSet(set)
	if err != nil {
		t.Fatal(err)
	}
	u := out.(*unstructured.Unstructured)
	if u.GetUID() != "u-1" || u.GetName() != "kr" || u.GetAnnotations()[jkev1.AnnotationEnable] != "true" {
		t.Fatalf("identity or annotations lost: %v", u.Object)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "template"); found {
		t.Fatal("the pod template was kept")
	}
	if o := kruiseOrdinalsOf(u); o.replicas != 2 || !o.reserved[1] {
		t.Fatalf("replicas/reserveOrdinals lost: %+v", o)
	}
}
