// Package scheme registers the staticip plugin args into the kube-scheduler's config
// scheme. Importing it (the plugins do) is all a scheduler binary needs for its
// KubeSchedulerConfiguration pluginConfig to decode, default and convert those args.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"github.com/staticip/staticip/scheduler-plugins/apis/config"
	configv1 "github.com/staticip/staticip/scheduler-plugins/apis/config/v1"
)

func init() {
	// schedscheme.Scheme was filled by its own init before this package's; add ours.
	AddToScheme(schedscheme.Scheme)
}

// AddToScheme adds the internal and v1 plugin args to scheme.
func AddToScheme(scheme *runtime.Scheme) {
	utilruntime.Must(config.AddToScheme(scheme))
	utilruntime.Must(configv1.AddToScheme(scheme))
}
