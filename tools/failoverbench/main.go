// Command failoverbench measures node failover on the local cluster (tools/localcluster, with a
// spare: `up --spare-nodes=1`): in each round an EnhancedStatefulSet with static IPs and a
// native StatefulSet of the same pods run on one node; the node is powered off (`node stop`)
// and, once NotReady, fenced with the out-of-service taint. From that taint it times
//
//   - ests:   every static-IP pod Running on the spare with its old IP (the nodefailover
//     controller moved the node's IPRanges and StaticIPs), and
//   - native: every StatefulSet pod Running again (on the other workers, new IPs),
//
// then boots the node, removes the taint and puts ranges and spare back for the next round.
// It prints every round, the medians and the ratio. A measurement tool, not a test: nothing
// here asserts a duration. See README.md.
//
//	tools/run.sh failoverbench --kubeconfig=/var/lib/staticip-c3/kubeconfig --rounds=5
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

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	"github.com/staticip/staticip/internal/reporoot"
	"github.com/staticip/staticip/tools/images/imagebuilder"
	"github.com/staticip/staticip/tools/localcluster/cluster"
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the local cluster")
	stateDir := flag.String("state-dir", "", "the local cluster's state dir (default: the kubeconfig's directory)")
	rounds := flag.Int("rounds", 5, "rounds; each fails the node once and times both workloads from the same taint")
	replicas := flag.Int("replicas", 3, "pods of each workload")
	node := flag.String("node", "", "node to fail (default: the last worker in the spare's zone)")
	image := flag.String("image", imagebuilder.TestServerImage, "image of the pods (present on the nodes: imagePullPolicy Never)")
	timeout := flag.Duration("timeout", 6*time.Minute, "limit of each wait (pods up, failover, restore)")
	routes := flag.Bool("routes", true, "also time route convergence on the local cluster's datacenter router (FRR): range served on the spare -> FRR's best path via it -> the outside's first answer")
	daemonSet := flag.Bool("tolerating-daemonset", true, "also run a DaemonSet pod on the failed node that tolerates every taint (not on the host network): the failover must not stall on it")
	flag.Parse()

	if *stateDir == "" {
		*stateDir = filepath.Dir(*kubeconfig)
	}
	root, err := reporoot.Find()
	if err != nil {
		fail(err)
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	restConfig.QPS, restConfig.Burst = 50, 100
	kube, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		fail(err)
	}
	client, err := versioned.NewForConfig(restConfig)
	if err != nil {
		fail(err)
	}
	nodes := cluster.DefaultOptions()
	nodes.StateDir, nodes.BinDir, nodes.RepoRoot = *stateDir, filepath.Join(root, "_output", "bin"), root
	r := &Runner{Kube: kube, Staticip: client, Nodes: nodes, Log: os.Stderr}
	nodes.Logf = r.logf
	r.Nodes = nodes

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *routes {
		router, err := cluster.RouterOf(nodes)
		if err != nil {
			fail(fmt.Errorf("%w (--routes=false to time the failover alone)", err))
		}
		if r.Dialer, err = newOutsideDialer(ctx, router.OutsideNetns); err != nil {
			fail(err)
		}
		r.Router = &router
	}
	results, err := r.Run(ctx, Config{Rounds: *rounds, Replicas: *replicas, Node: *node, Image: *image, Timeout: *timeout, DaemonSet: *daemonSet})
	PrintTable(os.Stdout, results)
	if r.Router != nil {
		fmt.Println()
		PrintRouteTable(os.Stdout, results)
	}
	if err != nil {
		fail(err)
	}
	if n := DuplicateCount(results); n > 0 {
		fail(fmt.Errorf("%d pod events showed an IP held by two live pods", n))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "failoverbench:", err)
	os.Exit(1)
}
