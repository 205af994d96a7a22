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

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/apis/poolchoice"
	"github.com/staticip/staticip/e2e/framework"
	"github.com/staticip/staticip/tools/localcluster/cluster"
)

// TestDualStackStaticPod (issue 39 item 2) on a dual-stack cluster (both InternalIPs, an IPv6
// pool beside the IPv4 one, dual-stack Services; dualStackPoolsOf: the local cluster's, or kind's
// with KIND_IP_FAMILY=dual): a static-IP EnhancedStatefulSet pod naming both pools gets an IPv4
// and an IPv6 address, its StaticIP records both (spec.ips), it keeps both across a delete and
// recreate, a pod on another node reaches it over IPv4 and IPv6 (the agents' routes: the IPv6
// range via its node's IPv6 address), and a RequireDualStack Service reaches it over both
// families. On kind the client pod names no pool: both of its namespace's pools select it
// (the path upstream's dual-stack specs take), and it must get both families too. Skipped where
// the cluster has no such pools (an IPv4 cluster: KIND_IP_FAMILY=ipv4).
func TestDualStackStaticPod(t *testing.T) {
	ctx := context.Background()
	requireStaticIPCNI(t, ctx)
	cs := versioned.NewForConfigOrDie(f.Config)
	pools, err := dualStackPoolsOf(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	if pools == nil {
		t.Skipf("no dual-stack pools: neither the local cluster's IPPool %s nor an IPv4 and an IPv6 IPPool selecting the namespaces labelled %v (kind: KIND_IP_FAMILY=dual)", cluster.LocalClusterPoolV6, kindDualStackNamespaceLabels)
	}
	nodes := workloadNodes(t, ctx)
	if len(nodes) < 2 {
		t.Skip("needs two nodes that take ordinary pods")
	}
	serverNode, clientNode := nodes[0].Name, nodes[1].Name
	began := time.Now()
	// Registered before the namespace, so it runs after the namespace's deletion (cleanups run
	// last-registered first): the namespace pools' blocks go back once empty (releaseAfter 10 s),
	// so the tests after this one (failover moves every block of a node; the router carries IPv4
	// only; the CNI test checks the routes of every range of every node) see the nodes as before.
	t.Cleanup(func() { waitNamespacePoolBlocksReleased(t, cs, pools.released) })
	ns := f.NamespaceWithLabels(t, "dualstack", pools.namespaceLabels)

	name := "ds"
	labels := map[string]string{"app": name}
	spec := testServerPod("", "", nil).Spec
	spec.NodeSelector = map[string]string{"kubernetes.io/hostname": serverNode}
	set := &jkev1alpha1.EnhancedStatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{jkev1.AnnotationEnable: "true"}},
		Spec: jkev1alpha1.EnhancedStatefulSetSpec{
			Replicas: ptr(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels}, ServiceName: name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{
				poolchoice.AnnotationIPPools: fmt.Sprintf(`[%q,%q]`, pools.v4, pools.v6)}}, Spec: spec},
		},
	}
	if _, err := cs.JkeV1alpha1().EnhancedStatefulSets(ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := waitDualStackPod(t, ctx, ns, name+"-0", "")
	t.Logf("%s/%s-0 runs on %s with %v, %s after the set's creation", ns, name, serverNode, first.addrs, time.Since(began).Round(time.Millisecond))
	if err := framework.WaitFor(ctx, 30*time.Second, "StaticIP "+name+"-0 records both addresses", func(ctx context.Context) (bool, error) {
		s, err := cs.JkeV1().StaticIPs(ns).Get(ctx, name+"-0", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		return s.Spec.IP == first.addrs[0] && slices.Equal(s.Spec.IPs, first.addrs), nil
	}); err != nil {
		t.Fatal(err)
	}

	// Deleted and recreated: both addresses come back.
	if err := f.Client.CoreV1().Pods(ns).Delete(ctx, name+"-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := waitDualStackPod(t, ctx, ns, name+"-0", first.uid)
	if !slices.Equal(again.addrs, first.addrs) {
		t.Fatalf("recreated %s-0 got %v, want its addresses %v back", name, again.addrs, first.addrs)
	}
	t.Logf("recreated %s-0 kept %v", name, again.addrs)

	// From a pod on another node, over both families: the agents route the server node's IPv4
	// and IPv6 ranges via its address of each family.
	client := testServerPod("client", clientNode, nil)
	if !pools.bySelector {
		client.Annotations = map[string]string{poolchoice.AnnotationIPPools: fmt.Sprintf(`[%q,%q]`, pools.v4, pools.v6)}
	}
	if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, client, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clientPod := waitDualStackPod(t, ctx, ns, "client", "")
	t.Logf("client on %s: %v (pools %s)", clientNode, clientPod.addrs, client.Annotations[poolchoice.AnnotationIPPools])
	get := func(what, ip string, port int) {
		t.Helper()
		var out string
		var err error
		for range 10 { // routes and kube-proxy's rules follow within a pass or two
			if out, err = f.ExecInPod(ns, "client", "/testserver", "get", "--timeout=2s", url(ip, port)); err == nil {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		if err != nil || !strings.Contains(out, name+"-0") {
			t.Errorf("client on %s -> %s %s: %v %s", clientNode, what, url(ip, port), err, out)
			return
		}
		t.Logf("client on %s -> %s %s: answered by %s-0", clientNode, what, url(ip, port), name)
	}
	for _, ip := range again.addrs {
		get("pod", ip, 8080)
	}

	// A RequireDualStack Service: a ClusterIP of each family, both reaching the pod.
	svc, err := f.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Selector: labels, IPFamilyPolicy: ptr(corev1.IPFamilyPolicyRequireDualStack),
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			Ports:      []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a RequireDualStack Service: %v", err)
	}
	if len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("Service %s has ClusterIPs %v, want one of each family", name, svc.Spec.ClusterIPs)
	}
	for i, ip := range svc.Spec.ClusterIPs {
		get(fmt.Sprintf("Service (%s)", svc.Spec.IPFamilies[i]), ip, 80)
	}
	t.Logf("done %s after the set's creation", time.Since(began).Round(time.Millisecond))
}

// dualStackPod is a running pod's UID and addresses (pod.status.podIPs, IPv4 first).
type dualStackPod struct {
	uid   string
	addrs []string
}

// waitDualStackPod waits until pod name runs Ready with one IPv4 and one IPv6 address (another
// pod than oldUID, when set: the recreated one).
func waitDualStackPod(t *testing.T, ctx context.Context, ns, name, oldUID string) dualStackPod {
	t.Helper()
	var got dualStackPod
	var last string
	if err := framework.WaitFor(ctx, 2*time.Minute, fmt.Sprintf("%s/%s Ready with an IPv4 and an IPv6 address", ns, name), func(ctx context.Context) (bool, error) {
		p, err := f.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		got = dualStackPod{uid: string(p.UID)}
		for _, ip := range p.Status.PodIPs {
			got.addrs = append(got.addrs, ip.IP)
		}
		last = fmt.Sprintf("uid %s on %s, %s, podIPs %v", p.UID, p.Spec.NodeName, p.Status.Phase, got.addrs)
		if string(p.UID) == oldUID || p.DeletionTimestamp != nil || !framework.PodReady(p) || len(got.addrs) != 2 {
			return false, nil
		}
		a, err4 := netip.ParseAddr(got.addrs[0])
		b, err6 := netip.ParseAddr(got.addrs[1])
		return err4 == nil && err6 == nil && a.Is4() && b.Is6(), nil
	}); err != nil {
		t.Fatalf("%v (last: %s)", err, last)
	}
	return got
}

// kindDualStackNamespaceLabels is the label kind's dual-stack pools select (tools/kind/kind.sh
// dual_stack_pools, KIND_IP_FAMILY=dual): the one upstream's e2e framework gives the namespaces
// of its [Feature:IPv6DualStack] specs (tools/conformance).
var kindDualStackNamespaceLabels = map[string]string{"e2e-framework": "dualstack"}

// dualStackPools are the IPPools a dual-stack pod of this cluster names, the labels of a
// namespace they serve, and the namespace pools whose blocks must go back after the test.
type dualStackPools struct {
	v4, v6          string
	namespaceLabels map[string]string
	// bySelector: both pools select the namespace, so a pod naming no pool gets both families.
	bySelector bool
	released   []string
}

// dualStackPoolsOf finds the cluster's dual-stack pools: the local cluster's default and
// default-v6 (a namespace pool of IPv6; the IPv4 one is the node pool), else an IPv4 and an IPv6
// pool selecting kindDualStackNamespaceLabels (kind's); nil when there are none.
func dualStackPoolsOf(ctx context.Context, cs versioned.Interface) (*dualStackPools, error) {
	list, err := cs.JkeV1().IPPools().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	byFamily := map[bool]string{}
	for _, p := range list.Items {
		if p.Name == cluster.LocalClusterPoolV6 {
			return &dualStackPools{v4: cluster.LocalClusterPool, v6: cluster.LocalClusterPoolV6,
				namespaceLabels: map[string]string{cluster.LabelDualStack: "true"}, released: []string{cluster.LocalClusterPoolV6}}, nil
		}
		if p.Spec.NamespaceSelector == nil || !maps.Equal(p.Spec.NamespaceSelector.MatchLabels, kindDualStackNamespaceLabels) || len(p.Spec.CIDRs) == 0 {
			continue
		}
		if c, err := netip.ParsePrefix(p.Spec.CIDRs[0]); err == nil {
			byFamily[c.Addr().Is4()] = p.Name
		}
	}
	if byFamily[true] == "" || byFamily[false] == "" {
		return nil, nil
	}
	return &dualStackPools{v4: byFamily[true], v6: byFamily[false], namespaceLabels: kindDualStackNamespaceLabels,
		bySelector: true, released: []string{byFamily[true], byFamily[false]}}, nil
}

// waitNamespacePoolBlocksReleased waits until no node holds a block of the pools (the allocator
// releases an empty one after the pool's releaseAfter).
func waitNamespacePoolBlocksReleased(t *testing.T, cs versioned.Interface, pools []string) {
	ctx := context.Background()
	var held []string
	if err := framework.WaitFor(ctx, 90*time.Second, fmt.Sprintf("the blocks of IPPools %v released", pools), func(ctx context.Context) (bool, error) {
		var now []string
		for _, pool := range pools {
			list, err := cs.JkeV1().IPRanges().List(ctx, metav1.ListOptions{LabelSelector: jkev1.LabelIPPool + "=" + pool})
			if err != nil {
				return false, err
			}
			for _, r := range list.Items {
				if r.Spec.Node != "" {
					now = append(now, r.Name+"@"+r.Spec.Node)
				}
			}
		}
		held = now // the last complete answer, for the message
		return len(held) == 0, nil
	}); err != nil {
		t.Errorf("%v: still held %v", err, held)
	}
}
