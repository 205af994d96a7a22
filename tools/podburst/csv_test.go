package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCSVRoundTripAndSummary(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	burst := func(startups ...int) Burst {
		b := Burst{Start: t0, Seen: map[string]time.Time{}, Running: map[string]time.Time{}}
		for i, ms := range startups {
			pod := string(rune('a' + i))
			b.Seen[pod], b.Running[pod] = at(100), at(100+ms)
		}
		return b
	}
	path := filepath.Join(t.TempDir(), "podburst.csv")
	// Round 1: staticip then bridge; round 2 the other way round (run.sh alternates).
	for _, r := range []struct {
		round int
		label string
		b     Burst
	}{
		{1, "staticip", burst(1000, 2000, 3000)}, {1, "bridge", burst(2000, 2000, 2000)},
		{2, "bridge", burst(1000, 1000, 1000)}, {2, "staticip", burst(1000, 1000, 4000)},
		{3, "staticip", burst(500, 500, 500)}, {3, "bridge", burst(1000, 1000, 1000)},
	} {
		if err := appendCSV(path, CSVRows(r.b, r.round, r.label, "deployment")); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "round,label"); n != 1 {
		t.Errorf("header written %d times:\n%s", n, data)
	}
	if !strings.Contains(string(data), "1,staticip,deployment,c,0.100,3.100,3.000") {
		t.Errorf("raw row missing:\n%s", data)
	}
	series, err := ReadSeries(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if len(series) != 2 || series[0].Label != "staticip" || len(series[0].Rounds) != 3 {
		t.Fatalf("series %+v", series)
	}
	var out strings.Builder
	Summary(&out, series)
	got := out.String()
	for _, want := range []string{
		// staticip p50 per round 2.0, 1.0, 0.5 s; p99 3.0, 4.0, 0.5 s.
		"staticip   deployment  3 rounds: startup p50 1.00s (0.50–2.00), p99 3.00s (0.50–4.00)",
		// bridge p50 2.0, 1.0, 1.0 -> median 1.0; staticip's median 1.0 -> 1.00x; p99 3.0 / 1.0.
		"bridge / staticip (deployment), medians over rounds: startup p50 1.00x, p99 0.33x",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if _, err := ReadSeries(strings.NewReader("a,b\n")); err == nil {
		t.Error("a CSV without podburst's header was read")
	}
}
