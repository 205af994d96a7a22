package integration

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/staticip/staticip/apis/iprangelabel"
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

// TestStaticIPCarriesItsRangeLabel (issue 37, scale): the StaticIP controller labels every record
// with the IPRange its IP lies in (iprangelabel.Key), so that a node agent watches only the
// records of its own ranges. A record recorded from its pod gets the label with its IP; a record
// written before the label existed (an upgrade) gets it; a range deleted takes it off (the
// record is then watched by every agent again, as an unlabelled one).
func TestStaticIPCarriesItsRangeLabel(t *testing.T) {
	f := newFixture(t)
	other := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-label-b"}, Spec: jkev1.IPRangeSpec{CIDR: "10.78.0.0/24", Node: "node-b"}}
	if _, err := f.client.JkeV1().IPRanges().Create(f.ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.client.JkeV1().IPRanges().Delete(context.Background(), other.Name, metav1.DeleteOptions{})
	})
	legacy, err := f.client.JkeV1().StaticIPs(f.ns).Create(f.ctx, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: "legacy-0"},
		Spec: jkev1.StaticIPSpec{Pod: "legacy-0", IP: "10.78.0.9", Node: "node-b"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := legacy.Labels[iprangelabel.Key]; ok {
		t.Fatalf("the record was created with a label: %v", legacy.Labels)
	}
	f.startKubelet("node-a", 100*time.Millisecond, nil)
	f.startManager()
	f.createSet(newSet("lbl", 1, enableStaticIP))
	f.eventually(time.Minute, "the records labelled with their ranges", func() (bool, error) {
		ranges, err := f.client.JkeV1().IPRanges().List(f.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		var rs []*jkev1.IPRange
		for i := range ranges.Items {
			rs = append(rs, &ranges.Items[i])
		}
		l, err := f.staticIP("legacy-0")
		if err != nil {
			return false, err
		}
		w, err := f.staticIP("lbl-0")
		if err != nil {
			return false, nil
		}
		return l.Labels[iprangelabel.Key] == iprangelabel.Value(other.Name) &&
			w.Spec.IP != "" && w.Labels[iprangelabel.Key] != "" && w.Labels[iprangelabel.Key] == iprangelabel.For(rs, w.Spec.IP), nil
	})
	if err := f.client.JkeV1().IPRanges().Delete(f.ctx, other.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(time.Minute, "the label gone with the range", func() (bool, error) {
		l, err := f.staticIP("legacy-0")
		if err != nil {
			return false, err
		}
		_, ok := l.Labels[iprangelabel.Key]
		return !ok, nil
	})
}
