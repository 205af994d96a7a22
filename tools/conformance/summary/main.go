// Command summary prints passed/failed/skipped of an e2e.test JUnit report (the specs the
// focus selected; tools/conformance/run.sh) and exits 1 when a spec failed or none ran.
//
//	tools/run.sh conformance/summary _output/conformance/junit_01.xml
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: summary JUNIT.xml")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "summary:", err)
		os.Exit(1)
	}
	defer f.Close()
	s, err := Summarize(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "summary:", err)
		os.Exit(1)
	}
	s.Print(os.Stdout)
	if len(s.Failed) > 0 || len(s.Passed) == 0 {
		os.Exit(1)
	}
}
