package integration

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/controllers/pkg/ippool"
)

// TestIPPoolDeletedReturnsItsBlocks (issue 36, "a pool deleted → its rules and routes gone"):
// the pool is deleted while node a's block is empty and a pod on node b holds an address of
// b's block. a's block is released at once (unassigned at ownerGeneration+1: its node's agent
// withdraws it from BGP and from the NAT sources), b's stays with b — served and routed —
// with the IPRange condition IPPoolDeleted and a Warning Event, until the pod is gone; then it
// is released and the condition goes. Nobody gets them again until a pool of the same name is
// created: it gives them back out, at the generation of their release. The allocator runs
// with its RBAC only.
func TestIPPoolDeletedReturnsItsBlocks(t *testing.T) {
	f := newFixture(t)
	pool := f.createPool("del", []string{"100.66.0.0/16"}, nil)
	f.startAllocatorAsServiceAccount()
	a, b := f.poolNode("a"), f.poolNode("b")
	ra, rb := f.waitBlock(a), f.waitBlock(b)

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "holder", Namespace: f.ns},
		Spec: corev1.PodSpec{NodeName: b, Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	pod, err := f.kube.CoreV1().Pods(f.ns).Create(f.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip := strings.TrimSuffix(rb.Spec.CIDR, "0/24") + "7"
	pod.Status.PodIP, pod.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	if _, err := f.kube.CoreV1().Pods(f.ns).UpdateStatus(f.ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the allocator's pod informer has the address

	deleted := time.Now()
	if err := f.client.JkeV1().IPPools().Delete(f.ctx, pool.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(10*time.Second, "the empty block released at ownerGeneration+1", func() (bool, error) {
		r, err := f.client.JkeV1().IPRanges().Get(f.ctx, ra.Name, metav1.GetOptions{})
		return err == nil && r.Spec.Node == "" && r.Spec.OwnerGeneration == ra.Spec.OwnerGeneration+1 &&
			r.Annotations[jkev1.AnnotationReleasedGeneration] != "", err
	})
	t.Logf("the deleted pool's empty block released %v after the deletion", time.Since(deleted).Round(time.Millisecond))
	f.eventually(10*time.Second, "condition IPPoolDeleted=True on the held block", func() (bool, error) {
		r, err := f.client.JkeV1().IPRanges().Get(f.ctx, rb.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(r.Status.Conditions, ippool.ConditionPoolDeleted)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ippool.ReasonOrphanHeld && strings.Contains(c.Message, pod.Name), nil
	})
	f.eventually(10*time.Second, "a Warning Event on the held block", func() (bool, error) {
		l, err := f.kube.CoreV1().Events(metav1.NamespaceAll).List(f.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + rb.Name})
		if err != nil {
			return false, err
		}
		for _, e := range l.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == ippool.ReasonReleaseWaits && strings.Contains(e.Message, ippool.ReasonOrphanHeld) {
				t.Logf("Event on %s: %s %s: %s", rb.Name, e.Type, e.Reason, e.Message)
				return true, nil
			}
		}
		return false, nil
	})
	time.Sleep(2 * time.Second)
	if r, err := f.client.JkeV1().IPRanges().Get(f.ctx, rb.Name, metav1.GetOptions{}); err != nil || r.Spec.Node != b || r.Spec.OwnerGeneration != rb.Spec.OwnerGeneration {
		t.Fatalf("the block a pod holds an address of left its node: %v %+v", err, r.Spec)
	}

	if err := f.kube.CoreV1().Pods(f.ns).Delete(f.ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	f.eventually(40*time.Second, "the held block released once the pod is gone, its condition removed", func() (bool, error) {
		r, err := f.client.JkeV1().IPRanges().Get(f.ctx, rb.Name, metav1.GetOptions{})
		return err == nil && r.Spec.Node == "" && r.Spec.OwnerGeneration == rb.Spec.OwnerGeneration+1 &&
			meta.FindStatusCondition(r.Status.Conditions, ippool.ConditionPoolDeleted) == nil, err
	})
	time.Sleep(2 * time.Second)
	if rs := f.rangesByNode(); len(rs[a]) != 0 || len(rs[b]) != 0 {
		t.Fatalf("a deleted pool's block handed out again: %v", rs)
	}

	// The pool created again under the same name: its released blocks go back out, at the
	// generation of their release (no new IPRange is cut while they are free).
	f.createPool("del", []string{"100.66.0.0/16"}, nil)
	na, nb := f.waitBlock(a), f.waitBlock(b)
	got := map[string]bool{na.Name: true, nb.Name: true}
	if !got[ra.Name] || !got[rb.Name] || na.Spec.OwnerGeneration != ra.Spec.OwnerGeneration+1 || nb.Spec.OwnerGeneration != rb.Spec.OwnerGeneration+1 {
		t.Errorf("the recreated pool gave %s (gen %d) and %s (gen %d); want its released %s and %s at generation+1",
			na.Name, na.Spec.OwnerGeneration, nb.Name, nb.Spec.OwnerGeneration, ra.Name, rb.Name)
	}
}
