//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/e2e/framework"
	"github.com/staticip/staticip/tools/localcluster/cluster"
)

// TestNodeThatJoinsGetsABlock (issue 24): a node joins the cluster — here the spare, powered
// off, its Node object deleted and its block returned to the pool, then booted: its kubelet
// registers a new Node — and, with nobody writing an IPRange, the range allocator gives it a
// block of the IPPool, its agent serves it, the node turns Ready and a pod sent there runs with
// an address of that block. Logs Node created → IPRange created → Synced.
func TestNodeThatJoinsGetsABlock(t *testing.T) {
	ctx := context.Background()
	f.RequireLocalCluster(t, "the Blocks allocator choosing a joining node's block (kind's IPPool mirrors the podCIDR kube-controller-manager gives, NodePodCIDR, where a node's rejoin was not tried)")
	ctl := requireNodeControl(t)
	byNode := requireStaticIPCNI(t, ctx)
	cs := versioned.NewForConfigOrDie(f.Config)
	nodes, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var joiner *corev1.Node
	for i := range nodes.Items {
		if n := &nodes.Items[i]; n.Labels[cluster.SpareLabel] == "true" && len(byNode[n.Name]) > 0 {
			joiner = n
		}
	}
	if joiner == nil {
		t.Skip("no spare node with an IPRange (localcluster up --spare-nodes=1): the test makes the spare join anew")
	}
	for _, r := range byNode[joiner.Name] {
		if r.Labels[jkev1.LabelIPPool] == "" {
			t.Skipf("IPRange %s of %s was written by hand, not given by an IPPool", r.Name, joiner.Name)
		}
	}
	name, netns := joiner.Name, joiner.Annotations[cluster.NetnsAnnotation]

	// Its route report (issue 37) is owned by its Node, so that it goes with it.
	waitRouteReportOwner(t, ctx, name, joiner.UID)

	// The node leaves: powered off, its Node object and its block gone (the allocator would
	// return the block after the pool's releaseAfter; the test does not wait for that).
	ctl.stop(t, name)
	started := false
	t.Cleanup(func() {
		if !started {
			ctl.start(t, name)
		}
	})
	if err := f.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Its block is returned only once the allocator has seen the Node go (it marks the block
	// node-gone-since), as an operator returns a gone node's block. Deleted earlier, the block
	// could reach the allocator's cache before the Node's deletion did, and the allocator gave
	// the node — still live there — a fresh block (CI of 7240e5d: "Node node-4 and its
	// IPRanges gone" timed out; see the issue 30 note).
	if err := framework.WaitFor(ctx, time.Minute, "the allocator marking "+name+"'s blocks "+jkev1.AnnotationNodeGoneSince, func(ctx context.Context) (bool, error) {
		for _, r := range rangesOf(t, ctx, cs, name) {
			if r.Annotations[jkev1.AnnotationNodeGoneSince] == "" {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, r := range byNode[name] {
		if err := cs.JkeV1().IPRanges().Delete(ctx, r.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	if err := framework.WaitFor(ctx, time.Minute, "Node "+name+" and its IPRanges gone", func(ctx context.Context) (bool, error) {
		if _, err := f.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, nil
		}
		return len(rangesOf(t, ctx, cs, name)) == 0, nil
	}); err != nil {
		t.Fatal(err)
	}
	// The garbage collector removes the gone Node's route report (else every node an autoscaler
	// ever removed would keep a Lease the failover controller reads).
	if err := framework.WaitFor(ctx, time.Minute, "Node "+name+"'s route-report Lease gone with it", func(ctx context.Context) (bool, error) {
		_, err := f.Client.CoordinationV1().Leases(jkev1.NamespaceRouteReports).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal(err)
	}

	// The node joins: NodeStart waits until it is Ready, which it only is once it serves a range.
	ctl.start(t, name)
	started = true
	if netns != "" {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, cluster.NetnsAnnotation, netns)
		if _, err := f.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	node, err := f.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitRouteReportOwner(t, ctx, name, node.UID)
	ranges := rangesOf(t, ctx, cs, name)
	if len(ranges) != 1 || ranges[0].Labels[jkev1.LabelIPPool] == "" {
		t.Fatalf("the joined node %s owns %d IPRanges (%v), want one block of an IPPool", name, len(ranges), ranges)
	}
	block := ranges[0]
	waitRangeServed(t, ctx, cs, block.Name)
	block = rangesOf(t, ctx, cs, name)[0]
	synced := time.Time{}
	for _, c := range block.Status.Conditions {
		if c.Type == "Synced" {
			synced = c.LastTransitionTime.Time
		}
	}
	t.Logf("Node %s created %s; IPRange %s (%s) created +%s, Synced +%s (API timestamps, whole seconds)", name,
		node.CreationTimestamp.UTC().Format("15:04:05"), block.Name, block.Spec.CIDR,
		block.CreationTimestamp.Sub(node.CreationTimestamp.Time), synced.Sub(node.CreationTimestamp.Time))

	ns := f.Namespace(t, "ippool-join")
	p := testServerPod("joined", name, nil)
	p.Spec.Tolerations = []corev1.Toleration{{Key: cluster.SpareTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running, err := f.WaitForPodRunning(ctx, ns, "joined", 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if running.Spec.NodeName != name {
		t.Fatalf("pod runs on %s, want %s", running.Spec.NodeName, name)
	}
	if _, in := ipIn([]jkev1.IPRange{block}, running.Status.PodIP); !in {
		t.Errorf("pod on the joined node has %s, outside its block %s", running.Status.PodIP, block.Spec.CIDR)
	}
	if r := answersThroughAPIServer(t, ctx, ns, "joined"); r.Pod != "joined" {
		t.Errorf("the joined node's pod through the API server's pod proxy answered as %q", r.Pod)
	}
}

// waitRouteReportOwner waits until node's route-report Lease is owned by the Node of that UID
// alone (its agent writes the owner on its next pass).
func waitRouteReportOwner(t *testing.T, ctx context.Context, node string, uid types.UID) {
	t.Helper()
	var last []metav1.OwnerReference
	if err := framework.WaitFor(ctx, time.Minute, "Node "+node+"'s route-report Lease owned by the Node "+string(uid), func(ctx context.Context) (bool, error) {
		l, err := f.Client.CoordinationV1().Leases(jkev1.NamespaceRouteReports).Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = l.OwnerReferences
		return len(last) == 1 && last[0].Kind == "Node" && last[0].Name == node && last[0].UID == uid, nil
	}); err != nil {
		t.Fatalf("%v (owners %+v)", err, last)
	}
}
