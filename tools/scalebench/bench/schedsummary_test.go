package bench

import (
	"strings"
	"testing"
	"time"
)

func TestPassOrderAlternates(t *testing.T) {
	for r, want := range [][]int{{0, 1}, {1, 0}, {0, 1}, {1, 0}} {
		if got := passOrder(r); got[0] != want[0] || got[1] != want[1] {
			t.Errorf("round %d: order %v, want %v", r+1, got, want)
		}
	}
}

func TestSummarizeScheduler(t *testing.T) {
	s := time.Second
	pass := func(name string, pps float64, cpu time.Duration, rssMiB int64, p99 time.Duration) Row {
		return Row{Scenario: "scheduler", Component: name, Nodes: 1000, Wall: 100 * s, CPU: cpu, PeakRSS: rssMiB << 20,
			Requests: 60000, PodsPerSecond: pps, FilterP99: p99}
	}
	ms := time.Millisecond
	rows := []Row{ // round 1: kube first, round 2: staticip first, round 3: kube first
		pass("kube-scheduler", 300, 50*s, 700, 20*ms), pass("staticip-scheduler", 270, 55*s, 770, 22*ms),
		pass("staticip-scheduler", 200, 60*s, 800, 30*ms), pass("kube-scheduler", 250, 50*s, 720, 20*ms),
		pass("kube-scheduler", 400, 40*s, 710, 10*ms), pass("staticip-scheduler", 400, 40*s, 740, 10*ms),
	}
	out := SummarizeScheduler(rows)
	if len(out) != 2 {
		t.Fatalf("want a row per scheduler, got %d: %+v", len(out), out)
	}
	k, sip := out[0], out[1]
	if k.Component != "kube-scheduler, median of 3" || k.PodsPerSecond != 300 || k.CPU != 50*s || k.PeakRSS != 710<<20 || k.FilterP99 != 20*ms {
		t.Errorf("kube-scheduler medians: %+v", k)
	}
	notes := strings.Join(sip.Notes, "; ")
	for _, want := range []string{
		"pods/s 270 (200–400)",
		// Ratios inside each round: 0.90, 0.80, 1.00 (pods/s); 1.10, 1.20, 1.00 (CPU).
		"staticip / kube-scheduler per round, median (min–max): pods/s 0.90 (0.80–1.00), CPU 1.10 (1.00–1.20)",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("staticip-scheduler notes lack %q:\n%s", want, notes)
		}
	}
}
