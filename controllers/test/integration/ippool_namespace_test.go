package integration

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/controllers/pkg/ippool"
)

// TestIPPoolBlocksForNamespacePods: a pool whose namespaceSelector selects a namespace gives a
// node a block when a pod of that namespace is bound there and no free address of the pool is
// left on the node (the agent's status.free), more blocks as pods need them; an exhausted pool
// leaves the pod with a Warning Event naming the pool and the pool Exhausted naming the pod; the
// node keeps its node pool's block throughout; an empty block goes back to the pool after
// releaseAfter (unassigned at ownerGeneration+1); a younger pool selecting the same namespace
// carries NamespaceSelectorOverlaps. The allocator runs with its RBAC only.
func TestIPPoolBlocksForNamespacePods(t *testing.T) {
	f := newFixture(t)
	tenant := map[string]string{"tenant.test/" + f.ns: "blue"}
	tenantNS := f.ns + "-blue"
	if _, err := f.kube.CoreV1().Namespaces().Create(f.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNS, Labels: tenant}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.kube.CoreV1().Namespaces().Delete(f.ctx, tenantNS, metav1.DeleteOptions{}) })
	f.createPool("node", []string{"100.70.0.0/16"}, nil)
	bits := int32(30) // blocks of two addresses
	blue := f.createPool("blue", []string{"100.71.0.0/29"}, func(p *jkev1.IPPool) {
		p.Spec.BlockSize = &bits
		p.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: tenant}
	})
	f.startAllocatorAsServiceAccount()
	a := f.poolNode("a")

	blocksOf := func(pool string) []jkev1.IPRange {
		var out []jkev1.IPRange
		for _, r := range f.rangesByNode()[a] {
			if r.Labels[jkev1.LabelIPPool] == pool {
				out = append(out, r)
			}
		}
		return out
	}
	waitBlocks := func(pool string, n int) []jkev1.IPRange {
		t.Helper()
		var got []jkev1.IPRange
		f.eventually(30*time.Second, "node a holding "+string(rune('0'+n))+" block(s) of "+pool, func() (bool, error) {
			got = blocksOf(pool)
			return len(got) == n, nil
		})
		return got
	}
	nodeBlock := waitBlocks(f.ns+"-node", 1)[0]
	if got := blocksOf(blue.Name); len(got) != 0 {
		t.Fatalf("node a got a block of the namespace pool with no pod of it: %v", got)
	}

	bound := func(name string) *corev1.Pod {
		t.Helper()
		p, err := f.kube.CoreV1().Pods(tenantNS).Create(f.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: a, Containers: []corev1.Container{{Name: "c", Image: "x"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	setIP := func(p *corev1.Pod, ip string) {
		t.Helper()
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
		p.Status.PodIP = ip
		if _, err := f.kube.CoreV1().Pods(tenantNS).UpdateStatus(f.ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The agent's count of a block (what the allocator reads as its free addresses).
	report := func(r jkev1.IPRange, used int32) {
		t.Helper()
		f.eventually(10*time.Second, "status of "+r.Name, func() (bool, error) {
			cur, err := f.client.JkeV1().IPRanges().Get(f.ctx, r.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			cur.Status.Total, cur.Status.Used, cur.Status.Free, cur.Status.ObservedGeneration = 2, used, 2-used, cur.Generation
			_, err = f.client.JkeV1().IPRanges().UpdateStatus(f.ctx, cur, metav1.UpdateOptions{})
			return err == nil, nil
		})
	}

	// A pod of the tenant bound to a: a block of blue.
	p1 := bound("p1")
	b1 := waitBlocks(blue.Name, 1)[0]
	if b1.Spec.CIDR != "100.71.0.0/30" {
		t.Errorf("first blue block %s, want 100.71.0.0/30", b1.Spec.CIDR)
	}
	if b1.Labels[jkev1.LabelIPPoolRestricted] != "true" || nodeBlock.Labels[jkev1.LabelIPPoolRestricted] != "" {
		t.Errorf("labels: blue block %v, node block %v; want %s=true on the blue block only", b1.Labels, nodeBlock.Labels, jkev1.LabelIPPoolRestricted)
	}
	setIP(p1, "100.71.0.1")
	report(b1, 1)
	// Two more pods, one free address: a second block.
	p2, p3 := bound("p2"), bound("p3")
	b2 := waitBlocks(blue.Name, 2)
	setIP(p2, "100.71.0.2")
	setIP(p3, "100.71.0.5")
	report(b1, 2)
	// A fourth takes the last address; the fifth finds the pool with no block left. The pod
	// gets a Warning Event naming the pool, the pool's Exhausted names the pod.
	setIP(bound("p4"), "100.71.0.6")
	for _, r := range b2 {
		if r.Spec.CIDR == "100.71.0.4/30" {
			report(r, 2)
		}
	}
	bound("p5")
	f.eventually(30*time.Second, "a Warning Event on p5 naming "+blue.Name, func() (bool, error) {
		evs, err := f.kube.CoreV1().Events(tenantNS).List(f.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=p5"})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(evs.Items, func(e corev1.Event) bool {
			return e.Type == corev1.EventTypeWarning && e.Reason == ippool.ReasonPoolExhausted && strings.Contains(e.Message, blue.Name)
		}), nil
	})
	f.eventually(30*time.Second, blue.Name+" Exhausted naming p5", func() (bool, error) {
		p, err := f.client.JkeV1().IPPools().Get(f.ctx, blue.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, jkev1.IPPoolExhausted)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, tenantNS+"/p5"), nil
	})

	// A younger pool selecting the same namespace: NamespaceSelectorOverlaps on it, not on blue.
	green := f.createPool("green", []string{"100.72.0.0/29"}, func(p *jkev1.IPPool) {
		p.Spec.BlockSize = &bits
		p.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: tenant}
	})
	f.eventually(30*time.Second, "NamespaceSelectorOverlaps on "+green.Name, func() (bool, error) {
		g, err := f.client.JkeV1().IPPools().Get(f.ctx, green.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		b, err := f.client.JkeV1().IPPools().Get(f.ctx, blue.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(g.Status.Conditions, jkev1.IPPoolNamespaceSelectorOverlaps)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, blue.Name) && strings.Contains(c.Message, tenantNS) &&
			meta.IsStatusConditionFalse(b.Status.Conditions, jkev1.IPPoolNamespaceSelectorOverlaps), nil
	})

	// Every pod gone and the agent reporting the blocks empty: both return to the pool after
	// releaseAfter (2 s here), unassigned at generation 1; the node's own block stays.
	if err := f.kube.CoreV1().Pods(tenantNS).DeleteCollection(f.ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range blocksOf(blue.Name) {
		report(r, 0)
	}
	f.eventually(60*time.Second, "the blue blocks back in the pool", func() (bool, error) {
		list, err := f.client.JkeV1().IPRanges().List(f.ctx, metav1.ListOptions{LabelSelector: jkev1.LabelIPPool + "=" + blue.Name})
		if err != nil {
			return false, err
		}
		for _, r := range list.Items {
			if r.Spec.Node != "" || r.Spec.OwnerGeneration != 1 {
				return false, nil
			}
		}
		return len(list.Items) == 2, nil
	})
	if f.rangeNode(nodeBlock.Name) != a {
		t.Errorf("the node pool's block %s left node a", nodeBlock.Name)
	}
}
