// staticip-controller-manager runs the staticip controllers (manager.KnownControllers: the
// EnhancedStatefulSet, StaticIP, the three SuperEdge grid, node failover and range allocator
// controllers; --controllers picks them) in one process with Lease leader election. See
// controllers/README.md.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/server"
	"k8s.io/klog/v2"

	"github.com/staticip/staticip/controllers/pkg/manager"
)

func main() {
	opts := manager.NewOptions()
	fs := pflag.NewFlagSet(manager.ComponentName, pflag.ExitOnError)
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
	ctx := server.SetupSignalContext()
	if err := manager.Run(ctx, opts, cfg); err != nil {
		klog.ErrorS(err, "Exiting")
		klog.Flush()
		os.Exit(1)
	}
}
