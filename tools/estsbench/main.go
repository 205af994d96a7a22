// Command estsbench measures, on a real cluster and in one run, how long it takes to roll the
// same pods from one image to another as an EnhancedStatefulSet (maxUnavailable, run by
// staticip-controller-manager, which must be running) and as a native StatefulSet (rolled
// by kube-controller-manager, one pod at a time). Workloads run one after the other, never
// at the same time; rounds rotate their order. It prints each round, the medians, the
// native StatefulSet's median over each other workload's where both ran at the same budget
// (statefulset-maxunavailable; the one-at-a-time statefulset is listed, never compared with a
// budget of --max-unavailable) and the largest number of unavailable pods seen during each
// rollout. It is a measurement tool, not a test: nothing here asserts a duration.
//
//	tools/run.sh estsbench --kubeconfig=/var/lib/staticip-localcluster/kubeconfig --rounds=2
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
	"k8s.io/client-go/dynamic"
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
		"workloads to roll: ests (ReCreate), statefulset (budget 1), statefulset-maxunavailable (--max-unavailable; gate MaxUnavailableStatefulSet), ests-inplace (InPlaceIfPossible), "+
			"kruise and kruise-inplace (OpenKruise Advanced StatefulSet, ReCreate / InPlaceIfPossible, --max-unavailable; its CRD installed and tools/kruise running)")
	maxUnavailable := flag.Int("max-unavailable", 10, "maxUnavailable of the EnhancedStatefulSets and of statefulset-maxunavailable")
	podManagement := flag.String("pod-management-policy", string(appsv1.ParallelPodManagement),
		"podManagementPolicy of every workload: Parallel, OrderedReady, or both comma-separated (each policy is a table of its own, in this order)")
	orderedWorkloads := flag.String("ordered-ready-workloads", "", "workloads of the OrderedReady table when --pod-management-policy has both (default: --workloads); "+
		"OrderedReady starts 50 pods one by one, so each of its rounds takes minutes per workload")
	restarts := flag.Int("restarts", 0, "also measure delete -> same-IP Running: this many deletions of a static-IP EnhancedStatefulSet's pod, each next to a plain pod's create -> Running (0: skip)")
	restartJitter := flag.Duration("restart-jitter", time.Second, "with --restarts: wait a random time in [0, this) before each delete and plain create, so no step sets the next one's phase against the kubelets' 1-second PLEG relist (0: none)")
	restartTogether := flag.Bool("restart-together", true, "with --restarts: delete the static-IP pod and a native StatefulSet pod on the same node at the same moment (both wait for the same kubelet's next PLEG relist); false: one after the other")
	restartTrace := flag.Bool("restart-trace", false, "with --restarts: print every watch event of each restarted pod with its time from the delete call")
	from := flag.String("from", imagebuilder.TestServerImage, "image the pods start with (present on the nodes: imagePullPolicy Never)")
	to := flag.String("to", imagebuilder.TestServerV2Image, "image the pods are rolled to")
	cpu := flag.String("cpu-request", "10m", "CPU request of each pod")
	grace := flag.Int64("grace-period", 1, "terminationGracePeriodSeconds of each pod")
	probePeriod := flag.Int("probe-period", 1, "readiness probe periodSeconds")
	settle := flag.Duration("settle", 5*time.Second, "pause between 'ready at --from' and the update")
	timeout := flag.Duration("timeout", 15*time.Minute, "limit of each phase (ready, rollout, deletion) of each workload")
	namespace := flag.String("namespace", "", "namespace to use (default: a new estsbench-* namespace, deleted at the end)")
	managerOnHost := flag.String("manager-on-host", "", "path of a staticip-controller-manager binary to run on this host in place of its Deployment while the benchmark runs "+
		"(scaled to 0, then back), so it is scheduled like kube-controller-manager and Kruise on the local cluster; empty: the Deployment's pods")
	flag.Parse()

	cpuRequest, err := resource.ParseQuantity(*cpu)
	if err != nil {
		fail(fmt.Errorf("--cpu-request: %w", err))
	}
	policies := strings.Split(*podManagement, ",")
	cfg := bench.Config{
		Replicas:  *replicas,
		Rounds:    *rounds,
		Workloads: strings.FieldsFunc(*workloads, func(r rune) bool { return r == ',' }),
		From:      *from,
		To:        *to,
		Template: bench.TemplateOptions{
			Port:            8080,
			CPURequest:      cpuRequest,
			GracePeriod:     *grace,
			ProbePeriod:     int32(*probePeriod),
			PodManagement:   appsv1.PodManagementPolicyType(policies[0]),
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
	dyn, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	runner := &bench.Runner{Kube: kube, Staticip: staticip, Dynamic: dyn, Log: os.Stdout}
	if *managerOnHost != "" {
		hm := &bench.HostManager{Kube: kube, Binary: *managerOnHost, Kubeconfig: *kubeconfig, Log: runner.Logf}
		stopManager, err := hm.Start(ctx)
		if err != nil {
			fail(fmt.Errorf("--manager-on-host: %w", err))
		}
		atExit = append(atExit, stopManager)
		defer stopManager()
	}
	for _, policy := range policies {
		cfg.Template.PodManagement = appsv1.PodManagementPolicyType(policy)
		cfg.Workloads = strings.FieldsFunc(*workloads, func(r rune) bool { return r == ',' })
		if policy == string(appsv1.OrderedReadyPodManagement) && *orderedWorkloads != "" {
			cfg.Workloads = strings.FieldsFunc(*orderedWorkloads, func(r rune) bool { return r == ',' })
		}
		if len(cfg.Workloads) == 0 && *restarts > 0 {
			continue // --workloads= --restarts=N: only the restart latency
		}
		fmt.Printf("estsbench: %d replicas, %s -> %s, podManagementPolicy %s, workloads %s; ests, statefulset-maxunavailable and kruise maxUnavailable %d, statefulset default RollingUpdate (one pod at a time), %d rounds\n",
			cfg.Replicas, cfg.From, cfg.To, policy, strings.Join(cfg.Workloads, ","), cfg.Template.MaxUnavailable, cfg.Rounds)
		results, err := runner.Run(ctx, cfg)
		// Each policy's table as soon as it is done: a later failure or interruption keeps it.
		fmt.Printf("\n== podManagementPolicy %s ==\n", policy)
		bench.PrintTable(os.Stdout, results, func(w string) int { return bench.Budget(w, cfg.Template.MaxUnavailable) })
		fmt.Println()
		if err != nil {
			fail(err)
		}
	}
	var restart *bench.RestartResult
	if *restarts > 0 {
		res, err := runner.MeasureRestart(ctx, bench.RestartConfig{Count: *restarts, Replicas: 3, Image: cfg.From, Template: cfg.Template, Timeout: cfg.Timeout, Trace: *restartTrace, Jitter: *restartJitter, Together: *restartTogether})
		if err != nil {
			fail(fmt.Errorf("restart latency: %w", err))
		}
		restart = &res
	}
	if restart != nil {
		fmt.Println()
		bench.PrintRestart(os.Stdout, *restart)
	}
}

// atExit runs before fail exits (deferred calls do not run on os.Exit).
var atExit []func()

func fail(err error) {
	fmt.Fprintln(os.Stderr, "estsbench:", err)
	for _, f := range atExit {
		f()
	}
	os.Exit(1)
}
