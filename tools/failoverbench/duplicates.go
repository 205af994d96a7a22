package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// HeldTwice lists, "IP: ns/a, ns/b", every pod IP held by more than one pod that may still use
// it: not on the host network, not Succeeded or Failed. A pod being deleted still counts (its
// sandbox may still run) — exactly the pod objects failover must wait for or remove.
func HeldTwice(pods map[types.UID]*corev1.Pod) []string {
	by := map[string][]string{}
	for _, p := range pods {
		if p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, ip := range p.Status.PodIPs {
			by[ip.IP] = append(by[ip.IP], p.Namespace+"/"+p.Name)
		}
	}
	var out []string
	for ip, holders := range by {
		if len(holders) > 1 {
			sort.Strings(holders)
			out = append(out, ip+": "+strings.Join(holders, ", "))
		}
	}
	sort.Strings(out)
	return out
}

// duplicateWatcher checks HeldTwice at every pod event of the cluster.
type duplicateWatcher struct {
	kube   kubernetes.Interface
	mu     sync.Mutex
	pods   map[types.UID]*corev1.Pod
	events int
	seen   map[string]bool
	dups   []string
}

func newDuplicateWatcher(kube kubernetes.Interface) *duplicateWatcher {
	return &duplicateWatcher{kube: kube, pods: map[types.UID]*corev1.Pod{}, seen: map[string]bool{}}
}

// run lists every pod, then watches until ctx ends; a watch that ends early is resumed.
func (w *duplicateWatcher) run(ctx context.Context) error {
	list, err := w.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range list.Items {
		w.apply(watch.Added, &list.Items[i])
	}
	rv := list.ResourceVersion
	for ctx.Err() == nil {
		wi, err := w.kube.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for ev := range wi.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			rv = p.ResourceVersion
			if ev.Type != watch.Bookmark {
				w.apply(ev.Type, p)
			}
		}
		wi.Stop()
	}
	return nil
}

func (w *duplicateWatcher) apply(t watch.EventType, p *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events++
	if t == watch.Deleted {
		delete(w.pods, p.UID)
		return
	}
	w.pods[p.UID] = p
	for _, d := range HeldTwice(w.pods) {
		if !w.seen[d] {
			w.seen[d] = true
			w.dups = append(w.dups, fmt.Sprintf("%s (event %d, %s of %s/%s)", d, w.events, t, p.Namespace, p.Name))
		}
	}
}

func (w *duplicateWatcher) result() (int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.events, append([]string(nil), w.dups...)
}

// DuplicateCount adds up the duplicates every round saw.
func DuplicateCount(rounds []Round) int {
	n := 0
	for _, r := range rounds {
		n += len(r.Duplicates)
	}
	return n
}
