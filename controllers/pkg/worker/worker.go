// Package worker is the work-queue loop every staticip controller runs: wait for the
// informers, run N workers that hand keys to a sync function, retry failures with rate
// limiting, and on shutdown wait until every worker has returned (the manager relies on
// that to stop cleanly when it loses its lease).
package worker

import (
	"context"
	"sync"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/staticip/staticip/controllers/pkg/metrics"
)

// SyncFunc reconciles one key. A positive requeueAfter asks to look at the key again then.
type SyncFunc func(ctx context.Context, key string) (requeueAfter time.Duration, err error)

// Run blocks until ctx is done. name is the controller's name in logs and metrics; kind is
// what a key names, for error messages.
func Run(ctx context.Context, name, kind string, queue workqueue.TypedRateLimitingInterface[string],
	synced []cache.InformerSynced, workers int, syncKey SyncFunc) {
	defer utilruntime.HandleCrash()
	defer queue.ShutDown()
	logger := klog.FromContext(ctx).WithValues("controller", name)
	logger.Info("Starting")
	if !cache.WaitForNamedCacheSync(name, ctx.Done(), synced...) {
		return
	}
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for processNext(ctx, name, kind, queue, syncKey) {
				}
			}, time.Second)
		})
	}
	<-ctx.Done()
	logger.Info("Stopping")
	queue.ShutDown()
	wg.Wait()
}

func processNext(ctx context.Context, name, kind string, queue workqueue.TypedRateLimitingInterface[string], syncKey SyncFunc) bool {
	key, quit := queue.Get()
	if quit {
		return false
	}
	defer queue.Done(key)
	start := time.Now()
	requeue, err := syncKey(ctx, key)
	metrics.ObserveSync(name, start, err)
	switch {
	case err != nil:
		utilruntime.HandleErrorWithContext(ctx, err, "syncing "+kind, "key", key)
		queue.AddRateLimited(key)
	case requeue > 0:
		queue.Forget(key)
		queue.AddAfter(key, requeue)
	default:
		queue.Forget(key)
	}
	return true
}
