package v1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/conversion"

	"github.com/staticip/staticip/scheduler-plugins/apis/config"
	"github.com/staticip/staticip/scheduler-plugins/apis/config/validation"
)

// The conversions to the internal types are the generated ones plus validation: kube-scheduler
// converts plugin args while it loads its configuration, so a bad value fails the load (with
// the field named) instead of surfacing only when the plugin is built.

// Convert_v1_PodFitsResourcesWithStaticIPArgs_To_config_PodFitsResourcesWithStaticIPArgs converts and validates.
func Convert_v1_PodFitsResourcesWithStaticIPArgs_To_config_PodFitsResourcesWithStaticIPArgs(in *PodFitsResourcesWithStaticIPArgs, out *config.PodFitsResourcesWithStaticIPArgs, s conversion.Scope) error { //nolint:revive // generator naming
	if err := autoConvert_v1_PodFitsResourcesWithStaticIPArgs_To_config_PodFitsResourcesWithStaticIPArgs(in, out, s); err != nil {
		return err
	}
	if err := validation.ValidatePodFitsResourcesWithStaticIPArgs(nil, out); err != nil {
		return fmt.Errorf("PodFitsResourcesWithStaticIP args: %w", err)
	}
	return nil
}

// Convert_v1_CheckPodAnnotationWithStaticIPArgs_To_config_CheckPodAnnotationWithStaticIPArgs converts and validates.
func Convert_v1_CheckPodAnnotationWithStaticIPArgs_To_config_CheckPodAnnotationWithStaticIPArgs(in *CheckPodAnnotationWithStaticIPArgs, out *config.CheckPodAnnotationWithStaticIPArgs, s conversion.Scope) error { //nolint:revive // generator naming
	if err := autoConvert_v1_CheckPodAnnotationWithStaticIPArgs_To_config_CheckPodAnnotationWithStaticIPArgs(in, out, s); err != nil {
		return err
	}
	if err := validation.ValidateDeprecatedIPAddressAnnotation(nil, in.IPAddressAnnotation); err != nil {
		return fmt.Errorf("CheckPodAnnotationWithStaticIP args: %w", err)
	}
	if err := validation.ValidateCheckPodAnnotationWithStaticIPArgs(nil, out); err != nil {
		return fmt.Errorf("CheckPodAnnotationWithStaticIP args: %w", err)
	}
	return nil
}
