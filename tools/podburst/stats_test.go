package main

import (
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	s := func(n ...int) []time.Duration {
		var out []time.Duration
		for _, v := range n {
			out = append(out, time.Duration(v)*time.Second)
		}
		return out
	}
	for _, tc := range []struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 50, 0},
		{s(3), 99, 3 * time.Second},
		{s(5, 1, 4, 2, 3), 50, 3 * time.Second},
		{s(5, 1, 4, 2, 3), 100, 5 * time.Second},
		{s(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Second},
		{s(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 90, 9 * time.Second},
		{s(1, 2, 3, 4), 50, 2 * time.Second},
	} {
		if got := Percentile(tc.in, tc.p); got != tc.want {
			t.Errorf("Percentile(%v, %v) = %v, want %v", tc.in, tc.p, got, tc.want)
		}
	}
}

func TestMeasure(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	b := Burst{
		Start:   t0,
		Seen:    map[string]time.Time{"a": at(100), "b": at(200), "c": at(300)},
		Running: map[string]time.Time{"a": at(1100), "b": at(3200), "c": at(2300), "d": at(4000)}, // d: Running first seen (no earlier event)
	}
	f := b.Measure()
	if f.Pods != 4 || f.AllRunning != 4*time.Second || f.PodsPerSecond != 1 {
		t.Errorf("pods %d, all running %v, pods/s %v; want 4, 4s, 1", f.Pods, f.AllRunning, f.PodsPerSecond)
	}
	// latencies a 1s, b 3s, c 2s, d 0s
	if f.P50 != time.Second || f.P99 != 3*time.Second || f.Max != 3*time.Second {
		t.Errorf("p50 %v p99 %v max %v; want 1s 3s 3s", f.P50, f.P99, f.Max)
	}
}

func TestRestartLine(t *testing.T) {
	r := Restarts{
		Back: []time.Duration{3 * time.Second, 1 * time.Second, 2 * time.Second, 4 * time.Second},
		Gone: []time.Duration{time.Second, time.Second, 2 * time.Second, time.Second},
	}
	got := restartLine("spiderpool", "statefulset", 3, r)
	for _, want := range []string{"spiderpool", "statefulset", "3 pods", " 4 deletions", "median  2.00s", "p90  4.00s", "max  4.00s", "old pod gone median  1.00s", "IP kept 4/4"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
}
