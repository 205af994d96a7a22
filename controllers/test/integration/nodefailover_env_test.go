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

	coordinationv1 "k8s.io/api/coordination/v1"
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
	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/controllers/pkg/manager"
	"github.com/staticip/staticip/controllers/pkg/nodefailover"
)

// The node failover tests simulate nodes: Node objects whose Ready condition the test sets,
// agents (a loop that reports an IPRange Synced for its owner and writes each Ready node's
// route report: its Lease in staticip-node-routes, or, for a node whose agent plays the previous
// release (legacyRoutes), its Node's ipranges-observed annotation), pod GC (the test deletes the failed node's pods) and the
// workload controller + kubelet (the test creates the moved pods Running on the target).
// Nodes, ranges and records are cluster-wide: every name carries the test's namespace and
// everything is deleted at the end, so tests never see each other's objects.

var failoverSubnets atomic.Int32

type failoverEnv struct {
	*fixture
	zone string
	net  int // 10.<net>.0.0/16 holds this test's ranges

	mu         sync.Mutex
	holdSync   map[string]bool // node -> its agent does not report ranges Synced
	holdRoutes bool            // no agent writes a route report
	// legacyRoutes: node -> its agent is of the previous release: it reports its routes in its
	// Node's ipranges-observed annotation and has no route-report Lease.
	legacyRoutes map[string]bool
	stopManager  func()
	managerCfg   *rest.Config           // the manager's identity (default: the test's admin)
	options      func(*manager.Options) // more manager flags (default: none)
}

func newFailoverEnv(t *testing.T) *failoverEnv {
	e := &failoverEnv{fixture: newFixture(t), zone: "", net: 150 + int(failoverSubnets.Add(1)), holdSync: map[string]bool{}, legacyRoutes: map[string]bool{}}
	e.zone = "zone-" + e.ns
	// The route reports' namespace, as the install creates it (manifests/cni/node-routes.yaml).
	if _, err := e.kube.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: jkev1.NamespaceRouteReports}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
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
			_ = e.kube.CoordinationV1().Leases(jkev1.NamespaceRouteReports).Delete(ctx, n.Name, metav1.DeleteOptions{})
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
	// Settled or not after 15 s, the test goes on: a timeout here is no failure.
	_ = wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := e.kube.CoreV1().Events("").List(ctx, metav1.ListOptions{})
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
		}
		return time.Since(stableSince) >= time.Second, nil
	})
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
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Annotations: map[string]string{podip.AnnotationIPAddress: ip}},
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
		holdSync, holdRoutes, legacy := maps(e.holdSync), e.holdRoutes, maps(e.legacyRoutes)
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
		leases := e.kube.CoordinationV1().Leases(jkev1.NamespaceRouteReports)
		for _, n := range nodes.Items {
			if !ready[n.Name] {
				continue
			}
			if legacy[n.Name] {
				// A previous release's agent has no Lease. setLegacyRoutes deletes it, but a pass
				// of this loop that began before the flag was set may create it again after that
				// deletion (CI of bd98cb6: the migration then read n1 from that stale Lease and
				// waited for it for a minute): the simulated agent removes it itself.
				if err := leases.Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					continue
				}
				if n.Annotations[jkev1alpha1.AnnotationIPRangesObserved] == string(want) {
					continue
				}
				patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{jkev1alpha1.AnnotationIPRangesObserved: string(want)}}})
				_, _ = e.kube.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{})
				continue
			}
			l, err := leases.Get(ctx, n.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				_, _ = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: n.Name,
					Labels: map[string]string{jkev1.LabelRouteReport: "true"}, Annotations: map[string]string{jkev1.AnnotationRoutesObserved: string(want)}},
					Spec: coordinationv1.LeaseSpec{HolderIdentity: &n.Name}}, metav1.CreateOptions{})
				continue
			}
			if err != nil || l.Annotations[jkev1.AnnotationRoutesObserved] == string(want) {
				continue
			}
			l.Annotations[jkev1.AnnotationRoutesObserved] = string(want)
			_, _ = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
		return false, nil
	})
}

// setLegacyRoutes makes node's agent play the previous release (true): routes in its Node
// annotation, no route-report Lease (one it had is deleted, as before its agent was upgraded).
func (e *failoverEnv) setLegacyRoutes(node string, legacy bool) {
	e.mu.Lock()
	e.legacyRoutes[node] = legacy
	e.mu.Unlock()
	if legacy {
		if err := e.kube.CoordinationV1().Leases(jkev1.NamespaceRouteReports).Delete(e.ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			e.t.Fatal(err)
		}
	}
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

// asManagerServiceAccount makes the manager run as its ServiceAccount with only the
// permissions of manifests/controller-manager/rbac.yaml.
func (e *failoverEnv) asManagerServiceAccount() {
	e.applyRBAC()
	cfg := rest.CopyConfig(e.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:staticip-system:staticip-controller-manager"}
	e.managerCfg = cfg
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
