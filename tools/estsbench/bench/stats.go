package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Median of ds (the mean of the two middle values for an even count); 0 for none.
func Median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	mid := len(s) / 2
	if len(s)%2 == 1 {
		return s[mid]
	}
	return (s[mid-1] + s[mid]) / 2
}

// baselineSummary is the native StatefulSet the others are compared with: the one with a
// maxUnavailable budget when it ran (equal budgets), else the default one-at-a-time one.
func baselineSummary(sums []Summary) *Summary {
	var fallback *Summary
	for i := range sums {
		switch sums[i].Workload {
		case WorkloadStatefulSetMaxUnavailable:
			return &sums[i]
		case WorkloadStatefulSet:
			fallback = &sums[i]
		}
	}
	return fallback
}

// Budget is a workload's maxUnavailable: the native StatefulSet without the gate's field
// updates one pod at a time, every other workload runs at maxUnavailable.
func Budget(workload string, maxUnavailable int) int {
	if workload == WorkloadStatefulSet {
		return 1
	}
	return maxUnavailable
}

// Ratio is slow/fast, 0 when fast is 0.
func Ratio(slow, fast time.Duration) float64 {
	if fast <= 0 {
		return 0
	}
	return float64(slow) / float64(fast)
}

// Result is one measured rollout.
type Result struct {
	Round    int
	Workload string
	// Rollout is from the template update to "every pod runs the new image, is Ready, and the
	// workload's status says updated == ready == replicas".
	Rollout time.Duration
	// MaxUnavailable is the most ordinals without a live Ready pod at any point of the
	// rollout, replayed from every pod watch event.
	MaxUnavailable int
	// Phases is where the rollout's time went.
	Phases Phases
	// CreateAll is from creating the workload to every pod Ready at the first image, and
	// DeleteAll from deleting it to every pod gone: under podManagementPolicy Parallel both
	// start all pods at once, so they are the cluster's throughput for pod starts and stops.
	CreateAll, DeleteAll time.Duration
}

// Summary is the per-workload outcome of all rounds, in the order of first appearance.
type Summary struct {
	Workload       string
	Rollouts       []time.Duration
	Median         time.Duration
	MaxUnavailable int
}

// Summarize groups results by workload.
func Summarize(results []Result) []Summary {
	var out []Summary
	index := map[string]int{}
	for _, r := range results {
		i, ok := index[r.Workload]
		if !ok {
			i = len(out)
			index[r.Workload] = i
			out = append(out, Summary{Workload: r.Workload})
		}
		out[i].Rollouts = append(out[i].Rollouts, r.Rollout)
		out[i].MaxUnavailable = max(out[i].MaxUnavailable, r.MaxUnavailable)
	}
	for i := range out {
		out[i].Median = Median(out[i].Rollouts)
	}
	return out
}

// PrintTable writes one line per workload (each round's time, its budget, the median, the
// largest unavailable count) and then the native StatefulSet's median divided by each other
// workload's — only where both ran at the same budget (budget gives a workload's).
func PrintTable(w io.Writer, results []Result, budget func(workload string) int) {
	sums := Summarize(results)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	rounds := 0
	for _, s := range sums {
		rounds = max(rounds, len(s.Rollouts))
	}
	head := []string{"workload"}
	for i := range rounds {
		head = append(head, fmt.Sprintf("round %d", i+1))
	}
	head = append(head, "budget", "median", "max unavailable")
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, s := range sums {
		row := []string{s.Workload}
		for i := range rounds {
			cell := "-"
			if i < len(s.Rollouts) {
				cell = seconds(s.Rollouts[i])
			}
			row = append(row, cell)
		}
		row = append(row, fmt.Sprint(budget(s.Workload)), seconds(s.Median), fmt.Sprint(s.MaxUnavailable))
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	_ = tw.Flush()
	base := baselineSummary(sums)
	if base != nil {
		for _, s := range sums {
			if s.Workload == base.Workload {
				continue
			}
			if budget(s.Workload) != budget(base.Workload) {
				// A rollout of budget 10 against one of budget 1 measures the budget, not the controller.
				fmt.Fprintf(w, "no ratio %s / %s: budgets differ (%d and %d)\n", base.Workload, s.Workload, budget(base.Workload), budget(s.Workload))
				continue
			}
			fmt.Fprintf(w, "ratio %s / %s (medians, budget %d both): %.2fx\n", base.Workload, s.Workload, budget(s.Workload), Ratio(base.Median, s.Median))
		}
	}
	if create, del, ok := ReplacementFloor(results); ok {
		fmt.Fprintf(w, "all pods at once (medians over every workload and round): created and Ready %s, deleted and gone %s; "+
			"replacing every pod cannot take much less than %s here", seconds(create), seconds(del), seconds(create+del))
		if base != nil {
			fmt.Fprintf(w, ", so no recreating rollout beats %s by more than about %.1fx", base.Workload, Ratio(base.Median, create+del))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "where the time went:")
	for _, r := range results {
		fmt.Fprintf(w, "  round %d %s: %s\n", r.Round, r.Workload, r.Phases)
	}
}

// ReplacementFloor is the medians of CreateAll and DeleteAll over all results that have both.
// A rollout that recreates every pod does each pod's stop and start work once; on a cluster
// whose nodes share CPUs it cannot finish much sooner than starting all pods at once plus
// stopping all pods at once takes. An estimate, not a bound: it includes each phase's tail.
func ReplacementFloor(results []Result) (create, del time.Duration, ok bool) {
	var creates, deletes []time.Duration
	for _, r := range results {
		if r.CreateAll > 0 && r.DeleteAll > 0 {
			creates, deletes = append(creates, r.CreateAll), append(deletes, r.DeleteAll)
		}
	}
	if len(creates) == 0 {
		return 0, 0, false
	}
	return Median(creates), Median(deletes), true
}

func seconds(d time.Duration) string {
	return fmt.Sprintf("%.1fs", d.Seconds())
}
