package integration

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/controllers/pkg/ippool"
	"github.com/staticip/staticip/controllers/pkg/manager"
)

// poolKey is the node label a test's pool selects on, so pools of other tests (one API server
// serves the package) never see this test's nodes.
func (f *fixture) poolKey() string { return "ippool.test/" + f.ns }

func (f *fixture) createPool(name string, cidrs []string, mutate func(*jkev1.IPPool)) *jkev1.IPPool {
	f.t.Helper()
	p := &jkev1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-" + name}, Spec: jkev1.IPPoolSpec{CIDRs: cidrs,
		NodeSelector:  &metav1.LabelSelector{MatchLabels: map[string]string{f.poolKey(): "yes"}},
		ReleaseAfter:  &metav1.Duration{Duration: 2 * time.Second},
		GatewayPolicy: jkev1.GatewayNone, Mode: jkev1.IPPoolBlocks}}
	if mutate != nil {
		mutate(p)
	}
	p, err := f.client.JkeV1().IPPools().Create(f.ctx, p, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		ctx := context.Background()
		_ = f.client.JkeV1().IPPools().Delete(ctx, p.Name, metav1.DeleteOptions{})
		_ = f.client.JkeV1().IPRanges().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: jkev1.LabelIPPool + "=" + p.Name})
	})
	return p
}

// poolNode creates a Node the test's pools select.
func (f *fixture) poolNode(name string, podCIDRs ...string) string {
	f.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-" + name, Labels: map[string]string{f.poolKey(): "yes"}},
		Spec: corev1.NodeSpec{PodCIDRs: podCIDRs}}
	if len(podCIDRs) > 0 {
		n.Spec.PodCIDR = podCIDRs[0]
	}
	if _, err := f.kube.CoreV1().Nodes().Create(f.ctx, n, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = f.kube.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{}) })
	return n.Name
}

// rangesByNode lists every IPRange naming one of the test's nodes (prefix f.ns), by node.
func (f *fixture) rangesByNode() map[string][]jkev1.IPRange {
	f.t.Helper()
	list, err := f.client.JkeV1().IPRanges().List(f.ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string][]jkev1.IPRange{}
	for _, r := range list.Items {
		if strings.HasPrefix(r.Spec.Node, f.ns+"-") && r.DeletionTimestamp == nil {
			out[r.Spec.Node] = append(out[r.Spec.Node], r)
		}
	}
	return out
}

func (f *fixture) waitBlock(node string) jkev1.IPRange {
	f.t.Helper()
	var got jkev1.IPRange
	f.eventually(30*time.Second, "a block for "+node, func() (bool, error) {
		rs := f.rangesByNode()[node]
		if len(rs) == 1 {
			got = rs[0]
		}
		return len(rs) == 1, nil
	})
	return got
}

// rangeNode is the node an IPRange names ("" when it is gone or unassigned).
func (f *fixture) rangeNode(name string) string {
	r, err := f.client.JkeV1().IPRanges().Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return r.Spec.Node
}

// startAllocatorAsServiceAccount runs the allocator alone, with only the permissions of
// manifests/controller-manager/rbac.yaml, and the options mutate changes.
func (f *fixture) startAllocatorAsServiceAccount(mutate ...func(*manager.Options)) {
	f.applyRBAC()
	cfg := rest.CopyConfig(f.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:staticip-system:staticip-controller-manager"}
	o := manager.NewOptions()
	o.LeaderElect = false
	o.Serving.MetricsBindAddress, o.Serving.HealthBindAddress = "0", "0"
	o.Controllers = []string{ippool.Name}
	for _, m := range mutate {
		m(o)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- manager.Run(ctx, o, cfg) }()
	f.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			f.t.Errorf("manager: %v", err)
		}
	})
}

// TestIPPoolJoinReleaseAndReturn: a joining node gets a block within seconds; a node with a
// hand-written range gets none and its range is never touched; a deleted node's block goes
// back only after releaseAfter, once it is proven gone (no Lease renewal for --node-gone-after)
// and only once no pod object and no StaticIP holds an IP of it — unassigned at
// ownerGeneration+1, not deleted;
// a node returning after failover (its block moved to a spare at ownerGeneration+1) gets a
// new, different block. The allocator runs with its RBAC only.
func TestIPPoolJoinReleaseAndReturn(t *testing.T) {
	f := newFixture(t)
	pool := f.createPool("p", []string{"100.64.0.0/16"}, func(p *jkev1.IPPool) {
		p.Spec.ExcludeIPs = []string{"100.64.0.9"}
		p.Spec.GatewayPolicy = jkev1.GatewayFirstHost
	})
	// A hand-written range for node "hand", inside the pool: the allocator skips its block.
	hand := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-hand"}, Spec: jkev1.IPRangeSpec{CIDR: "100.64.0.0/24", Node: f.ns + "-hand"}}
	if _, err := f.client.JkeV1().IPRanges().Create(f.ctx, hand, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.client.JkeV1().IPRanges().Delete(context.Background(), hand.Name, metav1.DeleteOptions{})
	})
	f.startAllocatorAsServiceAccount(func(o *manager.Options) { o.NodeGoneAfter = 2 * time.Second })
	handNode := f.poolNode("hand")
	start := time.Now()
	a := f.poolNode("a")
	ra := f.waitBlock(a)
	t.Logf("node %s got %s (%s) %v after joining", a, ra.Name, ra.Spec.CIDR, time.Since(start).Round(time.Millisecond))
	if ra.Spec.CIDR != "100.64.1.0/24" || ra.Spec.Gateway != "100.64.1.1" || ra.Labels[jkev1.LabelIPPool] != pool.Name ||
		ra.Name != pool.Name+"-100-64-1-0-24" {
		t.Errorf("block %+v", ra)
	}
	b := f.poolNode("b")
	rb := f.waitBlock(b)
	if rs := f.rangesByNode()[handNode]; len(rs) != 1 || rs[0].Name != hand.Name || len(rs[0].Labels) != 0 {
		t.Errorf("the node with a hand-written range got %v", rs)
	}
	f.eventually(10*time.Second, "pool status", func() (bool, error) {
		p, err := f.client.JkeV1().IPPools().Get(f.ctx, pool.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Status.BlocksTotal == 256 && p.Status.BlocksAssigned == 2 && p.Status.BlocksFree == 253 && p.Status.BlockSize == 24 &&
			meta.IsStatusConditionFalse(p.Status.Conditions, jkev1.IPPoolExhausted), nil
	})
	// natOutgoing (issue 36): the CRD's default (true) is copied into every block; a pool edit
	// reaches every block within 2 s; the hand-written range is never touched.
	if p, _ := f.client.JkeV1().IPPools().Get(f.ctx, pool.Name, metav1.GetOptions{}); p == nil || p.Spec.NATOutgoing == nil || !*p.Spec.NATOutgoing {
		t.Errorf("IPPool natOutgoing not defaulted to true: %+v", p)
	}
	for _, want := range []bool{true, false, true} {
		if _, err := f.client.JkeV1().IPPools().Patch(f.ctx, pool.Name, types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"natOutgoing":%t}}`, want)), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		edited := time.Now()
		f.eventually(2*time.Second, fmt.Sprintf("every block natOutgoing=%t", want), func() (bool, error) {
			for _, name := range []string{ra.Name, rb.Name} {
				r, err := f.client.JkeV1().IPRanges().Get(f.ctx, name, metav1.GetOptions{})
				if err != nil || r.Spec.NATOutgoing == nil || *r.Spec.NATOutgoing != want {
					return false, err
				}
			}
			return true, nil
		})
		t.Logf("natOutgoing=%t on both blocks %v after the pool's edit", want, time.Since(edited).Round(time.Millisecond))
	}
	if r, err := f.client.JkeV1().IPRanges().Get(f.ctx, hand.Name, metav1.GetOptions{}); err != nil || r.Spec.NATOutgoing != nil {
		t.Errorf("the hand-written range: %v, natOutgoing %v (want unset)", err, r.Spec.NATOutgoing)
	}

	// Node a is deleted while a pod object holds an IP of its block and a StaticIP names another.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "holder", Namespace: f.ns},
		Spec: corev1.PodSpec{NodeName: a, Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	pod, err := f.kube.CoreV1().Pods(f.ns).Create(f.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.PodIP, pod.Status.PodIPs = "100.64.1.7", []corev1.PodIP{{IP: "100.64.1.7"}}
	if _, err := f.kube.CoreV1().Pods(f.ns).UpdateStatus(f.ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	sip := &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: "reserved", Namespace: f.ns}, Spec: jkev1.StaticIPSpec{IP: "100.64.1.8", Node: a}}
	if _, err := f.client.JkeV1().StaticIPs(f.ns).Create(f.ctx, sip, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.kube.CoreV1().Nodes().Delete(f.ctx, a, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(10*time.Second, "the gone mark", func() (bool, error) {
		r, err := f.client.JkeV1().IPRanges().Get(f.ctx, ra.Name, metav1.GetOptions{})
		return err == nil && r.Annotations[jkev1.AnnotationNodeGoneSince] != "", err
	})
	time.Sleep(4 * time.Second) // twice releaseAfter: held by the pod and the StaticIP
	if f.rangeNode(ra.Name) != a {
		t.Fatal("the block was released while a pod object held one of its IPs")
	}
	if err := f.kube.CoreV1().Pods(f.ns).Delete(f.ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if f.rangeNode(ra.Name) != a {
		t.Fatal("the block was released while a StaticIP's spec.ip lay in it")
	}
	if err := f.client.JkeV1().StaticIPs(f.ns).Delete(f.ctx, sip.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(30*time.Second, "the block back in the pool at ownerGeneration+1", func() (bool, error) {
		r, err := f.client.JkeV1().IPRanges().Get(f.ctx, ra.Name, metav1.GetOptions{})
		return err == nil && r.Spec.Node == "" && r.Spec.OwnerGeneration == ra.Spec.OwnerGeneration+1, err
	})

	// Return after failover: b is fenced (out-of-service), its block moves to a spare at
	// ownerGeneration+1; b owns nothing but gets no block while fenced (failover would move
	// it after the first: on the local cluster that loop handed out 100+ blocks), and a new
	// one — never the moved one — once the operator lifts the fence.
	spare := f.poolNode("spare")
	rspare := f.waitBlock(spare)
	setTaints := func(taints []corev1.Taint) {
		t.Helper()
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := f.kube.CoreV1().Nodes().Get(f.ctx, b, metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Spec.Taints = taints
			_, err = f.kube.CoreV1().Nodes().Update(f.ctx, n, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	setTaints([]corev1.Taint{{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}})
	time.Sleep(time.Second)
	cur, err := f.client.JkeV1().IPRanges().Get(f.ctx, rb.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Node, cur.Spec.OwnerGeneration = spare, cur.Spec.OwnerGeneration+1
	if _, err := f.client.JkeV1().IPRanges().Update(f.ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if rs := f.rangesByNode()[b]; len(rs) != 0 {
		t.Fatalf("the fenced node %s got %d blocks while tainted out-of-service: %v", b, len(rs), rs)
	}
	setTaints(nil)
	nb := f.waitBlock(b)
	if nb.Spec.CIDR == rb.Spec.CIDR || nb.Spec.CIDR == rspare.Spec.CIDR {
		t.Errorf("the returned node got %s; its old block was %s, the spare's %s", nb.Spec.CIDR, rb.Spec.CIDR, rspare.Spec.CIDR)
	}
	time.Sleep(2 * time.Second)
	if rs := f.rangesByNode()[spare]; len(rs) != 2 {
		t.Errorf("the spare must keep its own block and the moved one (gen 1 is never an extra): %d ranges", len(rs))
	}
}

// TestIPPoolTwoAllocatorsRace: two allocators (two manager instances, no leader election)
// against one API server, 50 nodes joining at once: every node ends with exactly one block and
// no block CIDR is on two nodes. One allocator is stopped midway and started again (restart
// mid-assignment).
func TestIPPoolTwoAllocatorsRace(t *testing.T) {
	f := newFixture(t)
	f.createPool("race", []string{"100.65.0.0/16"}, nil)
	f.startManager(ippool.Name)
	second, cancelSecond := context.WithCancel(f.ctx)
	defer cancelSecond()
	startSecond := func(ctx context.Context) chan error {
		o := manager.NewOptions()
		o.LeaderElect = false
		o.Serving.MetricsBindAddress, o.Serving.HealthBindAddress = "0", "0"
		o.Controllers = []string{ippool.Name}
		done := make(chan error, 1)
		go func() { done <- manager.Run(ctx, o, f.cfg) }()
		return done
	}
	done := startSecond(second)
	var wg sync.WaitGroup
	names := make([]string, 50)
	for i := range names {
		wg.Go(func() { names[i] = f.poolNode(fmt.Sprintf("n%02d", i)) })
		if i == 25 {
			cancelSecond()
			if err := <-done; err != nil {
				t.Errorf("second allocator: %v", err)
			}
			third, cancelThird := context.WithCancel(f.ctx)
			done = startSecond(third)
			t.Cleanup(func() { cancelThird(); <-done })
		}
	}
	wg.Wait()
	check := func() (bool, error) {
		byNode := f.rangesByNode()
		owner := map[string]string{}
		for node, rs := range byNode {
			for _, r := range rs {
				if o, ok := owner[r.Spec.CIDR]; ok {
					t.Fatalf("block %s on two nodes: %s and %s", r.Spec.CIDR, o, node)
				}
				owner[r.Spec.CIDR] = node
			}
		}
		for _, n := range names {
			if len(byNode[n]) != 1 {
				return false, fmt.Errorf("node %s has %d blocks", n, len(byNode[n]))
			}
		}
		return true, nil
	}
	f.eventually(60*time.Second, "one block per node", check)
	time.Sleep(2 * time.Second) // and it stays so
	if ok, err := check(); !ok {
		t.Fatal(err)
	}
	for _, rs := range f.rangesByNode() {
		for _, r := range rs {
			if _, err := netip.ParsePrefix(r.Spec.CIDR); err != nil || !strings.HasPrefix(r.Spec.CIDR, "100.65.") {
				t.Errorf("block %s outside the pool", r.Spec.CIDR)
			}
		}
	}
}

// TestIPPoolGrowthAndPodCIDRMode: an exhausted pool says so (condition naming the waiting
// node, Warning Event on it); adding a CIDR serves the waiting node and clears the condition.
// A NodePodCIDR pool mirrors each node's podCIDR, and refuses one overlapping an IPRange.
func TestIPPoolGrowthAndPodCIDRMode(t *testing.T) {
	f := newFixture(t)
	bits := int32(25)
	pool := f.createPool("grow", []string{"100.66.0.0/25"}, func(p *jkev1.IPPool) { p.Spec.BlockSize = &bits })
	f.startManager(ippool.Name)
	a := f.poolNode("a")
	f.waitBlock(a)
	b := f.poolNode("b")
	f.eventually(30*time.Second, "Exhausted naming "+b, func() (bool, error) {
		p, err := f.client.JkeV1().IPPools().Get(f.ctx, pool.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, jkev1.IPPoolExhausted)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, b), nil
	})
	f.eventually(30*time.Second, "a Warning Event on "+b, func() (bool, error) {
		evs, err := f.kube.CoreV1().Events("default").List(f.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + b})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == ippool.ReasonPoolExhausted && e.Type == corev1.EventTypeWarning {
				return true, nil
			}
		}
		return false, nil
	})
	p, err := f.client.JkeV1().IPPools().Get(f.ctx, pool.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.CIDRs = append(p.Spec.CIDRs, "100.66.1.0/25")
	if _, err := f.client.JkeV1().IPPools().Update(f.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if rb := f.waitBlock(b); rb.Spec.CIDR != "100.66.1.0/25" {
		t.Errorf("after growth %s got %s", b, rb.Spec.CIDR)
	}
	f.eventually(30*time.Second, "Exhausted cleared", func() (bool, error) {
		p, err := f.client.JkeV1().IPPools().Get(f.ctx, pool.Name, metav1.GetOptions{})
		return err == nil && meta.IsStatusConditionFalse(p.Status.Conditions, jkev1.IPPoolExhausted) && p.Status.BlocksTotal == 2, err
	})

	// NodePodCIDR mode, for other nodes (its own label value).
	kind := f.createPool("kind", []string{"100.67.0.0/16"}, func(p *jkev1.IPPool) {
		p.Spec.Mode = jkev1.IPPoolNodePodCIDR
		p.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{f.poolKey(): "kind"}}
	})
	hand := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-hand"}, Spec: jkev1.IPRangeSpec{CIDR: "100.67.9.0/25", Node: "elsewhere"}}
	if _, err := f.client.JkeV1().IPRanges().Create(f.ctx, hand, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.client.JkeV1().IPRanges().Delete(context.Background(), hand.Name, metav1.DeleteOptions{})
	})
	mk := func(name, podCIDR string) string {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-" + name, Labels: map[string]string{f.poolKey(): "kind"}},
			Spec: corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}}}
		if _, err := f.kube.CoreV1().Nodes().Create(f.ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.kube.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{}) })
		return n.Name
	}
	k1 := mk("k1", "100.67.3.0/24")
	if r := f.waitBlock(k1); r.Spec.CIDR != "100.67.3.0/24" || r.Name != kind.Name+"-100-67-3-0-24" {
		t.Errorf("podCIDR mirrored as %s %s", r.Name, r.Spec.CIDR)
	}
	k2 := mk("k2", "100.67.9.0/24")
	f.eventually(30*time.Second, "an Event saying the podCIDR overlaps", func() (bool, error) {
		evs, err := f.kube.CoreV1().Events("default").List(f.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + k2})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == ippool.ReasonPodCIDROverlaps {
				return true, nil
			}
		}
		return false, nil
	})
	if rs := f.rangesByNode()[k2]; len(rs) != 0 {
		t.Errorf("a podCIDR overlapping an IPRange was mirrored: %v", rs)
	}
}

// TestIPPoolDualStackBlocks: with an IPv4 and an IPv6 pool selecting it, a node gets a block of
// each family; once the node is deleted, its IPv6 block stays while a dual-stack StaticIP's IPv6
// address (spec.ips, not spec.ip) lies in it, and goes back to the pool once the record is gone.
func TestIPPoolDualStackBlocks(t *testing.T) {
	f := newFixture(t)
	f.createPool("v4", []string{"100.66.0.0/16"}, nil)
	v6 := f.createPool("v6", []string{"fd00:66::/112"}, nil)
	f.startAllocatorAsServiceAccount(func(o *manager.Options) { o.NodeGoneAfter = 2 * time.Second })
	n := f.poolNode("ds")
	var b4, b6 jkev1.IPRange
	f.eventually(30*time.Second, "a block of each family for "+n, func() (bool, error) {
		rs := f.rangesByNode()[n]
		for _, r := range rs {
			if strings.Contains(r.Spec.CIDR, ":") {
				b6 = r
			} else {
				b4 = r
			}
		}
		return len(rs) == 2 && b4.Name != "" && b6.Name != "", nil
	})
	if b6.Labels[jkev1.LabelIPPool] != v6.Name || !strings.HasSuffix(b6.Spec.CIDR, "/120") {
		t.Errorf("IPv6 block %s %s of pool %s", b6.Name, b6.Spec.CIDR, b6.Labels[jkev1.LabelIPPool])
	}
	v4addr := strings.TrimSuffix(b4.Spec.CIDR, "0/24") + "8"
	v6addr := strings.TrimSuffix(b6.Spec.CIDR, "/120") + "8"
	sip := &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: "dual", Namespace: f.ns},
		Spec: jkev1.StaticIPSpec{IP: v4addr, IPs: []string{v4addr, v6addr}, Node: n}}
	if _, err := f.client.JkeV1().StaticIPs(f.ns).Create(f.ctx, sip, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.kube.CoreV1().Nodes().Delete(f.ctx, n, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(10*time.Second, "the gone mark on the IPv6 block", func() (bool, error) {
		r, err := f.client.JkeV1().IPRanges().Get(f.ctx, b6.Name, metav1.GetOptions{})
		return err == nil && r.Annotations[jkev1.AnnotationNodeGoneSince] != "", err
	})
	time.Sleep(4 * time.Second) // twice releaseAfter
	if f.rangeNode(b6.Name) != n {
		t.Fatalf("the IPv6 block %s was released while StaticIP %s/dual's spec.ips named %s in it", b6.Spec.CIDR, f.ns, v6addr)
	}
	if err := f.client.JkeV1().StaticIPs(f.ns).Delete(f.ctx, sip.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(30*time.Second, "both blocks back in their pools", func() (bool, error) {
		return f.rangeNode(b4.Name) == "" && f.rangeNode(b6.Name) == "", nil
	})
}
