package bench

import (
	"context"
	"fmt"
	"io"
	"time"
)

// Scenarios, in the order Run takes them by default.
var Scenarios = []string{"ippool", "scheduler", "staticip", "ests", "failover", "wrapper"}

// RunOptions size the scenarios.
type RunOptions struct {
	Scheduler      SchedulerOptions
	StaticIPs      int
	Replicas       int
	MaxUnavailable int
	FailoverPods   int
	// FailoverNativeFirst runs the native StatefulSet's failover before the
	// EnhancedStatefulSet's (rounds alternate the order).
	FailoverNativeFirst bool
	Services            int
	Wrappers            int
	// Idle is how long the StaticIP controller's idle cost is measured.
	Idle time.Duration
}

// DefaultRunOptions are the sizes.
func DefaultRunOptions() RunOptions {
	return RunOptions{Scheduler: SchedulerOptions{PodsPerNode: 30, HeldPerNode: 5}, StaticIPs: 10000,
		Replicas: 1000, MaxUnavailable: 100, FailoverPods: 110, Services: 5000, Wrappers: 20, Idle: 30 * time.Second}
}

// Run starts a cluster, brings up n nodes (through the range allocator when "ippool" is
// listed) and runs the scenarios one after the other, logging progress to log.
func Run(ctx context.Context, opts Options, n int, scenarios []string, o RunOptions, log io.Writer) (rows []Row, err error) {
	t0 := time.Now()
	logf := func(format string, a ...any) {
		fmt.Fprintf(log, "scalebench %6.1fs: %s\n", time.Since(t0).Seconds(), fmt.Sprintf(format, a...))
	}
	c, err := Start(opts)
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	logf("control plane and kwok up (logs in %s)", c.Dir)
	listed := map[string]bool{}
	for _, s := range scenarios {
		listed[s] = true
	}
	if listed["ippool"] {
		logf("ippool: %d nodes join an IPPool", n)
		r, err := c.RangeAllocator(ctx, n)
		rows = append(rows, r...)
		if err != nil {
			return rows, fmt.Errorf("ippool: %w", err)
		}
	} else {
		if err := c.AddNodes(ctx, n); err != nil {
			return rows, err
		}
	}
	logf("%d nodes Ready", len(c.Nodes))
	for _, s := range scenarios {
		var r []Row
		var err error
		start := time.Now()
		logf("%s: start", s)
		switch s {
		case "ippool":
			continue
		case "scheduler":
			so := o.Scheduler
			so.Progress = func(row Row) { logf("scheduler pass done:"); WriteTable(log, []Row{row}) }
			r, err = c.Scheduler(ctx, so)
		case "staticip":
			r, err = c.StaticIPController(ctx, o.StaticIPs, o.Idle)
		case "ests":
			r, err = c.Rollout(ctx, o.Replicas, o.MaxUnavailable)
		case "failover":
			r, err = c.Failover(ctx, o.FailoverPods, o.FailoverNativeFirst)
		case "wrapper":
			r, err = c.Wrapper(ctx, o.Services, o.Wrappers)
		default:
			err = fmt.Errorf("unknown scenario (known: %v)", Scenarios)
		}
		rows = append(rows, r...)
		if err != nil {
			return rows, fmt.Errorf("%s: %w", s, err)
		}
		logf("%s: done in %.1f s", s, time.Since(start).Seconds())
		WriteTable(log, r)
	}
	return rows, nil
}
