// Package validation checks the staticip scheduler plugins' arguments.
package validation

import (
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

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

// ValidateCheckPodAnnotationWithStaticIPArgs validates CheckPodAnnotationWithStaticIPArgs.
func ValidateCheckPodAnnotationWithStaticIPArgs(path *field.Path, args *config.CheckPodAnnotationWithStaticIPArgs) error {
	var errs field.ErrorList
	for _, msg := range validation.IsQualifiedName(args.IPAddressAnnotation) {
		errs = append(errs, field.Invalid(path.Child("ipAddressAnnotation"), args.IPAddressAnnotation, msg))
	}
	switch args.UnknownIP {
	case config.UnknownIPReject, config.UnknownIPIgnore:
	default:
		errs = append(errs, field.NotSupported(path.Child("unknownIP"), args.UnknownIP,
			[]string{string(config.UnknownIPReject), string(config.UnknownIPIgnore)}))
	}
	return errs.ToAggregate()
}
