// Package testsupport holds the test helpers this module's packages share. Everything else
// comes from the libraries: wait.PollUntilContextTimeout (k8s.io/apimachinery/pkg/util/wait)
// for polling, meta.FindStatusCondition (k8s.io/apimachinery/pkg/api/meta) for conditions, and
// tools/testenv for a real API server.
package testsupport

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Interval is how often Eventually polls.
const Interval = 50 * time.Millisecond

// Eventually polls cond (wait.PollUntilContextTimeout, at once and then every Interval) until
// it returns true, and fails the test if timeout passes or ctx ends first, naming what it
// waited for and cond's last error. An error from cond does not stop the polling: it is kept
// for the message (an API read that fails now may succeed next time).
func Eventually(ctx context.Context, tb testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	tb.Helper()
	var last error
	err := wait.PollUntilContextTimeout(ctx, Interval, timeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		if err != nil {
			last = err
			return false, nil
		}
		return ok, nil
	})
	if err != nil {
		if last != nil {
			err = fmt.Errorf("%w (last error: %v)", err, last)
		}
		tb.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
	}
}

// True adapts a condition without an error for Eventually.
func True(cond func() bool) func() (bool, error) {
	return func() (bool, error) { return cond(), nil }
}
