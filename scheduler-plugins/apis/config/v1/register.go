package v1

import (
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	schedconfigv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/scheduler-plugins/apis/config"
)

// SchemeGroupVersion is kubescheduler.config.k8s.io/v1.
var SchemeGroupVersion = schedconfigv1.SchemeGroupVersion

var (
	// SchemeBuilder registers only this package's types, defaults and conversions.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes, addDefaultingFuncs, addConversionFuncs)
	// AddToScheme registers this package into a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func init() {
	// Extend the kube-scheduler's v1 builder too: the scheduler builds its plugin-args
	// conversion scheme from it on first use.
	schedconfigv1.SchemeBuilder.Register(addKnownTypes, addDefaultingFuncs, addConversionFuncs)
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&PodFitsResourcesWithStaticIPArgs{},
		&CheckPodAnnotationWithStaticIPArgs{},
	)
	return nil
}

func addDefaultingFuncs(scheme *runtime.Scheme) error {
	scheme.AddTypeDefaultingFunc(&PodFitsResourcesWithStaticIPArgs{}, func(obj interface{}) {
		SetDefaultsPodFitsResourcesWithStaticIPArgs(obj.(*PodFitsResourcesWithStaticIPArgs))
	})
	scheme.AddTypeDefaultingFunc(&CheckPodAnnotationWithStaticIPArgs{}, func(obj interface{}) {
		SetDefaultsCheckPodAnnotationWithStaticIPArgs(obj.(*CheckPodAnnotationWithStaticIPArgs))
	})
	return nil
}

// SetDefaultsPodFitsResourcesWithStaticIPArgs: checkIPs true, nodesWithoutIPRange Allow.
func SetDefaultsPodFitsResourcesWithStaticIPArgs(obj *PodFitsResourcesWithStaticIPArgs) {
	if obj.CheckIPs == nil {
		obj.CheckIPs = ptr.To(true)
	}
	if obj.NodesWithoutIPRange == nil {
		obj.NodesWithoutIPRange = ptr.To(string(config.NodesWithoutIPRangeAllow))
	}
}

// SetDefaultsCheckPodAnnotationWithStaticIPArgs: the staticip ip-address annotation, Reject.
func SetDefaultsCheckPodAnnotationWithStaticIPArgs(obj *CheckPodAnnotationWithStaticIPArgs) {
	if obj.IPAddressAnnotation == nil {
		obj.IPAddressAnnotation = ptr.To(jkev1.AnnotationIPAddress)
	}
	if obj.UnknownIP == nil {
		obj.UnknownIP = ptr.To(string(config.UnknownIPReject))
	}
}

func addConversionFuncs(scheme *runtime.Scheme) error {
	if err := scheme.AddConversionFunc((*PodFitsResourcesWithStaticIPArgs)(nil), (*config.PodFitsResourcesWithStaticIPArgs)(nil),
		func(a, b interface{}, _ conversion.Scope) error {
			in, out := a.(*PodFitsResourcesWithStaticIPArgs), b.(*config.PodFitsResourcesWithStaticIPArgs)
			out.CheckIPs = ptr.Deref(in.CheckIPs, false)
			out.NodesWithoutIPRange = config.NodesWithoutIPRangePolicy(ptr.Deref(in.NodesWithoutIPRange, ""))
			return nil
		}); err != nil {
		return err
	}
	if err := scheme.AddConversionFunc((*config.PodFitsResourcesWithStaticIPArgs)(nil), (*PodFitsResourcesWithStaticIPArgs)(nil),
		func(a, b interface{}, _ conversion.Scope) error {
			in, out := a.(*config.PodFitsResourcesWithStaticIPArgs), b.(*PodFitsResourcesWithStaticIPArgs)
			out.CheckIPs = ptr.To(in.CheckIPs)
			out.NodesWithoutIPRange = ptr.To(string(in.NodesWithoutIPRange))
			return nil
		}); err != nil {
		return err
	}
	if err := scheme.AddConversionFunc((*CheckPodAnnotationWithStaticIPArgs)(nil), (*config.CheckPodAnnotationWithStaticIPArgs)(nil),
		func(a, b interface{}, _ conversion.Scope) error {
			in, out := a.(*CheckPodAnnotationWithStaticIPArgs), b.(*config.CheckPodAnnotationWithStaticIPArgs)
			out.IPAddressAnnotation = ptr.Deref(in.IPAddressAnnotation, "")
			out.UnknownIP = config.UnknownIPPolicy(ptr.Deref(in.UnknownIP, ""))
			return nil
		}); err != nil {
		return err
	}
	return scheme.AddConversionFunc((*config.CheckPodAnnotationWithStaticIPArgs)(nil), (*CheckPodAnnotationWithStaticIPArgs)(nil),
		func(a, b interface{}, _ conversion.Scope) error {
			in, out := a.(*config.CheckPodAnnotationWithStaticIPArgs), b.(*CheckPodAnnotationWithStaticIPArgs)
			out.IPAddressAnnotation = ptr.To(in.IPAddressAnnotation)
			out.UnknownIP = ptr.To(string(in.UnknownIP))
			return nil
		})
}
