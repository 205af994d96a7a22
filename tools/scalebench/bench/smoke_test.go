package bench

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs the harness end to end at 100 nodes with small sizes, so that it does not
// rot: every scenario must produce its rows with real measurements. It skips (saying why)
// only when a binary is missing.
func TestSmoke(t *testing.T) {
	o := RunOptions{Scheduler: SchedulerOptions{PodsPerNode: 3, HeldPerNode: 1}, StaticIPs: 500,
		Replicas: 50, MaxUnavailable: 10, FailoverPods: 10, Services: 50, Wrappers: 2, Idle: 5 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var log strings.Builder
	rows, err := Run(ctx, Options{Need: []string{"kube-scheduler", "kube-controller-manager", "staticip-scheduler",
		"staticip-controller-manager", "application-grid-wrapper"}}, 100, Scenarios, o, &log)
	if errors.Is(err, ErrMissingBinary) {
		t.Skipf("SKIP: %v", err)
	}
	t.Log("\n" + log.String())
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	WriteTable(&table, rows)
	t.Log("\n" + table.String())
	seen := map[string]bool{}
	for _, r := range rows {
		seen[r.Scenario] = true
		if r.CPU <= 0 || r.PeakRSS <= 0 {
			t.Errorf("%s/%s: no CPU or memory measured: %+v", r.Scenario, r.Component, r)
		}
		if r.Requests <= 0 {
			t.Errorf("%s/%s: no API request counted: %+v", r.Scenario, r.Component, r)
		}
	}
	for _, s := range []string{"range allocator", "scheduler", "staticip controller", "reservation cache"} {
		if !seen[s] {
			t.Errorf("no row for %s", s)
		}
	}
}

func TestMain(m *testing.M) { os.Exit(m.Run()) }
