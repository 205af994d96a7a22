package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/manager"
	"github.com/staticip/staticip/controllers/pkg/nodefailover"
)

// The node failover tests simulate nodes: Node objects whose Ready condition the test sets,
// agents (a loop that reports an IPRange Synced for its owner and writes each Ready node's
// ipranges-observed annotation), pod GC (the test deletes the failed node's pods) and the
// workload controller + kubelet (the test creates the moved pods Running on the target).
// Nodes, ranges and records are cluster-wide: every name carries the test's namespace and
// everything is deleted at the end, so tests never see each other's objects.

var failoverSubnets atomic.Int32

type failoverEnv struct {
	*fixture
	zone string
	net  int // 10.<net>.0.0/16 holds this test's ranges

	mu          sync.Mutex
	holdSync    map[string]bool // node -> its agent does not report ranges Synced
	holdRoutes  bool            // no agent writes ipranges-observed
	stopManager func()
	managerCfg  *rest.Config           // the manager's identity (default: the test's admin)
	options     func(*manager.Options) // more manager flags (default: none)
}

func newFailoverEnv(t *testing.T) *failoverEnv {
	e := &failoverEnv{fixture: newFixture(t), zone: "", net: 150 + int(failoverSubnets.Add(1)), holdSync: map[string]bool{}}
	e.zone = "zone-" + e.ns
	t.Cleanup(e.cleanup)
	go e.agents()
	return e
}

func (e *failoverEnv) name(n string) string { return e.ns + "-" + n }

func (e *failoverEnv) cleanup() {
	ctx := context.Background()
	if e.stopManager != nil {
		e.stopManager()
	}
	ranges, _ := e.client.JkeV1().IPRanges().List(ctx, metav1.ListOptions{})
	for _, r := range ranges.Items {
		if strings.HasPrefix(r.Name, e.ns) {
			_ = e.client.JkeV1().IPRanges().Delete(ctx, r.Name, metav1.DeleteOptions{})
		}
	}
	recs, _ := e.client.JkeV1alpha1().NodeFailovers().List(ctx, metav1.ListOptions{})
	for _, r := range recs.Items {
		if strings.HasPrefix(r.Name, e.ns) {
			// The manager is stopped: nobody else removes the finalizer.
			_, _ = e.client.JkeV1alpha1().NodeFailovers().Patch(ctx, r.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			_ = e.client.JkeV1alpha1().NodeFailovers().Delete(ctx, r.Name, metav1.DeleteOptions{})
		}
	}
	nodes, _ := e.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	for _, n := range nodes.Items {
		if strings.HasPrefix(n.Name, e.ns) {
			_ = e.kube.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{})
		}
	}
}

// startFailover runs a manager with only the nodefailover controller; the returned func stops
// it and waits (a "restart" is stop + start).
func (e *failoverEnv) startFailover(window time.Duration) func() {
	o := manager.NewOptions()
	o.LeaderElect = false
	o.Serving.MetricsBindAddress, o.Serving.HealthBindAddress = "0", "0"
	o.Controllers = []string{nodefailover.Name}
	o.NodeFailoverWindow = window
	// The tests play pod GC themselves (podGC); a pod left on a fenced node is force-deleted
	// by the controller only where a test asks for it (TestNodeFailoverPodsThatNeverLeave).
	o.FencedPodDeletionGrace = time.Hour
	if e.options != nil {
		e.options(o)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	cfg := e.cfg
	if e.managerCfg != nil {
		cfg = e.managerCfg
	}
	go func() { done <- manager.Run(ctx, o, cfg) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				e.t.Errorf("manager: %v", err)
			}
		})
	}
	e.stopManager = stop
	return stop
}

func (e *failoverEnv) restart(window time.Duration) {
	e.t.Helper()
	e.eventsSettled()
	e.stopManager()
	e.startFailover(window)
}

// eventsSettled waits (up to 15 s) until the Events about this test's objects have not
// changed for a second. Events are written asynchronously and best effort: one not yet sent
// when a manager stops is lost with it (client-go's recorder), so a restart right after a step
// could take that step's Event along and fail a later check of the reasons for no fault of
// the controller (a CI run: "no Completed Event yet").
func (e *failoverEnv) eventsSettled() {
	e.t.Helper()
	last, stableSince := "", time.Now()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		list, err := e.kube.CoreV1().Events("").List(e.ctx, metav1.ListOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		var b strings.Builder
		for _, ev := range list.Items {
			if strings.HasPrefix(ev.InvolvedObject.Name, e.ns) || ev.InvolvedObject.Namespace == e.ns {
				fmt.Fprintf(&b, "%s/%s/%d;", ev.Name, ev.Reason, ev.Count)
			}
		}
		if b.String() != last {
			last, stableSince = b.String(), time.Now()
		} else if time.Since(stableSince) >= time.Second {
			return
		}
	}
}

type nodeOpt func(*corev1.Node)

func spare(n *corev1.Node) {
	n.Labels[jkev1alpha1.LabelSpare] = "true"
	n.Spec.Taints = append(n.Spec.Taints, nodefailover.SpareTaint)
}

func withCPU(cpu string) nodeOpt {
	return func(n *corev1.Node) {
		n.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse(cpu)
		n.Status.Capacity[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
}

func inZone(zone string) nodeOpt {
	return func(n *corev1.Node) { n.Labels[nodefailover.LabelZone] = zone }
}

// addNode creates a Ready node in the test's zone.
func (e *failoverEnv) addNode(short string, opts ...nodeOpt) {
	e.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.name(short), Labels: map[string]string{nodefailover.LabelZone: e.zone}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")},
			Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")},
		}}
	for _, o := range opts {
		o(n)
	}
	st, taints := n.Status, n.Spec.Taints
	created, err := e.kube.CoreV1().Nodes().Create(e.ctx, n, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	// The TaintNodesByCondition admission adds node.kubernetes.io/not-ready to a new Node; the
	// node lifecycle controller (not running here) removes it once the node is Ready.
	if !slices.Equal(created.Spec.Taints, taints) {
		created.Spec.Taints = taints
		if created, err = e.kube.CoreV1().Nodes().Update(e.ctx, created, metav1.UpdateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
	created.Status = st
	created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := e.kube.CoreV1().Nodes().UpdateStatus(e.ctx, created, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *failoverEnv) getNode(short string) *corev1.Node {
	e.t.Helper()
	n, err := e.kube.CoreV1().Nodes().Get(e.ctx, e.name(short), metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// setReady sets the node's Ready condition (a powered-off or partitioned node turns Unknown).
func (e *failoverEnv) setReady(short string, ready bool) {
	e.t.Helper()
	e.retry(func() error {
		n := e.getNode(short)
		status, reason := corev1.ConditionTrue, "KubeletReady"
		if !ready {
			status, reason = corev1.ConditionUnknown, "NodeStatusUnknown"
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: reason,
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		_, err := e.kube.CoreV1().Nodes().UpdateStatus(e.ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// fence puts the out-of-service taint on the node, as an operator does after powering it off.
func (e *failoverEnv) fence(short string) {
	e.t.Helper()
	e.retry(func() error {
		n := e.getNode(short)
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: jkev1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
		_, err := e.kube.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{})
		return err
	})
}

func (e *failoverEnv) retry(write func() error) {
	e.t.Helper()
	var err error
	for range 20 {
		if err = write(); err == nil || !apierrors.IsConflict(err) {
			break
		}
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

// addRange creates an IPRange owned by node (ownerGeneration gen); the simulated agent
// reports it Synced.
func (e *failoverEnv) addRange(short string, third int, node string, gen int64) string {
	e.t.Helper()
	r := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: e.name(short)},
		Spec: jkev1.IPRangeSpec{CIDR: e.cidr(third), Node: e.name(node), OwnerGeneration: gen}}
	if _, err := e.client.JkeV1().IPRanges().Create(e.ctx, r, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	return r.Name
}

func (e *failoverEnv) cidr(third int) string { return fmt.Sprintf("10.%d.%d.0/24", e.net, third) }
func (e *failoverEnv) ip(third, host int) string {
	return fmt.Sprintf("10.%d.%d.%d", e.net, third, host)
}

func (e *failoverEnv) getRange(name string) *jkev1.IPRange {
	e.t.Helper()
	r, err := e.client.JkeV1().IPRanges().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// addStaticIP creates a Bound StaticIP and its running pod on node.
func (e *failoverEnv) addStaticIP(name, node, ip string) {
	e.t.Helper()
	s := &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: jkev1.StaticIPSpec{Ref: "web", Kind: "EnhancedStatefulSet", Node: e.name(node), IP: ip, Pod: name,
			Resources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")}}}
	if _, err := e.client.JkeV1().StaticIPs(e.ns).Create(e.ctx, s, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.runPod(name, node, ip)
}

// runPod creates the pod Running on node with ip (the workload controller and the kubelet).
func (e *failoverEnv) runPod(name, node, ip string) {
	e.t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Annotations: map[string]string{jkev1.AnnotationIPAddress: ip}},
		Spec: corev1.PodSpec{NodeName: e.name(node), Containers: []corev1.Container{{Name: "app", Image: "app:v1"}}}}
	created, err := e.kube.CoreV1().Pods(e.ns).Create(e.ctx, p, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	if _, err := e.kube.CoreV1().Pods(e.ns).UpdateStatus(e.ctx, created, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// podGC force-deletes the pods on node, as pod GC does once the node is out-of-service.
func (e *failoverEnv) podGC(node string) {
	e.t.Helper()
	pods, err := e.kube.CoreV1().Pods(e.ns).List(e.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + e.name(node)})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, p := range pods.Items {
		if err := e.kube.CoreV1().Pods(e.ns).Delete(e.ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
			e.t.Fatal(err)
		}
	}
}

func (e *failoverEnv) setHoldSync(short string, hold bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.holdSync[e.name(short)] = hold
}

func (e *failoverEnv) setHoldRoutes(hold bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.holdRoutes = hold
}

// agents simulates the staticip-agent of every Ready node of the test: the owner reports its
// ranges Synced at their generation, and every node reports the routes it programs.
func (e *failoverEnv) agents() {
	_ = wait.PollUntilContextCancel(e.ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		nodes, err := e.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ranges, err := e.client.JkeV1().IPRanges().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready := map[string]bool{}
		for _, n := range nodes.Items {
			if strings.HasPrefix(n.Name, e.ns) && nodefailover.NodeReady(&n) {
				ready[n.Name] = true
			}
		}
		e.mu.Lock()
		holdSync, holdRoutes := maps(e.holdSync), e.holdRoutes
		e.mu.Unlock()
		observed := map[string]string{}
		for i := range ranges.Items {
			r := &ranges.Items[i]
			if !strings.HasPrefix(r.Name, e.ns) {
				continue
			}
			observed[r.Name] = nodefailover.ObservedValue(r.Spec.Node, r.Spec.OwnerGeneration)
			if !ready[r.Spec.Node] || holdSync[r.Spec.Node] || nodefailover.RangeSynced(r) {
				continue
			}
			r.Status.ObservedGeneration = r.Generation
			meta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{Type: "Synced", Status: metav1.ConditionTrue, Reason: "Served", Message: "simulated agent"})
			_, _ = e.client.JkeV1().IPRanges().UpdateStatus(ctx, r, metav1.UpdateOptions{})
		}
		if holdRoutes {
			return false, nil
		}
		want, _ := json.Marshal(observed)
		for _, n := range nodes.Items {
			if !ready[n.Name] || n.Annotations[jkev1alpha1.AnnotationIPRangesObserved] == string(want) {
				continue
			}
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{jkev1alpha1.AnnotationIPRangesObserved: string(want)}}})
			_, _ = e.kube.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		}
		return false, nil
	})
}

func maps(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (e *failoverEnv) record(short string) (*jkev1alpha1.NodeFailover, error) {
	return e.client.JkeV1alpha1().NodeFailovers().Get(e.ctx, e.name(short), metav1.GetOptions{})
}

// waitRecord waits until the record satisfies cond; the message names its last state.
func (e *failoverEnv) waitRecord(short, what string, cond func(*jkev1alpha1.NodeFailover) bool) *jkev1alpha1.NodeFailover {
	e.t.Helper()
	var last *jkev1alpha1.NodeFailover
	e.eventually(time.Minute, what, func() (bool, error) {
		r, err := e.record(short)
		if err != nil {
			return false, err
		}
		last = r
		if cond(r) {
			return true, nil
		}
		return false, fmt.Errorf("record %s: phase %q, target %q, lastError %q, conditions %s", r.Name, r.Status.Phase, r.Status.Target, r.Status.LastError, conditionsString(r.Status.Conditions))
	})
	return last
}

func conditionsString(cs []metav1.Condition) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(parts, "; ")
}

func hasCondition(r *jkev1alpha1.NodeFailover, t string, status metav1.ConditionStatus, reason string) bool {
	c := meta.FindStatusCondition(r.Status.Conditions, t)
	return c != nil && c.Status == status && (reason == "" || c.Reason == reason)
}

func phaseIs(p jkev1alpha1.NodeFailoverPhase) func(*jkev1alpha1.NodeFailover) bool {
	return func(r *jkev1alpha1.NodeFailover) bool { return r.Status.Phase == p }
}

func waitingOn(reason string) func(*jkev1alpha1.NodeFailover) bool {
	return func(r *jkev1alpha1.NodeFailover) bool {
		return hasCondition(r, jkev1alpha1.NodeFailoverConditionProgressing, metav1.ConditionTrue, reason)
	}
}

// assertRange checks a range's owner and generation (the move happened exactly once).
func (e *failoverEnv) assertRange(name, node string, gen int64) {
	e.t.Helper()
	r := e.getRange(name)
	if r.Spec.Node != e.name(node) || r.Spec.OwnerGeneration != gen {
		e.t.Fatalf("IPRange %s: node %q ownerGeneration %d, want %q %d", name, r.Spec.Node, r.Spec.OwnerGeneration, e.name(node), gen)
	}
}

// stays asserts that cond holds for the whole period (nothing moves).
func (e *failoverEnv) stays(d time.Duration, what string, cond func() error) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := cond(); err != nil {
			e.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// threeNodesAndSpare: n1, n2, n3 with n3 owning two ranges (one at ownerGeneration 4) and two
// static-IP pods; one spare.
func (e *failoverEnv) threeNodesAndSpare() (ra, rb string) {
	for _, n := range []string{"n1", "n2", "n3"} {
		e.addNode(n)
	}
	e.addNode("spare1", spare)
	ra = e.addRange("r3a", 1, "n3", 0)
	rb = e.addRange("r3b", 2, "n3", 4)
	e.addRange("r1", 3, "n1", 0)
	e.addStaticIP("web-0", "n3", e.ip(1, 10))
	e.addStaticIP("web-1", "n3", e.ip(2, 10))
	return ra, rb
}

// TestNodeFailoverLifecycleWithRestarts runs one migration through every step and restarts the
// controller at each of them: it resumes from the record, and every range's ownerGeneration is
// bumped exactly once.
func TestNodeFailoverLifecycleWithRestarts(t *testing.T) {
	e := newFailoverEnv(t)
	ra, rb := e.threeNodesAndSpare()
	const window = 2 * time.Second
	e.startFailover(window)

	// Power off n3, fence it. Its pods still exist: Detected/Fenced, nothing moves.
	e.setReady("n3", false)
	e.fence("n3")
	e.waitRecord("n3", "pods remaining block the move", waitingOn(nodefailover.ReasonPodsRemain))
	e.restart(window)
	e.waitRecord("n3", "still blocked by the pods after a restart", waitingOn(nodefailover.ReasonPodsRemain))
	e.assertRange(ra, "n3", 0)
	e.assertRange(rb, "n3", 4)

	// Pod GC removes them; the spare's agent does not report Synced yet.
	e.setHoldSync("spare1", true)
	e.setHoldRoutes(true)
	e.podGC("n3")
	rec := e.waitRecord("n3", "ranges written, waiting for the target agent", waitingOn(nodefailover.ReasonWaitingForAgent))
	if rec.Status.Target != e.name("spare1") || rec.Spec.Target != e.name("spare1") {
		t.Fatalf("target %q/%q, want %s", rec.Spec.Target, rec.Status.Target, e.name("spare1"))
	}
	if got := e.getNode("spare1").Labels[jkev1alpha1.LabelFailoverFor]; got != e.name("n3") {
		t.Fatalf("spare not claimed: label %q", got)
	}
	e.assertRange(ra, "spare1", 1)
	e.assertRange(rb, "spare1", 5)
	for range 2 { // twice at the same step
		e.restart(window)
		e.waitRecord("n3", "still waiting for the target agent after a restart", waitingOn(nodefailover.ReasonWaitingForAgent))
		e.assertRange(ra, "spare1", 1)
		e.assertRange(rb, "spare1", 5)
	}
	if !slices.ContainsFunc(e.getNode("spare1").Spec.Taints, func(t corev1.Taint) bool { return t.Key == jkev1alpha1.TaintSpare }) {
		t.Fatal("spare taint removed before ranges and routes are in place")
	}

	// The target reports Synced; routes are not converged yet.
	e.setHoldSync("spare1", false)
	e.waitRecord("n3", "waiting for routes", waitingOn(nodefailover.ReasonWaitingForRoutes))
	e.restart(window)
	e.waitRecord("n3", "still waiting for routes after a restart", waitingOn(nodefailover.ReasonWaitingForRoutes))
	for _, name := range []string{"web-0", "web-1"} {
		if s, _ := e.staticIP(name); s.Spec.Node != e.name("n3") {
			t.Fatalf("StaticIP %s re-pointed to %s before the routes converged", name, s.Spec.Node)
		}
	}

	// Routes converge: StaticIPs re-pointed, spare opened, waiting for the pods.
	e.setHoldRoutes(false)
	rec = e.waitRecord("n3", "waiting for pods", waitingOn(nodefailover.ReasonWaitingForPods))
	if rec.Status.Phase != jkev1alpha1.FailoverStaticIPsRebound {
		t.Fatalf("phase %s, want StaticIPsRebound", rec.Status.Phase)
	}
	for _, name := range []string{"web-0", "web-1"} {
		if s, _ := e.staticIP(name); s.Spec.Node != e.name("spare1") {
			t.Fatalf("StaticIP %s names %s, want the target", name, s.Spec.Node)
		}
	}
	if slices.ContainsFunc(e.getNode("spare1").Spec.Taints, func(t corev1.Taint) bool { return t.Key == jkev1alpha1.TaintSpare }) {
		t.Fatal("spare taint still on the target after StaticIPsRebound")
	}
	e.restart(window)
	e.waitRecord("n3", "still waiting for pods after a restart", waitingOn(nodefailover.ReasonWaitingForPods))

	// The workload controllers recreate the pods on the target with their IPs.
	e.runPod("web-0", "spare1", e.ip(1, 10))
	e.runPod("web-1", "spare1", e.ip(2, 10))
	rec = e.waitRecord("n3", "completed", phaseIs(jkev1alpha1.FailoverCompleted))
	e.waitRecord("n3", "a completed record keeps no finalizer", func(r *jkev1alpha1.NodeFailover) bool {
		return !slices.Contains(r.Finalizers, nodefailover.Finalizer)
	})
	e.restart(window)
	e.stays(2*time.Second, "a completed migration stays as it is", func() error {
		r, err := e.record("n3")
		if err != nil || r.Status.Phase != jkev1alpha1.FailoverCompleted {
			return fmt.Errorf("record %v %v", r, err)
		}
		if g := e.getRange(rb).Spec.OwnerGeneration; g != 5 {
			return fmt.Errorf("ownerGeneration of %s is %d, want 5", rb, g)
		}
		return nil
	})
	e.assertRange(ra, "spare1", 1)
	e.assertRange(rb, "spare1", 5)
	if got := e.getNode("spare1").Labels[jkev1alpha1.LabelFailoverFor]; got != "" {
		t.Errorf("claim label left on the target after completion: %q", got)
	}
	want := []jkev1alpha1.MovedRange{
		{Name: ra, CIDR: e.cidr(1), FromNode: e.name("n3"), ToNode: e.name("spare1"), OwnerGeneration: 1},
		{Name: rb, CIDR: e.cidr(2), FromNode: e.name("n3"), ToNode: e.name("spare1"), OwnerGeneration: 5},
	}
	if !slices.Equal(rec.Status.MovedRanges, want) {
		t.Errorf("movedRanges %+v, want %+v", rec.Status.MovedRanges, want)
	}
	if len(rec.Status.MovedStaticIPs) != 2 || !rec.Status.MovedStaticIPs[0].Rebound || !rec.Status.MovedStaticIPs[1].Rebound {
		t.Errorf("movedStaticIPs %+v", rec.Status.MovedStaticIPs)
	}
	e.assertRange(e.name("r1"), "n1", 0) // n1's range never touched
	// Events on the record, the failed node, the target and the pods.
	e.eventually(30*time.Second, "events", func() (bool, error) {
		reasons := e.eventReasons()
		for _, want := range []string{nodefailover.ReasonDetected, nodefailover.ReasonClaimed, nodefailover.ReasonSpareReleased, nodefailover.ReasonPodMoved, nodefailover.ReasonCompleted, "RangeMoved"} {
			if !reasons[want] {
				return false, fmt.Errorf("no %s Event yet (have %v)", want, reasons)
			}
		}
		return true, nil
	})
}

// eventReasons collects the reasons of Events about this test's objects (any namespace).
func (e *failoverEnv) eventReasons() map[string]bool {
	out := map[string]bool{}
	list, err := e.kube.CoreV1().Events("").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, ev := range list.Items {
		if strings.HasPrefix(ev.InvolvedObject.Name, e.ns) || ev.InvolvedObject.Namespace == e.ns {
			out[ev.Reason] = true
		}
	}
	return out
}

// TestNodeFailoverResumesARecordedMove: a crash after the move was recorded but before the
// IPRange write finishes it at the recorded generation; a crash after the write does not bump
// it again.
func TestNodeFailoverResumesARecordedMove(t *testing.T) {
	e := newFailoverEnv(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		e.addNode(n)
	}
	e.addNode("spare1", spare)
	written := e.addRange("r3a", 1, "n3", 0)
	pending := e.addRange("r3b", 2, "n3", 7)
	e.setReady("n3", false)
	e.fence("n3")
	// What a previous leader left: spare claimed, both moves recorded, only the first written.
	e.leftByDeadLeader("n3", "spare1", nil, []jkev1alpha1.MovedRange{
		{Name: written, CIDR: e.cidr(1), FromNode: e.name("n3"), ToNode: e.name("spare1"), OwnerGeneration: 1},
		{Name: pending, CIDR: e.cidr(2), FromNode: e.name("n3"), ToNode: e.name("spare1"), OwnerGeneration: 8},
	})
	e.retry(func() error {
		r := e.getRange(written)
		r.Spec.Node, r.Spec.OwnerGeneration = e.name("spare1"), 1
		_, err := e.client.JkeV1().IPRanges().Update(e.ctx, r, metav1.UpdateOptions{})
		return err
	})
	e.startFailover(time.Second)
	e.waitRecord("n3", "completed (no StaticIPs to wait for)", phaseIs(jkev1alpha1.FailoverCompleted))
	e.assertRange(written, "spare1", 1)
	e.assertRange(pending, "spare1", 8)
}

// leftByDeadLeader makes what a leader leaves that claimed target for failed, recorded the
// moves and died: the claim label, the record (with its finalizer and annotations) at
// TargetReserved with the moves.
func (e *failoverEnv) leftByDeadLeader(failed, target string, annotations map[string]string, moves []jkev1alpha1.MovedRange) {
	e.t.Helper()
	e.retry(func() error {
		n := e.getNode(target)
		n.Labels[jkev1alpha1.LabelFailoverFor] = e.name(failed)
		_, err := e.kube.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{})
		return err
	})
	rec, err := e.client.JkeV1alpha1().NodeFailovers().Create(e.ctx, &jkev1alpha1.NodeFailover{ObjectMeta: metav1.ObjectMeta{Name: e.name(failed),
		Finalizers: []string{nodefailover.Finalizer}, Annotations: annotations},
		Spec: jkev1alpha1.NodeFailoverSpec{Node: e.name(failed), Target: e.name(target)}}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	start := metav1.NewTime(time.Now().Add(-time.Minute))
	rec.Status = jkev1alpha1.NodeFailoverStatus{Phase: jkev1alpha1.FailoverTargetReserved, Target: e.name(target), StartTime: &start, PhaseTime: &start,
		MovedRanges: moves}
	if _, err := e.client.JkeV1alpha1().NodeFailovers().UpdateStatus(e.ctx, rec, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// TestNodeFailoverNoTarget: no spare qualifies (too little CPU, another zone) → condition and
// Event, nothing moved; a fitting spare appears → the migration goes on.
func TestNodeFailoverNoTarget(t *testing.T) {
	e := newFailoverEnv(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		e.addNode(n)
	}
	e.addNode("small", spare, withCPU("500m")) // web-0 + web-1 need 1 CPU
	e.addNode("faraway", spare, inZone("elsewhere-"+e.ns))
	ra := e.addRange("r3a", 1, "n3", 0)
	e.addStaticIP("web-0", "n3", e.ip(1, 10))
	e.addStaticIP("web-1", "n3", e.ip(1, 11))
	e.startFailover(time.Second)
	e.setReady("n3", false)
	e.fence("n3")
	e.podGC("n3")
	rec := e.waitRecord("n3", "NoTarget", func(r *jkev1alpha1.NodeFailover) bool {
		return hasCondition(r, jkev1alpha1.NodeFailoverConditionTargetReserved, metav1.ConditionFalse, nodefailover.ReasonNoTarget)
	})
	msg := meta.FindStatusCondition(rec.Status.Conditions, jkev1alpha1.NodeFailoverConditionTargetReserved).Message
	if !strings.Contains(msg, "cpu") || !strings.Contains(msg, "zone") {
		t.Errorf("NoTarget message does not say why each spare was rejected: %s", msg)
	}
	e.stays(2*time.Second, "nothing moves without a target", func() error {
		if r := e.getRange(ra); r.Spec.Node != e.name("n3") || r.Spec.OwnerGeneration != 0 {
			return fmt.Errorf("range moved to %s/%d", r.Spec.Node, r.Spec.OwnerGeneration)
		}
		for _, n := range []string{"small", "faraway"} {
			if l := e.getNode(n).Labels[jkev1alpha1.LabelFailoverFor]; l != "" {
				return fmt.Errorf("%s claimed (%s)", n, l)
			}
		}
		return nil
	})
	e.eventually(30*time.Second, "NoTarget Event", func() (bool, error) { return e.eventReasons()[nodefailover.ReasonNoTarget], nil })
	e.addNode("big", spare)
	e.waitRecord("n3", "waiting for pods on the new spare", waitingOn(nodefailover.ReasonWaitingForPods))
	e.assertRange(ra, "big", 1)
}

// TestNodeFailoverSecondFailure: two nodes fail during one migration and there is one spare:
// the first takes it, the second does not (the claim), and goes on once a second spare exists.
func TestNodeFailoverSecondFailure(t *testing.T) {
	e := newFailoverEnv(t)
	for _, n := range []string{"n1", "n2", "n3", "n4", "n5", "n6"} {
		e.addNode(n)
	}
	e.addNode("spare1", spare)
	r3 := e.addRange("r3", 1, "n3", 0)
	r4 := e.addRange("r4", 2, "n4", 0)
	e.addStaticIP("web-0", "n3", e.ip(1, 10))
	e.addStaticIP("web-1", "n4", e.ip(2, 10))
	e.setHoldSync("spare1", true) // keep the first migration in flight
	e.startFailover(time.Second)
	e.setReady("n3", false)
	e.fence("n3")
	e.podGC("n3")
	e.waitRecord("n3", "first migration in flight", waitingOn(nodefailover.ReasonWaitingForAgent))

	e.setReady("n4", false)
	e.fence("n4")
	e.podGC("n4")
	e.waitRecord("n4", "second failure finds no target", func(r *jkev1alpha1.NodeFailover) bool {
		return hasCondition(r, jkev1alpha1.NodeFailoverConditionTargetReserved, metav1.ConditionFalse, nodefailover.ReasonNoTarget)
	})
	e.assertRange(r4, "n4", 0)
	e.assertRange(r3, "spare1", 1)

	e.addNode("spare2", spare)
	e.setHoldSync("spare1", false)
	e.waitRecord("n3", "first waits for its pods", waitingOn(nodefailover.ReasonWaitingForPods))
	e.waitRecord("n4", "second waits for its pods", waitingOn(nodefailover.ReasonWaitingForPods))
	e.assertRange(r3, "spare1", 1)
	e.assertRange(r4, "spare2", 1)
	e.runPod("web-0", "spare1", e.ip(1, 10))
	e.runPod("web-1", "spare2", e.ip(2, 10))
	e.waitRecord("n3", "first completed", phaseIs(jkev1alpha1.FailoverCompleted))
	e.waitRecord("n4", "second completed", phaseIs(jkev1alpha1.FailoverCompleted))
}

// TestNodeFailoverTooManyUnhealthy: when more than the allowed share of nodes is NotReady,
// failover stops (condition + Event) even for a fenced node; it goes on once they recover.
func TestNodeFailoverTooManyUnhealthy(t *testing.T) {
	e := newFailoverEnv(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		e.addNode(n)
	}
	e.addNode("spare1", spare)
	ra := e.addRange("r3a", 1, "n3", 0)
	e.addStaticIP("web-0", "n3", e.ip(1, 10))
	e.startFailover(time.Second)
	// 2 of 4 NotReady = 50% > 34%.
	e.setReady("n2", false)
	e.setReady("n3", false)
	e.fence("n3")
	e.podGC("n3")
	e.waitRecord("n3", "stopped", func(r *jkev1alpha1.NodeFailover) bool {
		return hasCondition(r, jkev1alpha1.NodeFailoverConditionStopped, metav1.ConditionTrue, nodefailover.ReasonTooManyUnhealthy)
	})
	e.stays(2*time.Second, "nothing moves while too many nodes are unhealthy", func() error {
		if r := e.getRange(ra); r.Spec.Node != e.name("n3") {
			return fmt.Errorf("range moved to %s", r.Spec.Node)
		}
		return nil
	})
	e.eventually(30*time.Second, "TooManyUnhealthy Event", func() (bool, error) {
		return e.eventReasons()[nodefailover.ReasonTooManyUnhealthy], nil
	})
	e.setReady("n2", true)
	e.waitRecord("n3", "goes on once n2 is back", waitingOn(nodefailover.ReasonWaitingForPods))
	e.assertRange(ra, "spare1", 1)
}

// TestNodeFailoverPartitionWithoutTaint: a node NotReady for many windows but not fenced (a
// partition) gets no record and nothing of it moves. Fenced but then un-fenced before anything
// moved: the record is removed and the spare released.
func TestNodeFailoverPartitionWithoutTaint(t *testing.T) {
	e := newFailoverEnv(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		e.addNode(n)
	}
	e.addNode("spare1", spare)
	ra := e.addRange("r3a", 1, "n3", 0)
	e.addStaticIP("web-0", "n3", e.ip(1, 10))
	e.startFailover(500 * time.Millisecond)
	e.setReady("n3", false)
	e.podGC("n3") // even with its pods gone
	e.stays(3*time.Second, "a partitioned node without the taint keeps everything", func() error {
		if _, err := e.record("n3"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("record exists (%v)", err)
		}
		if r := e.getRange(ra); r.Spec.Node != e.name("n3") || r.Spec.OwnerGeneration != 0 {
			return fmt.Errorf("range moved to %s/%d", r.Spec.Node, r.Spec.OwnerGeneration)
		}
		if s, _ := e.staticIP("web-0"); s.Spec.Node != e.name("n3") {
			return fmt.Errorf("StaticIP moved to %s", s.Spec.Node)
		}
		if l := e.getNode("spare1").Labels[jkev1alpha1.LabelFailoverFor]; l != "" {
			return fmt.Errorf("spare claimed for %s", l)
		}
		return nil
	})

	// Paused on the Node, then fenced: recorded, nothing written.
	e.retry(func() error {
		n := e.getNode("n3")
		n.Annotations = map[string]string{jkev1alpha1.AnnotationFailoverPaused: "true"}
		_, err := e.kube.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{})
		return err
	})
	e.fence("n3")
	e.waitRecord("n3", "paused", func(r *jkev1alpha1.NodeFailover) bool {
		return hasCondition(r, jkev1alpha1.NodeFailoverConditionPaused, metav1.ConditionTrue, "")
	})
	e.stays(time.Second, "paused: nothing moves", func() error {
		if r := e.getRange(ra); r.Spec.Node != e.name("n3") {
			return fmt.Errorf("range moved to %s", r.Spec.Node)
		}
		return nil
	})
	// The operator un-fences instead (it was a partition after all) and unpauses.
	e.retry(func() error {
		n := e.getNode("n3")
		n.Spec.Taints = nil
		n.Annotations = nil
		_, err := e.kube.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{})
		return err
	})
	e.eventually(30*time.Second, "record removed after un-fencing", func() (bool, error) {
		_, err := e.record("n3")
		return apierrors.IsNotFound(err), nil
	})
	e.assertRange(ra, "n3", 0)
}

// asManagerServiceAccount makes the manager run as its ServiceAccount with only the
// permissions of manifests/controller-manager/rbac.yaml.
func (e *failoverEnv) asManagerServiceAccount() {
	e.applyRBAC()
	cfg := rest.CopyConfig(e.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:staticip-system:staticip-controller-manager"}
	e.managerCfg = cfg
}

// TestNodeFailoverWithItsRBAC runs a whole migration as the manager's ServiceAccount with only
// the permissions of manifests/controller-manager/rbac.yaml.
func TestNodeFailoverWithItsRBAC(t *testing.T) {
	e := newFailoverEnv(t)
	e.asManagerServiceAccount()
	ra, rb := e.threeNodesAndSpare()
	e.startFailover(time.Second)
	e.setReady("n3", false)
	e.fence("n3")
	e.podGC("n3")
	e.waitRecord("n3", "waiting for pods", waitingOn(nodefailover.ReasonWaitingForPods))
	e.runPod("web-0", "spare1", e.ip(1, 10))
	e.runPod("web-1", "spare1", e.ip(2, 10))
	e.waitRecord("n3", "completed", phaseIs(jkev1alpha1.FailoverCompleted))
	e.assertRange(ra, "spare1", 1)
	e.assertRange(rb, "spare1", 5)
	e.eventually(30*time.Second, "events written with the manager's RBAC", func() (bool, error) {
		return e.eventReasons()[nodefailover.ReasonCompleted], nil
	})
}

// TestNodeFailoverNodeDeleted: with --node-deletion-is-fence, a Node object deleted (a cloud
// node controller removed the instance) fences it too — once its range was served by an
// agent. A range whose node never joined is left alone.
func TestNodeFailoverNodeDeleted(t *testing.T) {
	e := newFailoverEnv(t)
	e.options = func(o *manager.Options) { o.NodeDeletionIsFence = true }
	ra, _ := e.threeNodesAndSpare()
	never := e.addRange("rnever", 9, "not-joined-yet", 0)
	e.eventually(30*time.Second, "n3's range served by its agent", func() (bool, error) {
		return nodefailover.RangeSynced(e.getRange(ra)), nil
	})
	watchers := e.nodeWatches()
	e.startFailover(time.Second)
	// The manager must have listed the Nodes before n3 goes: a Node deleted before the manager
	// ever saw it leaves no zone to remember (documented). Its informers watch after they list.
	e.eventually(time.Minute, "the manager watches Nodes", func() (bool, error) { return e.nodeWatches() > watchers, nil })
	e.podGC("n3")
	if err := e.kube.CoreV1().Nodes().Delete(e.ctx, e.name("n3"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec := e.waitRecord("n3", "waiting for pods on the spare", waitingOn(nodefailover.ReasonWaitingForPods))
	if rec.Status.Zone != e.zone {
		t.Errorf("zone %q not kept from the deleted Node, want %q", rec.Status.Zone, e.zone)
	}
	e.assertRange(ra, "spare1", 1)
	if _, err := e.record("not-joined-yet"); !apierrors.IsNotFound(err) {
		t.Errorf("a record for a node that never joined: %v", err)
	}
	if r := e.getRange(never); r.Spec.Node != e.name("not-joined-yet") {
		t.Errorf("range of a node that never joined moved to %s", r.Spec.Node)
	}
}

// nodeWatches is the API server's count of open WATCH requests on nodes
// (apiserver_longrunning_requests), from its /metrics.
func (e *failoverEnv) nodeWatches() int {
	e.t.Helper()
	raw, err := e.kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(e.ctx)
	if err != nil {
		e.t.Fatalf("API server metrics: %v", err)
	}
	n := 0
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "apiserver_longrunning_requests{") && strings.Contains(line, `resource="nodes"`) && strings.Contains(line, `verb="WATCH"`) {
			fields := strings.Fields(line)
			if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
				n += int(v)
			}
		}
	}
	return n
}

// TestNodeFailoverRecordDeletedMidMigration: deleting a record after its ranges were written
// does not forget the migration: the record stays (finalizer) and the migration completes —
// the target keeps its spare taint until its agent has reserved the ranges — then it goes. A
// record deleted before anything moved goes at once and releases its claim.
func TestNodeFailoverRecordDeletedMidMigration(t *testing.T) {
	e := newFailoverEnv(t)
	ra, rb := e.threeNodesAndSpare()
	e.setHoldSync("spare1", true)
	e.startFailover(time.Second)
	e.setReady("n3", false)
	e.fence("n3")
	e.podGC("n3")
	e.waitRecord("n3", "ranges written, waiting for the target agent", waitingOn(nodefailover.ReasonWaitingForAgent))
	if err := e.client.JkeV1alpha1().NodeFailovers().Delete(e.ctx, e.name("n3"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.stays(3*time.Second, "a record deleted mid-migration is held and nothing skips ahead", func() error {
		r, err := e.record("n3")
		if err != nil {
			return fmt.Errorf("record gone mid-migration: %v", err)
		}
		if len(r.Status.MovedRanges) != 2 {
			return fmt.Errorf("record lost its moves: %+v (uid %s)", r.Status.MovedRanges, r.UID)
		}
		if !slices.ContainsFunc(e.getNode("spare1").Spec.Taints, func(t corev1.Taint) bool { return t.Key == jkev1alpha1.TaintSpare }) {
			return fmt.Errorf("spare taint removed before the target's agent reserved the ranges")
		}
		for _, name := range []string{"web-0", "web-1"} {
			if s, _ := e.staticIP(name); s.Spec.Node != e.name("n3") {
				return fmt.Errorf("StaticIP %s re-pointed to %s before the ranges were served", name, s.Spec.Node)
			}
		}
		return nil
	})
	rec := e.waitRecord("n3", "deletion held", func(r *jkev1alpha1.NodeFailover) bool {
		return r.DeletionTimestamp != nil && hasCondition(r, jkev1alpha1.NodeFailoverConditionProgressing, metav1.ConditionTrue, "")
	})
	if !slices.Contains(rec.Finalizers, nodefailover.Finalizer) {
		t.Errorf("finalizers %v", rec.Finalizers)
	}
	e.eventually(30*time.Second, "DeletionHeld Event", func() (bool, error) { return e.eventReasons()[nodefailover.ReasonDeletionHeld], nil })

	e.setHoldSync("spare1", false)
	e.waitRecord("n3", "waiting for pods", waitingOn(nodefailover.ReasonWaitingForPods))
	e.runPod("web-0", "spare1", e.ip(1, 10))
	e.runPod("web-1", "spare1", e.ip(2, 10))
	e.eventually(time.Minute, "the record goes once the migration completed", func() (bool, error) {
		_, err := e.record("n3")
		return apierrors.IsNotFound(err), nil
	})
	e.assertRange(ra, "spare1", 1)
	e.assertRange(rb, "spare1", 5)
	if got := e.getNode("spare1").Labels[jkev1alpha1.LabelFailoverFor]; got != "" {
		t.Errorf("claim label left: %q", got)
	}

	// Before anything moved: deleting goes at once (the node is still fenced, so it is
	// detected again — with a new record, which carries the finalizer too).
	e.addNode("n4")
	e.addNode("spare2", spare)
	r4 := e.addRange("r4", 4, "n4", 0)
	e.addStaticIP("db-0", "n4", e.ip(4, 10))
	e.setReady("n4", false)
	e.fence("n4")
	old := e.waitRecord("n4", "pods remaining block the move", waitingOn(nodefailover.ReasonPodsRemain))
	if !slices.Contains(old.Finalizers, nodefailover.Finalizer) {
		t.Errorf("finalizers %v", old.Finalizers)
	}
	if err := e.client.JkeV1alpha1().NodeFailovers().Delete(e.ctx, e.name("n4"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.eventually(30*time.Second, "the uncommitted record goes", func() (bool, error) {
		r, err := e.record("n4")
		return apierrors.IsNotFound(err) || (err == nil && r.UID != old.UID), nil
	})
	e.assertRange(r4, "n4", 0)
}
