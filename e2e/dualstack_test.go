//go:build e2e

package e2e

import (
	"context"
	"fmt"
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

// TestDualStackStaticPod (issue 39 item 2) on the local cluster's dual-stack nodes (both
// InternalIPs, the IPv6 pool cluster.LocalClusterPoolV6 beside the IPv4 one, dual-stack Services):
// a static-IP EnhancedStatefulSet pod naming both pools gets an IPv4 and an IPv6 address, its
// StaticIP records both (spec.ips), it keeps both across a delete and recreate, a pod on another
// node reaches it over IPv4 and IPv6 (the agents' routes: the IPv6 range via its node's IPv6
// address), and a RequireDualStack Service reaches it over both families. Skipped where the
// cluster has no IPv6 pool (kind's single-stack install).
func TestDualStackStaticPod(t *testing.T) {
	ctx := context.Background()
	requireStaticIPCNI(t, ctx)
	cs := versioned.NewForConfigOrDie(f.Config)
	if _, err := cs.JkeV1().IPPools().Get(ctx, cluster.LocalClusterPoolV6, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Skipf("no IPPool %s: the cluster is not the local cluster's dual-stack one (tools/localcluster up creates it)", cluster.LocalClusterPoolV6)
	} else if err != nil {
		t.Fatal(err)
	}
	nodes := workloadNodes(t, ctx)
	if len(nodes) < 2 {
		t.Skip("needs two nodes that take ordinary pods")
	}
	serverNode, clientNode := nodes[0].Name, nodes[1].Name
	began := time.Now()
	// Registered before the namespace, so it runs after the namespace is gone (cleanups run
	// last-registered first): the IPv6 pool's blocks go back once empty (releaseAfter 10 s), so
	// the tests after this one (failover moves every block of a node; the router carries IPv4
	// only) see the nodes as before.
	t.Cleanup(func() { waitIPv6BlocksReleased(t, cs) })
	ns := f.NamespaceWithLabels(t, "dualstack", map[string]string{cluster.LabelDualStack: "true"})
	bothPools := map[string]string{poolchoice.AnnotationIPPools: fmt.Sprintf(`[%q,%q]`, cluster.LocalClusterPool, cluster.LocalClusterPoolV6)}

	name := "ds"
	labels := map[string]string{"app": name}
	spec := testServerPod("", "", nil).Spec
	spec.NodeSelector = map[string]string{"kubernetes.io/hostname": serverNode}
	set := &jkev1alpha1.EnhancedStatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{jkev1.AnnotationEnable: "true"}},
		Spec: jkev1alpha1.EnhancedStatefulSetSpec{
			Replicas: ptr(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels}, ServiceName: name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template:            corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: bothPools}, Spec: spec},
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
	// The client is dual-stack too: in this namespace a pod naming no pool would take the
	// namespace's pool alone, the IPv6 one.
	client := testServerPod("client", clientNode, nil)
	client.Annotations = bothPools
	if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, client, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WaitForPodRunning(ctx, ns, "client", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
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

// waitIPv6BlocksReleased waits until no node holds a block of the IPv6 pool (the allocator
// releases an empty one after the pool's releaseAfter).
func waitIPv6BlocksReleased(t *testing.T, cs versioned.Interface) {
	ctx := context.Background()
	var held []string
	if err := framework.WaitFor(ctx, 90*time.Second, "the IPv6 pool's blocks released", func(ctx context.Context) (bool, error) {
		list, err := cs.JkeV1().IPRanges().List(ctx, metav1.ListOptions{LabelSelector: jkev1.LabelIPPool + "=" + cluster.LocalClusterPoolV6})
		if err != nil {
			return false, err
		}
		held = held[:0]
		for _, r := range list.Items {
			if r.Spec.Node != "" {
				held = append(held, r.Name+"@"+r.Spec.Node)
			}
		}
		return len(held) == 0, nil
	}); err != nil {
		t.Errorf("%v: still held %v", err, held)
	}
}
