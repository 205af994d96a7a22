package config

import (
	"k8s.io/apimachinery/pkg/runtime"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
)

// SchemeGroupVersion is the kube-scheduler's internal config version: plugin args live in
// the same group as KubeSchedulerConfiguration.
var SchemeGroupVersion = schedconfig.SchemeGroupVersion

var (
	// SchemeBuilder registers only this package's types.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme registers this package's types into a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func init() {
	// Also extend the kube-scheduler's own builder: its plugin-args conversion scheme is
	// built from that builder on first use, after every init has run.
	schedconfig.SchemeBuilder.Register(addKnownTypes)
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&PodFitsResourcesWithStaticIPArgs{},
		&CheckPodAnnotationWithStaticIPArgs{},
	)
	return nil
}
