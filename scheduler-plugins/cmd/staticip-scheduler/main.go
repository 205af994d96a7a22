// Command staticip-scheduler is kube-scheduler with the staticip filter plugins compiled in.
// Flags and configuration are kube-scheduler's; enable the plugins in a profile of the
// KubeSchedulerConfiguration (see manifests/scheduler). --version prints staticip's release
// and the kube-scheduler it is built on.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // JSON log format, as kube-scheduler
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	k8sversion "k8s.io/component-base/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/staticip/staticip/internal/version"
	"github.com/staticip/staticip/scheduler-plugins/pkg/checkpodannotation"
	"github.com/staticip/staticip/scheduler-plugins/pkg/podfitsresources"
)

func main() {
	command := app.NewSchedulerCommand(
		app.WithPlugin(checkpodannotation.Name, checkpodannotation.New),
		app.WithPlugin(podfitsresources.Name, podfitsresources.New),
	)
	version.WrapFlag(command.Flags(), "staticip-scheduler", os.Stdout,
		func() string { return "kube-scheduler " + k8sversion.Get().GitVersion }, os.Exit)
	os.Exit(cli.Run(command))
}
