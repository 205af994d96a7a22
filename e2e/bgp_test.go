//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/e2e/framework"
	"github.com/staticip/staticip/tools/localcluster/cluster"
)

// The datacenter router (issue 36, items 3 and 4): on the local cluster, FRR's bgpd and zebra
// run in their own network namespace on the nodes' bridge, every node's staticip-agent
// announces its IPRanges to it (the BGPConfiguration and BGPPeer `up` creates), and an "outside"
// namespace behind it has no route but its default route via the router
// (tools/localcluster/README.md, "The datacenter router"). The tests here assert on FRR's own
// view (`vtysh -c 'show bgp ipv4 unicast json'`, parsed by cluster.ParseBGPTable) and on traffic
// from and to the outside. The failover tests (failover_controller_test.go) add the router's
// side of a failover, a power-off and a partition through routerView, without a failover of
// their own.

// routerView is the router of the cluster under test; nil where there is none (kind, a remote
// cluster), and then every check is skipped with the reason logged once.
type routerView struct {
	cluster.Router
	outside *outside
}

// optionalRouter returns the local cluster's router, or nil (logging why) elsewhere.
func optionalRouter(t *testing.T) *routerView {
	t.Helper()
	dir := filepath.Dir(f.Kubeconfig)
	if _, err := os.Stat(filepath.Join(dir, "cluster.json")); err != nil {
		t.Logf("no datacenter router here (only the local cluster has one: tools/localcluster); the router's side is not checked")
		return nil
	}
	o := cluster.DefaultOptions()
	o.StateDir = dir
	r, err := cluster.RouterOf(o)
	if err != nil {
		t.Fatalf("the local cluster's datacenter router: %v", err)
	}
	return &routerView{Router: r}
}

// requireRouter returns the local cluster's router or skips saying why.
func requireRouter(t *testing.T) *routerView {
	t.Helper()
	if _, err := os.Stat(filepath.Join(filepath.Dir(f.Kubeconfig), "cluster.json")); err != nil {
		t.Skip("SKIP: needs the local cluster's datacenter router (FRR in <prefix>-router, tools/localcluster); this cluster has none")
	}
	return optionalRouter(t)
}

// serveOutside runs the outside's servers (HTTP, DNS, SYN counters) in the router's outside
// namespace until the test ends.
func (r *routerView) serveOutside(t *testing.T) *outside {
	t.Helper()
	if r.outside == nil {
		r.outside = &outside{netns: r.OutsideNetns, addr: r.OutsideIP, httpPort: 18036, dnsLog: &lockedBuffer{}}
		if routes := run(t, "ip", "-n", r.OutsideNetns, "-4", "route", "show"); strings.Contains(routes, "10.") || !strings.Contains(routes, "default via "+r.OutsideGateway) {
			t.Fatalf("the outside namespace %s must have only its default route via the router %s and its link's route:\n%s", r.OutsideNetns, r.OutsideGateway, routes)
		}
		r.outside.serve(t)
	}
	return r.outside
}

// table is FRR's BGP table now.
func (r *routerView) table(t *testing.T) cluster.BGPTable {
	t.Helper()
	table, err := r.BGPTable()
	if err != nil {
		t.Fatal(err)
	}
	return table
}

// logTable logs FRR's table (what the report quotes) and the router's kernel routes.
func (r *routerView) logTable(t *testing.T, when string) {
	t.Helper()
	kernel, _ := r.Kernel()
	t.Logf("FRR's table %s:\n%s\nthe router's kernel (zebra):\n%s", when, r.table(t), kernel)
}

// waitBestVia waits until FRR's best path for cidr goes via nextHop and returns how long that took.
func (r *routerView) waitBestVia(t *testing.T, cidr, nextHop string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var last cluster.BGPTable
	for time.Since(start) < timeout {
		last = r.table(t)
		if last.BestNextHop(cidr) == nextHop {
			return time.Since(start)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("FRR's best path for %s is not via %s after %s; FRR's table:\n%s", cidr, nextHop, timeout, last)
	return 0
}

// waitNoneVia waits until FRR has no path via nextHop and returns how long that took.
func (r *routerView) waitNoneVia(t *testing.T, nextHop string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		table, err := r.BGPTable()
		if err == nil && len(table.Via(nextHop)) == 0 {
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return time.Since(start), fmt.Errorf("FRR still has paths via %s after %s: %v (err %v)\n%s", nextHop, timeout, table.Via(nextHop), err, table)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// outsideGet asks url from the outside namespace.
func (r *routerView) outsideGet(timeout, target string) (string, error) {
	out, err := exec.Command("ip", "netns", "exec", r.OutsideNetns, f.NodeTool, "get", "--timeout="+timeout, target).CombinedOutput()
	return string(out), err
}

// outsideReaches asks the testserver at ip from the outside, retrying for up to timeout, and
// returns its answer.
func (r *routerView) outsideReaches(t *testing.T, ip string, timeout time.Duration) reply {
	t.Helper()
	var out string
	var err error
	for start := time.Now(); time.Since(start) < timeout; time.Sleep(200 * time.Millisecond) {
		if out, err = r.outsideGet("1s", url(ip, 8080)); err == nil {
			return parseReply(t, out)
		}
	}
	t.Fatalf("the outside (%s, routed only by FRR) cannot reach %s: %v: %s\nFRR's table:\n%s", r.OutsideIP, ip, err, out, r.table(t))
	return reply{}
}

// TestBGPOutsideAndPods (issue 36, 4a and 4b): FRR learned the pod's range via its node; the
// outside — routed only through the router — reaches the pod by its IP and sees that IP; the pod
// reaches a server outside NATed to its node's address (natOutgoing, the default) and, with its
// exported pool's natOutgoing false, with its own IP, the answer returning through FRR's route;
// a CoreDNS forwarding a zone to a resolver outside answers a pod through it.
func TestBGPOutsideAndPods(t *testing.T) {
	ctx := context.Background()
	r := requireRouter(t)
	requireAgents(t)
	cs := versioned.NewForConfigOrDie(f.Config)
	nodes := workloadNodes(t, ctx)
	node := nodes[0]
	nodeIP := nodeInternalIP(node)
	out := r.serveOutside(t)
	ns := f.Namespace(t, "e2e-bgp")
	if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, testServerPod("ts", node.Name, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := f.WaitForPodRunning(ctx, ns, "ts", 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	rng := podRange(t, ctx, cs, pod.Status.PodIP)
	took := r.waitBestVia(t, rng.Spec.CIDR, nodeIP, 30*time.Second)
	r.logTable(t, fmt.Sprintf("with pod %s (%s) on %s (%s)", pod.Name, pod.Status.PodIP, node.Name, nodeIP))
	t.Logf("FRR: %s best via %s (%s) after %s", rng.Spec.CIDR, nodeIP, node.Name, took.Round(time.Millisecond))
	// `kubectl staticip bgp` (the plugin's binary, as a user runs it) shows the node announcing
	// the pod's range, and its session with the router Established.
	t.Run("KubectlStaticIPBGP", func(t *testing.T) { kubectlStaticIPBGP(t, node.Name, rng.Spec.CIDR) })

	// 4b: the outside reaches the pod by its IP, and the pod sees the outside's own address.
	if got := r.outsideReaches(t, pod.Status.PodIP, 20*time.Second); got.Pod != pod.Name || got.Node != node.Name {
		t.Errorf("the outside reached %s as pod %s on %s, want %s on %s", pod.Status.PodIP, got.Pod, got.Node, pod.Name, node.Name)
	}
	if reply, err := r.outsideGet("2s", url(pod.Status.PodIP, 8080)); err == nil {
		if host := remoteHost(t, reply); host != r.OutsideIP {
			t.Errorf("pod %s saw the outside as %s, want its own address %s (nothing on the way in may NAT)", pod.Name, host, r.OutsideIP)
		}
	}

	// 4a, natOutgoing true (the default): the outside sees the node's address.
	get := func(timeout string) (string, error) {
		return f.ExecInPod(ns, pod.Name, "/testserver", "get", "--timeout="+timeout, out.url())
	}
	reply, err := get("5s")
	if err != nil {
		t.Fatalf("pod %s (%s) cannot reach the outside server %s through the router: %v", pod.Name, pod.Status.PodIP, out.url(), err)
	}
	if host := remoteHost(t, reply); host != nodeIP {
		t.Errorf("natOutgoing true: the outside saw pod %s as %s, want its node's address %s", pod.Name, host, nodeIP)
	}

	// 4b: CoreDNS forwards a zone to the resolver outside.
	t.Run("CoreDNSForwardsOutside", func(t *testing.T) { coreDNSForwardsOutside(t, ctx, ns, node.Name, out) })

	// 4a, an exported pool with natOutgoing false: the pod's own IP outside, and the answer
	// comes back through FRR's route to the pod's range.
	pool := rng.Labels[jkev1.LabelIPPool]
	if pool == "" {
		t.Logf("IPRange %s was written by hand: not flipping a pool's natOutgoing", rng.Name)
		return
	}
	p, err := cs.JkeV1().IPPools().Get(ctx, pool, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.DisableBGPExport != nil && *p.Spec.DisableBGPExport {
		t.Fatalf("IPPool %s has disableBGPExport, yet FRR has its block %s", pool, rng.Spec.CIDR)
	}
	agentPod := agentPodOn(t, ctx, node.Name)
	setNATOutgoing(t, ctx, cs, pool, false)
	t.Cleanup(func() { setNATOutgoing(t, context.Background(), cs, pool, true) })
	waitNATRule(t, ctx, agentPod, rng.Spec.CIDR, false)
	reply, err = get("5s")
	if err != nil {
		t.Fatalf("natOutgoing false on the exported pool %s: pod %s (%s) got no answer from the outside %s: %v; the answer must come back through FRR's route to %s\nFRR's table:\n%s",
			pool, pod.Name, pod.Status.PodIP, out.url(), err, rng.Spec.CIDR, r.table(t))
	}
	if host := remoteHost(t, reply); host != pod.Status.PodIP {
		t.Errorf("natOutgoing false: the outside saw pod %s as %s, want the pod's own IP %s", pod.Name, host, pod.Status.PodIP)
	} else {
		t.Logf("natOutgoing false on exported pool %s: the outside saw pod %s with its own IP %s and answered through the router", pool, pod.Name, host)
	}
	setNATOutgoing(t, ctx, cs, pool, true)
	waitNATRule(t, ctx, agentPod, rng.Spec.CIDR, true)
}

// bgpNodeIPs are the nodes' InternalIPs by name.
func bgpNodeIPs(t *testing.T, ctx context.Context) map[string]string {
	t.Helper()
	nodes, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ips := map[string]string{}
	for _, n := range nodes.Items {
		ips[n.Name] = nodeInternalIP(n)
	}
	return ips
}

// routerOnPowerOff starts timing, right before a node is powered off, how long its routes stay
// in FRR (4d: a dead node's routes go with its session, within the hold time). wait returns the
// time and fails the test past the hold time (plus a second of polling and keepalive slack).
func (r *routerView) routerOnPowerOff(t *testing.T, nodeIP string, cidrs []string) (wait func()) {
	if r == nil {
		return func() {}
	}
	table := r.table(t)
	for _, c := range cidrs {
		if table.BestNextHop(c) != nodeIP {
			t.Errorf("before the power-off FRR's best path for %s is via %q, want the node %s\n%s", c, table.BestNextHop(c), nodeIP, table)
		}
	}
	r.logTable(t, "before the power-off of "+nodeIP)
	type result struct {
		took time.Duration
		err  error
	}
	done := make(chan result, 1)
	go func() {
		took, err := r.waitNoneVia(t, nodeIP, r.HoldTime+30*time.Second)
		done <- result{took, err}
	}()
	return func() {
		t.Helper()
		res := <-done
		if res.err != nil {
			t.Error(res.err)
			return
		}
		limit := r.HoldTime + time.Second
		if res.took > limit {
			t.Errorf("the powered-off node %s's routes left FRR %s after the power-off, want within the hold time %s (+1 s slack)", nodeIP, res.took.Round(time.Millisecond), r.HoldTime)
		} else {
			t.Logf("4d: the powered-off node %s's routes left FRR %s after the power-off (hold time %s)", nodeIP, res.took.Round(time.Millisecond), r.HoldTime)
		}
	}
}

// afterFailover (4c): every moved range's best path goes via the spare, nothing is left via the
// fenced node, and the outside reaches every moved pod at its old IP on the spare.
func (r *routerView) afterFailover(t *testing.T, ctx context.Context, failed, spare string, moved []jkev1.IPRange, ips map[string]string) {
	if r == nil {
		return
	}
	t.Helper()
	nodeIPs := bgpNodeIPs(t, ctx)
	r.serveOutside(t)
	for _, rng := range moved {
		took := r.waitBestVia(t, rng.Spec.CIDR, nodeIPs[spare], 30*time.Second)
		t.Logf("4c: FRR's best path for the moved %s via the spare %s (%s) (%s after the pods ran there)", rng.Spec.CIDR, spare, nodeIPs[spare], took.Round(time.Millisecond))
	}
	if via := r.table(t).Via(nodeIPs[failed]); len(via) > 0 {
		t.Errorf("FRR still routes %v via the fenced node %s (%s)", via, failed, nodeIPs[failed])
	}
	r.logTable(t, "after the failover to "+spare)
	for pod, ip := range ips {
		if got := r.outsideReaches(t, ip, 20*time.Second); got.Pod != pod || got.Node != spare {
			t.Errorf("the outside reached %s as %s on %s, want %s on %s", ip, got.Pod, got.Node, pod, spare)
		}
	}
}

// returnedBlock (4c): the returned node's new block is announced via it, and nothing it lost is.
func (r *routerView) returnedBlock(t *testing.T, ctx context.Context, node string, moved []jkev1.IPRange) {
	if r == nil {
		return
	}
	t.Helper()
	cs := versioned.NewForConfigOrDie(f.Config)
	ip := bgpNodeIPs(t, ctx)[node]
	old := map[string]bool{}
	for _, m := range moved {
		old[m.Spec.CIDR] = true
	}
	for _, rng := range rangesOf(t, ctx, cs, node) {
		if !old[rng.Spec.CIDR] {
			r.waitBestVia(t, rng.Spec.CIDR, ip, 30*time.Second)
		}
	}
	table := r.table(t)
	for _, c := range table.Via(ip) {
		if old[c] {
			t.Errorf("FRR has a path for %s via %s, which lost it to the failover:\n%s", c, node, table)
		}
	}
	r.logTable(t, "after "+node+" came back with a new block")
}

// duringPartition (4d): a partitioned node's session is gone (its routes with it, as with any
// router that loses a neighbour), but nothing moved: no range of the node is routed via
// another node.
func (r *routerView) duringPartition(t *testing.T, ctx context.Context, node string, ranges []jkev1.IPRange) {
	if r == nil {
		return
	}
	t.Helper()
	ips := bgpNodeIPs(t, ctx)
	table := r.table(t)
	for _, rng := range ranges {
		if via := table.NextHops(rng.Spec.CIDR); len(via) > 0 {
			t.Errorf("during the partition of %s FRR routes its %s via %v: nothing may move, and the node's own session is down", node, rng.Spec.CIDR, via)
		}
	}
	if via := table.Via(ips[node]); len(via) > 0 {
		t.Errorf("FRR keeps %v via the partitioned node %s past its hold time", via, node)
	}
	r.logTable(t, "during the partition of "+node)
}

// afterHeal (4d): the healed node's session is back and its ranges are routed via it again.
func (r *routerView) afterHeal(t *testing.T, ctx context.Context, node string, ranges []jkev1.IPRange, ips map[string]string) {
	if r == nil {
		return
	}
	t.Helper()
	nodeIP := bgpNodeIPs(t, ctx)[node]
	for _, rng := range ranges {
		took := r.waitBestVia(t, rng.Spec.CIDR, nodeIP, time.Minute)
		t.Logf("after the heal: FRR's best path for %s via %s again (%s)", rng.Spec.CIDR, node, took.Round(time.Millisecond))
	}
	for pod, ip := range ips {
		if got := r.outsideReaches(t, ip, 20*time.Second); got.Pod != pod || got.Node != node {
			t.Errorf("after the heal the outside reached %s as %s on %s, want %s on %s", ip, got.Pod, got.Node, pod, node)
		}
	}
}

// cidrsOf are the ranges' CIDRs.
func cidrsOf(ranges []jkev1.IPRange) []string {
	var out []string
	for _, r := range ranges {
		out = append(out, r.Spec.CIDR)
	}
	return out
}

// kubectlStaticIPBGP runs `kubectl-staticip bgp NODE` (the binary make build puts in
// _output/bin) against the cluster and checks that its table shows cidr among the node's
// advertised prefixes and a session Established with no problem, and that -o json says the same.
func kubectlStaticIPBGP(t *testing.T, node, cidr string) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "_output", "bin", "kubectl-staticip")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no kubectl-staticip at %s (make build builds it): %v", bin, err)
	}
	var table string
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The agent writes its BGPNodeStatus when something changed: the advertised list may
		// lag FRR's table by a pass.
		table = runLogged(t, root, "kubectl staticip bgp", bin, "bgp", node)
		if bgpRowOK(table, node, cidr) || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("kubectl staticip bgp %s:\n%s", node, table)
	if !bgpRowOK(table, node, cidr) {
		t.Errorf("kubectl staticip bgp %s: no row of node %s advertising %s with a session Established and no problem:\n%s", node, node, cidr, table)
	}
	out := runLogged(t, root, "kubectl staticip bgp -o json", bin, "bgp", node, "-o", "json")
	var list jkev1.BGPNodeStatusList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("kubectl staticip bgp -o json: %v\n%s", err, out)
	}
	if len(list.Items) != 1 || list.Items[0].Name != node || !slices.Contains(list.Items[0].Status.Advertised, cidr) ||
		!slices.ContainsFunc(list.Items[0].Status.Peers, func(p jkev1.BGPNodePeerStatus) bool { return p.State == jkev1.BGPSessionEstablished }) {
		t.Errorf("kubectl staticip bgp %s -o json: %+v", node, list.Items)
	}
}

// bgpRowOK: the plugin's table has a row NODE ADVERTISED PEER PEER-IP STATE SINCE PROBLEM for node
// with cidr among the advertised, state Established and no problem.
func bgpRowOK(table, node, cidr string) bool {
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) >= 7 && f[0] == node && slices.Contains(strings.Split(f[1], ","), cidr) && f[4] == string(jkev1.BGPSessionEstablished) && f[len(f)-1] == "<none>" {
			return true
		}
	}
	return false
}
