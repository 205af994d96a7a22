package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Component is a component process and the proxy counting its API requests.
type Component struct {
	*Proc
	Proxy   *CountingProxy
	Started time.Time
	// MetricsURL is its /metrics when it serves them (schedulers).
	MetricsURL string
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
// serving /metrics to anyone on a free loopback port.
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
			"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics", "--v=1"}
	})
	if err != nil {
		if comp != nil {
			comp.Stop()
		}
		return nil, err
	}
	comp.MetricsURL = fmt.Sprintf("https://127.0.0.1:%d/metrics", port)
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
}

// CreateWorkers is how many objects the harness creates at once by default: enough to keep
// the API server busy, few enough not to starve the component under test on two cores.
const CreateWorkers = 16

// Scheduler: PodsPerNode pods per node, a third of them static-IP (annotation, StaticIP,
// pinned to the node holding the IP), HeldPerNode reservations for absent pods per node;
// the same pods scheduled by kube-scheduler and then by staticip-scheduler, each alone.
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
	held := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	if err := parallel(ctx, len(c.Nodes)*o.HeldPerNode, workers, func(ctx context.Context, k int) error {
		node := c.Nodes[k/o.HeldPerNode]
		name := fmt.Sprintf("held-%s-%d", node, k%o.HeldPerNode)
		return create(func() error {
			_, err := c.SIP.JkeV1().StaticIPs(heldNS).Create(ctx, StaticIP(heldNS, name, Host(ranges[node], 200+k%o.HeldPerNode), node, held), metav1.CreateOptions{})
			return err
		})
	}); err != nil {
		return nil, fmt.Errorf("reservations: %w", err)
	}
	static := o.PodsPerNode / 3
	modes := []struct{ name, bin, config string }{
		{"kube-scheduler", "kube-scheduler", StockSchedulerConfig},
		{"staticip-scheduler", "staticip-scheduler", StaticIPSchedulerConfig},
	}
	var rows []Row
	for mi, m := range modes {
		ns := "sched-" + m.name
		if err := c.EnsureNamespace(ctx, ns); err != nil {
			return nil, err
		}
		total := len(c.Nodes) * o.PodsPerNode
		bound, err := c.WatchBound(ctx, ns)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		err = parallel(ctx, total, workers, func(ctx context.Context, k int) error {
			i, j := k/o.PodsPerNode, k%o.PodsPerNode
			node := c.Nodes[i]
			if j >= static {
				return create(func() error {
					_, err := c.Kube.CoreV1().Pods(ns).Create(ctx, Pod(ns, fmt.Sprintf("p-%s-%d", node, j), "", ""), metav1.CreateOptions{})
					return err
				})
			}
			// The modes use different addresses of the node's range (1-10, 11-20, ...).
			name, ip := fmt.Sprintf("s-%s-%d", node, j), Host(ranges[node], 1+mi*static+j)
			if err := create(func() error {
				_, err := c.SIP.JkeV1().StaticIPs(ns).Create(ctx, StaticIP(ns, name, ip, node, Requests), metav1.CreateOptions{})
				return err
			}); err != nil {
				return err
			}
			return create(func() error {
				_, err := c.Kube.CoreV1().Pods(ns).Create(ctx, Pod(ns, name, ip, node), metav1.CreateOptions{})
				return err
			})
		})
		if err != nil {
			bound.Stop()
			return nil, fmt.Errorf("%s pods: %w", m.name, err)
		}
		created := time.Since(t0)
		comp, err := c.StartScheduler(m.name, m.bin, m.config)
		if err != nil {
			bound.Stop()
			return nil, err
		}
		err = poll(ctx, 60*time.Minute, func(ctx context.Context) (bool, error) {
			if done, perr := comp.Exited(); done {
				return false, fmt.Errorf("%s exited: %v (log %s)", m.name, perr, filepath.Join(c.Dir, m.name+".log"))
			}
			return bound.Bound() >= total, nil
		})
		wall := time.Since(comp.Started)
		bound.Stop()
		if err != nil {
			comp.Stop()
			return nil, fmt.Errorf("%s: pods not all bound: %w", m.name, err)
		}
		row, err := Measure("scheduler", len(c.Nodes), comp.Proc, comp.Proxy, wall)
		if err == nil {
			row.Note("%d pods, %.0f pods/s", total, float64(total)/wall.Seconds())
			row.Note("pods created (%d workers) in %.0f s before the scheduler started", workers, created.Seconds())
			if h, herr := ScrapeHistogram(ctx, comp.MetricsURL, "scheduler_framework_extension_point_duration_seconds", map[string]string{"extension_point": "Filter"}); herr == nil {
				row.Note("Filter p99 %.2f ms", h.Quantile(0.99)*1e3)
			} else {
				row.Note("Filter p99 n/a (%v)", herr)
			}
			row.Note("%.1f requests/pod", float64(row.Requests)/float64(total))
		}
		comp.Stop()
		if err != nil {
			return rows, err
		}
		rows = append(rows, row)
		if err := c.DeletePods(ctx, ns); err != nil {
			return rows, fmt.Errorf("%s: deleting its pods: %w", m.name, err)
		}
	}
	if len(rows) == 2 {
		rows[1].Note("CPU ratio to kube-scheduler %.2f", rows[1].CPU.Seconds()/rows[0].CPU.Seconds())
		rows[1].Note("RSS ratio %.2f", float64(rows[1].PeakRSS)/float64(rows[0].PeakRSS))
	}
	return rows, nil
}

func ignoreExists(err error) error {
	if err != nil && isExists(err) {
		return nil
	}
	return err
}
