package bench

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs the harness end to end at 100 nodes with small sizes, so that it does not
// rot: every scenario must produce its rows with real measurements. It skips (saying why)
// only when a binary is missing.
func TestSmoke(t *testing.T) {
	// The failover scenario runs in the order -failover-native-first asks for (the native
	// StatefulSet's failover, its node unfenced, then the EnhancedStatefulSet's): a benchmark
	// run's default order exercises the other, and alternating rounds need both.
	o := RunOptions{Scheduler: SchedulerOptions{PodsPerNode: 3, HeldPerNode: 1, Rounds: 2}, StaticIPs: 500,
		Replicas: 50, MaxUnavailable: 10, FailoverPods: 10, FailoverNativeFirst: true, Services: 50, Wrappers: 2, Idle: 5 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var log strings.Builder
	scenarios := Scenarios
	if s := os.Getenv("SCALEBENCH_SCENARIOS"); s != "" {
		scenarios = strings.Split(s, ",") // while working on one scenario
	}
	rows, err := Run(ctx, Options{Need: []string{"kube-scheduler", "kube-controller-manager", "staticip-scheduler",
		"staticip-controller-manager", "application-grid-wrapper"}}, 100, scenarios, o, &log)
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
		// A failover row's CPU is the cost after the fence only: a few ticks at 10 pods.
		if (r.CPU <= 0 && r.Scenario != "failover") || r.PeakRSS <= 0 {
			t.Errorf("%s/%s: no CPU or memory measured: %+v", r.Scenario, r.Component, r)
		}
		if r.Requests <= 0 {
			t.Errorf("%s/%s: no API request counted: %+v", r.Scenario, r.Component, r)
		}
	}
	if slices.Contains(scenarios, "failover") {
		// Both failovers completed (else Run failed above), in the order asked for.
		if !slices.ContainsFunc(rows, func(r Row) bool {
			return r.Scenario == "failover" && slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "(StatefulSet first)") })
		}) {
			t.Errorf("failover with FailoverNativeFirst: no row notes the ratio with \"(StatefulSet first)\"")
		}
	}
	want := map[string][]string{"ippool": {"range allocator"}, "scheduler": {"scheduler"}, "staticip": {"staticip controller", "reservation cache"},
		"ests": {"rollout"}, "failover": {"failover"}, "wrapper": {"wrapper"}}
	for _, sc := range scenarios {
		for _, s := range want[sc] {
			if !seen[s] {
				t.Errorf("no row for %s", s)
			}
		}
	}
}

func TestMain(m *testing.M) { os.Exit(m.Run()) }
