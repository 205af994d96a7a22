// Command estsbench measures, on a real cluster and in one run, how long it takes to roll the
// same pods from one image to another as an EnhancedStatefulSet (maxUnavailable, run by
// staticip-controller-manager, which must be running) and as a native StatefulSet (rolled
// by kube-controller-manager, one pod at a time). Workloads run one after the other, never
// at the same time; rounds rotate their order. It prints each round, the medians, the
// ratio statefulset / ests and the largest number of unavailable pods seen during each
// rollout. It is a measurement tool, not a test: nothing here asserts a duration.
//
//	go run ./tools/estsbench --kubeconfig=/var/lib/staticip-localcluster/kubeconfig --rounds=2
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	"github.com/staticip/staticip/tools/estsbench/bench"
	"github.com/staticip/staticip/tools/images/imagebuilder"
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster")
	replicas := flag.Int("replicas", 50, "pods per workload")
	rounds := flag.Int("rounds", 2, "rounds; each rolls every workload once, the order rotating from round to round")
	workloads := flag.String("workloads", strings.Join([]string{bench.WorkloadESTS, bench.WorkloadStatefulSet, bench.WorkloadESTSInPlace}, ","),
		"workloads to roll: ests (ReCreate), statefulset (budget 1), statefulset-maxunavailable (--max-unavailable; gate MaxUnavailableStatefulSet), ests-inplace (InPlaceIfPossible)")
	maxUnavailable := flag.Int("max-unavailable", 10, "maxUnavailable of the EnhancedStatefulSets and of statefulset-maxunavailable")
	podManagement := flag.String("pod-management-policy", string(appsv1.ParallelPodManagement), "podManagementPolicy of both kinds: Parallel or OrderedReady")
	from := flag.String("from", imagebuilder.TestServerImage, "image the pods start with (present on the nodes: imagePullPolicy Never)")
	to := flag.String("to", imagebuilder.TestServerV2Image, "image the pods are rolled to")
	cpu := flag.String("cpu-request", "10m", "CPU request of each pod")
	grace := flag.Int64("grace-period", 1, "terminationGracePeriodSeconds of each pod")
	probePeriod := flag.Int("probe-period", 1, "readiness probe periodSeconds")
	settle := flag.Duration("settle", 5*time.Second, "pause between 'ready at --from' and the update")
	timeout := flag.Duration("timeout", 15*time.Minute, "limit of each phase (ready, rollout, deletion) of each workload")
	namespace := flag.String("namespace", "", "namespace to use (default: a new estsbench-* namespace, deleted at the end)")
	flag.Parse()

	cpuRequest, err := resource.ParseQuantity(*cpu)
	if err != nil {
		fail(fmt.Errorf("--cpu-request: %w", err))
	}
	cfg := bench.Config{
		Replicas:  *replicas,
		Rounds:    *rounds,
		Workloads: strings.Split(*workloads, ","),
		From:      *from,
		To:        *to,
		Template: bench.TemplateOptions{
			Port:            8080,
			CPURequest:      cpuRequest,
			GracePeriod:     *grace,
			ProbePeriod:     int32(*probePeriod),
			PodManagement:   appsv1.PodManagementPolicyType(*podManagement),
			MaxUnavailable:  *maxUnavailable,
			RevisionHistory: 2,
		},
		Settle:    *settle,
		Timeout:   *timeout,
		Namespace: *namespace,
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	// 50 pods change state at once; the default client rate limit (5 qps) would time the
	// benchmark's own polling instead of the controllers.
	restConfig.QPS, restConfig.Burst = 50, 100
	kube, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		fail(err)
	}
	staticip, err := versioned.NewForConfig(restConfig)
	if err != nil {
		fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Printf("estsbench: %d replicas, %s -> %s, podManagementPolicy %s, ests and statefulset-maxunavailable maxUnavailable %d, statefulset default RollingUpdate (one pod at a time), %d rounds\n",
		cfg.Replicas, cfg.From, cfg.To, cfg.Template.PodManagement, cfg.Template.MaxUnavailable, cfg.Rounds)
	runner := &bench.Runner{Kube: kube, Staticip: staticip, Log: os.Stdout}
	results, err := runner.Run(ctx, cfg)
	fmt.Println()
	bench.PrintTable(os.Stdout, results, bench.WorkloadStatefulSet)
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "estsbench:", err)
	os.Exit(1)
}
