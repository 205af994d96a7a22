package integration

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/ippool"
	"github.com/staticip/staticip/controllers/pkg/nodefailover"
)

// renewLease keeps kube-node-lease/<node> renewed every 500ms until the returned stop is called,
// as a kubelet that still runs does (it recreates the Lease if the garbage collector took it).
// Its leaseDurationSeconds is 2 (a kubelet's is 40): a renewal keeps the node alive that long.
func (f *fixture) renewLease(node string) (stop func()) {
	f.t.Helper()
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	leases := f.kube.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	renew := func() {
		now := metav1.NewMicroTime(time.Now())
		l, err := leases.Get(ctx, node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, _ = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To[int32](2), RenewTime: &now}}, metav1.CreateOptions{})
			return
		}
		if err == nil {
			l.Spec.RenewTime = &now
			_, _ = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
	}
	renew()
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
				renew()
			}
		}
	}()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	f.t.Cleanup(func() {
		stop()
		_ = leases.Delete(context.Background(), node, metav1.DeleteOptions{})
	})
	return stop
}

// annotateRange sets an annotation on an IPRange.
func (f *fixture) annotateRange(name, key, value string) {
	f.t.Helper()
	patch := []byte(`{"metadata":{"annotations":{"` + key + `":"` + value + `"}}}`)
	if _, err := f.client.JkeV1().IPRanges().Patch(f.ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// TestIPPoolDeletedNodeLeaseAndRelease (issue 37, defect 5b): the allocator alone. A node
// whose Node object is deleted but whose kubelet still renews its Lease is alive: its block is
// kept however long the pool's releaseAfter is. Once the Lease stops and the operator says
// the machine is off (node-off on the IPRange), the block is released — not deleted: unassigned
// at ownerGeneration+1, so the node revokes it should it come back — and the next node that
// needs a block gets that same IPRange at that generation.
func TestIPPoolDeletedNodeLeaseAndRelease(t *testing.T) {
	f := newFixture(t)
	pool := f.createPool("p", []string{"100.65.0.0/24"}, func(p *jkev1.IPPool) { p.Spec.BlockSize = ptr.To[int32](26) })
	f.startAllocatorAsServiceAccount()
	a := f.poolNode("a")
	ra := f.waitBlock(a)
	// a's agent claims the block; another node's claim (it drains the block) is not a's to lose.
	claimed := ra.DeepCopy()
	claimed.Status.Holders = []jkev1.IPRangeHolder{{Node: a, Address: "192.0.2.1", Generation: ra.Spec.OwnerGeneration, State: jkev1.HolderServing},
		{Node: "other", Address: "192.0.2.2", Generation: ra.Spec.OwnerGeneration, State: jkev1.HolderDraining}}
	if _, err := f.client.JkeV1().IPRanges().UpdateStatus(f.ctx, claimed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	stopLease := f.renewLease(a)
	if err := f.kube.CoreV1().Nodes().Delete(f.ctx, a, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(10*time.Second, "the gone mark", func() (bool, error) {
		r, err := f.client.JkeV1().IPRanges().Get(f.ctx, ra.Name, metav1.GetOptions{})
		return err == nil && r.Annotations[jkev1.AnnotationNodeGoneSince] != "", err
	})
	time.Sleep(6 * time.Second) // three times releaseAfter
	r, err := f.client.JkeV1().IPRanges().Get(f.ctx, ra.Name, metav1.GetOptions{})
	if err != nil || r.Spec.Node != a {
		t.Fatalf("the block of a deleted node whose Lease is still renewed was released (err %v, range %+v): the node may still serve it", err, r)
	}

	stopLease()
	f.annotateRange(ra.Name, jkev1alpha1.AnnotationNodeOff, "true")
	f.eventually(30*time.Second, "the block released at ownerGeneration+1", func() (bool, error) {
		r, err := f.client.JkeV1().IPRanges().Get(f.ctx, ra.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return r.Spec.Node == "" && r.Spec.OwnerGeneration == ra.Spec.OwnerGeneration+1, nil
	})
	// The node is proven gone: its claims go with its block (issue 37: a block that cycles
	// through deleted nodes would otherwise fill status.holders' 32 entries with dead claims).
	f.eventually(10*time.Second, "the gone node's claim pruned, the other kept", func() (bool, error) {
		r, err := f.client.JkeV1().IPRanges().Get(f.ctx, ra.Name, metav1.GetOptions{})
		return err == nil && len(r.Status.Holders) == 1 && r.Status.Holders[0].Node == "other", err
	})
	b := f.poolNode("b")
	rb := f.waitBlock(b)
	if rb.Name != ra.Name || rb.Spec.OwnerGeneration != ra.Spec.OwnerGeneration+1 || rb.Spec.CIDR != ra.Spec.CIDR {
		t.Errorf("the next node got %s (%s) at generation %d; want the released %s at %d", rb.Name, rb.Spec.CIDR, rb.Spec.OwnerGeneration, ra.Name, ra.Spec.OwnerGeneration+1)
	}
	f.eventually(10*time.Second, "pool status", func() (bool, error) {
		p, err := f.client.JkeV1().IPPools().Get(f.ctx, pool.Name, metav1.GetOptions{})
		return err == nil && p.Status.BlocksAssigned == 1 && p.Status.BlocksFree == 3, err
	})
}

// TestDeletedNodeBlockWithDefaultControllers (issue 37, defect 5a): allocator and failover
// both run (the default). A node that served a pool block (Synced) and has no StaticIP is
// deleted, no spare exists (an autoscaled cluster), and the operator says the machine is off:
// the block comes back to the pool exactly once; no failover record waits for a spare while
// the allocator waits for the record.
func TestDeletedNodeBlockWithDefaultControllers(t *testing.T) {
	f := newFixture(t)
	f.createPool("p", []string{"100.66.0.0/24"}, func(p *jkev1.IPPool) { p.Spec.BlockSize = ptr.To[int32](26) })
	f.startManager(ippool.Name, nodefailover.Name)
	a := f.poolNode("a")
	ra := f.waitBlock(a)
	r := ra.DeepCopy()
	r.Status.ObservedGeneration = r.Generation
	meta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{Type: "Synced", Status: metav1.ConditionTrue, Reason: "Served", Message: "simulated agent"})
	if _, err := f.client.JkeV1().IPRanges().UpdateStatus(f.ctx, r, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := f.kube.CoreV1().Nodes().Delete(f.ctx, a, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(10*time.Second, "the gone mark", func() (bool, error) {
		r, err := f.client.JkeV1().IPRanges().Get(f.ctx, ra.Name, metav1.GetOptions{})
		return err == nil && r.Annotations[jkev1.AnnotationNodeGoneSince] != "", err
	})
	f.annotateRange(ra.Name, jkev1alpha1.AnnotationNodeOff, "true")
	f.eventually(30*time.Second, "the deleted node's block back in the pool", func() (bool, error) {
		r, err := f.client.JkeV1().IPRanges().Get(f.ctx, ra.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil // released the old way; the generation check below fails it
		}
		return err == nil && r.Spec.Node == "", err
	})
	r, err := f.client.JkeV1().IPRanges().Get(f.ctx, ra.Name, metav1.GetOptions{})
	if err != nil || r.Spec.OwnerGeneration != ra.Spec.OwnerGeneration+1 {
		t.Errorf("released block: %v %+v, want it kept unassigned at generation %d", err, r, ra.Spec.OwnerGeneration+1)
	}
	if rec, err := f.client.JkeV1alpha1().NodeFailovers().Get(f.ctx, a, metav1.GetOptions{}); err == nil {
		t.Errorf("a failover record is left for a node that owned only a pool block: %+v", rec.Status)
	}
}

// TestIPPoolEditsReachExistingBlocks (issue 37, defect 7): excludeIPs and gatewayPolicy edits of
// a pool reach the blocks it already gave out, not only new ones.
func TestIPPoolEditsReachExistingBlocks(t *testing.T) {
	f := newFixture(t)
	pool := f.createPool("p", []string{"100.67.0.0/24"}, func(p *jkev1.IPPool) { p.Spec.BlockSize = ptr.To[int32](26) })
	f.startAllocatorAsServiceAccount()
	a := f.poolNode("a")
	ra := f.waitBlock(a)
	if ra.Spec.Gateway != "" || len(ra.Spec.ExcludeIPs) != 0 {
		t.Fatalf("block %+v", ra.Spec)
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := f.client.JkeV1().IPPools().Get(f.ctx, pool.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Spec.GatewayPolicy, p.Spec.ExcludeIPs = jkev1.GatewayFirstHost, []string{"100.67.0.9", "100.67.0.200"}
		_, err = f.client.JkeV1().IPPools().Update(f.ctx, p, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	f.eventually(15*time.Second, "the edit on the existing block", func() (bool, error) {
		r, err := f.client.JkeV1().IPRanges().Get(f.ctx, ra.Name, metav1.GetOptions{})
		return err == nil && r.Spec.Gateway == "100.67.0.1" && len(r.Spec.ExcludeIPs) == 1 && r.Spec.ExcludeIPs[0] == "100.67.0.9", err
	})
}
