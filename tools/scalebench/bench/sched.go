package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	sipclient "github.com/staticip/staticip/apis/generated/clientset/versioned"
)

// Component is a component process and the proxy counting its API requests.
type Component struct {
	*Proc
	Proxy   *CountingProxy
	Started time.Time
	// MetricsURL is its /metrics when it serves them (schedulers).
	MetricsURL string
	// ServingURL is https://127.0.0.1:PORT where it serves /metrics and /debug/pprof
	// (schedulers).
	ServingURL string
}

// StartComponent runs bin with args(kubeconfig) through a new counting proxy.
func (c *Cluster) StartComponent(name, bin string, args func(kubeconfig string) []string) (*Component, error) {
	kc, proxy, err := c.Kubeconfig(name)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	p, err := StartProc(c.Dir, name, filepath.Join(c.BinDir, bin), args(kc)...)
	if err != nil {
		return nil, err
	}
	return &Component{Proc: p, Proxy: proxy, Started: t0}, nil
}

// StartScheduler runs kube-scheduler or staticip-scheduler with a profile from manifests/,
// serving /metrics and /debug/pprof (kube-scheduler's --profiling, on by default) to anyone
// on a free loopback port: `go tool pprof https+insecure://127.0.0.1:PORT/debug/pprof/profile`
// during a pass (the port is in the process's --secure-port).
func (c *Cluster) StartScheduler(name, bin, manifest string) (*Component, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	comp, err := c.StartComponent(name, bin, func(kc string) []string {
		cfg, cerr := c.SchedulerConfig(name, manifest, kc)
		if cerr != nil {
			err = cerr
		}
		return []string{"--config=" + cfg, "--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
			"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics,/debug/pprof,/debug/pprof/*", LogVerbosity()}
	})
	if err != nil {
		if comp != nil {
			comp.Stop()
		}
		return nil, err
	}
	comp.ServingURL = fmt.Sprintf("https://127.0.0.1:%d", port)
	comp.MetricsURL = comp.ServingURL + "/metrics"
	return comp, nil
}

// Scheduler profiles: the stock default profile (kube-scheduler) and the shipped
// replace-default profile with the staticip plugins (staticip-scheduler).
const (
	StockSchedulerConfig    = "manifests/scheduler/benchmark/default-scheduler-config.yaml"
	StaticIPSchedulerConfig = "manifests/scheduler/replace-default/scheduler-config.yaml"
)

// SchedulerOptions shape scenario 1.
type SchedulerOptions struct {
	PodsPerNode int // 30
	// HeldPerNode StaticIPs per node hold a place for absent pods (1 CPU each).
	HeldPerNode int
	// Workers bounds the harness's concurrent creates (default CreateWorkers); a create the
	// API server turns away (busy, timed out) is repeated with backoff.
	Workers int
	// Rounds of both schedulers (default 3): kube-scheduler first in odd rounds,
	// staticip-scheduler first in even ones, so the machine's drift and the second pass's
	// warmer API server hit both alike.
	Rounds int
	// NoStaticIP: no StaticIP at all (no reservations, no static-IP pods): what staticip costs
	// a cluster that installs it and does not use it. The nodes keep their IPRanges.
	NoStaticIP bool
	// ProfileDir, when set, gets CPU profiles of every pass, taken back to back over the
	// whole pass (CaptureCPUProfiles): ProfileDir/sched-pass-R-M-NAME-NNN.pprof.
	ProfileDir string
	// Progress, when set, gets each pass's row as soon as it is measured (a long run that is
	// stopped keeps what it measured).
	Progress func(Row)
}

// CreateWorkers is how many objects the harness creates at once by default: enough to keep
// the API server busy, few enough not to starve the component under test on two cores.
const CreateWorkers = 16

// schedulerModes are the two schedulers of scenario 1.
var schedulerModes = []struct{ name, bin, config string }{
	{"kube-scheduler", "kube-scheduler", StockSchedulerConfig},
	{"staticip-scheduler", "staticip-scheduler", StaticIPSchedulerConfig},
}

// passOrder is the order of the two schedulers (indices into schedulerModes) in round r
// (0-based): kube-scheduler first in even r, staticip-scheduler first in odd r.
func passOrder(r int) []int {
	if r%2 == 0 {
		return []int{0, 1}
	}
	return []int{1, 0}
}

// passNamespace holds one pass's pods and StaticIPs; it is emptied after the pass, so each
// pass starts from the same objects: the reservations and the nodes' IPRanges. Every pass has
// its own: kwok acts on a deleted pod by namespace and name after the API server has dropped
// it, and deleted the next pass's pod of the same name (the second pass of every round lost
// pods and never finished, 2026-11-28).
func passNamespace(round, mode int) string { return fmt.Sprintf("sched-pass-%d-%d", round+1, mode) }

// Scheduler: PodsPerNode pods per node, a third of them static-IP (annotation, StaticIP,
// pinned to the node holding the IP), HeldPerNode reservations for absent pods per node;
// the same pods scheduled by kube-scheduler and by staticip-scheduler, each alone, Rounds
// times in alternating order. Every pass creates its pods and StaticIPs, and deletes them
// (pods and StaticIPs) before the next one: a pass never sees another pass's records.
func (c *Cluster) Scheduler(ctx context.Context, o SchedulerOptions) ([]Row, error) {
	ranges, err := c.EnsureRanges(ctx)
	if err != nil {
		return nil, err
	}
	const heldNS = "sched-held"
	if err := c.EnsureNamespace(ctx, heldNS); err != nil {
		return nil, err
	}
	workers := o.Workers
	if workers <= 0 {
		workers = CreateWorkers
	}
	rounds := o.Rounds
	if rounds <= 0 {
		rounds = 3
	}
	held := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	heldPerNode := o.HeldPerNode
	if o.NoStaticIP {
		heldPerNode = 0
	}
	if heldPerNode > 0 {
		if err := parallel(ctx, len(c.Nodes)*heldPerNode, workers, func(ctx context.Context, k int) error {
			node := c.Nodes[k/heldPerNode]
			name := fmt.Sprintf("held-%s-%d", node, k%heldPerNode)
			return create(func() error {
				_, err := c.SIP.JkeV1().StaticIPs(heldNS).Create(ctx, StaticIP(heldNS, name, Host(ranges[node], 200+k%heldPerNode), node, held), metav1.CreateOptions{})
				return err
			})
		}); err != nil {
			return nil, fmt.Errorf("reservations: %w", err)
		}
	}
	static := o.PodsPerNode / 3
	if o.NoStaticIP {
		static = 0
	}
	// The pass's creates go through clients whose requests time out: on an overloaded API
	// server one create without a deadline hung a 1,000-node run for half an hour (2026-11-28);
	// a timed-out create is transient and repeated (create).
	cfg := rest.CopyConfig(c.Config)
	cfg.Timeout = 30 * time.Second
	creator := &Cluster{Config: cfg}
	if creator.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if creator.SIP, err = sipclient.NewForConfig(cfg); err != nil {
		return nil, err
	}
	var rows []Row
	for r := range rounds {
		for _, mi := range passOrder(r) {
			m := schedulerModes[mi]
			ns := passNamespace(r, mi)
			if err := c.EnsureNamespace(ctx, ns); err != nil {
				return rows, err
			}
			row, err := c.schedulerPass(ctx, creator, ns, m.name, m.bin, m.config, o.PodsPerNode, static, workers, ranges, o.ProfileDir)
			if err != nil {
				return rows, fmt.Errorf("round %d: %w", r+1, err)
			}
			row.Note("round %d of %d, %s", r+1, rounds, map[bool]string{true: "first", false: "second"}[mi == passOrder(r)[0]])
			if o.NoStaticIP {
				row.Note("no StaticIP objects")
			}
			rows = append(rows, row)
			if o.Progress != nil {
				o.Progress(row)
			}
		}
	}
	return append(rows, SummarizeScheduler(rows)...), nil
}

// schedulerPass creates one pass's pods (and the StaticIPs of its static-IP pods), runs one
// scheduler until every pod is bound, measures it, and deletes the pass's pods and StaticIPs.
func (c *Cluster) schedulerPass(ctx context.Context, creator *Cluster, ns, name, bin, config string, perNode, static, workers int, ranges map[string]netip.Prefix, profileDir string) (Row, error) {
	total := len(c.Nodes) * perNode
	bound, err := c.WatchBound(ctx, ns)
	if err != nil {
		return Row{}, err
	}
	defer bound.Stop()
	t0 := time.Now()
	err = parallel(ctx, total, workers, func(ctx context.Context, k int) error {
		i, j := k/perNode, k%perNode
		node := c.Nodes[i]
		if j >= static {
			return create(func() error {
				_, err := creator.Kube.CoreV1().Pods(ns).Create(ctx, Pod(ns, fmt.Sprintf("p-%s-%d", node, j), "", ""), metav1.CreateOptions{})
				return err
			})
		}
		// The same addresses in every pass: the previous pass's records are gone.
		podName, ip := fmt.Sprintf("s-%s-%d", node, j), Host(ranges[node], 1+j)
		if err := create(func() error {
			_, err := creator.SIP.JkeV1().StaticIPs(ns).Create(ctx, StaticIP(ns, podName, ip, node, Requests), metav1.CreateOptions{})
			return err
		}); err != nil {
			return err
		}
		return create(func() error {
			_, err := creator.Kube.CoreV1().Pods(ns).Create(ctx, Pod(ns, podName, ip, node), metav1.CreateOptions{})
			return err
		})
	})
	if err != nil {
		return Row{}, fmt.Errorf("%s pods: %w", name, err)
	}
	created := time.Since(t0)
	comp, err := c.StartScheduler(name, bin, config)
	if err != nil {
		return Row{}, err
	}
	stopProfiles := func() []string { return nil }
	if profileDir != "" {
		stopProfiles = CaptureCPUProfiles(ctx, comp.ServingURL, profileDir, ns+"-"+name)
	}
	err = poll(ctx, 60*time.Minute, func(ctx context.Context) (bool, error) {
		if done, perr := comp.Exited(); done {
			return false, fmt.Errorf("%s exited: %v (log %s)", name, perr, filepath.Join(c.Dir, name+".log"))
		}
		return bound.Bound() >= total, nil
	})
	wall := time.Since(comp.Started)
	profiles := stopProfiles()
	if err != nil {
		comp.Stop()
		return Row{}, fmt.Errorf("%s: pods not all bound: %w", name, err)
	}
	row, err := Measure("scheduler", len(c.Nodes), comp.Proc, comp.Proxy, wall)
	if err == nil {
		row.PodsPerSecond = float64(total) / wall.Seconds()
		row.Note("%d pods, %.0f pods/s", total, row.PodsPerSecond)
		row.Note("pods created (%d workers) in %.0f s before the scheduler started", workers, created.Seconds())
		if h, herr := ScrapeHistogram(ctx, comp.MetricsURL, "scheduler_framework_extension_point_duration_seconds", map[string]string{"extension_point": "Filter"}); herr == nil {
			row.FilterP99 = time.Duration(h.Quantile(0.99) * float64(time.Second))
			row.Note("Filter p99 %.2f ms", h.Quantile(0.99)*1e3)
		} else {
			row.Note("Filter p99 n/a (%v)", herr)
		}
		// A bind the loaded API server times out sends the pod back to the queue: the retry is
		// scheduler CPU and wall time the figures include, so say how many there were.
		if errs, cerr := ScrapeCounter(ctx, comp.MetricsURL, "scheduler_schedule_attempts_total", map[string]string{"result": "error"}); cerr == nil {
			row.Note("%.0f scheduling attempts ended in an error (binds the API server timed out), retried", errs)
		}
		row.Note("%.1f requests/pod", float64(row.Requests)/float64(total))
		row.Note("load %s", loadAverage())
		if len(profiles) > 0 {
			row.Note("%d CPU profiles of %.0f s each: %s-*.pprof", len(profiles), ProfileWindow.Seconds(), filepath.Join(profileDir, ns+"-"+name))
		}
	}
	comp.Stop()
	if err != nil {
		return Row{}, err
	}
	if err := c.DeletePods(ctx, ns); err != nil {
		return row, fmt.Errorf("%s: deleting its pods: %w", name, err)
	}
	if err := c.DeleteStaticIPs(ctx, ns); err != nil {
		return row, fmt.Errorf("%s: deleting its StaticIPs: %w", name, err)
	}
	return row, nil
}

func ignoreExists(err error) error {
	if err != nil && isExists(err) {
		return nil
	}
	return err
}

// loadAverage is the machine's 1-, 5- and 15-minute load average (the machine is shared:
// every figure is quoted with it).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
