// Command localcluster runs a real Kubernetes cluster as processes on this machine:
//
//	tools/run.sh localcluster up [--nodes=3] [--state-dir=...] [--cni=bridge] [--scheduler=kube-scheduler]
//	tools/run.sh localcluster status|top|kubeconfig|routes|down|leftovers
//	tools/run.sh localcluster node stop|start|partition|heal NODE
//
// See tools/localcluster/README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/staticip/staticip/internal/reporoot"
	"github.com/staticip/staticip/tools/localcluster/cluster"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	sub := os.Args[1]
	args := os.Args[2:]
	var nodeAction, nodeName string
	if sub == "node" {
		// localcluster node stop|start|partition|heal NAME [flags]
		if len(args) < 2 {
			usage()
		}
		nodeAction, nodeName, args = args[0], args[1], args[2:]
	}
	o := cluster.DefaultOptions()
	root, _ := reporoot.Find()
	fs := flag.NewFlagSet(sub, flag.ExitOnError)
	fs.IntVar(&o.Nodes, "nodes", o.Nodes, "number of worker nodes")
	fs.IntVar(&o.SpareNodes, "spare-nodes", o.SpareNodes, "failover spares after the workers (label and NoSchedule taint staticip.jke.jdcloud.com/spare, zone of the worker they back)")
	fs.StringVar(&o.FailoverWindow, "failover-window", o.FailoverWindow, "staticip-controller-manager --node-failover-window (empty: its default)")
	fs.StringVar(&o.StateDir, "state-dir", o.StateDir, "directory for all cluster state (removed by down)")
	fs.StringVar(&o.BinDir, "bin-dir", filepath.Join(root, "_output", "bin"), "directory with etcd, kube-*, kubectl and coredns")
	fs.StringVar(&o.CRDDir, "crd-dir", filepath.Join(root, "manifests", "crds"), "staticip CRDs to install at up (empty: none)")
	fs.StringVar(&o.ImageDir, "image-dir", filepath.Join(root, "_output", "images"), "image tarballs to import into every node (missing defaults are built)")
	fs.StringVar(&o.CNI, "cni", o.CNI, "pod network: staticip, bridge (bridge + host-local) or spiderpool (macvlan + Spiderpool, a benchmark peer: make spiderpool)")
	fs.StringVar(&o.Scheduler, "scheduler", o.Scheduler, "scheduler binary: kube-scheduler or staticip-scheduler (make build; serves default-scheduler with the staticip plugins)")
	fs.StringVar(&o.FeatureGates, "feature-gates", "", "feature gates for kube-apiserver and kube-controller-manager, e.g. MaxUnavailableStatefulSet=true")
	fs.BoolVar(&o.KubeProxyDirect, "kube-proxy-direct", o.KubeProxyDirect, "kube-proxy talks to the API server directly instead of through application-grid-wrapper")
	fs.BoolVar(&o.CentralDNS, "central-dns", o.CentralDNS, "one CoreDNS Deployment instead of the edge DNS (a CoreDNS per zone with statefulset-grid-daemon's records; implied by --kube-proxy-direct)")
	fs.StringVar(&o.Prefix, "prefix", o.Prefix, "prefix of netns and link names")
	fs.StringVar(&o.PodCIDR, "pod-cidr", o.PodCIDR, "IPv4 /16 of pod addresses (node i gets its .i.0/24)")
	fs.StringVar(&o.ServiceCIDR, "service-cidr", o.ServiceCIDR, "IPv4 /16 of Service addresses (.0.10 is DNS)")
	fs.StringVar(&o.NodeSubnet, "node-subnet", o.NodeSubnet, "IPv4 /24 for the host bridge, control plane and node IPs")
	fs.StringVar(&o.OutsideSubnet, "outside-subnet", o.OutsideSubnet, "IPv4 network behind the datacenter router (FRR): the router has its first address, the outside namespace the second")
	sample := fs.Duration("sample", 30*time.Second, "top: CPU sampling interval")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after this long")
	_ = fs.Parse(args)
	o.RepoRoot = root
	o.Logf = func(format string, args ...any) {
		fmt.Printf("localcluster: "+format+"\n", args...)
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, *timeout)
	defer cancelTimeout()

	var err error
	switch sub {
	case "up":
		err = cluster.Up(ctx, o)
	case "down":
		err = cluster.Down(o)
	case "status":
		err = cluster.Status(ctx, o)
	case "top":
		err = cluster.Top(o, *sample)
	case "leftovers":
		// Exit status 1 when anything of the cluster remains (a check for after `down`).
		if left := cluster.Leftovers(o); len(left) > 0 {
			for _, x := range left {
				fmt.Println("leftover:", x)
			}
			err = fmt.Errorf("%d leftovers", len(left))
		} else {
			fmt.Println("localcluster: no leftovers")
		}
	case "node":
		switch nodeAction {
		case "stop":
			err = cluster.NodeStop(o, nodeName)
		case "start":
			err = cluster.NodeStart(ctx, o, nodeName, 3*time.Minute)
		case "partition":
			err = cluster.NodePartition(o, nodeName)
		case "heal":
			err = cluster.NodeHeal(o, nodeName)
		default:
			usage()
		}
	case "kubeconfig":
		var path string
		if path, err = cluster.Kubeconfig(o); err == nil {
			fmt.Println(path)
		}
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "localcluster %s: %v\n", sub, err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: localcluster up|down|status|top|kubeconfig|leftovers [flags]   (-h for flags)")
	fmt.Fprintln(os.Stderr, "       localcluster node stop|start|partition|heal NAME [--state-dir=...]")
	os.Exit(2)
}
