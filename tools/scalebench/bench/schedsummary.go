package bench

import (
	"fmt"
	"slices"
	"time"
)

// Spread is the median and range of one figure over rounds.
type Spread struct{ Median, Min, Max float64 }

func spreadOf(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{Median: m, Min: s[0], Max: s[len(s)-1]}
}

func (s Spread) String() string {
	return fmt.Sprintf("%s (%s–%s)", num(s.Median), num(s.Min), num(s.Max))
}

func num(x float64) string {
	if x >= 100 {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.2f", x)
}

// SummarizeScheduler turns the scheduler scenario's per-pass rows (in the order they ran,
// each round one pass of each scheduler) into one row per scheduler with the medians over the
// rounds, the spreads (min–max) in its notes, and on staticip-scheduler's row the per-round
// ratios staticip / kube-scheduler (pods/s, CPU, RSS, Filter p99): median and min–max. A
// ratio is taken inside a round, so both sides of it ran minutes apart on the same machine.
func SummarizeScheduler(rows []Row) []Row {
	by := map[string][]Row{}
	var names []string
	for _, r := range rows {
		if r.Scenario != "scheduler" {
			continue
		}
		if _, ok := by[r.Component]; !ok {
			names = append(names, r.Component)
		}
		by[r.Component] = append(by[r.Component], r)
	}
	var out []Row
	for _, name := range names {
		rs := by[name]
		var pps, cpu, rss, p99, wall, req []float64
		for _, r := range rs {
			pps = append(pps, r.PodsPerSecond)
			cpu = append(cpu, r.CPU.Seconds())
			rss = append(rss, float64(r.PeakRSS)/(1<<20))
			p99 = append(p99, float64(r.FilterP99)/float64(time.Millisecond))
			wall = append(wall, r.Wall.Seconds())
			req = append(req, float64(r.Requests))
		}
		row := Row{Scenario: "scheduler", Component: fmt.Sprintf("%s, median of %d", name, len(rs)), Nodes: rs[0].Nodes,
			Wall: secondsDuration(spreadOf(wall).Median), CPU: secondsDuration(spreadOf(cpu).Median),
			PeakRSS: int64(spreadOf(rss).Median * (1 << 20)), Requests: int(spreadOf(req).Median),
			PodsPerSecond: spreadOf(pps).Median, FilterP99: time.Duration(spreadOf(p99).Median * float64(time.Millisecond))}
		row.Note("pods/s %s", spreadOf(pps))
		row.Note("CPU s %s", spreadOf(cpu))
		row.Note("peak RSS MiB %s", spreadOf(rss))
		row.Note("Filter p99 ms %s", spreadOf(p99))
		out = append(out, row)
	}
	kube, sip := by["kube-scheduler"], by["staticip-scheduler"]
	if n := min(len(kube), len(sip)); n > 0 && len(out) == 2 {
		var pps, cpu, rss, p99 []float64
		for i := range n {
			k, s := kube[i], sip[i]
			pps = append(pps, s.PodsPerSecond/k.PodsPerSecond)
			cpu = append(cpu, s.CPU.Seconds()/k.CPU.Seconds())
			rss = append(rss, float64(s.PeakRSS)/float64(k.PeakRSS))
			if k.FilterP99 > 0 {
				p99 = append(p99, float64(s.FilterP99)/float64(k.FilterP99))
			}
		}
		r := &out[1]
		if r.Component[:len("staticip-scheduler")] != "staticip-scheduler" {
			r = &out[0]
		}
		r.Note("staticip / kube-scheduler per round, median (min–max): pods/s %s, CPU %s, RSS %s, Filter p99 %s",
			spreadOf(pps), spreadOf(cpu), spreadOf(rss), spreadOf(p99))
	}
	return out
}

func secondsDuration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
