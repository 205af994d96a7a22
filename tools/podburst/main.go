// Command podburst is the pod-burst benchmark of issue 30 (Spiderpool's published IPAM
// benchmark, scaled to this machine): D workloads × R replicas created at once, then the time
// until every pod is Running, pods per second, and each pod's startup latency (first watch
// event → first Running, p50/p99 against SIG Scalability's p99 ≤ 5 s). It is a measurement
// tool, not a test: nothing here asserts a duration. tools/podburst/run.sh alternates CNIs.
//
//	tools/run.sh podburst --kubeconfig=/var/lib/staticip-localcluster/kubeconfig --workloads=6 --kind=deployment --label=staticip
//	tools/run.sh podburst ... --kind=ests     # static-IP EnhancedStatefulSets (every pod a fixed IP, a StaticIP each)
//	tools/run.sh podburst ... --kind=statefulset --replicas=3 --restarts=24   # delete -> Running with the same IP (restart.go)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/tools/images/imagebuilder"
)

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster")
	workloads := flag.Int("workloads", 6, "D: workloads created at once")
	replicas := flag.Int("replicas", 10, "replicas of each workload")
	kind := flag.String("kind", "deployment", "deployment, or ests (static-IP EnhancedStatefulSets, parallel pod management)")
	label := flag.String("label", "", "what the result line is labelled with (the CNI)")
	image := flag.String("image", imagebuilder.TestServerImage, "image of the pods (present on the nodes: imagePullPolicy Never)")
	timeout := flag.Duration("timeout", 15*time.Minute, "give up when not every pod is Running by then")
	cleanupTimeout := flag.Duration("cleanup-timeout", 5*time.Minute, "how long to wait for the namespace to go after the measurement (run.sh: short for a cluster's last measurement, which `down` follows)")
	csvPath := flag.String("csv", "", "append every pod's raw timings of the burst to this CSV (round,label,kind,pod,seen_s,running_s,startup_s)")
	round := flag.Int("round", 0, "the round this burst belongs to, for --csv")
	summarize := flag.String("summarize", "", "print the per-round figures, their medians and min–max, and the ratios of a --csv file, then exit")
	restarts := flag.Int("restarts", 0, "instead of a burst: one workload of --replicas pods that keeps its IPs (--kind=ests: static-IP EnhancedStatefulSet; --kind=statefulset: native StatefulSet, for Spiderpool), this many deletions, each timed delete -> successor Running with the same IP (another IP fails the run)")
	flag.Parse()
	if *summarize != "" {
		if err := summarizeFile(*summarize); err != nil {
			fmt.Fprintln(os.Stderr, "podburst:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*kubeconfig, *workloads, *replicas, *kind, *label, *image, *timeout, *restarts, *cleanupTimeout, *csvPath, *round); err != nil {
		fmt.Fprintln(os.Stderr, "podburst:", err)
		os.Exit(1)
	}
}

func summarizeFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	series, err := ReadSeries(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	Summary(os.Stdout, series)
	return nil
}

func run(kubeconfig string, workloads, replicas int, kind, label, image string, timeout time.Duration, restarts int, cleanupTimeout time.Duration, csvPath string, round int) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 200, 400 // the burst is the client's, not client-go's rate limiter
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	sip, err := versioned.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "podburst-"}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	defer cleanup(client, ns.Name, cleanupTimeout)
	// Pods need the namespace's default ServiceAccount before they can be created.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("no default ServiceAccount in %s: %w", ns.Name, err)
	}
	if restarts > 0 {
		res, err := measureRestarts(ctx, client, sip, ns.Name, kind, image, int32(replicas), restarts)
		if err != nil {
			return err
		}
		fmt.Println(restartLine(label, kind, replicas, res))
		return nil
	}
	// A watch may end at any time (the API server's timeout, a connection dropped under load:
	// the first three-CNI run lost its watch mid-burst, "pod watch closed with 0 of 100 pods
	// Running"); the retry watcher resumes it from the last resourceVersion it delivered.
	pods, err := client.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, pods.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return client.CoreV1().Pods(ns.Name).Watch(ctx, o)
		},
	})
	if err != nil {
		return err
	}
	defer w.Stop()

	want := workloads * replicas
	b := Burst{Seen: map[string]time.Time{}, Running: map[string]time.Time{}}
	b.Start = time.Now()
	errs := make(chan error, workloads)
	var wg sync.WaitGroup
	for i := range workloads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- create(ctx, client, sip, ns.Name, fmt.Sprintf("burst-%d", i), kind, int32(replicas), image)
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		if e != nil {
			return e
		}
	}
	for len(b.Running) < want {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d pods Running after %v", len(b.Running), want, timeout)
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("pod watch closed with %d of %d pods Running", len(b.Running), want)
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod || ev.Type == watch.Deleted {
				continue
			}
			now := time.Now()
			if _, ok := b.Seen[p.Name]; !ok {
				b.Seen[p.Name] = now
			}
			if _, ok := b.Running[p.Name]; !ok && p.Status.Phase == corev1.PodRunning {
				b.Running[p.Name] = now
			}
		}
	}
	f := b.Measure()
	if csvPath != "" {
		if err := appendCSV(csvPath, CSVRows(b, round, label, kind)); err != nil {
			return fmt.Errorf("--csv: %w", err)
		}
	}
	extra := ""
	if kind == "ests" {
		n, err := boundStaticIPs(ctx, sip, ns.Name, want)
		if err != nil {
			return err
		}
		extra = fmt.Sprintf("  StaticIPs Bound %d", n)
	}
	fmt.Printf("podburst %-10s %-10s %3d x %2d = %4d pods: all Running %6.1fs  %5.2f pods/s  startup p50 %5.2fs p99 %5.2fs max %5.2fs%s\n",
		label, kind, workloads, replicas, f.Pods, f.AllRunning.Seconds(), f.PodsPerSecond, f.P50.Seconds(), f.P99.Seconds(), f.Max.Seconds(), extra)
	return nil
}

// boundStaticIPs waits (after the timing) until every static-IP pod's StaticIP is Bound, so a
// burst whose reservations were not all written does not pass as done; it returns the count.
func boundStaticIPs(ctx context.Context, sip versioned.Interface, ns string, want int) (int, error) {
	n := 0
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := sip.JkeV1().StaticIPs(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		n = 0
		for _, s := range list.Items {
			if s.Status.Phase == jkev1.StaticIPBound {
				n++
			}
		}
		return n >= want, nil
	})
	if err != nil {
		return n, fmt.Errorf("%d of %d StaticIPs Bound: %w", n, want, err)
	}
	return n, nil
}

func podSpec(image string) corev1.PodSpec {
	grace := int64(1)
	return corev1.PodSpec{
		TerminationGracePeriodSeconds: &grace,
		AutomountServiceAccountToken:  new(bool),
		EnableServiceLinks:            new(bool),
		Containers: []corev1.Container{{
			Name: "testserver", Image: image, ImagePullPolicy: corev1.PullNever, Args: []string{"serve"},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m")}},
		}},
	}
}

func create(ctx context.Context, client kubernetes.Interface, sip versioned.Interface, ns, name, kind string, replicas int32, image string) error {
	labels := map[string]string{"podburst": name}
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec(image)}
	switch kind {
	case "deployment":
		_, err := client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl},
		}, metav1.CreateOptions{})
		return err
	case "ests":
		_, err := sip.JkeV1alpha1().EnhancedStatefulSets(ns).Create(ctx, &jkev1alpha1.EnhancedStatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{jkev1.AnnotationEnable: "true"}},
			Spec: jkev1alpha1.EnhancedStatefulSetSpec{
				Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl,
				ServiceName: name, PodManagementPolicy: appsv1.ParallelPodManagement,
			},
		}, metav1.CreateOptions{})
		return err
	}
	return fmt.Errorf("--kind=%s: want deployment or ests", kind)
}

// cleanup deletes the namespace and waits until it is gone, so the next burst starts on an
// idle cluster.
func cleanup(client kubernetes.Interface, ns string, timeout time.Duration) {
	ctx := context.Background()
	_ = client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	if err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		fmt.Fprintf(os.Stderr, "podburst: namespace %s still there after %v: %v\n", ns, timeout, err)
	}
}
