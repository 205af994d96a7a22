package bench

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	estsbench "github.com/staticip/staticip/tools/estsbench/bench"
)

// Rollout (scenario 2): one set of replicas rolled v1 → v2 with maxUnavailable, as an
// EnhancedStatefulSet (staticip-controller-manager's controller alone) and as a native
// StatefulSet with the same budget (kube-controller-manager's statefulset controller alone,
// MaxUnavailableStatefulSet on); the sets are tools/estsbench's. kube-scheduler places the
// pods (not measured), kwok runs them.
func (c *Cluster) Rollout(ctx context.Context, replicas, maxUnavailable int) ([]Row, error) {
	const ns = "rollout"
	if err := c.EnsureNamespace(ctx, ns); err != nil {
		return nil, err
	}
	sched, err := c.StartScheduler("rollout-kube-scheduler", "kube-scheduler", StockSchedulerConfig)
	if err != nil {
		return nil, err
	}
	defer sched.Stop()
	runner := &estsbench.Runner{Kube: c.Kube, Staticip: c.SIP}
	opts := estsbench.TemplateOptions{Port: 8080, CPURequest: resource.MustParse("10m"), GracePeriod: 0, ProbePeriod: 1,
		PodManagement: appsv1.ParallelPodManagement, MaxUnavailable: maxUnavailable, RevisionHistory: 10}
	var rows []Row
	for _, kind := range []string{estsbench.WorkloadStatefulSetMaxUnavailable, estsbench.WorkloadESTS} {
		w, err := runner.Workload(ns, kind, opts)
		if err != nil {
			return rows, err
		}
		var comp *Component
		if kind == estsbench.WorkloadESTS {
			comp, err = c.Manager("ests-controller", "enhancedstatefulset")
		} else {
			comp, err = c.KubeControllerManager("kube-controller-manager", "statefulset")
		}
		if err != nil {
			return rows, err
		}
		row, err := c.rollOne(ctx, w, comp, replicas)
		comp.Stop()
		if err != nil {
			return rows, fmt.Errorf("%s: %w", kind, err)
		}
		row.Note("maxUnavailable %d", maxUnavailable)
		rows = append(rows, row)
		if err := w.Delete(ctx); err != nil {
			return rows, err
		}
		if err := c.DeletePods(ctx, ns); err != nil {
			return rows, err
		}
	}
	if len(rows) == 2 {
		rows[1].Note("rollout time ratio to StatefulSet %.2f, CPU ratio %.2f", rows[1].Wall.Seconds()/rows[0].Wall.Seconds(), rows[1].CPU.Seconds()/rows[0].CPU.Seconds())
	}
	return rows, nil
}

// rollOne creates w, waits until all replicas are ready, rolls it to a new image and waits
// until every replica is updated and ready. The row's wall time, CPU and requests are the
// rollout's (creation excluded); peak RSS covers both.
func (c *Cluster) rollOne(ctx context.Context, w estsbench.Workload, comp *Component, replicas int) (Row, error) {
	wait := func(gen int64, what string) error {
		return poll(ctx, 30*time.Minute, func(ctx context.Context) (bool, error) {
			if done, perr := comp.Exited(); done {
				return false, fmt.Errorf("%s exited: %v", comp.Name, perr)
			}
			g, st, err := w.Status(ctx)
			if err != nil {
				return false, nil
			}
			return g >= gen && st.ObservedGeneration >= gen && int(st.UpdatedReplicas) == replicas && int(st.ReadyReplicas) == replicas, nil
		})
	}
	if err := w.Create(ctx, int32(replicas), "testserver:v1"); err != nil {
		return Row{}, err
	}
	if err := wait(1, "created"); err != nil {
		return Row{}, fmt.Errorf("%d replicas ready: %w", replicas, err)
	}
	created := time.Since(comp.Started)
	u0, err := comp.Usage()
	if err != nil {
		return Row{}, err
	}
	r0 := comp.Proxy.Counts()
	t0 := time.Now()
	gen, err := w.SetImage(ctx, "testserver:v2")
	if err != nil {
		return Row{}, err
	}
	if err := wait(gen, "rolled"); err != nil {
		return Row{}, fmt.Errorf("rollout: %w", err)
	}
	wall := time.Since(t0)
	u1, err := comp.Usage()
	if err != nil {
		return Row{}, err
	}
	reqs := comp.Proxy.Counts().Sub(r0)
	row := Row{Scenario: "rollout", Component: comp.Name + " (" + w.Name() + ")", Nodes: len(c.Nodes), Wall: wall,
		CPU: u1.CPU - u0.CPU, PeakRSS: u1.PeakRSS, Requests: reqs.Total()}
	row.Note("%d replicas; created+ready in %.1f s", replicas, created.Seconds())
	row.Note("%.1f requests/pod", float64(reqs.Total())/float64(replicas))
	return row, nil
}
