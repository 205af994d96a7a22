package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodesWithoutIPRangePolicy says what PodFitsResourcesWithStaticIP does with a node that
// owns no IPRange.
type NodesWithoutIPRangePolicy string

const (
	// NodesWithoutIPRangeAllow: such a node's pod IPs are not managed by staticip ranges
	// (another IPAM hands them out); only the resource reservations are checked there. A node
	// that staticip does manage (its agent reports the condition NetworkUnavailable with a
	// StaticIP... reason) but that has no usable range (NetworkUnavailable=True) takes no pod
	// that needs an IP, under either policy.
	NodesWithoutIPRangeAllow NodesWithoutIPRangePolicy = "Allow"
	// NodesWithoutIPRangeReject: a pod that needs a pod-network IP does not fit there.
	NodesWithoutIPRangeReject NodesWithoutIPRangePolicy = "Reject"
)

// UnknownIPPolicy says what CheckPodAnnotationWithStaticIP does with a pod whose annotated
// IP lies in no IPRange.
type UnknownIPPolicy string

const (
	// UnknownIPReject: the pod is unschedulable until an IPRange holding the IP appears.
	UnknownIPReject UnknownIPPolicy = "Reject"
	// UnknownIPIgnore: the annotation does not pin the pod.
	UnknownIPIgnore UnknownIPPolicy = "Ignore"
)

// PodFitsResourcesWithStaticIPArgs are the arguments of PodFitsResourcesWithStaticIP.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type PodFitsResourcesWithStaticIPArgs struct {
	metav1.TypeMeta

	// CheckIPs: a pod that needs a pod-network IP fits a node with IPRanges only when one
	// of the node's addresses is free, or the pod's own StaticIP holds one there.
	CheckIPs bool
	// NodesWithoutIPRange: Allow or Reject.
	NodesWithoutIPRange NodesWithoutIPRangePolicy
}

// CheckPodAnnotationWithStaticIPArgs are the arguments of CheckPodAnnotationWithStaticIP.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type CheckPodAnnotationWithStaticIPArgs struct {
	metav1.TypeMeta

	// (No annotation key: it is podip.AnnotationIPAddress for every component. The versioned
	// args' deprecated ipAddressAnnotation is checked when converting, and dropped.)
	// UnknownIP: Reject or Ignore an annotated IP that lies in no IPRange.
	UnknownIP UnknownIPPolicy
}
