//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// TestSchedulerPinsPodToNodeOwningItsIP runs on a cluster whose default scheduler is
// staticip-scheduler (the local cluster's default): a pod annotated with an IP inside the
// IPRange of the last node runs on that node, whatever else would fit, and a pod with a
// malformed annotation stays Pending with a FailedScheduling event that names the problem.
func TestSchedulerPinsPodToNodeOwningItsIP(t *testing.T) {
	ctx := context.Background()
	nodes := readyNodes(t, ctx)
	target := nodes[len(nodes)-1]
	if target.Spec.PodCIDR == "" {
		t.Skipf("node %s has no podCIDR to carve an IPRange from", target.Name)
	}
	cs := versioned.NewForConfigOrDie(f.Config)
	ns := f.Namespace(t, "e2e-sched")

	// The IP comes from an IPRange of the target node: its own when the cluster has one per
	// node (the staticip CNI), else a /28 at the top of its pod CIDR made for this test.
	prefix := strings.TrimSuffix(target.Spec.PodCIDR, "0/24")
	rangeCIDR := prefix + "240/28"
	list, err := cs.JkeV1().IPRanges().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owned := false
	for _, r := range list.Items {
		if r.Spec.Node == target.Name && r.Spec.CIDR == target.Spec.PodCIDR {
			owned, rangeCIDR = true, r.Spec.CIDR
		}
	}
	if !owned {
		rangeName := "e2e-" + ns
		if _, err := cs.JkeV1().IPRanges().Create(ctx, &jkev1.IPRange{
			ObjectMeta: metav1.ObjectMeta{Name: rangeName},
			Spec:       jkev1.IPRangeSpec{CIDR: rangeCIDR, Node: target.Name},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create IPRange: %v", err)
		}
		t.Cleanup(func() { _ = cs.JkeV1().IPRanges().Delete(context.Background(), rangeName, metav1.DeleteOptions{}) })
	}

	pinned := testServerPod("pinned", "", nil)
	pinned.Spec.NodeSelector = nil
	pinned.Annotations = map[string]string{jkev1.AnnotationIPAddress: prefix + "245"}
	if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, pinned, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bad := testServerPod("badip", "", nil)
	bad.Spec.NodeSelector = nil
	bad.Annotations = map[string]string{jkev1.AnnotationIPAddress: prefix + "999"}
	if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	running, err := f.WaitForPodRunning(ctx, ns, "pinned", 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if running.Spec.NodeName != target.Name {
		t.Fatalf("pod annotated with %s ran on %s, want %s (owner of IPRange %s)",
			prefix+"245", running.Spec.NodeName, target.Name, rangeCIDR)
	}
	t.Logf("pod annotated with %s scheduled onto %s, the IPRange owner", prefix+"245", running.Spec.NodeName)

	waitForPodEvent(t, ctx, ns, "badip", "FailedScheduling", fmt.Sprintf("invalid annotation %s=%q", jkev1.AnnotationIPAddress, prefix+"999"))
	p, err := f.Client.CoreV1().Pods(ns).Get(ctx, "badip", metav1.GetOptions{})
	if err != nil || p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
		t.Fatalf("badip must stay Pending and unbound: node %q phase %q (%v)", p.Spec.NodeName, p.Status.Phase, err)
	}
}
