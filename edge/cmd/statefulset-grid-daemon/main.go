// statefulset-grid-daemon keeps, on each node, a CoreDNS hosts file in which
// {ssg}-{ordinal}.{service}.{ns}.svc.{domain} resolves to the pod of this node's unit, for
// every StatefulSetGrid. The unit's CoreDNS (a DeploymentGrid) reads the file's directory.
// See edge/README.md.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/server"
	"k8s.io/klog/v2"

	"github.com/staticip/staticip/edge/pkg/ssgdaemon"
)

func main() {
	opts := ssgdaemon.NewOptions()
	fs := pflag.NewFlagSet(ssgdaemon.ComponentName, pflag.ExitOnError)
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
	if err := ssgdaemon.RunWithServer(server.SetupSignalContext(), opts, cfg, nil); err != nil {
		klog.ErrorS(err, "Exiting")
		klog.Flush()
		os.Exit(1)
	}
}
