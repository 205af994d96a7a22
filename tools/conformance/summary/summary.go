package main

import (
	"encoding/xml"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// junitSuites is the part of the JUnit XML e2e.test writes (<report-dir>/junit_01.xml) that
// the summary reads.
type junitSuites struct {
	Suites []struct {
		Cases []junitCase `xml:"testcase"`
	} `xml:"testsuite"`
}

type junitCase struct {
	Name    string    `xml:"name,attr"`
	Time    float64   `xml:"time,attr"`
	Failure *struct{} `xml:"failure"`
	Error   *struct{} `xml:"error"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
}

// Summary is what a run of the selected specs came to. Specs the focus left out are not
// counted (ginkgo lists them as skipped with the bare message "skipped"); a spec that ran
// and called Skip is, with its reason.
type Summary struct {
	Passed, Failed []string
	Skipped        map[string]string // spec -> reason
	SpecTime       time.Duration     // sum of the specs' own times
}

// Summarize reads one JUnit report.
func Summarize(r io.Reader) (Summary, error) {
	var s junitSuites
	if err := xml.NewDecoder(r).Decode(&s); err != nil {
		return Summary{}, fmt.Errorf("junit: %w", err)
	}
	out := Summary{Skipped: map[string]string{}}
	for _, suite := range s.Suites {
		for _, c := range suite.Cases {
			// Specs are "[It] [sig-...] ..."; the rest are suite nodes: [SynchronizedBeforeSuite], [ReportAfterSuite] ...
			node := !strings.HasPrefix(c.Name, "[It] ")
			switch {
			case c.Failure != nil || c.Error != nil:
				out.Failed = append(out.Failed, c.Name)
			case node:
				continue
			case c.Skipped != nil:
				if reason, ok := strings.CutPrefix(c.Skipped.Message, "skipped - "); ok {
					out.Skipped[c.Name] = reason
				}
				continue
			default:
				out.Passed = append(out.Passed, c.Name)
			}
			out.SpecTime += time.Duration(c.Time * float64(time.Second))
		}
	}
	sort.Strings(out.Passed)
	sort.Strings(out.Failed)
	return out, nil
}

// Print writes the counts, then every failed and skipped spec.
func (s Summary) Print(w io.Writer) {
	fmt.Fprintf(w, "conformance: %d passed, %d failed, %d skipped\n", len(s.Passed), len(s.Failed), len(s.Skipped))
	for _, f := range s.Failed {
		fmt.Fprintf(w, "  FAILED  %s\n", f)
	}
	names := make([]string, 0, len(s.Skipped))
	for n := range s.Skipped {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  SKIPPED %s: %s\n", n, s.Skipped[n])
	}
}
