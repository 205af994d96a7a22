package framework

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// AvailabilityMonitor follows a namespace's pods through one watch and, after every single
// event, counts how many of a fixed set of pod names are unavailable: missing, terminating
// or not Ready. The count is computed on the state as of each event, in the API server's
// order, so "never more than N unavailable" is checked exactly, not sampled.
type AvailabilityMonitor struct {
	names []string
	limit int

	mu         sync.Mutex
	pods       map[string]*corev1.Pod
	events     int
	armed      bool
	peak       int // highest count since Arm or ResetPeak
	violations []string
	ips        map[string]string // pod name -> the only IP it may have (ExpectIPs)
	ipErrors   []string
	done       chan struct{}
}

// MonitorAvailability starts watching ns. Counting against limit starts with Arm (before
// that the pods are still coming up); the watch ends with the test.
func (f *Framework) MonitorAvailability(t *testing.T, ns string, names []string, limit int) *AvailabilityMonitor {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m := &AvailabilityMonitor{names: names, limit: limit, pods: map[string]*corev1.Pod{}, done: make(chan struct{})}
	list, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		t.Fatalf("list pods: %v", err)
	}
	for i := range list.Items {
		m.pods[list.Items[i].Name] = &list.Items[i]
	}
	// RetryWatcher resumes from the last resourceVersion it saw when the watch is closed,
	// so no event is lost for the whole test.
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			return f.Client.CoreV1().Pods(ns).Watch(ctx, o)
		},
	})
	if err != nil {
		cancel()
		t.Fatalf("watch pods: %v", err)
	}
	go func() {
		defer close(m.done)
		for ev := range w.ResultChan() {
			m.observe(ev)
		}
	}()
	t.Cleanup(func() {
		cancel()
		w.Stop()
		<-m.done
	})
	return m
}

func (m *AvailabilityMonitor) observe(ev watch.Event) {
	pod, ok := ev.Object.(*corev1.Pod)
	if !ok {
		return // a bookmark or an error status; RetryWatcher handles those
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events++
	if ev.Type == watch.Deleted {
		delete(m.pods, pod.Name)
	} else {
		m.pods[pod.Name] = pod
	}
	if want, ok := m.ips[pod.Name]; ok && ev.Type != watch.Deleted && pod.Status.PodIP != "" && pod.Status.PodIP != want {
		m.ipErrors = append(m.ipErrors, fmt.Sprintf("%s: event %d (%s %s, UID %s): IP %s, want %s",
			time.Now().Format("15:04:05.000"), m.events, ev.Type, pod.Name, pod.UID, pod.Status.PodIP, want))
	}
	if !m.armed {
		return
	}
	down := m.unavailableLocked()
	if len(down) > m.peak {
		m.peak = len(down)
	}
	if len(down) > m.limit {
		m.violations = append(m.violations, fmt.Sprintf("%s: after event %d (%s %s) %d unavailable > %d: %s",
			time.Now().Format("15:04:05.000"), m.events, ev.Type, pod.Name, len(down), m.limit, strings.Join(down, ", ")))
	}
}

// unavailableLocked names the watched pods that are missing, terminating or not Ready.
func (m *AvailabilityMonitor) unavailableLocked() []string {
	var down []string
	for _, name := range m.names {
		p := m.pods[name]
		switch {
		case p == nil:
			down = append(down, name+" (missing)")
		case p.DeletionTimestamp != nil:
			down = append(down, name+" (terminating)")
		case !PodReady(p):
			down = append(down, name+" (not ready)")
		}
	}
	return down
}

// armLag bounds how long Arm waits for the monitor's watch to deliver what the phase before
// it saw through a LIST: the watch may be a moment behind (a pod Ready in the LIST, not yet in
// the watch), and that lag is not unavailability.
const armLag = 10 * time.Second

// Arm starts counting against the limit; it fails the test if the pods are not all available
// in the monitor's own view within armLag (the phase before Arm must have waited for that).
func (m *AvailabilityMonitor) Arm(t *testing.T) {
	t.Helper()
	var down []string
	for deadline := time.Now().Add(armLag); ; time.Sleep(100 * time.Millisecond) {
		m.mu.Lock()
		if down = m.unavailableLocked(); len(down) == 0 || time.Now().After(deadline) {
			m.armed = true
			m.peak = 0
			m.mu.Unlock()
			break
		}
		m.mu.Unlock()
	}
	if len(down) > 0 {
		t.Fatalf("availability monitor armed with pods unavailable (after %s for its watch to catch up): %s", armLag, strings.Join(down, ", "))
	}
}

// ExpectIPs makes every later event of these pods (name -> IP) a check that the pod, whichever
// incarnation of it, has no other IP.
func (m *AvailabilityMonitor) ExpectIPs(ips map[string]string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ips = maps.Clone(ips)
}

// IPErrors lists every event where a pod had another IP than ExpectIPs gave it.
func (m *AvailabilityMonitor) IPErrors() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.ipErrors)
}

// ResetPeak starts a new phase for Peak.
func (m *AvailabilityMonitor) ResetPeak() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.peak = 0
}

// Peak is the highest unavailable count seen since Arm or ResetPeak.
func (m *AvailabilityMonitor) Peak() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak
}

// Events is the number of pod events seen so far.
func (m *AvailabilityMonitor) Events() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.events
}

// Violations lists every moment the limit was exceeded.
func (m *AvailabilityMonitor) Violations() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.violations)
}

// Check fails the test, naming each moment, if the limit was ever exceeded.
func (m *AvailabilityMonitor) Check(t *testing.T, phase string) {
	t.Helper()
	if v := m.Violations(); len(v) > 0 {
		t.Fatalf("%s: more than %d pods unavailable:\n%s", phase, m.limit, strings.Join(v, "\n"))
	}
}

// PodReady reports the pod's Ready condition.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
