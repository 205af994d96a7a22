// Package integration runs staticip-scheduler's plugins in a real scheduler, in-process,
// against a real kube-apiserver (internal/testenv). There is no kubelet: tests create Nodes
// with capacity, and pods stay bound-but-Pending, which is all a scheduler looks at.
package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/profile"
	"k8s.io/utils/ptr"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/internal/testenv"
	"github.com/staticip/staticip/scheduler-plugins/pkg/checkpodannotation"
	"github.com/staticip/staticip/scheduler-plugins/pkg/podfitsresources"
	"github.com/staticip/staticip/scheduler-plugins/pkg/staticipnode"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Registry is what staticip-scheduler's main registers.
func Registry() frameworkruntime.Registry {
	return frameworkruntime.Registry{
		checkpodannotation.Name: checkpodannotation.New,
		podfitsresources.Name:   podfitsresources.New,
	}
}

// LoadProfiles loads a shipped KubeSchedulerConfiguration with kube-scheduler's loader.
func LoadProfiles(t testing.TB, rel string) []schedconfig.KubeSchedulerProfile {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := options.LoadConfigFromFile(klog.Background(), filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Profiles
}

// RunningScheduler is a scheduler started in this process.
type RunningScheduler struct {
	cancel context.CancelFunc
	done   sync.WaitGroup
	// cache is the plugins' staticIPNode cache of this scheduler.
	cache *staticipnode.Cache
}

// WaitForStaticIP returns once the scheduler's cache holds the StaticIP of pod ns/name. A
// StaticIP and a pod created one after the other reach the scheduler on two independent
// watches: a test that means "the pod's StaticIP pins it" must first see the StaticIP there.
func (s *RunningScheduler) WaitForStaticIP(t testing.TB, ns, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, ok := s.cache.StaticIPForPod(ns, name); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the scheduler's cache never saw the StaticIP of %s/%s", ns, name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop stops the scheduler and waits for it.
func (s *RunningScheduler) Stop() {
	s.cancel()
	s.done.Wait()
}

// StartScheduler builds a scheduler the way kube-scheduler's app.Setup does (informer
// factories, dynamic informers for the CRD events, out-of-tree registry, profiles from the
// config file) and runs it until Stop.
func StartScheduler(t testing.TB, cfg *rest.Config, profiles []schedconfig.KubeSchedulerProfile) *RunningScheduler {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	client := kubernetes.NewForConfigOrDie(cfg)
	informerFactory := scheduler.NewInformerFactory(client, 0)
	dynInformerFactory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dynamic.NewForConfigOrDie(cfg), 0, metav1.NamespaceAll, nil)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	sched, err := scheduler.New(ctx, client, informerFactory, dynInformerFactory, profile.NewRecorderFactory(broadcaster),
		scheduler.WithKubeConfig(cfg),
		scheduler.WithProfiles(profiles...),
		scheduler.WithFrameworkOutOfTreeRegistry(Registry()),
		scheduler.WithPodInitialBackoffSeconds(1),
		scheduler.WithPodMaxBackoffSeconds(1),
	)
	if err != nil {
		cancel()
		t.Fatalf("scheduler.New: %v", err)
	}
	broadcaster.StartRecordingToSink(ctx.Done())
	informerFactory.Start(ctx.Done())
	dynInformerFactory.Start(ctx.Done())
	informerFactory.WaitForCacheSync(ctx.Done())
	dynInformerFactory.WaitForCacheSync(ctx.Done())
	if err := sched.WaitForHandlersSync(ctx); err != nil {
		cancel()
		t.Fatalf("scheduler handlers: %v", err)
	}
	sipCache, err := staticipnode.ForScheduler(ctx, informerFactory, versioned.NewForConfigOrDie(cfg))
	if err != nil {
		cancel()
		t.Fatalf("staticIPNode cache: %v", err)
	}
	s := &RunningScheduler{cancel: cancel, cache: sipCache}
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		sched.Run(ctx)
		broadcaster.Shutdown()
	}()
	return s
}

// fixture holds the clients and cleans up what a test created.
type fixture struct {
	t      *testing.T
	ctx    context.Context
	cfg    *rest.Config
	kube   kubernetes.Interface
	sip    versioned.Interface
	ns     string
	nodes  []string
	ranges []string
}

func newFixture(t *testing.T) *fixture {
	env := testenv.Get(t)
	f := &fixture{t: t, ctx: context.Background(), cfg: env.Config,
		kube: kubernetes.NewForConfigOrDie(env.Config), sip: versioned.NewForConfigOrDie(env.Config),
		ns: "sched-" + strings.ToLower(strings.ReplaceAll(t.Name(), "_", "-"))}
	if len(f.ns) > 56 {
		f.ns = f.ns[:56]
	}
	// A namespace is deleted at the end of each test but nothing here finalizes it (no
	// namespace controller): a suffix lets -count=N create the next one.
	f.ns += "-" + rand.String(5)
	if _, err := f.kube.CoreV1().Namespaces().Create(f.ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.cleanup)
	return f
}

// cleanup removes everything: there is no namespace controller or pod GC in testenv, and
// nodes and ranges are cluster-wide, so the next test must not see them.
func (f *fixture) cleanup() {
	ctx := context.Background()
	_ = f.kube.CoreV1().Pods(f.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
	_ = f.sip.JkeV1().StaticIPs(f.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	for _, r := range f.ranges {
		_ = f.sip.JkeV1().IPRanges().Delete(ctx, r, metav1.DeleteOptions{})
	}
	for _, n := range f.nodes {
		_ = f.kube.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{})
	}
	_ = f.kube.CoreV1().Namespaces().Delete(ctx, f.ns, metav1.DeleteOptions{})
}

func (f *fixture) node(name, cpu string, pods int) {
	f.t.Helper()
	alloc := v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse("16Gi"),
		v1.ResourcePods: *resource.NewQuantity(int64(pods), resource.DecimalSI)}
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: v1.NodeStatus{Capacity: alloc, Allocatable: alloc,
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}
	created, err := f.kube.CoreV1().Nodes().Create(f.ctx, n, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.nodes = append(f.nodes, name)
	// Admission (TaintNodesByCondition) taints a new node not-ready until a node lifecycle
	// controller sees it Ready; there is none here, so lift the taint as it would.
	created.Spec.Taints = nil
	if _, err := f.kube.CoreV1().Nodes().Update(f.ctx, created, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) ipRange(name, cidr, node string) {
	f.t.Helper()
	r := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: jkev1.IPRangeSpec{CIDR: cidr, Node: node}}
	if _, err := f.sip.JkeV1().IPRanges().Create(f.ctx, r, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.ranges = append(f.ranges, name)
}

func (f *fixture) staticIP(name, node, ip, cpu string) *jkev1.StaticIP {
	f.t.Helper()
	s := &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec: jkev1.StaticIPSpec{Node: node, IP: ip, Pod: name, Resources: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}}}
	out, err := f.sip.JkeV1().StaticIPs(f.ns).Create(f.ctx, s, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

func (f *fixture) pod(name, cpu, ip string) {
	f.t.Helper()
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}}}}}}
	if ip != "" {
		p.Annotations = map[string]string{podip.AnnotationIPAddress: ip}
	}
	if _, err := f.kube.CoreV1().Pods(f.ns).Create(f.ctx, p, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// deletePod deletes a pod at once (no kubelet will ever confirm a graceful deletion) and
// waits until it is gone.
func (f *fixture) deletePod(name string) {
	f.t.Helper()
	if err := f.kube.CoreV1().Pods(f.ns).Delete(f.ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		f.t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(f.ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := f.kube.CoreV1().Pods(f.ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		f.t.Fatalf("pod %s not gone: %v", name, err)
	}
}

// waitScheduled waits until the pod is bound and returns its node.
func (f *fixture) waitScheduled(name string) string {
	f.t.Helper()
	var node, last string
	err := wait.PollUntilContextTimeout(f.ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := f.kube.CoreV1().Pods(f.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = schedulingMessage(p)
		node = p.Spec.NodeName
		return node != "", nil
	})
	if err != nil {
		f.t.Fatalf("pod %s not scheduled: %v (last PodScheduled message: %q)", name, err, last)
	}
	return node
}

// waitUnschedulable waits until the scheduler reports the pod unschedulable with a message
// containing want, and checks that it is still not bound.
func (f *fixture) waitUnschedulable(name, want string) string {
	f.t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(f.ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := f.kube.CoreV1().Pods(f.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("pod %s was bound to %s, want it unschedulable (%q)", name, p.Spec.NodeName, want)
		}
		last = schedulingMessage(p)
		return strings.Contains(last, want), nil
	})
	if err != nil {
		f.t.Fatalf("pod %s: %v (last PodScheduled message: %q, want it to contain %q)", name, err, last, want)
	}
	return last
}

func schedulingMessage(p *v1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodScheduled {
			return c.Reason + ": " + c.Message
		}
	}
	return ""
}

const replaceDefault = "manifests/scheduler/replace-default/scheduler-config.yaml"

// TestDeletedStaticIPPodKeepsItsPlace: a static-IP pod is deleted; other pods cannot take
// its resources on its node, not even after a scheduler restart; the recreated pod lands
// on the same node.
func TestDeletedStaticIPPodKeepsItsPlace(t *testing.T) {
	f := newFixture(t)
	profiles := LoadProfiles(t, replaceDefault)
	f.node("sched-keep-n1", "4", 110)
	f.node("sched-keep-n2", "4", 110)
	f.ipRange("sched-keep-r1", "10.61.1.0/24", "sched-keep-n1")
	f.ipRange("sched-keep-r2", "10.61.2.0/24", "sched-keep-n2")
	sched := StartScheduler(t, f.cfg, profiles)
	defer func() { sched.Stop() }()

	f.staticIP("web-0", "sched-keep-n1", "10.61.1.5", "3")
	f.pod("web-0", "3", "10.61.1.5")
	if got := f.waitScheduled("web-0"); got != "sched-keep-n1" {
		t.Fatalf("web-0 on %s, want sched-keep-n1 (its StaticIP's node)", got)
	}
	f.deletePod("web-0")

	// n1 has 4 free cores, 3 of them held for web-0: a 3-core pod must go to n2, the next
	// one nowhere.
	f.pod("filler-a", "3", "")
	if got := f.waitScheduled("filler-a"); got != "sched-keep-n2" {
		t.Fatalf("filler-a on %s, want sched-keep-n2: n1's cores are reserved for web-0", got)
	}
	f.pod("filler-b", "3", "")
	msg := f.waitUnschedulable("filler-b", "Insufficient cpu: 3 of 4 cores reserved for absent static-IP pods")
	t.Logf("filler-b: %s", msg)

	// Restart: the new scheduler rebuilds the cache from the informers and decides the same.
	sched.Stop()
	sched = StartScheduler(t, f.cfg, profiles)
	f.pod("filler-c", "3", "")
	msg = f.waitUnschedulable("filler-c", "Insufficient cpu: 3 of 4 cores reserved for absent static-IP pods")
	t.Logf("after restart, filler-c: %s", msg)

	f.pod("web-0", "3", "10.61.1.5")
	if got := f.waitScheduled("web-0"); got != "sched-keep-n1" {
		t.Fatalf("recreated web-0 on %s, want sched-keep-n1", got)
	}
	for _, p := range []string{"filler-b", "filler-c"} {
		got, err := f.kube.CoreV1().Pods(f.ns).Get(f.ctx, p, metav1.GetOptions{})
		if err != nil || got.Spec.NodeName != "" {
			t.Fatalf("%s: %v, bound to %q; want still pending", p, err, got.Spec.NodeName)
		}
	}
}

// TestPinnedByIP: a pod goes only to the node owning its IP (by IPRange for an annotated
// IP, by StaticIP otherwise), even when the other node is emptier.
func TestPinnedByIP(t *testing.T) {
	f := newFixture(t)
	f.node("sched-pin-n1", "8", 110)
	f.node("sched-pin-n2", "64", 110)
	f.ipRange("sched-pin-r1", "10.62.1.0/24", "sched-pin-n1")
	f.ipRange("sched-pin-r2", "10.62.2.0/24", "sched-pin-n2")
	sched := StartScheduler(t, f.cfg, LoadProfiles(t, replaceDefault))
	defer sched.Stop()

	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("by-ip-%d", i)
		f.pod(name, "1", fmt.Sprintf("10.62.1.%d", 10+i))
		if got := f.waitScheduled(name); got != "sched-pin-n1" {
			t.Fatalf("%s on %s, want sched-pin-n1 (owner of 10.62.1.0/24)", name, got)
		}
	}
	f.staticIP("by-sip", "sched-pin-n1", "", "1")
	sched.WaitForStaticIP(t, f.ns, "by-sip")
	f.pod("by-sip", "1", "")
	if got := f.waitScheduled("by-sip"); got != "sched-pin-n1" {
		t.Fatalf("by-sip on %s, want sched-pin-n1 (its StaticIP's node)", got)
	}
	f.pod("unknown-ip", "1", "192.0.2.1")
	f.waitUnschedulable("unknown-ip", "the pod's IP 192.0.2.1 (annotation staticip.jke.jdcloud.com/ip-address) lies in no IPRange")

	// The range appears on n2: the pod is retried (IPRange event) and goes there.
	f.ipRange("sched-pin-r3", "192.0.2.0/24", "sched-pin-n2")
	if got := f.waitScheduled("unknown-ip"); got != "sched-pin-n2" {
		t.Fatalf("unknown-ip on %s, want sched-pin-n2", got)
	}

	f.pod("missing-node", "1", "")
	f.deletePod("missing-node")
	f.staticIP("missing-node", "sched-pin-gone", "10.62.9.9", "1")
	sched.WaitForStaticIP(t, f.ns, "missing-node")
	f.pod("missing-node", "1", "10.62.9.9")
	f.waitUnschedulable("missing-node", "the pod's IP 10.62.9.9 (StaticIP "+f.ns+"/missing-node) is held by node sched-pin-gone, which does not exist")
}

// TestExhaustedRangesRequeue: with no IP left the pod waits; a pod leaving the node, or
// the range growing, lets it in without waiting for a periodic flush.
func TestExhaustedRangesRequeue(t *testing.T) {
	f := newFixture(t)
	f.node("sched-ip-n1", "64", 110)
	f.ipRange("sched-ip-r1", "10.63.1.0/30", "sched-ip-n1") // 2 usable addresses
	sched := StartScheduler(t, f.cfg, LoadProfiles(t, replaceDefault))
	defer sched.Stop()

	f.pod("a", "100m", "")
	f.pod("b", "100m", "")
	f.waitScheduled("a")
	f.waitScheduled("b")
	f.pod("c", "100m", "")
	f.waitUnschedulable("c", "no free IP in node's ranges 10.63.1.0/30 (2 usable: 2 used by pods, 0 reserved for absent static-IP pods)")

	f.deletePod("a")
	if got := f.waitScheduled("c"); got != "sched-ip-n1" {
		t.Fatalf("c on %s", got)
	}

	f.pod("d", "100m", "")
	f.waitUnschedulable("d", "no free IP in node's ranges 10.63.1.0/30")
	r, err := f.sip.JkeV1().IPRanges().Get(f.ctx, "sched-ip-r1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.Spec.CIDR = "10.63.1.0/29"
	if _, err := f.sip.JkeV1().IPRanges().Update(f.ctx, r, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := f.waitScheduled("d"); got != "sched-ip-n1" {
		t.Fatalf("d on %s", got)
	}

	// A StaticIP released frees its address too.
	f.staticIP("held", "sched-ip-n1", "10.63.1.6", "100m")
	for _, p := range []string{"e", "f", "g"} {
		f.pod(p, "100m", "")
	}
	// 6 usable: b, c, d + e, f use 5 with "held" reserved; g has no IP.
	f.waitScheduled("e")
	f.waitScheduled("f")
	f.waitUnschedulable("g", "no free IP in node's ranges 10.63.1.0/29 (6 usable: 5 used by pods, 1 reserved for absent static-IP pods: StaticIP "+f.ns+"/held)")
	if err := f.sip.JkeV1().StaticIPs(f.ns).Delete(f.ctx, "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitScheduled("g")
}

// TestMalformedAnnotation: a clear reason, no panic, and the scheduler keeps working.
func TestMalformedAnnotation(t *testing.T) {
	f := newFixture(t)
	f.node("sched-bad-n1", "8", 110)
	sched := StartScheduler(t, f.cfg, LoadProfiles(t, replaceDefault))
	defer sched.Stop()

	f.pod("bad", "100m", "10.0.0.256")
	f.waitUnschedulable("bad", `invalid annotation staticip.jke.jdcloud.com/ip-address="10.0.0.256": not an IP address`)
	f.pod("good", "100m", "")
	if got := f.waitScheduled("good"); got != "sched-bad-n1" {
		t.Fatalf("good on %s", got)
	}
}
