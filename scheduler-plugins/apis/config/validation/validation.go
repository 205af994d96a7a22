// Package validation checks the staticip scheduler plugins' arguments.
package validation

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/scheduler-plugins/apis/config"
)

// ValidatePodFitsResourcesWithStaticIPArgs validates PodFitsResourcesWithStaticIPArgs.
func ValidatePodFitsResourcesWithStaticIPArgs(path *field.Path, args *config.PodFitsResourcesWithStaticIPArgs) error {
	var errs field.ErrorList
	switch args.NodesWithoutIPRange {
	case config.NodesWithoutIPRangeAllow, config.NodesWithoutIPRangeReject:
	default:
		errs = append(errs, field.NotSupported(path.Child("nodesWithoutIPRange"), args.NodesWithoutIPRange,
			[]string{string(config.NodesWithoutIPRangeAllow), string(config.NodesWithoutIPRangeReject)}))
	}
	return errs.ToAggregate()
}

// ValidateDeprecatedIPAddressAnnotation checks the versioned args' deprecated
// ipAddressAnnotation: unset, or exactly the one key (podip.AnnotationIPAddress).
func ValidateDeprecatedIPAddressAnnotation(path *field.Path, key *string) error {
	if key == nil || *key == podip.AnnotationIPAddress {
		return nil
	}
	return field.Invalid(path.Child("ipAddressAnnotation"), *key, fmt.Sprintf(
		"deprecated and no longer configurable: the scheduler, the CNI and the admission policies all read %s; remove the field (or set it to exactly that key)",
		podip.AnnotationIPAddress))
}

// ValidateCheckPodAnnotationWithStaticIPArgs validates CheckPodAnnotationWithStaticIPArgs.
func ValidateCheckPodAnnotationWithStaticIPArgs(path *field.Path, args *config.CheckPodAnnotationWithStaticIPArgs) error {
	var errs field.ErrorList
	switch args.UnknownIP {
	case config.UnknownIPReject, config.UnknownIPIgnore:
	default:
		errs = append(errs, field.NotSupported(path.Child("unknownIP"), args.UnknownIP,
			[]string{string(config.UnknownIPReject), string(config.UnknownIPIgnore)}))
	}
	return errs.ToAggregate()
}
