package staticipnode

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// Trim is the transform of the cache's informers (cache.TransformFunc): each StaticIP and
// IPRange is stored as a copy holding only what the cache and the plugins read — name,
// namespace, UID, resourceVersion, generation and deletion state; a StaticIP's node, IP,
// pod, workload and resources and its phase; an IPRange's spec. managedFields, labels,
// annotations, owner references, finalizers and status counters are dropped. Other objects
// (tombstones, unknown types) pass unchanged.
func Trim(obj interface{}) (interface{}, error) {
	switch o := obj.(type) {
	case *jkev1.StaticIP:
		return TrimStaticIP(o), nil
	case *jkev1.IPRange:
		return TrimIPRange(o), nil
	}
	return obj, nil
}

func trimMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		Generation: m.Generation, DeletionTimestamp: m.DeletionTimestamp}
}

// TrimStaticIP is the part of s the cache reads (staticIPFieldsOf).
func TrimStaticIP(s *jkev1.StaticIP) *jkev1.StaticIP {
	return &jkev1.StaticIP{ObjectMeta: trimMeta(&s.ObjectMeta),
		Spec: jkev1.StaticIPSpec{Node: s.Spec.Node, IP: s.Spec.IP, IPs: s.Spec.IPs, Pod: s.Spec.Pod, APIGroup: s.Spec.APIGroup, Kind: s.Spec.Kind,
			Ref: s.Spec.Ref, Resources: s.Spec.Resources},
		Status: jkev1.StaticIPStatus{Phase: s.Status.Phase}}
}

// TrimIPRange is the part of r the cache reads (ipRangeFieldsOf): its spec, no status.
func TrimIPRange(r *jkev1.IPRange) *jkev1.IPRange {
	return &jkev1.IPRange{ObjectMeta: trimMeta(&r.ObjectMeta), Spec: r.Spec}
}
