//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/podip"
)

// TestSchedulerPinsPodToNodeOwningItsIP runs on a cluster whose default scheduler is
// staticip-scheduler (the local cluster's default): a pod annotated with an IP inside the
// IPRange of the last node runs on that node, whatever else would fit, and a pod with a
// malformed annotation is refused at admission (the ValidatingAdmissionPolicy
// staticip-ip-address) or, on a cluster installed without it, stays Pending with a
// FailedScheduling event that names the problem.
func TestSchedulerPinsPodToNodeOwningItsIP(t *testing.T) {
	ctx := context.Background()
	nodes := workloadNodes(t, ctx)
	target := nodes[len(nodes)-1]
	cs := versioned.NewForConfigOrDie(f.Config)
	ns := f.IPRequestNamespace(t, "e2e-sched")

	// The IP comes from an IPRange of the target node: its own when it has one (the staticip
	// CNI: the IPPool allocator's block, or the podCIDR mirrored), else a /28 at the top of its
	// pod CIDR made for this test.
	list, err := cs.JkeV1().IPRanges().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var rangeCIDR, prefix string
	for _, r := range list.Items {
		if r.Spec.Node == target.Name && strings.HasSuffix(r.Spec.CIDR, ".0/24") {
			rangeCIDR, prefix = r.Spec.CIDR, strings.TrimSuffix(r.Spec.CIDR, "0/24")
			break
		}
	}
	if rangeCIDR == "" {
		if target.Spec.PodCIDR == "" {
			t.Skipf("node %s owns no IPv4 /24 IPRange and has no podCIDR to carve one from", target.Name)
		}
		prefix = strings.TrimSuffix(target.Spec.PodCIDR, "0/24")
		rangeCIDR = prefix + "240/28"
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
	pinned.Annotations = map[string]string{podip.AnnotationIPAddress: prefix + "245"}
	if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, pinned, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bad := testServerPod("badip", "", nil)
	bad.Spec.NodeSelector = nil
	bad.Annotations = map[string]string{podip.AnnotationIPAddress: prefix + "999"}
	badAdmitted := createUnlessAdmissionRefusesTheAddress(t, ctx, ns, bad)

	running, err := f.WaitForPodRunning(ctx, ns, "pinned", 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if running.Spec.NodeName != target.Name {
		t.Fatalf("pod annotated with %s ran on %s, want %s (owner of IPRange %s)",
			prefix+"245", running.Spec.NodeName, target.Name, rangeCIDR)
	}
	t.Logf("pod annotated with %s scheduled onto %s, the IPRange owner", prefix+"245", running.Spec.NodeName)

	if !badAdmitted {
		return
	}
	waitForPodEvent(t, ctx, ns, "badip", "FailedScheduling", fmt.Sprintf("invalid annotation %s=%q", podip.AnnotationIPAddress, prefix+"999"))
	p, err := f.Client.CoreV1().Pods(ns).Get(ctx, "badip", metav1.GetOptions{})
	if err != nil || p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
		t.Fatalf("badip must stay Pending and unbound: node %q phase %q (%v)", p.Spec.NodeName, p.Status.Phase, err)
	}
}

// TestSchedulerKeepsRoomForADeletedStaticIPPod is issue 5's scenario with real kubelets: a
// static-IP pod requesting most of a node's CPU runs there; while it is deleted (its StaticIP
// still names the node and records its requests, as the StaticIP controller does), a pod that
// would fit the freed CPU is kept off that node with a reason naming the reservation; the
// recreated pod lands back on the same node with the same IP; once the StaticIP is gone too,
// the other pod fits — so the reservation, and nothing else, held the room.
func TestSchedulerKeepsRoomForADeletedStaticIPPod(t *testing.T) {
	ctx := context.Background()
	rangesByNode := requireStaticIPCNI(t, ctx)
	nodes := workloadNodes(t, ctx)
	target := nodes[len(nodes)-1]
	if len(rangesByNode[target.Name]) == 0 {
		t.Fatalf("node %s has no IPRange", target.Name)
	}
	ip := hostInRange(t, rangesByNode[target.Name][0], 210)
	ns := f.IPRequestNamespace(t, "e2e-sched-keep")
	cs := versioned.NewForConfigOrDie(f.Config)
	pods := f.Client.CoreV1().Pods(ns)

	// "big" takes 60% of the node's allocatable CPU, "filler" 50%: either fits alone on the
	// otherwise nearly idle node, both never do.
	alloc := target.Status.Allocatable.Cpu().MilliValue()
	bigCPU := resource.NewMilliQuantity(alloc*6/10, resource.DecimalSI)
	fillerCPU := resource.NewMilliQuantity(alloc*5/10, resource.DecimalSI)
	if _, err := cs.JkeV1().StaticIPs(ns).Create(ctx, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: "big"},
		Spec: jkev1.StaticIPSpec{IP: ip, Node: target.Name, Pod: "big", Resources: corev1.ResourceList{corev1.ResourceCPU: *bigCPU}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	big := func() *corev1.Pod {
		p := testServerPod("big", "", nil)
		p.Spec.NodeSelector = nil
		p.Annotations = map[string]string{jkev1.AnnotationEnable: "true", podip.AnnotationIPAddress: ip}
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: *bigCPU}
		return p
	}
	runPodOn(t, ctx, ns, big(), target.Name, ip)
	t.Logf("big (cpu %s) runs on %s with %s", bigCPU, target.Name, ip)
	deletePodAndWait(t, ctx, ns, "big")

	filler := testServerPod("filler", target.Name, nil)
	filler.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: *fillerCPU}
	if _, err := pods.Create(ctx, filler, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	msg := waitForPodEvent(t, ctx, ns, "filler", "FailedScheduling", "reserved for absent static-IP pods")
	t.Logf("filler (cpu %s) kept off %s: %s", fillerCPU, target.Name, msg)
	if p, err := pods.Get(ctx, "filler", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("filler must stay unbound while big's reservation holds: node %q (%v)", p.Spec.NodeName, err)
	}

	runPodOn(t, ctx, ns, big(), target.Name, ip)
	t.Logf("recreated: big runs on %s with %s again", target.Name, ip)

	// Without the pod and its StaticIP, nothing holds the CPU any more: filler is scheduled.
	if err := pods.Delete(ctx, "big", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.JkeV1().StaticIPs(ns).Delete(ctx, "big", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := f.WaitForPodRunning(ctx, ns, "filler", 2*time.Minute)
	if err != nil {
		t.Fatalf("filler was not scheduled once the reservation was gone: %v", err)
	}
	if p.Spec.NodeName != target.Name {
		t.Fatalf("filler runs on %s, want %s", p.Spec.NodeName, target.Name)
	}
}
