//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/cni/agent"
	"github.com/staticip/staticip/e2e/framework"
	"github.com/staticip/staticip/tools/localcluster/cluster"
)

// Node failover (issue 16). The power and link of a node (nodecontrol_test.go): the local
// cluster's (`localcluster node stop|start|partition|heal`) or kind's (docker kill/start,
// network disconnect/connect); elsewhere — a real cluster — these tests skip with the reason.

// waitObserved waits until node routes rangeName the way want ("<node>/<ownerGeneration>")
// says: the range's holder claims it at that generation (its entry of status.holders) and node
// routes the range's CIDR via that holder's InternalIP. (An agent's route report, its Lease in
// staticip-node-routes, lists another node's range only while node failover waits for it, so
// the route itself is what is checked.)
func waitObserved(t *testing.T, ctx context.Context, node, rangeName, want string, timeout time.Duration) {
	t.Helper()
	i := strings.LastIndexByte(want, '/')
	holder, gen := want[:i], want[i+1:]
	shell, why, err := f.NodeShell(ctx, node)
	if err != nil || shell == nil {
		t.Fatalf("into %s's network namespace: %v %s", node, err, why)
	}
	via := internalIP(t, ctx, holder)
	cs := versioned.NewForConfigOrDie(f.Config)
	var last string
	if err := framework.WaitFor(ctx, timeout, fmt.Sprintf("node %s to route IPRange %s via %s (%s)", node, rangeName, holder, want), func(ctx context.Context) (bool, error) {
		r, err := cs.JkeV1().IPRanges().Get(ctx, rangeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		claimed := false
		for _, h := range r.Status.Holders {
			claimed = claimed || (h.Node == holder && fmt.Sprint(h.Generation) == gen)
		}
		out, err := shell.Exec("ip", "-4", "route", "show", "root", r.Spec.CIDR)
		last = fmt.Sprintf("holders %+v, routes %q", r.Status.Holders, out)
		return claimed && err == nil && (node == holder || strings.Contains(out, " via "+via+" ")), nil
	}); err != nil {
		t.Fatalf("%v (last: %s)", err, last)
	}
}

// waitRangeServed waits until the IPRange's owner reports it Synced at its current generation.
func waitRangeServed(t *testing.T, ctx context.Context, cs versioned.Interface, name string) {
	t.Helper()
	if err := framework.WaitFor(ctx, 2*time.Minute, "IPRange "+name+" Synced at its generation", func(ctx context.Context) (bool, error) {
		r, err := cs.JkeV1().IPRanges().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if r.Status.ObservedGeneration != r.Generation {
			return false, nil
		}
		for _, c := range r.Status.Conditions {
			if c.Type == agent.ConditionSynced && c.ObservedGeneration == r.Generation {
				return c.Status == metav1.ConditionTrue, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// setRangeOwner does what node failover does to a range (one update: spec.node and
// spec.ownerGeneration), or, with the same generation, what an operator's plain move does.
func setRangeOwner(t *testing.T, ctx context.Context, cs versioned.Interface, name, node string, gen int64) {
	t.Helper()
	// Read-change-write, again on a conflict: the agents' status writes move the resourceVersion.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		r, err := cs.JkeV1().IPRanges().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if r.Spec.Node != "" && node != "" && r.Spec.Node != node && gen == r.Spec.OwnerGeneration {
			// The API server refuses a move straight from one node to another at the same
			// generation (issue 24): unassign first; the new node serves the range once the old
			// one has drained it.
			r.Spec.Node = ""
			if r, err = cs.JkeV1().IPRanges().Update(ctx, r, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		r.Spec.Node, r.Spec.OwnerGeneration = node, gen
		_, err = cs.JkeV1().IPRanges().Update(ctx, r, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// goesBackByHand says whether a range a test moved away from its node is given back to that
// node afterwards: a range written by hand, or the mirror of the node's podCIDR (an IPPool in
// NodePodCIDR mode: kube-controller-manager gave the node that very CIDR, so the allocator
// mirrors nothing for the node while the range is held elsewhere — Event
// PodCIDROverlapsIPRange — and it never gets another). A block of an IPPool in Blocks mode is
// not: the node gets a fresh block from the allocator meanwhile.
func goesBackByHand(t *testing.T, ctx context.Context, cs versioned.Interface, rng jkev1.IPRange) bool {
	t.Helper()
	pool := rng.Labels[jkev1.LabelIPPool]
	if pool == "" {
		return true
	}
	p, err := cs.JkeV1().IPPools().Get(ctx, pool, metav1.GetOptions{})
	if err != nil {
		t.Errorf("IPPool %s of IPRange %s: %v", pool, rng.Name, err)
		return false
	}
	return p.Spec.Mode == jkev1.IPPoolNodePodCIDR
}

// giveBack undoes a test's move of rng away from node: a range written by hand or mirrored from
// the node's podCIDR goes back (a plain move at the same generation: the holder drains, the node
// serves it afresh); an IPPool block is unassigned instead — the node got a new block from the
// allocator meanwhile, and the allocator returns the old one to the pool — and the test waits
// until the node serves a range.
func giveBack(t *testing.T, ctx context.Context, cs versioned.Interface, rng jkev1.IPRange, node string, gen int64) {
	t.Helper()
	if goesBackByHand(t, ctx, cs, rng) {
		setRangeOwner(t, ctx, cs, rng.Name, node, gen)
		waitRangeServed(t, ctx, cs, rng.Name)
		return
	}
	setRangeOwner(t, ctx, cs, rng.Name, "", gen)
	if err := framework.WaitFor(ctx, 2*time.Minute, "node "+node+" owns an IPRange again", func(ctx context.Context) (bool, error) {
		list, err := cs.JkeV1().IPRanges().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, r := range list.Items {
			if r.Spec.Node == node {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Error(err)
	}
}

// hostRoutesInto lists the routes of a node's network namespace into cidr other than the agent's route of
// the whole range (what would make the node answer for addresses of the range itself).
func hostRoutesInto(t *testing.T, node *framework.NodeShell, cidr string) []string {
	t.Helper()
	out, err := node.Exec("ip", "-4", "route", "show", "root", cidr)
	if err != nil {
		t.Fatal(err)
	}
	var own []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" || strings.HasPrefix(line, cidr+" via ") {
			continue
		}
		own = append(own, line)
	}
	return own
}

// spareOrOther picks the node that takes a range over: a failover spare when the cluster has
// one, else another worker.
func spareOrOther(t *testing.T, ctx context.Context, not string) string {
	t.Helper()
	nodes, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := ""
	for _, n := range nodes.Items {
		if n.Name == not {
			continue
		}
		if n.Labels[cluster.SpareLabel] == "true" {
			return n.Name
		}
		if other == "" {
			other = n.Name
		}
	}
	if other == "" {
		t.Skip("needs a second node")
	}
	return other
}

// The node side of failover, end to end on real nodes, with the test in the failover
// controller's place (it moves the range as the controller does, so this runs with or without
// the nodefailover controller): a node with a running pod is powered off; its IPRange is moved to
// another node at ownership generation + 1; a pod there gets the old pod's IP and answers on it
// from another node. Then the old node boots on its old state — its IPAM database still holds
// the old pod's allocation, its netns the old sandbox's veth and /32 route — and its agent
// withdraws all of it: no route into the range but the agent's one via the new owner, the
// address reached from the old node is the new pod, the node reports the new owner, and an
// Event RangeRevoked says so.
func TestReturningNodeServesNoneOfItsMovedRange(t *testing.T) {
	ctx := context.Background()
	ctl := requireNodeControl(t)
	byNode := requireStaticIPCNI(t, ctx)
	cs := versioned.NewForConfigOrDie(f.Config)
	workers := workloadNodes(t, ctx)
	if len(workers) < 2 {
		t.Skipf("needs 2 workers, the cluster has %d", len(workers))
	}
	old, observer := workers[len(workers)-1].Name, workers[0].Name
	target := spareOrOther(t, ctx, old)
	if len(byNode[old]) != 1 {
		t.Skipf("node %s has %d IPRanges, this test moves exactly one", old, len(byNode[old]))
	}
	rng := byNode[old][0]
	oldShell, why, err := f.NodeShell(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if oldShell == nil {
		t.Skipf("no way into node %s's network namespace here: %s", old, why)
	}
	ns := f.IPRequestNamespace(t, "failover-node")

	// A pod on the old node, and a client on another.
	victim := testServerPod("victim", old, nil)
	if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, victim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vp, err := f.WaitForPodRunning(ctx, ns, "victim", 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ip := vp.Status.PodIP
	if _, ok := ipIn([]jkev1.IPRange{rng}, ip); !ok {
		t.Fatalf("victim's IP %s is not in %s's IPRange %s (%s)", ip, old, rng.Name, rng.Spec.CIDR)
	}
	client := testServerPod("client", observer, nil)
	if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, client, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WaitForPodRunning(ctx, ns, "client", 2*time.Minute); err != nil {
		t.Fatal(err)
	}

	// Power-off; the range moves as failover moves it; the pod object goes as pod GC
	// force-deletes it once the node is fenced.
	ctl.stop(t, old)
	started := false
	t.Cleanup(func() {
		if !started {
			ctl.start(t, old)
		}
	})
	gen := rng.Spec.OwnerGeneration + 1
	setRangeOwner(t, ctx, cs, rng.Name, target, gen)
	t.Cleanup(func() {
		// Give the range back (a plain move: same generation); the old node serves it afresh.
		_ = f.Client.CoreV1().Pods(ns).Delete(context.Background(), "heir", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
		_ = framework.WaitFor(context.Background(), time.Minute, "heir gone", func(ctx context.Context) (bool, error) {
			_, err := f.Client.CoreV1().Pods(ns).Get(ctx, "heir", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		giveBack(t, context.Background(), cs, rng, old, gen)
	})
	if err := f.Client.CoreV1().Pods(ns).Delete(ctx, "victim", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitRangeServed(t, ctx, cs, rng.Name)
	waitObserved(t, ctx, observer, rng.Name, fmt.Sprintf("%s/%d", target, gen), time.Minute)

	// The IP lives on at the target.
	heir := testServerPod("heir", target, nil)
	heir.Annotations = map[string]string{podip.AnnotationIPAddress: ip}
	heir.Spec.Tolerations = []corev1.Toleration{{Key: cluster.SpareTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	runPodOn(t, ctx, ns, heir, target, ip)
	if r := reachable(t, ns, "client", ip); r.Pod != "heir" {
		t.Fatalf("%s from %s answered as %q, want heir", ip, observer, r.Pod)
	}
	// ... and from the control plane: the API server reaches the heir where the range is now.
	if r := answersThroughAPIServer(t, ctx, ns, "heir"); r.Pod != "heir" || r.Node != target {
		t.Errorf("heir through the API server's pod proxy answered as %s on %s, want heir on %s", r.Pod, r.Node, target)
	}

	// The old node boots on its old state.
	ctl.start(t, old)
	started = true
	waitObserved(t, ctx, old, rng.Name, fmt.Sprintf("%s/%d", target, gen), 2*time.Minute)
	if own := hostRoutesInto(t, oldShell, rng.Spec.CIDR); len(own) > 0 {
		t.Errorf("node %s still routes into its former range %s itself: %v", old, rng.Spec.CIDR, own)
	}
	if out, err := oldShell.Exec("ip", "-4", "route", "get", ip); err != nil || !strings.Contains(out, "via "+internalIP(t, ctx, target)+" ") {
		t.Errorf("node %s's route to %s: %q (%v), want the agent's route via %s", old, ip, out, err, target)
	}
	waitForRangeEvent(t, ctx, rng.Name, agent.ReasonRangeRevoked, old)
	if r := reachable(t, ns, "client", ip); r.Pod != "heir" || r.Node != target {
		t.Errorf("after %s came back, %s answered as %s on %s, want heir on %s", old, ip, r.Pod, r.Node, target)
	}
}

// reachable asks the testserver at ip from pod from.
func reachable(t *testing.T, ns, from, ip string) reply {
	t.Helper()
	var out string
	var err error
	for i := 0; i < 20; i++ { // routes converge within an agent pass
		if out, err = f.ExecInPod(ns, from, "/testserver", "get", "--timeout=2s", url(ip, 8080)); err == nil {
			return parseReply(t, out)
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("%s from %s: %v: %s", ip, from, err, out)
	return reply{}
}

// answersThroughAPIServer asks pod's testserver through the API server's pod proxy
// (pods/proxy: the API server connects to the pod's IP itself, as it does for webhooks and
// aggregated APIs): the control plane's route into the pod's range must follow the range
// wherever it is now — on the local cluster through the datacenter router, by the BGP
// announcement of the node that serves it. Retried for 30 s (a moved or new range is announced
// within an agent pass).
func answersThroughAPIServer(t *testing.T, ctx context.Context, ns, pod string) reply {
	t.Helper()
	var out []byte
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		out, err = f.Client.CoreV1().Pods(ns).ProxyGet("http", pod, "8080", "/", nil).DoRaw(rctx)
		cancel()
		if err == nil {
			return parseReply(t, string(out))
		}
	}
	t.Fatalf("pod %s/%s through the API server's pod proxy: %v: %s", ns, pod, err, out)
	return reply{}
}

// waitForRangeEvent waits for an Event with reason on the IPRange whose message names node.
func waitForRangeEvent(t *testing.T, ctx context.Context, rangeName, reason, node string) {
	t.Helper()
	if err := framework.WaitFor(ctx, time.Minute, reason+" Event on IPRange "+rangeName, func(ctx context.Context) (bool, error) {
		evs, err := f.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + rangeName + ",reason=" + reason})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, "node "+node+" ") {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Error(err)
	}
}

func internalIP(t *testing.T, ctx context.Context, node string) string {
	t.Helper()
	n, err := f.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	t.Fatalf("node %s has no InternalIP", node)
	return ""
}
