package integration

import (
	"math"
	"runtime"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics/legacyregistry"
)

// cpuSeconds is this process's user+system CPU time. The scheduler runs in the test binary;
// kube-apiserver and etcd are other processes, so this is the scheduler's CPU plus the
// benchmark's own light polling.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return math.NaN()
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// histogram is a snapshot of one histogram's cumulative buckets (upper bound -> count).
type histogram struct {
	bounds []float64
	counts []uint64
	total  uint64
}

// filterHistogram sums the scheduler's own scheduler_framework_extension_point_duration_seconds
// for extension_point="Filter" over every status and profile.
func filterHistogram(tb testing.TB) histogram {
	tb.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	var h histogram
	for _, f := range families {
		if f.GetName() != "scheduler_framework_extension_point_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			if !hasLabel(m, "extension_point", "Filter") {
				continue
			}
			hist := m.GetHistogram()
			if h.bounds == nil {
				for _, b := range hist.GetBucket() {
					h.bounds = append(h.bounds, b.GetUpperBound())
				}
				h.counts = make([]uint64, len(h.bounds))
			}
			for i, b := range hist.GetBucket() {
				h.counts[i] += b.GetCumulativeCount()
			}
			h.total += hist.GetSampleCount()
		}
	}
	return h
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// p99Since is the 99th percentile of the observations made after before, interpolated
// linearly inside the bucket it falls in (as Prometheus' histogram_quantile), in seconds.
func (h histogram) p99Since(before histogram) float64 {
	total := h.total - before.total
	if total == 0 || len(h.bounds) == 0 {
		return math.NaN()
	}
	rank := 0.99 * float64(total)
	lower, prev := 0.0, uint64(0)
	for i, upper := range h.bounds {
		c := h.counts[i]
		if len(before.counts) > i {
			c -= before.counts[i]
		}
		if float64(c) >= rank {
			if c == prev {
				return upper
			}
			return lower + (upper-lower)*(rank-float64(prev))/float64(c-prev)
		}
		lower, prev = upper, c
	}
	return lower // in the +Inf bucket: report its lower bound
}

// measurement is what a benchmark run reports.
type measurement struct {
	start     time.Time
	cpu       float64
	filter    histogram
	pods      int
	elapsed   time.Duration
	cpuPerPod float64
	filterP99 float64
}

// startMeasuring first collects the garbage the previous mode left (its scheduler, informers
// and pods), as the testing package does before each benchmark: otherwise the next mode's
// CPU and time include the previous mode's GC debt.
func startMeasuring(tb testing.TB, pods int) *measurement {
	runtime.GC()
	return &measurement{start: time.Now(), cpu: cpuSeconds(), filter: filterHistogram(tb), pods: pods}
}

func (m *measurement) stop(tb testing.TB) {
	m.elapsed = time.Since(m.start)
	m.cpuPerPod = (cpuSeconds() - m.cpu) / float64(m.pods)
	m.filterP99 = filterHistogram(tb).p99Since(m.filter)
}

func (m *measurement) report(b *testing.B) {
	b.ReportMetric(float64(m.pods)/m.elapsed.Seconds(), "pods/s")
	b.ReportMetric(m.cpuPerPod*1000, "cpu-ms/pod")
	b.ReportMetric(m.filterP99*1e6, "filter-p99-us")
}
