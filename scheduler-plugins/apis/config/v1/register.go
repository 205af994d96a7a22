package v1

import (
	"k8s.io/apimachinery/pkg/runtime"
	schedconfigv1 "k8s.io/kube-scheduler/config/v1"
)

// SchemeGroupVersion is kubescheduler.config.k8s.io/v1.
var SchemeGroupVersion = schedconfigv1.SchemeGroupVersion

var (
	// SchemeBuilder registers this package's types and generated defaults; the generated
	// conversions add themselves through localSchemeBuilder.
	SchemeBuilder      = runtime.NewSchemeBuilder(addKnownTypes, addDefaultingFuncs)
	localSchemeBuilder = &SchemeBuilder
	// AddToScheme registers this package into a scheme.
	AddToScheme = localSchemeBuilder.AddToScheme
)

func init() {
	// Extend the kube-scheduler's v1 builder too: the scheduler builds its plugin-args
	// conversion scheme from it on first use.
	schedconfigv1.SchemeBuilder.Register(addKnownTypes, addDefaultingFuncs, func(s *runtime.Scheme) error { return RegisterConversions(s) })
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&PodFitsResourcesWithStaticIPArgs{},
		&CheckPodAnnotationWithStaticIPArgs{},
	)
	return nil
}

func addDefaultingFuncs(scheme *runtime.Scheme) error {
	return RegisterDefaults(scheme)
}
