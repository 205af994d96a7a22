// Command podstartup measures, on an idle cluster, the time from a pod's creation to its
// Running phase, one pod at a time, and prints the distribution (median of --count).
// It is a measurement tool, not a test: nothing here asserts a duration.
//
//	tools/run.sh podstartup --kubeconfig=/var/lib/staticip-localcluster/kubeconfig --count=20
//
// With --compare-pool=CIDR it compares pods naming a per-workload IPPool (created from CIDR,
// selecting a namespace of its own) with pods of the default pool, on --node, in --rounds
// alternating rounds (pools.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	"github.com/staticip/staticip/tools/podwatch"
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster")
	count := flag.Int("count", 20, "pods to create, one after the other")
	image := flag.String("image", "localhost/staticip/testserver:v1", "image of the pods (must be present on the nodes)")
	comparePool := flag.String("compare-pool", "", "CIDR of an IPPool to create: compare pods naming it with pods of the default pool (pools.go)")
	node := flag.String("node", "", "with --compare-pool: the node every pod runs on")
	rounds := flag.Int("rounds", 3, "with --compare-pool: rounds, alternating which kind goes first")
	flag.Parse()
	var err error
	if *comparePool != "" {
		err = runComparePools(*kubeconfig, *node, *comparePool, *image, *count, *rounds)
	} else {
		err = run(*kubeconfig, *count, *image)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "podstartup:", err)
		os.Exit(1)
	}
}

// clients are the Kubernetes and staticip clients of kubeconfig.
func clients(kubeconfig string) (kubernetes.Interface, versioned.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	sip, err := versioned.NewForConfig(cfg)
	return kube, sip, err
}

func runComparePools(kubeconfig, node, cidr, image string, count, rounds int) error {
	kube, sip, err := clients(kubeconfig)
	if err != nil {
		return err
	}
	return comparePools(context.Background(), kube, sip, node, cidr, image, count, rounds)
}

func run(kubeconfig string, count int, image string) error {
	client, _, err := clients(kubeconfig)
	if err != nil {
		return err
	}
	ctx := context.Background()
	ns, err := newNamespace(ctx, client, "podstartup-", nil)
	if ns != "" {
		defer func() {
			_ = client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		}()
	}
	if err != nil {
		return err
	}
	var running []time.Duration
	nodes := map[string]int{}
	for i := range count {
		name := fmt.Sprintf("p%02d", i)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: new(int64),
				Containers:                    []corev1.Container{{Name: "c", Image: image, ImagePullPolicy: corev1.PullIfNotPresent, Args: []string{"serve"}}},
			},
		}
		start := time.Now()
		created, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		d, node, err := waitRunning(ctx, client, ns, created, start)
		if err != nil {
			return fmt.Errorf("pod %s: %w", name, err)
		}
		running = append(running, d)
		nodes[node]++
		fmt.Printf("%s on %s: Running after %s\n", name, node, d.Round(time.Millisecond))
	}
	sort.Slice(running, func(i, j int) bool { return running[i] < running[j] })
	q := func(p float64) time.Duration {
		return running[int(p*float64(len(running)-1)+0.5)].Round(time.Millisecond)
	}
	fmt.Printf("pod create -> Running, %d pods one at a time: min %s, median %s, p90 %s, max %s; per node %v\n",
		len(running), q(0), q(0.5), q(0.9), q(1), nodes)
	return nil
}

// waitRunning follows pod from its creation until it is Running (podwatch.Until), for at most
// two minutes, and returns the time from start and its node.
func waitRunning(ctx context.Context, client kubernetes.Interface, ns string, pod *corev1.Pod, start time.Time) (time.Duration, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	node := ""
	at, err := podwatch.Until(ctx, client, ns, pod.Name, pod.ResourceVersion, nil, func(p *corev1.Pod) (bool, error) {
		switch p.Status.Phase {
		case corev1.PodRunning:
			node = p.Spec.NodeName
			return true, nil
		case corev1.PodFailed, corev1.PodSucceeded:
			return false, fmt.Errorf("ended in phase %s", p.Status.Phase)
		}
		return false, nil
	})
	if err != nil {
		return 0, "", err
	}
	return at.Sub(start), node, nil
}
