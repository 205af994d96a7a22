// Package podwatch follows one pod by name, for the benchmarks under tools/ that time a pod's
// restart (estsbench, podburst): the time a state arrived is when the watch delivered it.
package podwatch

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// Until watches pod name in ns from resourceVersion (empty: its current state first, from a
// list) until done says so, and returns the time the watch delivered that state. observe, when
// not nil, gets every event but bookmarks (Deleted ones too: done never sees those) with the
// time it arrived. A watch the server closes is resumed from the last resourceVersion seen;
// the context bounds the whole wait.
func Until(ctx context.Context, client kubernetes.Interface, ns, name, resourceVersion string,
	observe func(time.Time, watch.EventType, *corev1.Pod), done func(*corev1.Pod) (bool, error)) (time.Time, error) {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	if resourceVersion == "" {
		list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return time.Time{}, err
		}
		for i := range list.Items {
			if ok, err := done(&list.Items[i]); err != nil || ok {
				return time.Now(), err
			}
		}
		resourceVersion = list.ResourceVersion
	}
	for {
		w, err := client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: resourceVersion, AllowWatchBookmarks: true})
		if err != nil {
			return time.Time{}, fmt.Errorf("watch pod %s: %w", name, err)
		}
		for ev := range w.ResultChan() {
			now := time.Now()
			if ev.Type == watch.Error {
				w.Stop()
				return time.Time{}, fmt.Errorf("watch pod %s: %v", name, ev.Object)
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			resourceVersion = p.ResourceVersion
			if ev.Type == watch.Bookmark {
				continue
			}
			if observe != nil {
				observe(now, ev.Type, p)
			}
			if ev.Type == watch.Deleted {
				continue
			}
			if ok, err := done(p); err != nil || ok {
				w.Stop()
				return now, err
			}
		}
		if ctx.Err() != nil {
			return time.Time{}, fmt.Errorf("pod %s: %w", name, ctx.Err())
		}
	}
}
