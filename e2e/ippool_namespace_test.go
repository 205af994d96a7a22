//go:build e2e

package e2e

import (
	"context"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/e2e/framework"
	"github.com/staticip/staticip/tools/localcluster/cluster"
)

// TestNamespacePoolGivesItsPodsAddresses (issue 39 item 1): a namespace whose label an IPPool's
// namespaceSelector selects gets its pods' addresses from that pool — the range allocator gives
// the pod's node a block of it once the pod is bound there, the agent stores it restricted, the
// CNI picks from it — while a pod of another namespace on the same node never gets one; with the
// pool's one block full, the next pod of the namespace stays Pending with a Warning Event naming
// the pool (the scheduler's FailedScheduling, or the allocator's IPPoolExhausted when the pod was
// bound before the block was counted full).
func TestNamespacePoolGivesItsPodsAddresses(t *testing.T) {
	ctx := context.Background()
	byNode := requireStaticIPCNI(t, ctx)
	cs := versioned.NewForConfigOrDie(f.Config)
	nodes, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var candidates []string
	for _, n := range nodes.Items {
		if n.Labels[cluster.SpareLabel] != "true" && len(byNode[n.Name]) > 0 && len(n.Spec.Taints) == 0 {
			candidates = append(candidates, n.Name)
		}
	}
	if len(candidates) == 0 {
		t.Skip("no untainted node with an IPRange")
	}
	sort.Strings(candidates)
	node := candidates[0]

	suffix := rand.String(5)
	selector := map[string]string{"staticip-e2e/tenant": suffix}
	block := netip.MustParsePrefix("10.199.0.0/30") // one block of two addresses
	bits := int32(30)
	pool, err := cs.JkeV1().IPPools().Create(ctx, &jkev1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "e2e-tenant-" + suffix},
		Spec: jkev1.IPPoolSpec{CIDRs: []string{block.String()}, BlockSize: &bits,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: selector},
			ReleaseAfter:      &metav1.Duration{Duration: 10 * time.Second}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Runs after the namespaces are deleted (cleanups run last-registered first): the pool's
	// block goes once its pods are gone.
	t.Cleanup(func() {
		ctx := context.Background()
		_ = cs.JkeV1().IPPools().Delete(ctx, pool.Name, metav1.DeleteOptions{})
		_ = framework.WaitFor(ctx, 2*time.Minute, "the pool's pods gone", func(ctx context.Context) (bool, error) {
			pods, err := f.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			return !slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool {
				a, err := netip.ParseAddr(p.Status.PodIP)
				return err == nil && block.Contains(a)
			}), nil
		})
		_ = cs.JkeV1().IPRanges().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: jkev1.LabelIPPool + "=" + pool.Name})
	})
	tenant := f.NamespaceWithLabels(t, "tenant", selector)
	other := f.Namespace(t, "other")

	runIn := func(ns, name string) *corev1.Pod {
		t.Helper()
		if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, testServerPod(name, node, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p, err := f.WaitForPodRunning(ctx, ns, name, 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	inBlock := func(p *corev1.Pod) bool {
		a, err := netip.ParseAddr(p.Status.PodIP)
		return err == nil && block.Contains(a)
	}
	began := time.Now()
	p1 := runIn(tenant, "p1")
	t.Logf("%s/p1 runs on %s with %s, %s after its creation", tenant, node, p1.Status.PodIP, time.Since(began).Round(time.Millisecond))
	if !inBlock(p1) {
		t.Fatalf("%s/p1 got %s, want an address of IPPool %s (%s)", tenant, p1.Status.PodIP, pool.Name, block)
	}
	ranges, err := cs.JkeV1().IPRanges().List(ctx, metav1.ListOptions{LabelSelector: jkev1.LabelIPPool + "=" + pool.Name})
	if err != nil {
		t.Fatal(err)
	}
	if len(ranges.Items) != 1 || ranges.Items[0].Spec.Node != node || ranges.Items[0].Labels[jkev1.LabelIPPoolRestricted] != "true" {
		t.Errorf("the pool's blocks: %+v; want one on %s labelled %s=true", ranges.Items, node, jkev1.LabelIPPoolRestricted)
	}
	if p := runIn(other, "plain"); inBlock(p) {
		t.Errorf("%s/plain (its namespace not selected) got %s of IPPool %s", other, p.Status.PodIP, pool.Name)
	}
	if p2 := runIn(tenant, "p2"); !inBlock(p2) || p2.Status.PodIP == p1.Status.PodIP {
		t.Fatalf("%s/p2 got %s, want the other address of %s", tenant, p2.Status.PodIP, block)
	}

	// The pool is full: p3 waits, with a Warning Event naming the pool — staticip-scheduler's
	// FailedScheduling (no node has a free address of the pool and the pool has no block left),
	// or, when p3 was bound before the agent counted the block full, the allocator's
	// IPPoolExhausted. Either way Pending, never ContainerCreating with an address of another pool.
	if _, err := f.Client.CoreV1().Pods(tenant).Create(ctx, testServerPod("p3", node, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var event string
	if err := framework.WaitFor(ctx, 2*time.Minute, "a Warning Event (FailedScheduling or IPPoolExhausted) on p3 naming "+pool.Name, func(ctx context.Context) (bool, error) {
		evs, err := f.Client.CoreV1().Events(tenant).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=p3"})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && (e.Reason == "IPPoolExhausted" || e.Reason == "FailedScheduling") && strings.Contains(e.Message, pool.Name) {
				event = e.Reason + " " + strconv.Quote(e.Message)
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("p3: Warning %s", event)
	if p3, err := f.Client.CoreV1().Pods(tenant).Get(ctx, "p3", metav1.GetOptions{}); err != nil || p3.Status.Phase != corev1.PodPending || p3.Status.PodIP != "" {
		t.Errorf("p3: %v %s %q; want Pending without an address", err, p3.Status.Phase, p3.Status.PodIP)
	}
}
