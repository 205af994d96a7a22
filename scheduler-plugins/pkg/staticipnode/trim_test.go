package staticipnode

import (
	"fmt"
	"reflect"
	"runtime"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	runtimeapi "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// liveStaticIP is a StaticIP as the API server serves it once the controller has bound it:
// labels, owner reference, finalizer, two managedFields entries, conditions.
func liveStaticIP(i int) *jkev1.StaticIP {
	now := metav1.NewTime(time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC))
	fields := func(manager, sub string, raw string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "jke.jdcloud.com/v1",
			Time: &now, FieldsType: "FieldsV1", Subresource: sub, FieldsV1: &metav1.FieldsV1{Raw: []byte(raw)}}
	}
	return &jkev1.StaticIP{
		ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: fmt.Sprintf("web-%d", i), UID: types.UID(fmt.Sprintf("0b8f0c2e-6d1a-4c36-9b57-%012d", i)),
			ResourceVersion: fmt.Sprint(100000 + i), Generation: 2, CreationTimestamp: now,
			Labels:          map[string]string{"app": "web", "staticip.jke.jdcloud.com/workload": "web"},
			Finalizers:      []string{"staticip.jke.jdcloud.com/release"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "jke.jdcloud.com/v1alpha1", Kind: "EnhancedStatefulSet", Name: "web", UID: "5f1c", Controller: ptr.To(true)}},
			ManagedFields: []metav1.ManagedFieldsEntry{
				fields("staticip-controller-manager", "", `{"f:metadata":{"f:finalizers":{".":{},"v:\"staticip.jke.jdcloud.com/release\"":{}},"f:labels":{".":{},"f:app":{},"f:staticip.jke.jdcloud.com/workload":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"5f1c\"}":{}}},"f:spec":{".":{},"f:apiGroup":{},"f:ip":{},"f:kind":{},"f:node":{},"f:pod":{},"f:ref":{},"f:resources":{".":{},"f:cpu":{},"f:memory":{}},"f:retentionPolicy":{}}}`),
				fields("staticip-controller-manager", "status", `{"f:status":{".":{},"f:conditions":{".":{},"k:{\"type\":\"Bound\"}":{".":{},"f:lastTransitionTime":{},"f:message":{},"f:observedGeneration":{},"f:reason":{},"f:status":{},"f:type":{}}},"f:observedGeneration":{},"f:phase":{},"f:podUID":{}}}`),
			}},
		Spec: jkev1.StaticIPSpec{Ref: "web", Kind: "EnhancedStatefulSet", APIGroup: "jke.jdcloud.com", Node: fmt.Sprintf("node-%04d", i%1000),
			IP: fmt.Sprintf("10.%d.%d.%d", 64+i/65536, i/256%256, i%256), Pod: fmt.Sprintf("web-%d", i),
			Resources: v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("512Mi")}},
		Status: jkev1.StaticIPStatus{Phase: jkev1.StaticIPBound, PodUID: "a1b2c3d4-0000-4000-8000-000000000000", ObservedGeneration: 2,
			Conditions: []metav1.Condition{{Type: "Bound", Status: metav1.ConditionTrue, ObservedGeneration: 2, LastTransitionTime: now,
				Reason: "PodRunning", Message: "pod prod/web runs on its node with the IP"}}},
	}
}

// The trimmed copy yields exactly the fields the cache reads from the whole object.
func TestTrimKeepsWhatTheCacheReads(t *testing.T) {
	full := liveStaticIP(7)
	full.DeletionTimestamp = ptr.To(metav1.Now())
	trimmed, err := Trim(full)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := staticIPFieldsOf(trimmed.(*jkev1.StaticIP)), staticIPFieldsOf(full); !reflect.DeepEqual(got, want) {
		t.Errorf("trimmed StaticIP reads as %+v, the whole one as %+v", got, want)
	}
	if ts := trimmed.(*jkev1.StaticIP); ts.ManagedFields != nil || ts.Labels != nil || ts.Status.Conditions != nil {
		t.Errorf("trimmed StaticIP keeps what nothing reads: %+v", ts)
	}
	r := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "r", UID: "u", ResourceVersion: "9", Generation: 3, Labels: map[string]string{"a": "b"}},
		Spec:   jkev1.IPRangeSpec{CIDR: "10.0.0.0/24", Node: "n1", Gateway: "10.0.0.1", ExcludeIPs: []string{"10.0.0.9"}, OwnerGeneration: 2},
		Status: jkev1.IPRangeStatus{Used: 12}}
	tr, _ := Trim(r)
	if got, want := ipRangeFieldsOf(tr.(*jkev1.IPRange)), ipRangeFieldsOf(r); !reflect.DeepEqual(got, want) {
		t.Errorf("trimmed IPRange reads as %+v, the whole one as %+v", got, want)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "x", Obj: full}
	if got, _ := Trim(tomb); !reflect.DeepEqual(got, tomb) {
		t.Error("a tombstone was changed")
	}
}

// heldBytes is the heap held by n objects that store puts in an informer-like store.
func heldBytes(n int, store func(i int) any) float64 {
	keep := make([]any, n)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range n {
		keep[i] = store(i)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// BenchmarkStaticIPHeld measures the bytes the scheduler holds per StaticIP: before, the
// cache's informer held the whole typed object and kube-scheduler's dynamic informer (for the
// registered custom-resource events) an unstructured copy; now one trimmed typed copy.
//
//	go test -run '^$' -bench StaticIPHeld ./scheduler-plugins/pkg/staticipnode/
func BenchmarkStaticIPHeld(b *testing.B) {
	const n = 10000
	modes := []struct {
		name  string
		store func(i int) any
	}{
		{"before=typed+unstructured", func(i int) any {
			o := liveStaticIP(i)
			u, err := runtimeapi.DefaultUnstructuredConverter.ToUnstructured(liveStaticIP(i))
			if err != nil {
				b.Fatal(err)
			}
			return []any{o, &unstructured.Unstructured{Object: u}}
		}},
		{"typed", func(i int) any { return liveStaticIP(i) }},
		{"after=trimmed", func(i int) any { t, _ := Trim(liveStaticIP(i)); return t }},
	}
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			var per float64
			for range b.N {
				per = heldBytes(n, m.store)
			}
			b.ReportMetric(per, "B/object")
		})
	}
}

// BenchmarkCacheBytesPerStaticIP measures what the cache itself (records, per-pod index,
// versions, node views) holds per StaticIP applied, beside the informer's trimmed copy that
// BenchmarkStaticIPHeld measures. kube-scheduler holds neither; at 1,000 nodes × (10 static-IP
// pods + 5 reservations) that is 15,000 records.
//
//	go test -run '^$' -bench CacheBytesPerStaticIP ./scheduler-plugins/pkg/staticipnode/
func BenchmarkCacheBytesPerStaticIP(b *testing.B) {
	const n = 15000
	objs := make([]*jkev1.StaticIP, n)
	for i := range objs {
		t, _ := Trim(liveStaticIP(i))
		objs[i] = t.(*jkev1.StaticIP)
	}
	var per float64
	for range b.N {
		per = heldBytes(1, func(int) any {
			c := NewEmpty()
			for _, o := range objs {
				c.OnStaticIPUpdate(nil, o)
			}
			return c
		}) / n
	}
	b.ReportMetric(per, "B/record")
}
