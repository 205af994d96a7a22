package integration

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// Issue 39 item 1: a pod whose address must come from a namespace pool goes only to a node
// that has a free address of the pool or can still get a block of it. With the pool exhausted
// and its one block full (two pods of the pool hold both addresses, as the scheduler's own pods
// show — not the agent's counts, which lag) the pod stays Pending, the reason naming the pool;
// once one of them leaves, the pod is brought back and lands on that block's node, and the next
// waits again (the first, bound without an address yet, counts against the block). A pod of a namespace no pool selects is scheduled as before; one naming a pool
// that does not exist is refused with that reason.
func TestPodOfAnExhaustedPoolStaysPending(t *testing.T) {
	f := newFixture(t)
	f.node("sched-pool-n1", "64", 110)
	f.node("sched-pool-n2", "64", 110)
	f.ipRange("sched-pool-r1", "10.64.1.0/28", "sched-pool-n1")
	f.ipRange("sched-pool-r2", "10.64.2.0/28", "sched-pool-n2")

	pool := "tenant-" + f.ns[len(f.ns)-5:]
	bits := int32(30)
	p, err := f.sip.JkeV1().IPPools().Create(f.ctx, &jkev1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: pool},
		Spec: jkev1.IPPoolSpec{CIDRs: []string{"10.65.0.0/30"}, BlockSize: &bits,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": pool}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.sip.JkeV1().IPPools().Delete(f.ctx, pool, metav1.DeleteOptions{}) })
	// As the range allocator reports it: the pool's one block is given (to n1), none is free.
	p.Status = jkev1.IPPoolStatus{BlocksTotal: 1, BlocksAssigned: 1, BlocksFree: 0}
	if _, err := f.sip.JkeV1().IPPools().UpdateStatus(f.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	block := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: pool + "-b0",
		Labels: map[string]string{jkev1.LabelIPPool: pool, jkev1.LabelIPPoolRestricted: "true"}},
		Spec: jkev1.IPRangeSpec{CIDR: "10.65.0.0/30", Node: "sched-pool-n1"}}
	block, err = f.sip.JkeV1().IPRanges().Create(f.ctx, block, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.ranges = append(f.ranges, block.Name)
	// Two pods of the pool run on n1 with both of the block's addresses.
	for i, ip := range []string{"10.65.0.1", "10.65.0.2"} {
		f.runningOn(fmt.Sprintf("held-%d", i), "sched-pool-n1", ip)
	}

	sched := StartScheduler(t, f.cfg, LoadProfiles(t, replaceDefault))
	defer sched.Stop()

	// f.ns is not selected yet: its pods are scheduled as ever.
	f.pod("plain", "100m", "")
	f.waitScheduled("plain")

	ns, err := f.kube.CoreV1().Namespaces().Get(f.ctx, f.ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{"tenant": pool}
	if _, err := f.kube.CoreV1().Namespaces().Update(f.ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.pod("tenant-a", "100m", "")
	f.waitUnschedulable("tenant-a", `IPPool "`+pool+`" is exhausted: no free address on the node and no free block to give it`)

	// One of them leaves n1: tenant-a is brought back and goes there (the only node with a
	// free address of the pool; n2 can get no block of it).
	f.deletePod("held-0")
	if got := f.waitScheduled("tenant-a"); got != "sched-pool-n1" {
		t.Fatalf("tenant-a on %s, want sched-pool-n1 (the only node with a free address of %s)", got, pool)
	}
	// It holds the freed address now (as good as: it waits for it, bound there): the next one waits.
	f.pod("tenant-b", "100m", "")
	f.waitUnschedulable("tenant-b", `IPPool "`+pool+`" is exhausted`)

	// A pod naming a pool that does not exist (admission refuses it; here it got in anyway).
	f.podRequesting("ghost", v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}, map[string]string{jkev1.AnnotationIPPools: `["no-such-pool"]`})
	f.waitUnschedulable("ghost", `IPPool "no-such-pool" does not exist`)
}

// runningOn creates a pod bound to node whose status says it runs with ip (no kubelet here).
func (f *fixture) runningOn(name, node, ip string) {
	f.t.Helper()
	p, err := f.kube.CoreV1().Pods(f.ns).Create(f.ctx, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec: v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	p.Status = v1.PodStatus{Phase: v1.PodRunning, PodIP: ip, PodIPs: []v1.PodIP{{IP: ip}}}
	if _, err := f.kube.CoreV1().Pods(f.ns).UpdateStatus(f.ctx, p, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}
