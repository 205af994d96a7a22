package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSummarize(t *testing.T) {
	const report = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="6" disabled="4" errors="0" failures="1" time="30">
  <testsuite name="Kubernetes e2e suite" package="/" tests="6" disabled="0" skipped="3" errors="0" failures="1" time="30">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="5"></testcase>
    <testcase name="[It] [sig-network] DNS should provide DNS for the cluster [Conformance]" classname="Kubernetes e2e suite" status="passed" time="10.5"></testcase>
    <testcase name="[It] [sig-network] Services should serve endpoints on same port and different protocols [Conformance]" classname="Kubernetes e2e suite" status="failed" time="12"><failure type="failed">boom</failure></testcase>
    <testcase name="[It] [sig-storage] not selected" classname="Kubernetes e2e suite" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
    <testcase name="[It] [sig-network] Networking Granular Checks: Services should function for node-Service: http [Conformance]" classname="Kubernetes e2e suite" status="skipped" time="1.5"><skipped message="skipped - Requires at least 2 nodes (not -1)"></skipped></testcase>
    <testcase name="[SynchronizedAfterSuite]" classname="Kubernetes e2e suite" status="failed" time="1"><failure type="failed">cleanup</failure></testcase>
  </testsuite>
</testsuites>`
	s, err := Summarize(strings.NewReader(report))
	if err != nil {
		t.Fatal(err)
	}
	want := Summary{
		Passed: []string{"[It] [sig-network] DNS should provide DNS for the cluster [Conformance]"},
		Failed: []string{"[It] [sig-network] Services should serve endpoints on same port and different protocols [Conformance]", "[SynchronizedAfterSuite]"},
		Skipped: map[string]string{
			"[It] [sig-network] Networking Granular Checks: Services should function for node-Service: http [Conformance]": "Requires at least 2 nodes (not -1)",
		},
	}
	if diff := cmp.Diff(want, s, cmp.FilterPath(func(p cmp.Path) bool { return p.String() == "SpecTime" }, cmp.Ignore())); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
	if s.SpecTime.Seconds() != 23.5 {
		t.Errorf("spec time %v, want 23.5s (10.5 + 12 + 1: passed and failed specs and nodes)", s.SpecTime)
	}
	var out strings.Builder
	s.Print(&out)
	if !strings.HasPrefix(out.String(), "conformance: 1 passed, 2 failed, 1 skipped\n") {
		t.Errorf("print:\n%s", out.String())
	}
	if _, err := Summarize(strings.NewReader("not xml")); err == nil {
		t.Error("garbage was accepted")
	}
}
