package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Percentile is the nearest-rank p-th percentile of ds (p in (0,100]); 0 for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = max(1, min(rank, len(s)))
	return s[rank-1]
}

// Burst is one measured burst: every pod's first sighting and first Running phase, against
// the moment the first workload was sent.
type Burst struct {
	Start   time.Time
	Seen    map[string]time.Time // pod -> first watch event (its creation, as the API server answered it)
	Running map[string]time.Time // pod -> first watch event with phase Running
}

// Figures are what a burst comes to.
type Figures struct {
	Pods          int
	AllRunning    time.Duration // Start -> the last pod Running
	PodsPerSecond float64
	P50, P99, Max time.Duration // per pod: seen -> Running (startup latency, SIG Scalability SLO: p99 <= 5 s)
}

// Measure computes the figures of b; pods never Running are left out of the latencies (the
// caller waits for all of them first).
func (b Burst) Measure() Figures {
	var lat []time.Duration
	var last time.Time
	for pod, run := range b.Running {
		seen, ok := b.Seen[pod]
		if !ok || seen.After(run) {
			seen = run
		}
		lat = append(lat, run.Sub(seen))
		if run.After(last) {
			last = run
		}
	}
	f := Figures{Pods: len(b.Running), P50: Percentile(lat, 50), P99: Percentile(lat, 99), Max: Percentile(lat, 100)}
	if !last.IsZero() {
		f.AllRunning = last.Sub(b.Start)
		if f.AllRunning > 0 {
			f.PodsPerSecond = float64(f.Pods) / f.AllRunning.Seconds()
		}
	}
	return f
}

// restartLine is the result line of a restart run: delete -> successor Running with the same
// IP (median, p90, p99, max), the part until the old pod was gone (median), and how many
// successors kept their IP (all of them, or the run would have failed).
func restartLine(label, kind string, replicas int, r Restarts) string {
	return fmt.Sprintf("podburst restart %-10s %-11s %d pods, %2d deletions: delete -> same-IP Running median %5.2fs p90 %5.2fs p99 %5.2fs max %5.2fs; old pod gone median %5.2fs; IP kept %d/%d",
		label, kind, replicas, len(r.Back), Percentile(r.Back, 50).Seconds(), Percentile(r.Back, 90).Seconds(), Percentile(r.Back, 99).Seconds(),
		Percentile(r.Back, 100).Seconds(), Percentile(r.Gone, 50).Seconds(), len(r.Back), len(r.Back))
}
