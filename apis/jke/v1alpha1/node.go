package v1alpha1

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// NodeOutOfService reports whether the node carries Kubernetes' out-of-service taint
// (TaintOutOfService, any effect): the node is known to be off. Node failover moves nothing
// of a node that does not carry it (or whose Node object is not gone); the range allocator
// gives such a node no new block. One predicate, read by both controllers.
func NodeOutOfService(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == TaintOutOfService })
}
