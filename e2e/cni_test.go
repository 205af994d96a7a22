//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/e2e/framework"
)

// agentRouteProtocol is the route protocol staticip-agent marks its routes with (0x5a).
const agentRouteProtocol = "90"

// agentBlackholeProtocol is the protocol of the agent's BGP blackhole routes (cni/agent
// BlackholeProtocol, 0x5b).
const agentBlackholeProtocol = "91"

// requireStaticIPCNI skips on clusters whose pod network is not staticip's (no agent
// DaemonSet), and returns each node's IPRanges.
func requireStaticIPCNI(t *testing.T, ctx context.Context) map[string][]jkev1.IPRange {
	t.Helper()
	if _, err := f.Client.AppsV1().DaemonSets("kube-system").Get(ctx, "staticip-agent", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Skip("the cluster does not run the staticip CNI (no kube-system/staticip-agent DaemonSet)")
	} else if err != nil {
		t.Fatal(err)
	}
	list, err := versioned.NewForConfigOrDie(f.Config).JkeV1().IPRanges().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byNode := map[string][]jkev1.IPRange{}
	for _, r := range list.Items {
		byNode[r.Spec.Node] = append(byNode[r.Spec.Node], r)
	}
	return byNode
}

// ipIn returns the IPRange of ranges that contains ip.
func ipIn(ranges []jkev1.IPRange, ip string) (jkev1.IPRange, bool) {
	for _, r := range ranges {
		if _, cidr, err := net.ParseCIDR(r.Spec.CIDR); err == nil && cidr.Contains(net.ParseIP(ip)) {
			return r, true
		}
	}
	return jkev1.IPRange{}, false
}

// hostInRange returns the address at offset host inside the IPv4 range r (e.g. .200).
func hostInRange(t *testing.T, r jkev1.IPRange, host byte) string {
	t.Helper()
	_, cidr, err := net.ParseCIDR(r.Spec.CIDR)
	if err != nil || cidr.IP.To4() == nil {
		t.Fatalf("IPRange %s: %q is not an IPv4 CIDR", r.Name, r.Spec.CIDR)
	}
	ip := cidr.IP.To4()
	return net.IPv4(ip[0], ip[1], ip[2], ip[3]+host).String()
}

// waitForPodEvent waits for an event on a pod with the reason whose message contains want.
func waitForPodEvent(t *testing.T, ctx context.Context, ns, pod, reason, want string) string {
	t.Helper()
	var msg string
	err := framework.WaitFor(ctx, 2*time.Minute, fmt.Sprintf("%s event on %s with %q", reason, pod, want), func(ctx context.Context) (bool, error) {
		evs, err := f.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == reason && strings.Contains(e.Message, want) {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// runPodOn creates pod and waits until it runs Ready on node with ip.
func runPodOn(t *testing.T, ctx context.Context, ns string, pod *corev1.Pod, node, ip string) {
	t.Helper()
	if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := f.WaitForPodRunning(ctx, ns, pod.Name, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != node || p.Status.PodIP != ip {
		t.Fatalf("pod %s runs on %s with %s, want %s with %s", pod.Name, p.Spec.NodeName, p.Status.PodIP, node, ip)
	}
}

// deletePodAndWait deletes a pod and waits until it is gone.
func deletePodAndWait(t *testing.T, ctx context.Context, ns, name string) {
	t.Helper()
	pods := f.Client.CoreV1().Pods(ns)
	if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(ctx, time.Minute, "pod "+name+" gone", func(ctx context.Context) (bool, error) {
		_, err := pods.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestCNIPodsGetNodeIPRangeAddressesAndCrossNodesThroughAgentRoutes: on the staticip CNI a
// pod on every node gets an address from its node's IPRange; every node routes every other
// node's IPRanges via that node's InternalIP of the range's family (a dual-stack node has two)
// with routes the agent made (protocol 0x5a, the
// local cluster adds no routes between nodes for this CNI); pods answer each other across
// every pair of nodes over those routes.
func TestCNIPodsGetNodeIPRangeAddressesAndCrossNodesThroughAgentRoutes(t *testing.T) {
	ctx := context.Background()
	rangesByNode := requireStaticIPCNI(t, ctx)
	ns := f.Namespace(t, "e2e-cni")
	pods := podPerNode(t, ctx, ns, nil)
	for _, p := range pods {
		r, ok := ipIn(rangesByNode[p.Spec.NodeName], p.Status.PodIP)
		if !ok {
			t.Errorf("pod %s on %s has IP %s, outside the node's IPRanges %v", p.Name, p.Spec.NodeName, p.Status.PodIP, rangesByNode[p.Spec.NodeName])
			continue
		}
		t.Logf("pod %s on %s: %s from IPRange %s (%s)", p.Name, p.Spec.NodeName, p.Status.PodIP, r.Name, r.Spec.CIDR)
	}

	nodes := readyNodes(t, ctx)
	// node -> "4"/"6" -> its first InternalIP of that family
	internalIP := map[string]map[string]string{}
	family := func(addr string) string {
		if strings.Contains(addr, ":") {
			return "6"
		}
		return "4"
	}
	for _, n := range nodes {
		internalIP[n.Name] = map[string]string{}
		for _, a := range n.Status.Addresses {
			if f := family(a.Address); a.Type == corev1.NodeInternalIP && internalIP[n.Name][f] == "" {
				internalIP[n.Name][f] = a.Address
			}
		}
	}
	for _, n := range nodes {
		shell, why, err := f.NodeShell(ctx, n.Name)
		if err != nil {
			t.Fatal(err)
		}
		if shell == nil {
			t.Logf("skipping the route check on %s: %s", n.Name, why)
			continue
		}
		out4, err := shell.Exec("ip", "-4", "route", "show", "proto", agentRouteProtocol)
		if err != nil {
			t.Fatal(err)
		}
		out6, err := shell.Exec("ip", "-6", "route", "show", "proto", agentRouteProtocol)
		if err != nil {
			t.Fatal(err)
		}
		out := out4 + out6
		for _, m := range nodes {
			if m.Name == n.Name {
				continue
			}
			for _, r := range rangesByNode[m.Name] {
				if want := r.Spec.CIDR + " via " + internalIP[m.Name][family(r.Spec.CIDR)]; !strings.Contains(out, want) {
					t.Errorf("node %s lacks the agent's route %q; its agent routes:\n%s", n.Name, want, out)
				}
			}
		}
	}

	for _, from := range pods {
		for _, to := range pods {
			if from.Spec.NodeName == to.Spec.NodeName {
				continue
			}
			out, err := f.ExecInPod(ns, from.Name, "/testserver", "get", url(to.Status.PodIP, 8080))
			if err != nil {
				t.Errorf("%s (%s) -> %s (%s): %v", from.Name, from.Spec.NodeName, to.Name, to.Spec.NodeName, err)
				continue
			}
			if r := parseReply(t, out); r.Pod != to.Name || r.PodIP != to.Status.PodIP {
				t.Errorf("%s -> %s answered by %+v", from.Name, to.Name, r)
			}
		}
	}
}

// TestCNIKeepsTheIPWhileTheStaticIPExists: a pod annotated with an IP of the last node's
// IPRange runs there with exactly that IP. Deleted while its StaticIP exists, the IP stays
// reserved for it: another pod asking for the IP on that node is refused with an event
// naming the owner, and the IPRange counts it as reserved. Recreated, the pod comes back
// to the same node with the same IP. Once the StaticIP is gone, deleting the pod frees the
// IP and another pod gets it.
func TestCNIKeepsTheIPWhileTheStaticIPExists(t *testing.T) {
	ctx := context.Background()
	rangesByNode := requireStaticIPCNI(t, ctx)
	nodes := workloadNodes(t, ctx)
	target := nodes[len(nodes)-1].Name
	if len(rangesByNode[target]) == 0 {
		t.Fatalf("node %s has no IPRange", target)
	}
	rng := rangesByNode[target][0]
	ip := hostInRange(t, rng, 200)
	ns := f.IPRequestNamespace(t, "e2e-cni-keep")
	cs := versioned.NewForConfigOrDie(f.Config)
	pods := f.Client.CoreV1().Pods(ns)

	if _, err := cs.JkeV1().StaticIPs(ns).Create(ctx, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: jkev1.StaticIPSpec{IP: ip, Node: target, Pod: "web"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web := func() *corev1.Pod {
		p := testServerPod("web", "", nil)
		p.Spec.NodeSelector = nil // the scheduler pins it to the IP's node
		p.Annotations = map[string]string{jkev1.AnnotationEnable: "true", podip.AnnotationIPAddress: ip}
		return p
	}
	runPodOn(t, ctx, ns, web(), target, ip)
	t.Logf("pod web runs on %s with %s", target, ip)
	deletePodAndWait(t, ctx, ns, "web")

	// Straight to the kubelet (nodeName set), past the scheduler, so only the CNI decides.
	intruder := testServerPod("intruder", "", nil)
	intruder.Spec.NodeSelector = nil
	intruder.Spec.NodeName = target
	intruder.Annotations = map[string]string{podip.AnnotationIPAddress: ip}
	if _, err := pods.Create(ctx, intruder, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	msg := waitForPodEvent(t, ctx, ns, "intruder", "FailedCreatePodSandBox", fmt.Sprintf("IP %s is reserved for pod %s/web", ip, ns))
	t.Logf("intruder refused: %s", msg)
	if err := framework.WaitFor(ctx, time.Minute, "IPRange "+rng.Name+" counting a reserved IP", func(ctx context.Context) (bool, error) {
		r, err := cs.JkeV1().IPRanges().Get(ctx, rng.Name, metav1.GetOptions{})
		return err == nil && r.Status.Reserved >= 1, err
	}); err != nil {
		t.Error(err)
	}
	deletePodAndWait(t, ctx, ns, "intruder")

	runPodOn(t, ctx, ns, web(), target, ip)
	t.Logf("recreated while its StaticIP exists: pod web runs on %s with %s again", target, ip)

	if err := cs.JkeV1().StaticIPs(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deletePodAndWait(t, ctx, ns, "web")
	next := testServerPod("next", "", nil)
	next.Spec.NodeSelector = nil
	next.Spec.NodeName = target
	next.Annotations = map[string]string{podip.AnnotationIPAddress: ip}
	runPodOn(t, ctx, ns, next, target, ip) // the IP was freed once the StaticIP and its pod were gone
}

// TestCNIBadInputShowsInPodEvents: a pod with a malformed ip-address annotation is refused
// at admission (ValidatingAdmissionPolicy staticip-ip-address, for every writer) with the
// rule, or, on a cluster installed without that policy, gets the plugin's event below; pods sent straight to a node's kubelet (past the scheduler, which would reject them
// first) with an IP owned by another node and an IP held by a running pod each get a
// FailedCreatePodSandBox event with the plugin's clear message, and never run.
func TestCNIBadInputShowsInPodEvents(t *testing.T) {
	ctx := context.Background()
	rangesByNode := requireStaticIPCNI(t, ctx)
	nodes := workloadNodes(t, ctx)
	if len(nodes) < 2 {
		t.Skip("needs two nodes that take ordinary pods")
	}
	node, other := nodes[0].Name, nodes[1].Name
	if len(rangesByNode[node]) == 0 || len(rangesByNode[other]) == 0 {
		t.Fatalf("nodes %s and %s need IPRanges", node, other)
	}
	ns := f.IPRequestNamespace(t, "e2e-cni-bad")
	pods := f.Client.CoreV1().Pods(ns)
	onNode := func(name, ip string) *corev1.Pod {
		p := testServerPod(name, "", nil)
		p.Spec.NodeSelector = nil
		p.Spec.NodeName = node
		p.Annotations = map[string]string{podip.AnnotationIPAddress: ip}
		return p
	}
	held := hostInRange(t, rangesByNode[node][0], 201)
	if _, err := pods.Create(ctx, onNode("holder", held), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WaitForPodRunning(ctx, ns, "holder", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	malformedAdmitted := createUnlessAdmissionRefusesTheAddress(t, ctx, ns, onNode("malformed", "10.244.1.999"))
	foreign := hostInRange(t, rangesByNode[other][0], 202)
	cases := []struct{ pod, ip, want string }{
		{"foreign", foreign, fmt.Sprintf("IP %s is outside every range of this node", foreign)},
		{"taken", held, fmt.Sprintf("IP %s is in use by pod %s/holder", held, ns)},
	}
	for _, c := range cases {
		if _, err := pods.Create(ctx, onNode(c.pod, c.ip), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if malformedAdmitted {
		cases = append(cases, struct{ pod, ip, want string }{"malformed", "10.244.1.999",
			fmt.Sprintf(`annotation %s="10.244.1.999" is not an IP address`, podip.AnnotationIPAddress)})
	}
	for _, c := range cases {
		msg := waitForPodEvent(t, ctx, ns, c.pod, "FailedCreatePodSandBox", c.want)
		t.Logf("%s: %s", c.pod, msg)
		if c.pod == "foreign" && !strings.Contains(msg, "owned by node "+other) {
			t.Errorf("the out-of-range error does not name the owning node %s: %s", other, msg)
		}
	}
	for _, c := range cases {
		p, err := pods.Get(ctx, c.pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.PodIP != "" || p.Status.Phase == corev1.PodRunning {
			t.Errorf("pod %s got IP %q, phase %s; it must not start", c.pod, p.Status.PodIP, p.Status.Phase)
		}
	}
	h, err := pods.Get(ctx, "holder", metav1.GetOptions{})
	if err != nil || h.Status.PodIP != held {
		t.Errorf("holder lost its IP %s: %v %v", held, h.Status.PodIP, err)
	}
}

// createUnlessAdmissionRefusesTheAddress creates pod, whose ip-address annotation is
// malformed, and reports whether the API server admitted it. Where staticip's admission
// policies are installed (make up, the chart) the ValidatingAdmissionPolicy
// staticip-ip-address must refuse it, naming the annotation and the rule; the caller then has
// nothing left to check downstream. Without the policy (an install that left it out) the pod
// is admitted and the caller checks that the scheduler or the plugin refuses it instead.
func createUnlessAdmissionRefusesTheAddress(t *testing.T, ctx context.Context, ns string, pod *corev1.Pod) bool {
	t.Helper()
	_, err := f.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err == nil {
		if _, perr := f.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, "staticip-ip-address", metav1.GetOptions{}); perr == nil {
			t.Errorf("pod %s with %s=%q was admitted although the policy staticip-ip-address is installed", pod.Name, podip.AnnotationIPAddress, pod.Annotations[podip.AnnotationIPAddress])
		}
		return true
	}
	if !(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) || !strings.Contains(err.Error(), podip.AnnotationIPAddress) || !strings.Contains(err.Error(), "must be one IP address") {
		t.Fatalf("pod %s with %s=%q: %v, want admission's refusal naming the annotation and the rule", pod.Name, podip.AnnotationIPAddress, pod.Annotations[podip.AnnotationIPAddress], err)
	}
	t.Logf("%s: refused at admission: %v", pod.Name, err)
	return false
}
