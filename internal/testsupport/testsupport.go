// Package testsupport holds the test helpers this module's packages share. Everything else
// comes from the libraries: wait.PollUntilContextTimeout (k8s.io/apimachinery/pkg/util/wait)
// for polling, meta.FindStatusCondition (k8s.io/apimachinery/pkg/api/meta) for conditions, and
// internal/testenv for a real API server.
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

// WaitFor polls cond (wait.PollUntilContextTimeout, at once and then every interval) until it
// returns true, and returns an error if timeout passes or ctx ends first, naming what it
// waited for and cond's last error. An error from cond does not stop the polling: it is kept
// for the message (an API read that fails now may succeed next time).
func WaitFor(ctx context.Context, interval, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		if err != nil {
			last = err
			return false, nil
		}
		return ok, nil
	})
	if err == nil {
		return nil
	}
	if last != nil {
		err = fmt.Errorf("%w (last error: %v)", err, last)
	}
	return fmt.Errorf("timed out after %s waiting for %s: %w", timeout, what, err)
}

// Eventually is WaitFor every Interval that fails the test.
func Eventually(ctx context.Context, tb testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	tb.Helper()
	if err := WaitFor(ctx, Interval, timeout, what, func(context.Context) (bool, error) { return cond() }); err != nil {
		tb.Fatal(err)
	}
}

// True adapts a condition without an error for Eventually.
func True(cond func() bool) func() (bool, error) {
	return func() (bool, error) { return cond(), nil }
}
