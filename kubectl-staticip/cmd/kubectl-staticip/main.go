// Command kubectl-staticip is the kubectl plugin of staticip: `kubectl staticip ips|check|
// rollout|failover`. Put it on PATH (or install it with krew: a release's staticip.yaml) and kubectl finds it.
package main

import (
	"context"
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/staticip/staticip/internal/version"
	"github.com/staticip/staticip/kubectl-staticip/pkg/kubectlplugin"
)

func main() {
	cmd := kubectlplugin.NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	cmd.Version = version.Version // --version
	os.Exit(kubectlplugin.HandleError(os.Stderr, cmd.ExecuteContext(context.Background())))
}
