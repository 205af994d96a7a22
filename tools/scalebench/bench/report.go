package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Row is one component's cost in one scenario at one cluster size.
type Row struct {
	Scenario  string
	Component string
	Nodes     int
	Wall      time.Duration
	CPU       time.Duration
	PeakRSS   int64
	Requests  int
	// PodsPerSecond and FilterP99: the scheduler scenario's rate and Filter p99.
	PodsPerSecond float64
	FilterP99     time.Duration
	// Notes are scenario-specific figures ("pods/s 312", "filter p99 1.2 ms").
	Notes []string
}

// Measure fills a row from a process's usage and its proxy's request count.
func Measure(scenario string, nodes int, p *Proc, proxy *CountingProxy, wall time.Duration) (Row, error) {
	u, err := p.Usage()
	if err != nil {
		return Row{}, err
	}
	r := Row{Scenario: scenario, Component: p.Name, Nodes: nodes, Wall: wall, CPU: u.CPU, PeakRSS: u.PeakRSS}
	if proxy != nil {
		r.Requests = proxy.Counts().Total()
	}
	return r, nil
}

// Note appends a scenario-specific figure.
func (r *Row) Note(format string, a ...any) { r.Notes = append(r.Notes, fmt.Sprintf(format, a...)) }

// WriteTable prints rows as a Markdown table.
func WriteTable(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| scenario | N nodes | component | wall s | CPU s | peak RSS MiB | API requests | notes |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %d | %s | %.1f | %.1f | %s | %d | %s |\n", r.Scenario, r.Nodes, r.Component,
			r.Wall.Seconds(), r.CPU.Seconds(), mib(r.PeakRSS), r.Requests, strings.Join(r.Notes, "; "))
	}
}
