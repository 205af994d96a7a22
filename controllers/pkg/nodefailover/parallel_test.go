package nodefailover

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestForEachParallel(t *testing.T) {
	t.Run("every index once, at most writeParallelism at once", func(t *testing.T) {
		const n = 100
		var mu sync.Mutex
		seen := map[int]int{}
		var inFlight, most atomic.Int32
		err := forEachParallel(context.Background(), n, func(_ context.Context, i int) error {
			cur := inFlight.Add(1)
			defer inFlight.Add(-1)
			for {
				m := most.Load()
				if cur <= m || most.CompareAndSwap(m, cur) {
					break
				}
			}
			time.Sleep(time.Millisecond) // let the others start: the bound is what is tested
			mu.Lock()
			seen[i]++
			mu.Unlock()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if seen[i] != 1 {
				t.Errorf("index %d called %d times, want 1", i, seen[i])
			}
		}
		if m := most.Load(); m > writeParallelism || m < 2 {
			t.Errorf("at most %d calls in flight, want 2..%d", m, writeParallelism)
		}
	})
	t.Run("the first error is returned and the rest see a cancelled context", func(t *testing.T) {
		boom := errors.New("boom")
		var cancelled atomic.Int32
		err := forEachParallel(context.Background(), 200, func(ctx context.Context, i int) error {
			if i == 0 {
				return boom
			}
			time.Sleep(time.Millisecond)
			if ctx.Err() != nil {
				cancelled.Add(1)
			}
			return nil
		})
		if !errors.Is(err, boom) {
			t.Fatalf("err = %v, want boom", err)
		}
		if cancelled.Load() == 0 {
			t.Error("no call saw the cancelled context after the error")
		}
	})
	t.Run("none", func(t *testing.T) {
		if err := forEachParallel(context.Background(), 0, func(context.Context, int) error { return errors.New("called") }); err != nil {
			t.Fatal(err)
		}
	})
}
