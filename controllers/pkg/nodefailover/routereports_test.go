package nodefailover

import (
	"reflect"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// routeReports decodes each Lease's report once per resourceVersion and follows every change:
// a new version is decoded again, a Lease naming another holder is no report, a deleted Lease's
// report is gone (and forgotten).
func TestRouteReportsFollowTheLeases(t *testing.T) {
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	r := &routeReports{store: store, parsed: map[string]parsedRouteReport{}}
	lease := func(rv, holder, report string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: jkev1.NamespaceRouteReports, ResourceVersion: rv,
			Annotations: map[string]string{jkev1.AnnotationRoutesObserved: report}}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder)}}
	}
	want := func(step string, routes map[string]string, wantOK bool) RouteReport {
		t.Helper()
		got, ok := r.of("n1")
		if ok != wantOK || (ok && !reflect.DeepEqual(got.Routes, routes)) || got.Err != nil {
			t.Fatalf("%s: report %+v, %v; want %v, %v", step, got, ok, routes, wantOK)
		}
		return got
	}
	want("no Lease", nil, false)
	_ = store.Add(lease("1", "n1", `{"ra":"s1/1"}`))
	first := want("its Lease", map[string]string{"ra": "s1/1"}, true)
	again := want("asked again", map[string]string{"ra": "s1/1"}, true)
	if reflect.ValueOf(first.Routes).Pointer() != reflect.ValueOf(again.Routes).Pointer() {
		t.Errorf("the same version decoded twice")
	}
	_ = store.Update(lease("2", "n1", `{"ra":"s1/2"}`))
	want("a new version", map[string]string{"ra": "s1/2"}, true)
	_ = store.Update(lease("3", "n2", `{"ra":"s1/2"}`))
	want("another node named holder", nil, false)
	l := lease("3", "n2", "")
	_ = store.Delete(l)
	r.forget(cache.DeletedFinalStateUnknown{Key: "x", Obj: l})
	want("deleted", nil, false)
	if len(r.parsed) != 0 {
		t.Errorf("a deleted Lease's report kept: %v", r.parsed)
	}
}
