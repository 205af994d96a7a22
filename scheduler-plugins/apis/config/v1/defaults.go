package v1

import (
	"k8s.io/utils/ptr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
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

// SetDefaults_CheckPodAnnotationWithStaticIPArgs: the staticip ip-address annotation, Reject.
func SetDefaults_CheckPodAnnotationWithStaticIPArgs(obj *CheckPodAnnotationWithStaticIPArgs) { //nolint:revive // generator naming
	if obj.IPAddressAnnotation == nil {
		obj.IPAddressAnnotation = ptr.To(jkev1.AnnotationIPAddress)
	}
	if obj.UnknownIP == "" {
		obj.UnknownIP = "Reject"
	}
}
