package testsupport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// recordingTB records Fatalf instead of stopping the test.
type recordingTB struct {
	testing.TB
	fatal string
}

func (r *recordingTB) Helper() {}
func (r *recordingTB) Fatal(args ...any) {
	r.fatal = fmt.Sprint(args...)
}

func TestEventually(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cond      func(calls int) (bool, error)
		wantFatal string // "" = passes
	}{
		{name: "true at once", cond: func(int) (bool, error) { return true, nil }},
		{name: "true on the third poll, errors before", cond: func(n int) (bool, error) {
			if n < 3 {
				return false, errors.New("not yet")
			}
			return true, nil
		}},
		{name: "never true", cond: func(int) (bool, error) { return false, nil },
			wantFatal: "timed out after 200ms waiting for the thing"},
		{name: "never true, last error named", cond: func(n int) (bool, error) { return false, fmt.Errorf("read %d failed", n) },
			wantFatal: "(last error: read "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recordingTB{TB: t}
			calls := 0
			Eventually(context.Background(), rec, 200*time.Millisecond, "the thing", func() (bool, error) {
				calls++
				return tc.cond(calls)
			})
			switch {
			case tc.wantFatal == "" && rec.fatal != "":
				t.Errorf("failed: %s", rec.fatal)
			case tc.wantFatal != "" && !strings.Contains(rec.fatal, tc.wantFatal):
				t.Errorf("failure %q, want it to contain %q", rec.fatal, tc.wantFatal)
			}
		})
	}
	rec := &recordingTB{TB: t}
	Eventually(context.Background(), rec, time.Second, "a flag", True(func() bool { return true }))
	if rec.fatal != "" {
		t.Errorf("True: %s", rec.fatal)
	}
}
