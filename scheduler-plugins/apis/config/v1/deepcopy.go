package v1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// DeepCopyObject implements runtime.Object.
func (in *PodFitsResourcesWithStaticIPArgs) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := *in
	if in.CheckIPs != nil {
		out.CheckIPs = ptr.To(*in.CheckIPs)
	}
	if in.NodesWithoutIPRange != nil {
		out.NodesWithoutIPRange = ptr.To(*in.NodesWithoutIPRange)
	}
	return &out
}

// DeepCopyObject implements runtime.Object.
func (in *CheckPodAnnotationWithStaticIPArgs) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := *in
	if in.IPAddressAnnotation != nil {
		out.IPAddressAnnotation = ptr.To(*in.IPAddressAnnotation)
	}
	if in.UnknownIP != nil {
		out.UnknownIP = ptr.To(*in.UnknownIP)
	}
	return &out
}
