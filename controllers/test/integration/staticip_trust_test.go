package integration

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/podip"
)

// TestStaticIPRecordsOnlyIPsOfTheNodesRanges (issue 37, defect 6): a pod's reported IP is
// recorded into its StaticIP only when it lies in an IPRange of the pod's node. A node that
// reports (compromised, or misconfigured) an address of another node's range for an enabled
// workload's pod does not pin it: the record keeps no IP and says why (Conflict
// IPOutsideNodeRanges, naming the IP, the node and the range that owns it). The other pod,
// with an address of its node's range, is recorded as ever.
func TestStaticIPRecordsOnlyIPsOfTheNodesRanges(t *testing.T) {
	f := newFixture(t)
	other := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-node-b"}, Spec: jkev1.IPRangeSpec{CIDR: "10.79.0.0/24", Node: "node-b"}}
	if _, err := f.client.JkeV1().IPRanges().Create(f.ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.client.JkeV1().IPRanges().Delete(context.Background(), other.Name, metav1.DeleteOptions{})
	})
	// The node reports evil-0 with 10.79.0.5, an address of node-b's range (the simulated
	// kubelet takes the pod's ip-address annotation, as the CNI would).
	f.startKubelet("node-a", 100*time.Millisecond, func(p *corev1.Pod) error {
		if p.Name != "evil-0" {
			return nil
		}
		patch := []byte(`{"metadata":{"annotations":{"` + podip.AnnotationIPAddress + `":"10.79.0.5"}}}`)
		_, err := f.kube.CoreV1().Pods(f.ns).Patch(f.ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	f.startManager()
	f.createSet(newSet("evil", 2, enableStaticIP))
	f.eventually(time.Minute, "evil-1 recorded", func() (bool, error) {
		sip, err := f.staticIP("evil-1")
		return err == nil && sip.Spec.IP != "" && sip.Status.Phase == jkev1.StaticIPBound, nil
	})
	f.eventually(30*time.Second, "evil-0 running with 10.79.0.5", func() (bool, error) {
		p := f.pods()["evil-0"]
		return p != nil && p.Status.PodIP == "10.79.0.5", nil
	})
	time.Sleep(2 * time.Second)
	sip, err := f.staticIP("evil-0")
	if err != nil {
		t.Fatal(err)
	}
	if sip.Spec.IP != "" || sip.Status.Phase == jkev1.StaticIPBound {
		t.Errorf("the record took an IP of another node's range: ip %q node %q phase %s", sip.Spec.IP, sip.Spec.Node, sip.Status.Phase)
	}
	f.waitConflict("evil-0", metav1.ConditionTrue, "10.79.0.5 reported on node node-a lies in IPRange "+other.Name)
}
