package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodesWithoutIPRangePolicy is Allow or Reject (see the internal type).
type NodesWithoutIPRangePolicy string

// UnknownIPPolicy is Reject or Ignore (see the internal type).
type UnknownIPPolicy string

// PodFitsResourcesWithStaticIPArgs are the arguments of PodFitsResourcesWithStaticIP.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type PodFitsResourcesWithStaticIPArgs struct {
	metav1.TypeMeta `json:",inline"`

	// CheckIPs: a pod that needs a pod-network IP fits a node with IPRanges only when one
	// of the node's addresses is free, or its own StaticIP holds one there. Default true.
	CheckIPs *bool `json:"checkIPs,omitempty"`
	// NodesWithoutIPRange: what a node that owns no IPRange and has no staticip agent does:
	// Allow (default; only reservations are checked there) or Reject. A staticip node (its agent
	// reports NetworkUnavailable, reason StaticIP...) without a usable range is refused either way.
	NodesWithoutIPRange NodesWithoutIPRangePolicy `json:"nodesWithoutIPRange,omitempty"`
}

// CheckPodAnnotationWithStaticIPArgs are the arguments of CheckPodAnnotationWithStaticIP.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type CheckPodAnnotationWithStaticIPArgs struct {
	metav1.TypeMeta `json:",inline"`

	// IPAddressAnnotation is deprecated and ignored: the annotation carrying a pod's IP is one
	// constant for the scheduler, the CNI and the admission policies that guard it
	// (podip.AnnotationIPAddress, staticip.jke.jdcloud.com/ip-address). It may be left unset or
	// set to exactly that key (configurations written when it was configurable); any other
	// value fails the configuration load, since the CNI would never read that annotation.
	IPAddressAnnotation *string `json:"ipAddressAnnotation,omitempty"`
	// UnknownIP: Reject (default) or Ignore an annotated IP that lies in no IPRange.
	UnknownIP UnknownIPPolicy `json:"unknownIP,omitempty"`
}
