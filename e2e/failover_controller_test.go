//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/cni/agent"
	"github.com/staticip/staticip/controllers/pkg/ippool"
	"github.com/staticip/staticip/controllers/pkg/nodefailover"
	"github.com/staticip/staticip/e2e/framework"
)

// The nodefailover controller end to end (issue 16): a powered-off, fenced node's static pods
// come back on the spare with the same IPs; a partitioned node moves nothing.

const failoverPoolLabel = "e2e.staticip.jke.jdcloud.com/failover-pool"

// failoverWindow returns the staticip-controller-manager's --node-failover-window, and skips
// unless the nodefailover controller can act here within the suite's time: the NodeFailover
// API must be served and the window set short (`localcluster up --failover-window=5s`, on kind
// KIND_FAILOVER_WINDOW=5s, make e2e-kind's default; the
// default 2m would make these tests minutes longer).
func failoverWindow(t *testing.T, ctx context.Context) time.Duration {
	t.Helper()
	requireManager(t)
	if _, err := versioned.NewForConfigOrDie(f.Config).JkeV1alpha1().NodeFailovers().List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		t.Skipf("the NodeFailover API is not served here (manifests/crds): %v", err)
	}
	d, err := f.Client.AppsV1().Deployments(managerNamespace).Get(ctx, managerDeployment, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--node-failover-window="); ok {
				w, err := time.ParseDuration(v)
				if err != nil {
					t.Fatalf("%s/%s: %s: %v", managerNamespace, managerDeployment, a, err)
				}
				if w > 30*time.Second {
					t.Skipf("--node-failover-window=%s: too long for the suite (localcluster up --failover-window=5s; kind: KIND_FAILOVER_WINDOW=5s)", w)
				}
				return w
			}
		}
	}
	t.Skipf("%s/%s runs without --node-failover-window (default 2m, too long for the suite): localcluster up --failover-window=5s (kind: KIND_FAILOVER_WINDOW=5s)", managerNamespace, managerDeployment)
	return 0
}

// labelNode sets (value != "") or removes a label, undone when the test ends.
func labelNode(t *testing.T, ctx context.Context, node, key, value string) {
	t.Helper()
	set := func(v any) error {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, key, v)
		_, err := f.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
	if err := set(fmt.Sprintf("%q", value)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = set("null") })
}

// staticSet creates an EnhancedStatefulSet with static IPs whose pods may run only on nodes
// labelled failoverPoolLabel=pool, and waits until all replicas run; it returns pod -> IP.
func staticSet(t *testing.T, ctx context.Context, cs versioned.Interface, ns, name, pool string, replicas int32, node string) map[string]string {
	t.Helper()
	labels := map[string]string{"app": name}
	spec := testServerPod("", "", nil).Spec
	spec.NodeSelector = map[string]string{failoverPoolLabel: pool}
	set := &jkev1alpha1.EnhancedStatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{jkev1.AnnotationEnable: "true"}},
		Spec: jkev1alpha1.EnhancedStatefulSetSpec{
			Replicas: ptr(replicas), Selector: &metav1.LabelSelector{MatchLabels: labels}, ServiceName: name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template:            corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
	if _, err := cs.JkeV1alpha1().EnhancedStatefulSets(ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return waitSetOn(t, ctx, ns, name, int(replicas), node, 3*time.Minute)
}

// waitSetOn waits until n pods of the set run Ready on node and returns pod -> IP.
func waitSetOn(t *testing.T, ctx context.Context, ns, name string, n int, node string, timeout time.Duration) map[string]string {
	t.Helper()
	ips := map[string]string{}
	var last string
	if err := framework.WaitFor(ctx, timeout, fmt.Sprintf("%d pods of %s Ready on %s", n, name, node), func(ctx context.Context) (bool, error) {
		pods, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, err
		}
		clear(ips)
		var where []string
		for _, p := range pods.Items {
			where = append(where, fmt.Sprintf("%s@%s/%s/%s", p.Name, p.Spec.NodeName, p.Status.PodIP, p.Status.Phase))
			if p.Spec.NodeName == node && p.DeletionTimestamp == nil && framework.PodReady(&p) && p.Status.PodIP != "" {
				ips[p.Name] = p.Status.PodIP
			}
		}
		last = strings.Join(where, " ")
		return len(ips) == n, nil
	}); err != nil {
		t.Fatalf("%v (pods: %s)", err, last)
	}
	return ips
}

// rangesOf lists the IPRanges spec.node names.
func rangesOf(t *testing.T, ctx context.Context, cs versioned.Interface, node string) []jkev1.IPRange {
	t.Helper()
	list, err := cs.JkeV1().IPRanges().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []jkev1.IPRange
	for _, r := range list.Items {
		if r.Spec.Node == node {
			out = append(out, r)
		}
	}
	return out
}

// TestNodeFailoverMovesStaticPodsWithTheirIPs: an EnhancedStatefulSet with static IPs runs on
// node F; F is powered off and tainted out-of-service; the nodefailover controller moves F's
// IPRange and StaticIPs to the spare of F's zone, and every pod runs there with its old IP,
// reachable from pods on two other nodes, with no IP held twice at any pod event. F then
// boots: it serves none of those IPs (no route of its own into the range, its agent reports the
// spare as owner and records RangeRevoked).
func TestNodeFailoverMovesStaticPodsWithTheirIPs(t *testing.T) {
	ctx := context.Background()
	ctl := requireNodeControl(t)
	failoverWindow(t, ctx)
	requireStaticIPCNI(t, ctx)
	cs := versioned.NewForConfigOrDie(f.Config)
	nodes, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spare := ""
	zoneOf := map[string]string{}
	for _, n := range nodes.Items {
		zoneOf[n.Name] = n.Labels[corev1.LabelTopologyZone]
		if n.Labels[jkev1alpha1.LabelSpare] == "true" && n.Labels[jkev1alpha1.LabelFailoverFor] == "" {
			spare = n.Name
		}
	}
	if spare == "" {
		t.Skip("no unclaimed spare node (localcluster up --spare-nodes=1; kind: KIND_SPARE_NODES=1)")
	}
	workers := workloadNodes(t, ctx)
	failed := ""
	var others []string
	for i := len(workers) - 1; i >= 0; i-- {
		if failed == "" && zoneOf[workers[i].Name] == zoneOf[spare] {
			failed = workers[i].Name
			continue
		}
		others = append(others, workers[i].Name)
	}
	if failed != "" && len(others) < 2 {
		// kind has two workers and the spare: the second client runs on the control plane
		// (the clients tolerate its NoSchedule taint).
		for _, n := range readyNodes(t, ctx) {
			if len(others) < 2 && n.Name != failed && n.Name != spare && !slices.Contains(others, n.Name) && onlyControlPlaneTaint(n) {
				others = append(others, n.Name)
			}
		}
	}
	if failed == "" || len(others) < 2 {
		t.Skipf("needs a worker in the spare's zone %q and two more nodes for client pods", zoneOf[spare])
	}
	moved := rangesOf(t, ctx, cs, failed)
	if len(moved) == 0 {
		t.Skipf("node %s owns no IPRange", failed)
	}
	ns := f.Namespace(t, "failover")
	w := startIPWatcher(t, ns, cs)
	labelNode(t, ctx, failed, failoverPoolLabel, ns)
	labelNode(t, ctx, spare, failoverPoolLabel, ns)
	ips := staticSet(t, ctx, cs, ns, "db", ns, 3, failed)
	var clients []string
	for _, n := range others[:2] {
		name := "client-" + n
		client := testServerPod(name, n, nil)
		client.Spec.Tolerations = []corev1.Toleration{{Key: controlPlaneTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
		if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, client, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WaitForPodRunning(ctx, ns, name, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, name)
	}
	// What an ordinary cluster also runs on the node (issue 25): a log shipper's DaemonSet pod
	// that tolerates every taint and is not on the host network (nothing in Kubernetes ever
	// deletes it from a fenced node: the controller force-deletes it after
	// --fenced-pod-deletion-grace), and a plain Deployment's pod (evicted by the taint manager,
	// removed by pod GC).
	dsPod := tolerateEverythingDaemonSet(t, ctx, ns, "logship", failed)
	deployPod := plainDeployment(t, ctx, ns, "plain", failed)
	t.Logf("%s runs %v, DaemonSet pod %s, Deployment pod %s; spare %s; ranges %d", failed, ips, dsPod.Name, deployPod.Name, spare, len(moved))

	// Power-off, then the operator's (or a remediator's) fence. The router (local cluster) times
	// how long the node's routes outlive it.
	rv := optionalRouter(t)
	routesGone := rv.routerOnPowerOff(t, internalIP(t, ctx, failed), cidrsOf(moved))
	ctl.stop(t, failed)
	started := false
	t.Cleanup(func() {
		if !started {
			ctl.start(t, failed)
		}
	})
	taint := fmt.Sprintf(`{"spec":{"taints":[{"key":%q,"value":"nodeshutdown","effect":"NoExecute"}]}}`, jkev1alpha1.TaintOutOfService)
	if _, err := f.Client.CoreV1().Nodes().Patch(ctx, failed, types.StrategicMergePatchType, []byte(taint), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	fencedAt := time.Now()
	t.Cleanup(func() { restoreAfterFailover(t, cs, ns, failed, spare, moved) })

	if err := framework.WaitFor(ctx, 6*time.Minute, "NodeFailover "+failed+" Completed", func(ctx context.Context) (bool, error) {
		nf, err := cs.JkeV1alpha1().NodeFailovers().Get(ctx, failed, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return nf.Status.Phase == jkev1alpha1.FailoverCompleted, nil
	}); err != nil {
		nf, _ := cs.JkeV1alpha1().NodeFailovers().Get(ctx, failed, metav1.GetOptions{})
		t.Fatalf("%v\nNodeFailover: %+v", err, nf)
	}
	routesGone()
	after := waitSetOn(t, ctx, ns, "db", len(ips), spare, 2*time.Minute)
	t.Logf("fence -> every static pod Running and Ready on the spare %s with its IP: %s (no pod deleted by hand)", spare, time.Since(fencedAt).Round(100*time.Millisecond))
	if !reflect.DeepEqual(after, ips) {
		t.Errorf("pods on the spare %s: %v, want the same IPs as on %s: %v", spare, after, failed, ips)
	}
	for _, p := range []*corev1.Pod{dsPod, deployPod} {
		if cur, err := f.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{}); err == nil && cur.UID == p.UID {
			t.Errorf("pod %s (uid %s) is still bound to the fenced node %s after the failover completed", p.Name, p.UID, failed)
		}
	}
	waitForPodEvent(t, ctx, ns, dsPod.Name, nodefailover.ReasonFencedPodDeleted, failed)
	for _, r := range moved {
		got, err := cs.JkeV1().IPRanges().Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.Node != spare || got.Spec.OwnerGeneration != r.Spec.OwnerGeneration+1 {
			t.Errorf("IPRange %s: node %s at owner generation %d, want %s at %d", r.Name, got.Spec.Node, got.Spec.OwnerGeneration, spare, r.Spec.OwnerGeneration+1)
		}
	}
	for pod, ip := range ips {
		for _, c := range clients {
			if r := reachable(t, ns, c, ip); r.Pod != pod || r.Node != spare {
				t.Errorf("%s from %s answered as %s on %s, want %s on %s", ip, c, r.Pod, r.Node, pod, spare)
			}
		}
	}
	rv.afterFailover(t, ctx, failed, spare, moved, ips)

	// The failed node boots on its old state: it withdraws the ranges it lost.
	ctl.start(t, failed)
	started = true
	shell, why, err := f.NodeShell(ctx, failed)
	if err != nil || shell == nil {
		t.Fatalf("into %s's network namespace: %v %s", failed, err, why)
	}
	for _, r := range moved {
		waitObserved(t, ctx, failed, r.Name, fmt.Sprintf("%s/%d", spare, r.Spec.OwnerGeneration+1), 2*time.Minute)
		if own := hostRoutesInto(t, shell, r.Spec.CIDR); len(own) > 0 {
			t.Errorf("%s still routes into %s itself after it came back: %v", failed, r.Spec.CIDR, own)
		}
		waitForRangeEvent(t, ctx, r.Name, agent.ReasonRangeRevoked, failed)
	}
	for pod, ip := range ips {
		if r := reachable(t, ns, clients[0], ip); r.Pod != pod || r.Node != spare {
			t.Errorf("after %s came back, %s answered as %s on %s, want %s on %s", failed, ip, r.Pod, r.Node, pod, spare)
		}
	}
	// The operator lifts the fence once the machine is back (Kubernetes' out-of-service
	// procedure); only then does the range allocator give the node a block.
	if _, err := f.Client.CoreV1().Nodes().Patch(ctx, failed, types.MergePatchType, []byte(`{"spec":{"taints":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if returnedNodeServesANewBlock(t, ctx, cs, ns, failed, moved, clients[0]) {
		rv.returnedBlock(t, ctx, failed, moved)
		back := waitOnePodOn(t, ctx, ns, "logship", failed)
		t.Logf("the DaemonSet's pod %s runs on %s again with %s", back.Name, failed, back.Status.PodIP)
	}
	if errs := w.errors(); len(errs) > 0 {
		t.Errorf("%d pod events checked; an IP was held twice:\n%s", w.checked(), strings.Join(errs, "\n"))
	} else {
		t.Logf("%d pod events checked: no IP held twice", w.checked())
	}
}

// returnedNodeServesANewBlock (true: the node serves a new block and runs pods again): where
// the failed node's ranges came from an IPPool, the range
// allocator gave the node a fresh block (never one held elsewhere) once it owned none, and a
// pod sent there runs with an address of that block, reachable from another node. A node whose
// ranges were written by hand gets nothing back by itself (cni/README.md, "Address space").
func returnedNodeServesANewBlock(t *testing.T, ctx context.Context, cs versioned.Interface, ns, node string, moved []jkev1.IPRange, from string) bool {
	t.Helper()
	fromPool, podCIDR := false, false
	old := map[string]bool{}
	for _, r := range moved {
		old[r.Spec.CIDR] = true
		fromPool = fromPool || r.Labels[jkev1.LabelIPPool] != ""
		podCIDR = podCIDR || r.Labels[jkev1.LabelIPPool] != "" && goesBackByHand(t, ctx, cs, r)
	}
	if !fromPool {
		t.Logf("%s's ranges were not given by an IPPool: it gets no new block by itself", node)
		return false
	}
	if podCIDR {
		// NodePodCIDR (kind, kubeadm): the node's range was its podCIDR, which the spare holds
		// now; the allocator mirrors nothing else for it (controllers/README.md, IPPool) and
		// says so on the Node, and the node's agent, with no range to serve, reports
		// NetworkUnavailable so nothing is scheduled there. The range goes back to the node
		// when the test restores the cluster.
		ev := waitForPodEvent(t, ctx, "", node, ippool.ReasonPodCIDROverlaps, "") // any object's Events by name: the Node's
		waitNodeCondition(t, ctx, node, corev1.NodeNetworkUnavailable, corev1.ConditionTrue, "StaticIPNoRange")
		if own := rangesOf(t, ctx, cs, node); len(own) > 0 {
			t.Errorf("%s owns %d IPRanges after it came back, want none (its podCIDR is the spare's range now)", node, len(own))
		}
		t.Logf("%s came back with no range (NodePodCIDR: its podCIDR moved to the spare): Event %s %q; NetworkUnavailable=True", node, ippool.ReasonPodCIDROverlaps, ev)
		return false
	}
	var fresh jkev1.IPRange
	if err := framework.WaitFor(ctx, 2*time.Minute, node+" owns a new IPPool block", func(ctx context.Context) (bool, error) {
		for _, r := range rangesOf(t, ctx, cs, node) {
			if !old[r.Spec.CIDR] && r.Labels[jkev1.LabelIPPool] != "" {
				fresh = r
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	if old[fresh.Spec.CIDR] {
		t.Fatalf("%s got back %s, a block that moved to the spare", node, fresh.Spec.CIDR)
	}
	waitRangeServed(t, ctx, cs, fresh.Name)
	name := "back-on-" + node
	if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, testServerPod(name, node, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := f.WaitForPodRunning(ctx, ns, name, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, in := ipIn([]jkev1.IPRange{fresh}, p.Status.PodIP); !in {
		t.Errorf("pod %s on the returned node %s has %s, outside its new block %s", name, node, p.Status.PodIP, fresh.Spec.CIDR)
	}
	if r := reachable(t, ns, from, p.Status.PodIP); r.Pod != name || r.Node != node {
		t.Errorf("%s from %s answered as %s on %s, want %s on %s", p.Status.PodIP, from, r.Pod, r.Node, name, node)
	}
	t.Logf("%s came back with the new block %s (IPRange %s); pod %s runs there with %s", node, fresh.Spec.CIDR, fresh.Name, name, p.Status.PodIP)
	return true
}

// tolerateEverythingDaemonSet runs a DaemonSet on node only (not on the host network,
// tolerating every taint: the shape of log shippers and monitoring agents) and returns its pod
// once it runs there with an IP.
func tolerateEverythingDaemonSet(t *testing.T, ctx context.Context, ns, name, node string) *corev1.Pod {
	t.Helper()
	labels := map[string]string{"app": name}
	spec := testServerPod("", node, nil).Spec
	spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec}}}
	if _, err := f.Client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return waitOnePodOn(t, ctx, ns, name, node)
}

// plainDeployment runs a one-replica Deployment whose pod is on node and returns that pod
// once it runs there with an IP.
func plainDeployment(t *testing.T, ctx context.Context, ns, name, node string) *corev1.Pod {
	t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{Replicas: ptr(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: testServerPod("", node, nil).Spec}}}
	if _, err := f.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return waitOnePodOn(t, ctx, ns, name, node)
}

// waitOnePodOn waits until a pod labelled app=name runs Ready on node with an IP.
func waitOnePodOn(t *testing.T, ctx context.Context, ns, name, node string) *corev1.Pod {
	t.Helper()
	var found *corev1.Pod
	if err := framework.WaitFor(ctx, 3*time.Minute, "a pod of "+name+" Ready on "+node, func(ctx context.Context) (bool, error) {
		pods, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, err
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Spec.NodeName == node && p.DeletionTimestamp == nil && framework.PodReady(p) && p.Status.PodIP != "" {
				found = p
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	return found
}

// controlPlaneTaint keeps ordinary pods off a kubeadm (kind) control plane.
const controlPlaneTaint = "node-role.kubernetes.io/control-plane"

// onlyControlPlaneTaint says whether the node's only taint that keeps pods off is the
// control plane's NoSchedule taint.
func onlyControlPlaneTaint(n corev1.Node) bool {
	found := false
	for _, taint := range n.Spec.Taints {
		switch {
		case taint.Key == controlPlaneTaint && taint.Effect == corev1.TaintEffectNoSchedule:
			found = true
		case taint.Effect == corev1.TaintEffectNoSchedule || taint.Effect == corev1.TaintEffectNoExecute:
			return false
		}
	}
	return found
}

// restoreAfterFailover gives the cluster its shape back for the tests that follow: the set is
// deleted, ranges written by hand or mirrored from the node's podCIDR go back to the failed node (a plain move: same generation,
// the spare drains and the node serves them afresh) while IPPool blocks are unassigned (the node
// has a new block; the allocator returns the old one to the pool), the spare is unclaimed and
// tainted again, the fence and the record are removed.
func restoreAfterFailover(t *testing.T, cs versioned.Interface, ns, failed, spare string, moved []jkev1.IPRange) {
	ctx := context.Background()
	_ = cs.JkeV1alpha1().EnhancedStatefulSets(ns).Delete(ctx, "db", metav1.DeleteOptions{})
	_ = framework.WaitFor(ctx, 2*time.Minute, "the set's pods gone", func(ctx context.Context) (bool, error) {
		pods, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=db"})
		return err == nil && len(pods.Items) == 0, nil
	})
	_ = cs.JkeV1alpha1().NodeFailovers().Delete(ctx, failed, metav1.DeleteOptions{})
	byHand := map[string]bool{}
	for _, r := range moved {
		byHand[r.Name] = goesBackByHand(t, ctx, cs, r)
		if cur, err := cs.JkeV1().IPRanges().Get(ctx, r.Name, metav1.GetOptions{}); err == nil && cur.Spec.Node != failed {
			if !byHand[r.Name] {
				setRangeOwner(t, ctx, cs, r.Name, "", cur.Spec.OwnerGeneration)
				continue
			}
			setRangeOwner(t, ctx, cs, r.Name, failed, cur.Spec.OwnerGeneration)
		}
	}
	unfence := fmt.Sprintf(`{"metadata":{"labels":{%q:null}},"spec":{"taints":[{"key":%q,"value":"true","effect":"NoSchedule"}]}}`,
		jkev1alpha1.LabelFailoverFor, jkev1alpha1.TaintSpare)
	if _, err := f.Client.CoreV1().Nodes().Patch(ctx, spare, types.MergePatchType, []byte(unfence), metav1.PatchOptions{}); err != nil {
		t.Errorf("restore spare %s: %v", spare, err)
	}
	if _, err := f.Client.CoreV1().Nodes().Patch(ctx, failed, types.MergePatchType, []byte(`{"spec":{"taints":null}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("unfence %s: %v", failed, err)
	}
	for _, r := range moved {
		if byHand[r.Name] {
			waitRangeServed(t, ctx, cs, r.Name)
		}
	}
}

// TestPartitionedNodeMovesNothing: a node cut off from everyone for twice the failover window,
// without the out-of-service taint, keeps its ranges and static IPs: no NodeFailover, no range
// or StaticIP rewritten, no IP held twice at any pod event; after the heal its pods run where
// they ran, with their IPs.
func TestPartitionedNodeMovesNothing(t *testing.T) {
	ctx := context.Background()
	ctl := requireNodeControl(t)
	window := failoverWindow(t, ctx)
	requireStaticIPCNI(t, ctx)
	cs := versioned.NewForConfigOrDie(f.Config)
	workers := workloadNodes(t, ctx)
	all, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// One NotReady node of 4 is 25%, under --node-failover-max-unhealthy's default 34%: nothing
	// moves because the node is not fenced, not because failover stopped for too many unhealthy
	// nodes. (The local cluster: 3 workers and a spare; kind: control plane, 2 workers, spare.)
	if len(workers) < 2 || len(all.Items) < 4 {
		t.Skipf("needs 2 workers and 4 nodes in all (one partitioned node of 3 is over --node-failover-max-unhealthy's 34%%), has %d workers of %d nodes", len(workers), len(all.Items))
	}
	cut := workers[1].Name
	ns := f.Namespace(t, "partition")
	w := startIPWatcher(t, ns, cs)
	labelNode(t, ctx, cut, failoverPoolLabel, ns)
	ips := staticSet(t, ctx, cs, ns, "db", ns, 2, cut)
	rangesBefore, err := cs.JkeV1().IPRanges().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sipsBefore, err := cs.JkeV1().StaticIPs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if err := ctl.partition(cut); err != nil {
		t.Fatal(err)
	}
	healed := false
	heal := func() {
		if !healed {
			healed = true
			if err := ctl.heal(cut); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(heal)
	if err := framework.WaitFor(ctx, 3*time.Minute, cut+" NotReady", func(ctx context.Context) (bool, error) {
		n, err := f.Client.CoreV1().Nodes().Get(ctx, cut, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status != corev1.ConditionTrue, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * window)
	rv := optionalRouter(t)
	cutRanges := rangesOf(t, ctx, cs, cut)
	rv.duringPartition(t, ctx, cut, cutRanges)
	if nf, err := cs.JkeV1alpha1().NodeFailovers().Get(ctx, cut, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a NodeFailover exists for the partitioned, unfenced node %s: %+v (%v)", cut, nf.Status, err)
	}
	rangesNow, err := cs.JkeV1().IPRanges().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	specs := func(l *jkev1.IPRangeList) map[string]jkev1.IPRangeSpec {
		m := map[string]jkev1.IPRangeSpec{}
		for _, r := range l.Items {
			m[r.Name] = r.Spec
		}
		return m
	}
	if !reflect.DeepEqual(specs(rangesBefore), specs(rangesNow)) {
		t.Errorf("IPRanges changed during the partition:\nbefore %v\nnow    %v", specs(rangesBefore), specs(rangesNow))
	}
	sipsNow, err := cs.JkeV1().StaticIPs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range sipsBefore.Items {
		if i >= len(sipsNow.Items) || !reflect.DeepEqual(s.Spec, sipsNow.Items[i].Spec) {
			t.Errorf("StaticIP %s changed during the partition", s.Name)
		}
	}

	healedAt := time.Now().Truncate(time.Second)
	heal()
	// Back in shape for the tests that follow: Ready again and no longer tainted unreachable
	// (the node lifecycle controller lifts that a moment after the first heartbeat).
	if err := waitNodeBack(ctx, cut, healedAt, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	after := waitSetOn(t, ctx, ns, "db", len(ips), cut, 3*time.Minute)
	if !reflect.DeepEqual(after, ips) {
		t.Errorf("after the heal: %v, want %v", after, ips)
	}
	rv.afterHeal(t, ctx, cut, cutRanges, ips)
	if errs := w.errors(); len(errs) > 0 {
		t.Errorf("%d pod events checked; an IP was held twice:\n%s", w.checked(), strings.Join(errs, "\n"))
	} else {
		t.Logf("%d pod events checked over %s of partition: no IP held twice", w.checked(), 2*window)
	}
}

// errors are the invariant violations the watcher saw so far.
func (w *ipWatcher) errors() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.errs...)
}
