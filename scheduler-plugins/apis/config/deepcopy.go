package config

import "k8s.io/apimachinery/pkg/runtime"

// DeepCopyObject implements runtime.Object (every field is a value).
func (in *PodFitsResourcesWithStaticIPArgs) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := *in
	return &out
}

// DeepCopyObject implements runtime.Object (every field is a value).
func (in *CheckPodAnnotationWithStaticIPArgs) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := *in
	return &out
}
