package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// csvHeader is the raw per-pod record of a burst: which round and CNI, the workload kind, the
// pod, when the watch first saw it and saw it Running (seconds after the burst's first create)
// and its startup latency (seen → Running).
var csvHeader = []string{"round", "label", "kind", "pod", "seen_s", "running_s", "startup_s"}

// CSVRows are b's pods as csvHeader rows, sorted by pod name.
func CSVRows(b Burst, round int, label, kind string) [][]string {
	var pods []string
	for pod := range b.Running {
		pods = append(pods, pod)
	}
	slices.Sort(pods)
	secs := func(t time.Time) string { return strconv.FormatFloat(t.Sub(b.Start).Seconds(), 'f', 3, 64) }
	var rows [][]string
	for _, pod := range pods {
		run := b.Running[pod]
		seen, ok := b.Seen[pod]
		if !ok || seen.After(run) {
			seen = run
		}
		rows = append(rows, []string{strconv.Itoa(round), label, kind, pod, secs(seen), secs(run),
			strconv.FormatFloat(run.Sub(seen).Seconds(), 'f', 3, 64)})
	}
	return rows
}

// appendCSV appends rows to path, writing the header first when the file is new.
func appendCSV(path string, rows [][]string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	w := csv.NewWriter(f)
	if st.Size() == 0 {
		_ = w.Write(csvHeader)
	}
	_ = w.WriteAll(rows)
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// RoundFigures are one burst's figures read back from the CSV.
type RoundFigures struct {
	Round    int
	P50, P99 time.Duration
	// AllRunning is the last pod's Running time after the first create.
	AllRunning time.Duration
	Pods       int
}

// Series is every round of one (label, kind).
type Series struct {
	Label, Kind string
	Rounds      []RoundFigures
}

// ReadSeries groups a podburst CSV by (label, kind) and round, in the order first seen.
func ReadSeries(r io.Reader) ([]Series, error) {
	records, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(records) == 0 || !slices.Equal(records[0], csvHeader) {
		return nil, fmt.Errorf("not a podburst CSV (want the header %s)", strings.Join(csvHeader, ","))
	}
	type key struct {
		label, kind string
		round       int
	}
	lat := map[key][]time.Duration{}
	last := map[key]time.Duration{}
	var keys []key
	for i, rec := range records[1:] {
		round, err1 := strconv.Atoi(rec[0])
		running, err2 := strconv.ParseFloat(rec[5], 64)
		startup, err3 := strconv.ParseFloat(rec[6], 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("line %d: %v", i+2, rec)
		}
		k := key{rec[1], rec[2], round}
		if _, ok := lat[k]; !ok {
			keys = append(keys, k)
		}
		lat[k] = append(lat[k], time.Duration(startup*float64(time.Second)))
		last[k] = max(last[k], time.Duration(running*float64(time.Second)))
	}
	var out []Series
	index := map[[2]string]int{}
	for _, k := range keys {
		sk := [2]string{k.label, k.kind}
		i, ok := index[sk]
		if !ok {
			i = len(out)
			index[sk] = i
			out = append(out, Series{Label: k.label, Kind: k.kind})
		}
		out[i].Rounds = append(out[i].Rounds, RoundFigures{Round: k.round, P50: Percentile(lat[k], 50), P99: Percentile(lat[k], 99),
			AllRunning: last[k], Pods: len(lat[k])})
	}
	return out, nil
}

// spread is "median (min–max)" of ds in seconds.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fs (%.2f–%.2f)", Percentile(ds, 50).Seconds(), Percentile(ds, 0.0001).Seconds(), Percentile(ds, 100).Seconds())
}

// Summary writes, per (label, kind), each round's startup p50/p99 and all-Running time, then
// their median and min–max over the rounds; and the ratio of each series' median to the first
// series of the same kind (the first label run.sh lists).
func Summary(w io.Writer, series []Series) {
	firstOfKind := map[string]Series{}
	for _, s := range series {
		var p50, p99, all []time.Duration
		var per []string
		for _, r := range s.Rounds {
			p50, p99, all = append(p50, r.P50), append(p99, r.P99), append(all, r.AllRunning)
			per = append(per, fmt.Sprintf("r%d %.2f/%.2f/%.1f", r.Round, r.P50.Seconds(), r.P99.Seconds(), r.AllRunning.Seconds()))
		}
		fmt.Fprintf(w, "%-10s %-11s %d rounds: startup p50 %s, p99 %s, all Running %s  [per round p50/p99/all: %s]\n",
			s.Label, s.Kind, len(s.Rounds), spread(p50), spread(p99), spread(all), strings.Join(per, ", "))
		if base, ok := firstOfKind[s.Kind]; ok {
			fmt.Fprintf(w, "  %s / %s (%s), medians over rounds: startup p50 %.2fx, p99 %.2fx, all Running %.2fx\n",
				s.Label, base.Label, s.Kind, ratioOfMedians(s, base, func(r RoundFigures) time.Duration { return r.P50 }),
				ratioOfMedians(s, base, func(r RoundFigures) time.Duration { return r.P99 }),
				ratioOfMedians(s, base, func(r RoundFigures) time.Duration { return r.AllRunning }))
		} else {
			firstOfKind[s.Kind] = s
		}
	}
}

func ratioOfMedians(a, b Series, f func(RoundFigures) time.Duration) float64 {
	med := func(s Series) time.Duration {
		var ds []time.Duration
		for _, r := range s.Rounds {
			ds = append(ds, f(r))
		}
		return Percentile(ds, 50)
	}
	if med(b) == 0 {
		return 0
	}
	return float64(med(a)) / float64(med(b))
}
