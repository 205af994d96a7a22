//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/e2e/framework"
)

// dualStackNamespaceLabels is the label the dual-stack pools of a kind cluster
// (KIND_IP_FAMILY=dual, tools/kind/kind.sh dual_stack_pools) select: the one upstream's e2e
// framework gives the namespaces of its [Feature:IPv6DualStack] specs (tools/conformance).
var dualStackNamespaceLabels = map[string]string{"e2e-framework": "dualstack"}

// TestDualStackPodsReachEachOtherAcrossNodes (issue 39 item 2): on a dual-stack cluster, a pod
// of a namespace that an IPv4 and an IPv6 IPPool select gets one address of each (pod.status.podIPs,
// the IPv4 one primary, each inside its pool), and a pod on another node reaches it over IPv6 and
// over IPv4 — the IPv6 packets cross between the nodes on the agents' routes via the holders'
// IPv6 InternalIPs. Once the pods are gone, both pools' blocks go back (releaseAfter), so the
// tests after this one see the nodes' IPv4 ranges only. Skips where no such pair of pools exists
// (an IPv4 cluster: KIND_IP_FAMILY=ipv4, the local cluster) or fewer than two schedulable nodes
// have an IPv6 InternalIP.
func TestDualStackPodsReachEachOtherAcrossNodes(t *testing.T) {
	ctx := context.Background()
	requireStaticIPCNI(t, ctx)
	cs := versioned.NewForConfigOrDie(f.Config)
	list, err := cs.JkeV1().IPPools().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pools := map[bool]jkev1.IPPool{} // by "is IPv4"
	for _, p := range list.Items {
		if p.Spec.NamespaceSelector == nil || !maps.Equal(p.Spec.NamespaceSelector.MatchLabels, dualStackNamespaceLabels) || len(p.Spec.CIDRs) == 0 {
			continue
		}
		if c, err := netip.ParsePrefix(p.Spec.CIDRs[0]); err == nil {
			pools[c.Addr().Is4()] = p
		}
	}
	if len(pools) != 2 {
		t.Skipf("no IPPool of each family selects the namespaces labelled %v (kind's dual-stack pools: KIND_IP_FAMILY=dual make e2e-kind); found %d", dualStackNamespaceLabels, len(pools))
	}
	var nodes []string
	for _, n := range workloadNodes(t, ctx) {
		if internalIPOf(n, false) != "" {
			nodes = append(nodes, n.Name)
		}
	}
	if len(nodes) < 2 {
		t.Skipf("fewer than two schedulable nodes have an IPv6 InternalIP (%v): not a dual-stack cluster", nodes)
	}
	nodes = nodes[:2]

	// Registered before the namespace, so it runs after the namespace's deletion: the pools'
	// blocks must go back once the pods are gone.
	t.Cleanup(func() { waitDualStackBlocksReleased(t, cs, pools) })
	ns := f.NamespaceWithLabels(t, "e2e-dualstack", dualStackNamespaceLabels)
	var pods []*corev1.Pod
	for i, node := range nodes {
		name := fmt.Sprintf("ds-%d", i)
		if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, testServerPod(name, node, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{}) }()
	}
	for i, node := range nodes {
		p, err := f.WaitForPodRunning(ctx, ns, fmt.Sprintf("ds-%d", i), 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != node {
			t.Fatalf("pod %s runs on %s, want %s", p.Name, p.Spec.NodeName, node)
		}
		var got []string
		for _, ip := range p.Status.PodIPs {
			got = append(got, ip.IP)
		}
		if len(got) != 2 {
			t.Fatalf("pod %s on %s has podIPs %v, want an IPv4 and an IPv6 address", p.Name, node, got)
		}
		for i, v4 := range []bool{true, false} {
			a, err := netip.ParseAddr(got[i])
			if err != nil || a.Is4() != v4 || !inPool(pools[v4], a) {
				t.Errorf("pod %s: podIPs[%d] = %s, want an address of IPPool %s %v (the IPv4 one first, as the primary)", p.Name, i, got[i], pools[v4].Name, pools[v4].Spec.CIDRs)
			}
		}
		if p.Status.PodIP != got[0] {
			t.Errorf("pod %s: podIP %s is not podIPs[0] %s", p.Name, p.Status.PodIP, got[0])
		}
		t.Logf("pod %s on %s: podIPs %v", p.Name, node, got)
		pods = append(pods, p)
	}
	if t.Failed() {
		t.FailNow()
	}

	// Both ways, IPv6 first (the family this test is about), then IPv4.
	for _, v4 := range []bool{false, true} {
		for _, pair := range [][2]*corev1.Pod{{pods[0], pods[1]}, {pods[1], pods[0]}} {
			from, to := pair[0], pair[1]
			ip := to.Status.PodIPs[1].IP
			if v4 {
				ip = to.Status.PodIPs[0].IP
			}
			began := time.Now()
			out, err := f.ExecInPod(ns, from.Name, "/testserver", "get", url(ip, 8080))
			if err != nil {
				t.Errorf("%s (%s) -> %s (%s) at %s: %v", from.Name, from.Spec.NodeName, to.Name, to.Spec.NodeName, ip, err)
				continue
			}
			if r := parseReply(t, out); r.Pod != to.Name {
				t.Errorf("%s -> %s at %s answered by %+v", from.Name, to.Name, ip, r)
				continue
			}
			t.Logf("%s (%s) -> %s (%s) at %s: answered (%s)", from.Name, from.Spec.NodeName, to.Name, to.Spec.NodeName, ip, time.Since(began).Round(time.Millisecond))
		}
	}
}

func inPool(p jkev1.IPPool, a netip.Addr) bool {
	return slices.ContainsFunc(p.Spec.CIDRs, func(c string) bool {
		pfx, err := netip.ParsePrefix(c)
		return err == nil && pfx.Contains(a)
	})
}

// internalIPOf is the node's first InternalIP of the family ("" when it has none).
func internalIPOf(n corev1.Node, v4 bool) string {
	for _, a := range n.Status.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP && ip.Is4() == v4 {
			return a.Address
		}
	}
	return ""
}

// waitDualStackBlocksReleased waits until no pod holds an address of the pools and none of their
// blocks is assigned to a node any more (each goes back releaseAfter after its last pod left).
func waitDualStackBlocksReleased(t *testing.T, cs versioned.Interface, pools map[bool]jkev1.IPPool) {
	ctx := context.Background()
	var held []string
	err := framework.WaitFor(ctx, 3*time.Minute, "the dual-stack pools' blocks released", func(ctx context.Context) (bool, error) {
		held = held[:0]
		pods, err := f.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			for _, ip := range p.Status.PodIPs {
				if a, err := netip.ParseAddr(ip.IP); err == nil && (inPool(pools[true], a) || inPool(pools[false], a)) {
					held = append(held, "pod "+p.Namespace+"/"+p.Name+" "+ip.IP)
				}
			}
		}
		for _, p := range pools {
			ranges, err := cs.JkeV1().IPRanges().List(ctx, metav1.ListOptions{LabelSelector: jkev1.LabelIPPool + "=" + p.Name})
			if err != nil {
				return false, err
			}
			for _, r := range ranges.Items {
				if r.Spec.Node != "" {
					held = append(held, "IPRange "+r.Name+" "+r.Spec.CIDR+" on "+r.Spec.Node)
				}
			}
		}
		return len(held) == 0, nil
	})
	if err != nil {
		t.Errorf("%v; still held: %s", err, strings.Join(held, ", "))
	}
}
