// Package bench rolls the same pods from one image to another as an EnhancedStatefulSet
// (maxUnavailable) and as a native StatefulSet (kube-controller-manager, one pod at a time)
// on a real cluster, one workload at a time, and reports how long each rollout took.
package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
)

// Config says what to roll and how often.
type Config struct {
	Replicas int
	Rounds   int
	// Workloads are rolled in this order in the first round; each later round rotates the
	// order by one, so no workload always goes first or last.
	Workloads []string
	From, To  string
	Template  TemplateOptions
	// Settle is the pause between "ready at From" and the template update, so the rollout
	// does not start while the kubelets are still busy with the start-up.
	Settle time.Duration
	// Timeout bounds each phase (ready, rollout, deletion) of each workload.
	Timeout time.Duration
	// Namespace to use; empty: a new estsbench-* namespace, deleted at the end.
	Namespace string
}

// Runner runs the benchmark with its clients.
type Runner struct {
	Kube     kubernetes.Interface
	Staticip versioned.Interface
	// Dynamic serves the OpenKruise workloads (nil: they cannot be run).
	Dynamic dynamic.Interface
	Log     io.Writer
}

// Run measures every workload in every round and returns the results in the order taken.
func (r *Runner) Run(ctx context.Context, cfg Config) ([]Result, error) {
	if cfg.Replicas < 1 || cfg.Rounds < 1 || len(cfg.Workloads) == 0 {
		return nil, fmt.Errorf("need replicas >= 1, rounds >= 1 and at least one workload")
	}
	ns, cleanup, err := r.namespace(ctx, cfg.Namespace)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if _, err := r.Kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: ServiceName},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"estsbench.staticip.io/none": "none"}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	var results []Result
	for round := range cfg.Rounds {
		for i := range cfg.Workloads {
			name := cfg.Workloads[(i+round)%len(cfg.Workloads)]
			w, err := r.workload(ns, name, cfg.Template)
			if err != nil {
				return results, err
			}
			res, err := r.measure(ctx, ns, w, cfg)
			if err != nil {
				return results, fmt.Errorf("round %d, %s: %w", round+1, name, err)
			}
			res.Round = round + 1
			results = append(results, res)
		}
	}
	return results, nil
}

// Logf prints a line with the time of day.
func (r *Runner) Logf(format string, args ...any) {
	fmt.Fprintf(r.Log, "%s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}

func (r *Runner) namespace(ctx context.Context, name string) (string, func(), error) {
	if name != "" {
		return name, func() {}, nil
	}
	ns, err := r.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "estsbench-"}}, metav1.CreateOptions{})
	if err != nil {
		return "", nil, err
	}
	cleanup := func() {
		_ = r.Kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	}
	// Pods need the namespace's default ServiceAccount before they can be created.
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		if _, err := r.Kube.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		}
		if time.Since(start) > time.Minute {
			cleanup()
			return "", nil, fmt.Errorf("no default ServiceAccount in %s", ns.Name)
		}
	}
	r.Logf("namespace %s", ns.Name)
	return ns.Name, cleanup, nil
}

func (r *Runner) workload(ns, name string, o TemplateOptions) (workload, error) {
	switch name {
	case WorkloadStatefulSet:
		return &statefulSet{client: r.Kube, namespace: ns, opts: o}, nil
	case WorkloadStatefulSetMaxUnavailable:
		return &statefulSet{client: r.Kube, namespace: ns, opts: o, maxUnavailable: true}, nil
	case WorkloadESTS:
		return &enhancedStatefulSet{client: r.Staticip, namespace: ns, opts: o, name: name, policy: jkev1alpha1.RecreatePodUpdatePolicy}, nil
	case WorkloadESTSInPlace:
		return &enhancedStatefulSet{client: r.Staticip, namespace: ns, opts: o, name: name, policy: jkev1alpha1.InPlaceIfPossiblePodUpdatePolicy}, nil
	case WorkloadKruise, WorkloadKruiseInPlace:
		if r.Dynamic == nil {
			return nil, fmt.Errorf("workload %s needs a dynamic client", name)
		}
		policy := "ReCreate"
		if name == WorkloadKruiseInPlace {
			policy = "InPlaceIfPossible"
		}
		return &kruiseStatefulSet{client: r.Dynamic, namespace: ns, opts: o, name: name, podUpdatePolicy: policy}, nil
	}
	return nil, fmt.Errorf("unknown workload %q (want %s, %s, %s, %s, %s or %s)", name, WorkloadStatefulSet, WorkloadStatefulSetMaxUnavailable,
		WorkloadESTS, WorkloadESTSInPlace, WorkloadKruise, WorkloadKruiseInPlace)
}

// measure creates w at cfg.From, waits until it is fully ready, rolls it to cfg.To and
// times that, then deletes it and waits until its pods are gone.
func (r *Runner) measure(ctx context.Context, ns string, w workload, cfg Config) (Result, error) {
	replicas := int32(cfg.Replicas)
	tracker, err := startPodTracker(ctx, r.Kube, ns, w.Name(), cfg.Replicas)
	if err != nil {
		return Result{}, err
	}
	defer tracker.close()
	if tracker.count() != 0 {
		return Result{}, fmt.Errorf("%d pods of %s left over from an earlier run", tracker.count(), w.Name())
	}
	deleted := false
	defer func() {
		if !deleted {
			_ = w.Delete(context.Background())
		}
	}()

	start := time.Now()
	if err := w.Create(ctx, replicas, cfg.From); err != nil {
		return Result{}, err
	}
	generation := int64(1)
	if err := r.waitRolledOut(ctx, w, tracker, cfg, cfg.From, generation, nil); err != nil {
		return Result{}, fmt.Errorf("ready at %s: %w", cfg.From, err)
	}
	createAll := time.Since(start)
	r.Logf("%s: %d pods ready at %s after %s", w.Name(), replicas, cfg.From, createAll.Round(100*time.Millisecond))
	time.Sleep(cfg.Settle)

	tracker.startMeasuring(cfg.To)
	start = time.Now()
	if generation, err = w.SetImage(ctx, cfg.To); err != nil {
		return Result{}, err
	}
	progress := func() {
		r.Logf("%s: rolling, %s so far, max unavailable %d", w.Name(), time.Since(start).Round(time.Second), tracker.maxSoFar())
	}
	if err := r.waitRolledOut(ctx, w, tracker, cfg, cfg.To, generation, progress); err != nil {
		return Result{}, fmt.Errorf("rollout to %s: %w", cfg.To, err)
	}
	res := Result{Workload: w.Name(), Rollout: time.Since(start)}
	if cfg.Template.PodManagement == appsv1.ParallelPodManagement {
		res.CreateAll = createAll // OrderedReady starts pods one by one: no throughput figure
	}
	maxUnavailable, atMax, lives := tracker.stopMeasuring()
	res.MaxUnavailable = maxUnavailable
	res.Phases = Breakdown(w.Name(), lives, res.Rollout)
	r.Logf("%s: rolled %d pods to %s in %s, max unavailable %d %v", w.Name(), replicas, cfg.To, res.Rollout.Round(100*time.Millisecond), res.MaxUnavailable, atMax)
	r.Logf("%s: %s", w.Name(), res.Phases)

	start = time.Now()
	if err := w.Delete(ctx); err != nil {
		return res, err
	}
	deleted = true
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, cfg.Timeout, true, func(context.Context) (bool, error) {
		if _, _, err := w.Status(ctx); !apierrors.IsNotFound(err) {
			return false, err
		}
		return tracker.count() == 0, nil
	}); err != nil {
		return res, fmt.Errorf("deletion: %w", err)
	}
	res.DeleteAll = time.Since(start)
	r.Logf("%s: deleted, pods gone after %s", w.Name(), res.DeleteAll.Round(100*time.Millisecond))
	return res, nil
}

// waitRolledOut waits until every pod runs image and is Ready, and the workload's status
// has seen generation and says replicas == ready == updated.
func (r *Runner) waitRolledOut(ctx context.Context, w workload, tracker *podTracker, cfg Config, image string, generation int64, progress func()) error {
	lastProgress := time.Now()
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, cfg.Timeout, true, func(context.Context) (bool, error) {
		if progress != nil && time.Since(lastProgress) >= 15*time.Second {
			progress()
			lastProgress = time.Now()
		}
		if !tracker.rolledOut(image) {
			return false, nil
		}
		_, st, err := w.Status(ctx)
		if err != nil {
			return false, nil // a failed read is retried until the timeout
		}
		n := int32(cfg.Replicas)
		return st.ObservedGeneration >= generation && st.Replicas == n && st.ReadyReplicas == n && st.UpdatedReplicas == n, nil
	})
}
