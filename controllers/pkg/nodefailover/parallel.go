package nodefailover

import (
	"context"

	"golang.org/x/sync/errgroup"
)

// writeParallelism bounds the API writes one migration sends at once (force-deleting a fenced
// node's pods, re-pointing its StaticIPs). One at a time, a full node's 110 pods took 5–10 s of
// a failover at load (tools/scalebench, "Node failover"); the writes are independent (each is
// guarded by its own UID precondition or resourceVersion), so they go out side by side, and the
// client's rate limiter (--kube-api-qps) stays the ceiling.
const writeParallelism = 16

// forEachParallel calls fn for every index in [0, n), at most writeParallelism at once, and
// returns the first error (the others' contexts are cancelled then). fn must touch only what
// belongs to its index.
func forEachParallel(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(writeParallelism)
	for i := 0; i < n; i++ {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error { return fn(ctx, i) })
	}
	return g.Wait()
}
