//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/client-go/util/retry"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/cni/agent"
	"github.com/staticip/staticip/e2e/framework"
)

// TestNodeWithOnlyDrainingRangesTakesNoPods (issue 24, item 4): a pod runs on a node; every
// IPRange of that node is unassigned (node: ""), so they only drain there. The node's agent
// reports NetworkUnavailable=True (StaticIPNoRange), the node lifecycle controller taints it
// network-unavailable, and a new ordinary pod sent to the node stays Pending (unschedulable),
// while the running pod keeps its IP. The ranges assigned back, the condition clears and the
// pending pod runs.
func TestNodeWithOnlyDrainingRangesTakesNoPods(t *testing.T) {
	ctx := context.Background()
	byNode := requireStaticIPCNI(t, ctx)
	cs := versioned.NewForConfigOrDie(f.Config)
	nodes := workloadNodes(t, ctx)
	node := nodes[len(nodes)-1].Name
	ranges := byNode[node]
	if len(ranges) == 0 {
		t.Skipf("node %s owns no IPRange", node)
	}
	// The IPPools that gave the node its blocks would give it a fresh one as soon as it owns
	// none: leave the node out of them for the test (as an operator leaves a node out of the
	// address space), and put the selectors back afterwards.
	for _, r := range ranges {
		if pool := r.Labels[jkev1.LabelIPPool]; pool != "" {
			excludeFromPool(t, ctx, cs, pool, node)
		}
	}
	ns := f.Namespace(t, "netunavail")

	holder := testServerPod("holder", node, nil)
	if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, holder, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running, err := f.WaitForPodRunning(ctx, ns, "holder", 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	for _, r := range ranges {
		setRangeOwner(t, ctx, cs, r.Name, "", r.Spec.OwnerGeneration)
	}
	restored := false
	restore := func() {
		for _, r := range ranges {
			setRangeOwner(t, context.Background(), cs, r.Name, node, r.Spec.OwnerGeneration)
		}
		restored = true
	}
	t.Cleanup(func() {
		if !restored {
			restore()
		}
	})
	waitNodeCondition(t, ctx, node, corev1.NodeNetworkUnavailable, corev1.ConditionTrue, "StaticIPNoRange")
	if err := framework.WaitFor(ctx, 2*time.Minute, "the network-unavailable taint on "+node, func(ctx context.Context) (bool, error) {
		n, err := f.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, taint := range n.Spec.Taints {
			if taint.Key == corev1.TaintNodeNetworkUnavailable && taint.Effect == corev1.TaintEffectNoSchedule {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Errorf("node %s was not tainted %s: %v", node, corev1.TaintNodeNetworkUnavailable, err)
	}

	// A new ordinary pod sent to the node is not placed there.
	if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, testServerPod("newcomer", node, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var msg string
	if err := framework.WaitFor(ctx, 2*time.Minute, "newcomer unschedulable", func(ctx context.Context) (bool, error) {
		p, err := f.Client.CoreV1().Pods(ns).Get(ctx, "newcomer", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("newcomer was placed on %s, whose ranges all drain", p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
				msg = c.Message
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	switch {
	case strings.Contains(msg, "network-unavailable"), strings.Contains(msg, "no usable IP range"):
	case strings.Contains(msg, "untolerated taint"):
		// kube-scheduler 1.36 names no taint ("node(s) had untolerated taint(s)"): then the
		// network-unavailable taint must be the only one on the node that keeps the pod off.
		n, err := f.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, taint := range n.Spec.Taints {
			if taint.Key != corev1.TaintNodeNetworkUnavailable && taint.Effect != corev1.TaintEffectPreferNoSchedule {
				t.Errorf("newcomer's FailedScheduling says %q; node %s is tainted %s besides %s", msg, node, taint.ToString(), corev1.TaintNodeNetworkUnavailable)
			}
		}
	default:
		t.Errorf("newcomer's FailedScheduling says %q; want the network-unavailable taint or the staticip refusal", msg)
	}
	// The running pod keeps its IP (its range drains).
	if p, err := f.Client.CoreV1().Pods(ns).Get(ctx, "holder", metav1.GetOptions{}); err != nil || p.Status.PodIP != running.Status.PodIP || !framework.PodReady(p) {
		t.Errorf("the holder pod changed while its range drained: %v %+v", err, p.Status)
	}

	drainingRangeStaysReachable(t, ctx, cs, ns, node, running, ranges, nodes)

	restore()
	waitNodeCondition(t, ctx, node, corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "StaticIPRangeReady")
	if p, err := f.WaitForPodRunning(ctx, ns, "newcomer", 3*time.Minute); err != nil {
		t.Errorf("newcomer did not run once the node had its ranges back: %v", err)
	} else if p.Spec.NodeName != node {
		t.Errorf("newcomer runs on %s, want %s", p.Spec.NodeName, node)
	}
}

// drainingRangeStaysReachable (issue 37, defect 1): a range that moved away stays routed via the
// node whose pod still holds an address of it — from a pod on another node and from the API server
// (pods/proxy) — while it is unassigned, and while it is assigned to another node that waits for
// it to drain. Before, no node and not the control plane routed it: the holder pod was cut off.
// It leaves the range unassigned again.
func drainingRangeStaysReachable(t *testing.T, ctx context.Context, cs versioned.Interface, ns, node string, holder *corev1.Pod, ranges []jkev1.IPRange, nodes []corev1.Node) {
	t.Helper()
	other := ""
	for _, n := range nodes {
		if n.Name != node {
			other = n.Name
			break
		}
	}
	if other == "" {
		t.Errorf("draining-range reachability not checked: no second node takes ordinary pods")
		return
	}
	var held *jkev1.IPRange
	ip := netip.MustParseAddr(holder.Status.PodIP)
	for i := range ranges {
		if pfx, err := netip.ParsePrefix(ranges[i].Spec.CIDR); err == nil && pfx.Contains(ip) {
			held = &ranges[i]
		}
	}
	if held == nil {
		t.Fatalf("the holder's IP %s lies in no IPRange of node %s", ip, node)
	}
	if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, testServerPod("client", other, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WaitForPodRunning(ctx, ns, "client", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		if r := reachable(t, ns, "client", ip.String()); r.Pod != "holder" || r.Node != node {
			t.Errorf("%s: %s from a pod on %s answered as %s on %s, want holder on %s", when, ip, other, r.Pod, r.Node, node)
		}
		if r := answersThroughAPIServer(t, ctx, ns, "holder"); r.Pod != "holder" {
			t.Errorf("%s: the holder through the API server's pod proxy answered as %s", when, r.Pod)
		}
	}
	check(fmt.Sprintf("IPRange %s unassigned", held.Name))
	setRangeOwner(t, ctx, cs, held.Name, other, held.Spec.OwnerGeneration)
	if err := framework.WaitFor(ctx, time.Minute, "IPRange "+held.Name+" waiting for "+node, func(ctx context.Context) (bool, error) {
		r, err := cs.JkeV1().IPRanges().Get(ctx, held.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range r.Status.Conditions {
			if c.Type == agent.ConditionSynced {
				return c.Reason == agent.ReasonWaitingForPreviousOwner && strings.Contains(c.Message, node), nil
			}
		}
		return false, nil
	}); err != nil {
		t.Errorf("assigned to %s while %s's pod holds %s: %v", other, node, ip, err)
	}
	check(fmt.Sprintf("IPRange %s assigned to %s, which waits", held.Name, other))
	setRangeOwner(t, ctx, cs, held.Name, "", held.Spec.OwnerGeneration)
}

// excludeFromPool adds "kubernetes.io/hostname NotIn [node]" to IPPool pool's node selector
// until the test ends.
func excludeFromPool(t *testing.T, ctx context.Context, cs versioned.Interface, pool, node string) {
	t.Helper()
	p, err := cs.JkeV1().IPPools().Get(ctx, pool, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := p.Spec.NodeSelector.DeepCopy()
	sel := p.Spec.NodeSelector.DeepCopy()
	if sel == nil {
		sel = &metav1.LabelSelector{}
	}
	sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{
		Key: corev1.LabelHostname, Operator: metav1.LabelSelectorOpNotIn, Values: []string{node}})
	p.Spec.NodeSelector = sel
	if _, err := cs.JkeV1().IPPools().Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("leave %s out of IPPool %s: %v", node, pool, err)
	}
	t.Cleanup(func() {
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p, err := cs.JkeV1().IPPools().Get(context.Background(), pool, metav1.GetOptions{})
			if err != nil {
				return err
			}
			p.Spec.NodeSelector = before
			_, err = cs.JkeV1().IPPools().Update(context.Background(), p, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Errorf("restore IPPool %s's node selector: %v", pool, err)
		}
	})
}

// waitNodeCondition waits until the node's condition typ has status and reason.
func waitNodeCondition(t *testing.T, ctx context.Context, node string, typ corev1.NodeConditionType, status corev1.ConditionStatus, reason string) {
	t.Helper()
	var last *corev1.NodeCondition
	if err := framework.WaitFor(ctx, 2*time.Minute, fmt.Sprintf("node %s %s=%s", node, typ, status), func(ctx context.Context) (bool, error) {
		n, err := f.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for i := range n.Status.Conditions {
			if c := &n.Status.Conditions[i]; c.Type == typ {
				last = c
				return c.Status == status && c.Reason == reason, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("node %s: %s %+v, want %s/%s: %v", node, typ, last, status, reason, err)
	}
}
