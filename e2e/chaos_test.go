//go:build e2e

package e2e

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/e2e/framework"
)

const (
	chaosReplicas       = 30
	chaosMaxUnavailable = 10
	chaosRounds         = 3
	apiServerDowntime   = 20 * time.Second
	chaosRoundTimeout   = 8 * time.Minute
)

// TestNoDuplicateIPUnderChaos: 3 rounds of rolling a 30-replica static-IP EnhancedStatefulSet
// (ReCreate, 10 at a time: every pod is deleted and recreated with its IP each round) while
// every staticip-agent is restarted (pods deleted, or their containers SIGKILLed) and the API
// server is stopped for 20 s mid-rollout. A watcher checks after every pod event, on the
// state as of that event: no two Running pods (of any namespace) share an IP, and every
// StaticIP's IP is held by its own pod or by nobody. On the local cluster or kind (it stops
// the API server's processes on this machine); skips elsewhere.
// chaosOnKind: the chaos test works on kind (StopAPIServer and CrashContainer reach the
// nodes' processes) but is the suite's longest; make e2e-kind passes it with E2E_KIND_CHAOS=1.
var chaosOnKind = flag.Bool("chaos-on-kind", false, "run TestNoDuplicateIPUnderChaos on a kind cluster too")

func TestNoDuplicateIPUnderChaos(t *testing.T) {
	requireManager(t)
	requireAgents(t)
	if typ, what, err := f.ClusterType(context.Background()); err == nil && typ == framework.KindCluster && !*chaosOnKind {
		t.Skipf("SKIP: on kind only with -chaos-on-kind (E2E_KIND_CHAOS=1 make e2e-kind): make test runs it on the local cluster already, and on this %s its 3 rounds took 4-6 min each (tools/kind/README.md, Times)", what)
	}
	resume, ok, err := f.StopAPIServer()
	if !ok {
		t.Skip("SKIP: neither a local cluster nor kind nodes of this machine: the API server process cannot be stopped from here")
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := resume(); err != nil { // only proving we can; the rounds stop it for real
		t.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	ns := f.Namespace(t, "e2e-chaos")
	cs := versioned.NewForConfigOrDie(f.Config)
	w := startIPWatcher(t, ns, cs)
	const name = "chaos"

	labels := map[string]string{"app": name}
	spec := testServerPod("", "", nil).Spec
	spec.NodeSelector = nil
	spec.Containers[0].Image = testServerImage
	spec.Containers[0].ImagePullPolicy = corev1.PullNever
	spec.Containers[0].ReadinessProbe.TimeoutSeconds = 2
	spec.Containers[0].Resources = corev1.ResourceRequirements{} // 30 pods on 3 small nodes
	spec.TerminationGracePeriodSeconds = ptr(int64(1))
	maxUnavailable := intstr.FromInt32(chaosMaxUnavailable)
	set := &jkev1alpha1.EnhancedStatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{jkev1.AnnotationEnable: "true"}},
		Spec: jkev1alpha1.EnhancedStatefulSetSpec{
			Replicas:            ptr(int32(chaosReplicas)),
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			ServiceName:         name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template:            corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
			UpdateStrategy: jkev1alpha1.EnhancedStatefulSetUpdateStrategy{
				Type: appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &jkev1alpha1.RollingUpdateEnhancedStatefulSetStrategy{
					MaxUnavailable: &maxUnavailable, PodUpdatePolicy: jkev1alpha1.RecreatePodUpdatePolicy,
				},
			},
		},
	}
	if _, err := cs.JkeV1alpha1().EnhancedStatefulSets(ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e := &estsTest{t: t, ns: ns, name: name, cs: cs}
	rev := e.observed(ctx).Status.UpdateRevision
	chaosSettled(t, ctx, e, rev, "30 pods Ready")
	t.Logf("30 pods up in %.1fs", time.Since(start).Seconds())

	images := []string{testServerV2Image, testServerImage}
	for round := 1; round <= chaosRounds; round++ {
		t0 := time.Now()
		e.patchTemplateImage(ctx, images[(round-1)%2])
		newRev := e.observed(ctx).Status.UpdateRevision
		// Mid-rollout: once the first pods are being replaced.
		if err := framework.WaitFor(ctx, 2*time.Minute, "the rollout under way", func(ctx context.Context) (bool, error) {
			return w.replaced(rev) >= chaosMaxUnavailable/2, nil
		}); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		how := restartAgents(t, ctx, round%2 == 1)
		resume, _, err := f.StopAPIServer()
		if err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		cont := func() {
			once.Do(func() {
				if err := resume(); err != nil {
					t.Errorf("SIGCONT kube-apiserver: %v", err)
				}
			})
		}
		t.Cleanup(cont) // never leave the cluster's API server stopped
		time.Sleep(apiServerDowntime)
		cont()
		chaosSettled(t, ctx, e, newRev, fmt.Sprintf("round %d: 30 pods Ready at the new revision", round))
		rev = newRev
		t.Logf("round %d: agents %s, API server stopped %s; rollout done in %.1fs; %d pod events checked so far",
			round, how, apiServerDowntime, time.Since(t0).Seconds(), w.checked())
		if v := w.violations(); len(v) > 0 {
			t.Fatalf("round %d: %d invariant violations, first: %s", round, len(v), strings.Join(v[:min(len(v), 5)], "\n"))
		}
	}
	// Every pod still has the IP its StaticIP records.
	pods, err := e.pods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for pname, p := range pods {
		sip, err := cs.JkeV1().StaticIPs(ns).Get(ctx, pname, metav1.GetOptions{})
		if err != nil {
			t.Errorf("StaticIP %s: %v", pname, err)
		} else if sip.Spec.IP != p.Status.PodIP {
			t.Errorf("pod %s runs with %s, its StaticIP records %s", pname, p.Status.PodIP, sip.Spec.IP)
		}
	}
	t.Logf("%d pod events checked, %d StaticIP events; no two Running pods shared an IP, no StaticIP's IP held by another pod; %.1fs in all",
		w.checked(), w.sipEvents(), time.Since(start).Seconds())
}

// chaosSettled waits until every ordinal runs Ready at rev.
func chaosSettled(t *testing.T, ctx context.Context, e *estsTest, rev, what string) {
	t.Helper()
	err := framework.WaitFor(ctx, chaosRoundTimeout, what, func(ctx context.Context) (bool, error) {
		ps, err := e.pods(ctx)
		if err != nil {
			return false, err
		}
		n := 0
		for _, p := range ps {
			if p.DeletionTimestamp == nil && framework.PodReady(p) && revisionOf(p) == rev {
				n++
			}
		}
		return n == chaosReplicas, nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, e.describe(ctx))
	}
}

// requireAgents skips when kube-system/staticip-agent does not run.
func requireAgents(t *testing.T) {
	t.Helper()
	if _, err := f.Client.AppsV1().DaemonSets("kube-system").Get(context.Background(), "staticip-agent", metav1.GetOptions{}); err != nil {
		t.Skipf("no kube-system/staticip-agent on this cluster: %v", err)
	}
}

// restartAgents restarts every staticip-agent: by deleting its pod (a new pod, a new
// service-account token, a fresh start) or by SIGKILLing its container (the kubelet restarts
// it in place). It returns what it did.
func restartAgents(t *testing.T, ctx context.Context, deletePods bool) string {
	t.Helper()
	pods, err := f.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=staticip-agent"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if deletePods {
			if err := f.Client.CoreV1().Pods("kube-system").Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, ok, err := f.CrashContainer(ctx, p, "agent"); !ok || err != nil {
			t.Fatalf("crash agent %s: ok=%v %v", p.Name, ok, err)
		}
	}
	if deletePods {
		return fmt.Sprintf("%d pods deleted", len(pods.Items))
	}
	return fmt.Sprintf("%d containers SIGKILLed", len(pods.Items))
}

// ipWatcher follows every pod of the cluster and the StaticIPs of one namespace through
// watches that resume where they stopped (also across the API server's stop), and checks the
// invariants after every pod event on the state as of that event.
type ipWatcher struct {
	ns string

	mu      sync.Mutex
	pods    map[string]*corev1.Pod // namespace/name
	sips    map[string]*jkev1.StaticIP
	events  int
	sipEvts int
	// deleted counts, per revision, the test namespace's pods of that revision deleted.
	deleted map[string]int
	errs    []string
}

func startIPWatcher(t *testing.T, ns string, cs versioned.Interface) *ipWatcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := &ipWatcher{ns: ns, pods: map[string]*corev1.Pod{}, sips: map[string]*jkev1.StaticIP{}, deleted: map[string]int{}}
	pods, err := f.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		w.pods[p.Namespace+"/"+p.Name] = p
	}
	podWatch, err := watchtools.NewRetryWatcherWithContext(ctx, pods.ResourceVersion, &cache.ListWatch{
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) { return f.Client.CoreV1().Pods("").Watch(ctx, o) },
	})
	if err != nil {
		t.Fatal(err)
	}
	sips, err := cs.JkeV1().StaticIPs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sipWatch, err := watchtools.NewRetryWatcherWithContext(ctx, sips.ResourceVersion, &cache.ListWatch{
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) { return cs.JkeV1().StaticIPs(ns).Watch(ctx, o) },
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ev := range podWatch.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				if ev.Type == watch.Error {
					w.fail(fmt.Sprintf("pod watch error: %v", ev.Object))
				}
				continue
			}
			w.mu.Lock()
			key := p.Namespace + "/" + p.Name
			if ev.Type == watch.Deleted {
				if p.Namespace == ns {
					w.deleted[revisionOf(p)]++
				}
				delete(w.pods, key)
			} else {
				w.pods[key] = p
			}
			w.events++
			w.check(fmt.Sprintf("after event %d (%s %s)", w.events, ev.Type, key))
			w.mu.Unlock()
		}
	}()
	go func() {
		for ev := range sipWatch.ResultChan() {
			s, ok := ev.Object.(*jkev1.StaticIP)
			if !ok {
				continue
			}
			w.mu.Lock()
			if ev.Type == watch.Deleted {
				delete(w.sips, s.Name)
			} else {
				w.sips[s.Name] = s
			}
			w.sipEvts++
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *ipWatcher) fail(msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs = append(w.errs, msg)
}

// check is called with mu held.
func (w *ipWatcher) check(when string) {
	holders := map[string][]string{} // IP -> Running pods
	for key, p := range w.pods {
		if p.Spec.HostNetwork || p.Status.PodIP == "" || p.Status.Phase != corev1.PodRunning {
			continue
		}
		holders[p.Status.PodIP] = append(holders[p.Status.PodIP], key)
	}
	for ip, keys := range holders {
		if len(keys) > 1 {
			sort.Strings(keys)
			w.errs = append(w.errs, fmt.Sprintf("%s: IP %s held by %d Running pods: %s", when, ip, len(keys), strings.Join(keys, ", ")))
		}
	}
	for _, s := range w.sips {
		if s.Spec.IP == "" {
			continue
		}
		own := s.Spec.Pod
		if own == "" {
			own = s.Name
		}
		for _, key := range holders[s.Spec.IP] {
			if key != w.ns+"/"+own {
				w.errs = append(w.errs, fmt.Sprintf("%s: StaticIP %s/%s's IP %s is held by pod %s", when, w.ns, s.Name, s.Spec.IP, key))
			}
		}
	}
}

func (w *ipWatcher) checked() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.events
}

func (w *ipWatcher) sipEvents() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sipEvts
}

func (w *ipWatcher) replaced(rev string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deleted[rev]
}

func (w *ipWatcher) violations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.errs...)
}

// TestIPWatcherDetectsViolations: the chaos test's checker, on made-up states, reports both
// kinds of violation and nothing else (no cluster needed).
func TestIPWatcherDetectsViolations(t *testing.T) {
	pod := func(ns, name, ip string, phase corev1.PodPhase, hostNetwork bool) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{HostNetwork: hostNetwork}, Status: corev1.PodStatus{Phase: phase, PodIP: ip}}
	}
	sip := func(name, ip string) *jkev1.StaticIP {
		return &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: name}, Spec: jkev1.StaticIPSpec{IP: ip, Pod: name}}
	}
	for _, c := range []struct {
		name string
		pods []*corev1.Pod
		sips []*jkev1.StaticIP
		want []string
	}{
		{"fine", []*corev1.Pod{pod("t", "a", "10.0.0.1", corev1.PodRunning, false), pod("t", "b", "10.0.0.2", corev1.PodRunning, false),
			pod("t", "old", "10.0.0.1", corev1.PodFailed, false), pod("kube-system", "agent", "10.0.0.2", corev1.PodRunning, true)},
			[]*jkev1.StaticIP{sip("a", "10.0.0.1"), sip("gone", "10.0.0.9")}, nil},
		{"two Running pods share an IP", []*corev1.Pod{pod("t", "a", "10.0.0.1", corev1.PodRunning, false), pod("u", "x", "10.0.0.1", corev1.PodRunning, false)},
			nil, []string{"IP 10.0.0.1 held by 2 Running pods: t/a, u/x"}},
		{"a StaticIP's IP held by another pod", []*corev1.Pod{pod("t", "b", "10.0.0.1", corev1.PodRunning, false)},
			[]*jkev1.StaticIP{sip("a", "10.0.0.1")}, []string{"StaticIP t/a's IP 10.0.0.1 is held by pod t/b"}},
	} {
		w := &ipWatcher{ns: "t", pods: map[string]*corev1.Pod{}, sips: map[string]*jkev1.StaticIP{}}
		for _, p := range c.pods {
			w.pods[p.Namespace+"/"+p.Name] = p
		}
		for _, s := range c.sips {
			w.sips[s.Name] = s
		}
		w.check("now")
		if len(w.errs) != len(c.want) {
			t.Errorf("%s: got %q, want %q", c.name, w.errs, c.want)
			continue
		}
		for i := range c.want {
			if !strings.Contains(w.errs[i], c.want[i]) {
				t.Errorf("%s: got %q, want %q", c.name, w.errs[i], c.want[i])
			}
		}
	}
}
