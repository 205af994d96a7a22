// application-grid-wrapper sits between kube-proxy and the API server on an edge node and
// keeps, in the EndpointSlices kube-proxy sees, only the endpoints the Service's
// topologyKeys select for this node. See edge/README.md.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/server"
	"k8s.io/klog/v2"

	"github.com/staticip/staticip/edge/pkg/gridwrapper"
)

func main() {
	opts := gridwrapper.NewOptions()
	fs := pflag.NewFlagSet(gridwrapper.ComponentName, pflag.ExitOnError)
	opts.AddFlags(fs)
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	_ = fs.Parse(os.Args[1:])

	if err := opts.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	cfg, err := opts.RestConfig()
	if err != nil {
		klog.ErrorS(err, "Loading kubeconfig")
		os.Exit(1)
	}
	if err := gridwrapper.Run(server.SetupSignalContext(), opts, cfg, nil); err != nil {
		klog.ErrorS(err, "Exiting")
		klog.Flush()
		os.Exit(1)
	}
}
