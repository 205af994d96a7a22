package v1

import (
	"k8s.io/utils/ptr"
)

// The SetDefaults_ functions are registered by defaulter-gen (zz_generated.defaults.go).

// SetDefaults_PodFitsResourcesWithStaticIPArgs: checkIPs true, nodesWithoutIPRange Allow.
func SetDefaults_PodFitsResourcesWithStaticIPArgs(obj *PodFitsResourcesWithStaticIPArgs) { //nolint:revive // generator naming
	if obj.CheckIPs == nil {
		obj.CheckIPs = ptr.To(true)
	}
	if obj.NodesWithoutIPRange == "" {
		obj.NodesWithoutIPRange = "Allow"
	}
}

// SetDefaults_CheckPodAnnotationWithStaticIPArgs: unknownIP Reject (ipAddressAnnotation is
// deprecated and has no default: the key is podip.AnnotationIPAddress).
func SetDefaults_CheckPodAnnotationWithStaticIPArgs(obj *CheckPodAnnotationWithStaticIPArgs) { //nolint:revive // generator naming
	if obj.UnknownIP == "" {
		obj.UnknownIP = "Reject"
	}
}
