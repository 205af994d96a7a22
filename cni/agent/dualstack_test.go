package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/cni/nstest"
	"github.com/staticip/staticip/cni/plugin"
	"github.com/staticip/staticip/internal/testsupport"
)

// TestDualStackPodsTalkAcrossNodes (issue 39 item 2): two dual-stack nodes — each a network
// namespace on one link, with an IPv4 and an IPv6 address, and a Node whose InternalIPs are
// both — each serve an IPv4 and an IPv6 range through their own agent; a pod on each node (the
// real plugin's ADD, from the conflist and database the agent wrote) gets one address of each
// family, and each pod reaches the other over IPv4 and over IPv6. Every holder entry carries the
// node's address of the range's family, so the IPv6 ranges are routed via the nodes' IPv6
// addresses (Linux takes no IPv4 next hop for an IPv6 route). Before the claims carried one
// address per family, the IPv6 ranges were unroutable and the pods could not talk over IPv6.
func TestDualStackPodsTalkAcrossNodes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	ctx, kube, sip, suffix := apiFixture(t, 2*time.Minute)
	type node struct {
		name, v4, v6, cidr4, cidr6 string
		host                       *nstest.NetNS
		agent                      *Agent
		log                        *syncBuffer
		pod                        *nstest.NetNS
		addrs                      []netip.Addr
	}
	nodes := []*node{
		{name: "cni-ds-a-" + suffix, v4: "192.168.97.1", v6: "fd00:97::1", cidr4: "10.197.0.0/24", cidr6: "fd00:197:a::/120"},
		{name: "cni-ds-b-" + suffix, v4: "192.168.97.2", v6: "fd00:97::2", cidr4: "10.198.0.0/24", cidr6: "fd00:197:b::/120"},
	}
	a, b := nodes[0], nodes[1]
	a.host, b.host = linkedNodeNetns(t, "dsn", []string{a.v4 + "/24", a.v6 + "/64"}, []string{b.v4 + "/24", b.v6 + "/64"})
	for _, n := range nodes {
		createNode(ctx, t, kube, n.name, n.v4, n.v6)
		createIPRange(ctx, t, sip, n.name+"-v4", jkev1.IPRangeSpec{CIDR: n.cidr4, Node: n.name})
		createIPRange(ctx, t, sip, n.name+"-v6", jkev1.IPRangeSpec{CIDR: n.cidr6, Node: n.name})
		dir := t.TempDir()
		n.log = &syncBuffer{}
		n.agent = startedAgent(ctx, t, Config{NodeName: n.name, CNIBinDir: filepath.Join(dir, "bin"), CNIConfDir: filepath.Join(dir, "net.d"),
			DataDir: dir, Routes: true, Quarantine: "0s"}, kube, sip, n.log)
	}
	sync := func(n *node) {
		t.Helper()
		if err := n.host.Do(func(ns.NetNS) error { return n.agent.SyncOnce(ctx) }); err != nil {
			t.Fatalf("sync of %s: %v\nlog:\n%s", n.name, err, n.log.String())
		}
	}
	// Each agent serves its ranges and claims them; each then routes the other's ranges once
	// it has seen the other's claims.
	for _, n := range nodes {
		sync(n)
	}
	for _, n := range nodes {
		n.pod = nstest.ForTest(t, n.name)
		n.addrs = addPod(t, n.host, n.pod, n.agent, "ctr-"+n.name)
		if len(n.addrs) != 2 || !n.addrs[0].Is4() || !n.addrs[1].Is6() {
			t.Fatalf("pod on %s got %v, want an IPv4 and an IPv6 address", n.name, n.addrs)
		}
	}
	testsupport.Eventually(context.Background(), t, 20*time.Second, "each node routes the other's IPv4 range via the other's IPv4 address",
		testsupport.True(func() bool {
			for _, n := range nodes {
				sync(n)
			}
			return agentRouteVia(a.host, b.cidr4) == b.v4 && agentRouteVia(b.host, a.cidr4) == a.v4
		}))
	// The IPv6 routes follow from the same passes' claims: one more pass each at most.
	for _, n := range nodes {
		sync(n)
	}
	for _, ip := range b.addrs {
		nstest.Talk(t, a.pod, b.pod, ip, 7779)
	}
	for _, ip := range a.addrs {
		nstest.Talk(t, b.pod, a.pod, ip, 7779)
	}
	for _, c := range []struct{ n, peer *node }{{a, b}, {b, a}} {
		if got := agentRouteVia(c.n.host, c.peer.cidr6); got != c.peer.v6 {
			t.Errorf("%s routes %s's IPv6 range %s via %q, want via its IPv6 address %s\nagent log:\n%s", c.n.name, c.peer.name, c.peer.cidr6, got, c.peer.v6, c.n.log.String())
		}
	}
	// The claims say so: every holder entry carries its node's address of the range's family.
	for _, n := range nodes {
		for name, want := range map[string]string{n.name + "-v4": n.v4, n.name + "-v6": n.v6} {
			r, err := sip.JkeV1().IPRanges().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range r.Status.Holders {
				if h.Node == n.name && h.Address != want {
					t.Errorf("IPRange %s: %s claims it with address %q, want its address of the range's family %s", name, n.name, h.Address, want)
				}
			}
		}
	}
}

// linkedNodeNetns makes two network namespaces standing for two nodes on one link (a veth pair,
// one end in each), with the given addresses (address/prefix, no duplicate address detection:
// the test's addresses are its own). Both are deleted when the test ends.
func linkedNodeNetns(t *testing.T, tag string, addrsA, addrsB []string) (*nstest.NetNS, *nstest.NetNS) {
	t.Helper()
	var out [2]*nstest.NetNS
	for i := range out {
		out[i] = nstest.ForTest(t, fmt.Sprint(tag, i))
	}
	if err := out[0].Do(func(ns.NetNS) error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "cni-up0"}, PeerName: "cni-up1"}
		if err := netlink.LinkAdd(veth); err != nil {
			return err
		}
		peer, err := netlink.LinkByName("cni-up1")
		if err != nil {
			return err
		}
		return netlink.LinkSetNsFd(peer, int(out[1].Fd()))
	}); err != nil {
		t.Fatal(err)
	}
	for i, addrs := range [][]string{addrsA, addrsB} {
		if err := out[i].Do(func(ns.NetNS) error {
			l, err := netlink.LinkByName(fmt.Sprint("cni-up", i))
			if err != nil {
				return err
			}
			for _, s := range addrs {
				addr, err := netlink.ParseAddr(s)
				if err != nil {
					return err
				}
				addr.Flags = unix.IFA_F_NODAD
				if err := netlink.AddrAdd(l, addr); err != nil {
					return fmt.Errorf("address %s: %w", s, err)
				}
			}
			return netlink.LinkSetUp(l)
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out[0], out[1]
}

// addPod runs the real plugin's ADD for a pod in pod on the node whose network namespace is
// host, with the conflist ag wrote (its database), and returns the pod's addresses in order.
func addPod(t *testing.T, host, pod *nstest.NetNS, ag *Agent, containerID string) []netip.Addr {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(ag.cfg.CNIConfDir, ag.cfg.ConfName))
	if err != nil {
		t.Fatalf("the agent wrote no conflist: %v", err)
	}
	var list struct {
		CNIVersion string           `json:"cniVersion"`
		Name       string           `json:"name"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatal(err)
	}
	conf := list.Plugins[0]
	conf["cniVersion"], conf["name"] = list.CNIVersion, list.Name
	data, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	args := &skel.CmdArgs{ContainerID: containerID, Netns: pod.Path(), IfName: "eth0", Args: "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=" + containerID, StdinData: data}
	var log strings.Builder
	p := &plugin.Plugin{Log: &log}
	var res *current.Result
	if err := host.Do(func(ns.NetNS) error {
		r, _, err := testutils.CmdAddWithArgs(args, func() error { return p.Funcs().Add(args) })
		if err != nil {
			return err
		}
		res, err = current.NewResultFromResult(r)
		return err
	}); err != nil {
		t.Fatalf("ADD %s: %v\nplugin log: %s", containerID, err, log.String())
	}
	var out []netip.Addr
	for _, ipc := range res.IPs {
		a, _ := netip.AddrFromSlice(ipc.Address.IP)
		out = append(out, a.Unmap())
	}
	return out
}

// agentRouteVia is the next hop of the agent's route (RouteProtocol, either family) to cidr in
// host, "" when there is none.
func agentRouteVia(host *nstest.NetNS, cidr string) string {
	via := ""
	host.Do(func(ns.NetNS) error {
		routes, _ := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
		for _, r := range routes {
			if r.Dst != nil && r.Dst.String() == cidr && r.Gw != nil {
				via = r.Gw.String()
			}
		}
		return nil
	})
	return via
}

// The claims carry one address per family (issue 39 item 2): a holder entry carries its node's
// InternalIP of its range's family; the next hops are read per family, whatever range an entry
// is of (an agent of the previous release wrote its IPv4 address into its IPv6 ranges' entries:
// that address counts as IPv4); a node without an address of a range's family is reported, a
// node with no address at all is not (not known yet).
func TestClaimsCarryTheAddressOfTheRangesFamily(t *testing.T) {
	v4, v6 := ipr("v4", 1, "10.0.1.0/24", "n1"), ipr("v6", 2, "fd00:1::/120", "n1")
	gone := ipr("gone6", 3, "fd00:2::/120", "n2")
	byName := map[string]*jkev1.IPRange{"v4": v4, "v6": v6, "gone6": gone}
	dual := addrsByFamily([]netip.Addr{netip.MustParseAddr("fd00:97::1"), netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.9")})
	if dual != (familyAddrs{"192.0.2.1", "fd00:97::1"}) {
		t.Fatalf("addrsByFamily = %v, want the first of each family", dual)
	}
	for _, c := range []struct {
		name    string
		addrs   familyAddrs
		want    map[string]string // range -> its entry's address
		missing map[string]string
	}{
		{"dual-stack node", dual, map[string]string{"v4": "192.0.2.1", "v6": "fd00:97::1", "gone6": "fd00:97::1"}, map[string]string{}},
		{"IPv4 only", familyAddrs{"192.0.2.1", ""}, map[string]string{"v4": "192.0.2.1", "v6": "", "gone6": ""},
			map[string]string{"v6": "IPv6", "gone6": "IPv6"}},
		{"IPv6 only", familyAddrs{"", "fd00:97::1"}, map[string]string{"v4": "", "v6": "fd00:97::1", "gone6": "fd00:97::1"}, map[string]string{"v4": "IPv4"}},
		{"no address known yet", familyAddrs{}, map[string]string{"v4": "", "v6": "", "gone6": ""}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			own := ownHolders("n1", c.addrs, []*jkev1.IPRange{v4, v6}, map[string]int64{"gone6": 4}, byName)
			for name, want := range c.want {
				if own[name].Address != want {
					t.Errorf("%s's entry carries %q, want %q", name, own[name].Address, want)
				}
			}
			if got := missingFamilies(c.addrs, []*jkev1.IPRange{v4, v6}, map[string]int64{"gone6": 4}, byName); fmt.Sprint(got) != fmt.Sprint(c.missing) {
				t.Errorf("missingFamilies = %v, want %v", got, c.missing)
			}
		})
	}
	// The next hops, per family: n2's IPv6 from its IPv6 range's entry, its IPv4 from the entry
	// an old agent wrote into an IPv6 range; n3 (legacy, both InternalIPs) from its Node.
	a := ipr("a", 1, "10.0.2.0/24", "n2")
	a.Status.Holders = []jkev1.IPRangeHolder{{Node: "n2", Address: "fd00:97::2"}}
	b := ipr("b", 2, "fd00:3::/120", "n2")
	b.Status.Holders = []jkev1.IPRangeHolder{{Node: "n2", Address: "192.0.2.2"}, {Node: "n4", Address: ""}}
	got := holderAddresses([]*jkev1.IPRange{a, b}, map[string][]netip.Addr{
		"n3": {netip.MustParseAddr("192.0.2.3"), netip.MustParseAddr("fd00:97::3")},
		"n2": {netip.MustParseAddr("192.0.2.99")}, // its status entries win
	})
	want := map[string]familyAddrs{"n2": {"192.0.2.2", "fd00:97::2"}, "n3": {"192.0.2.3", "fd00:97::3"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("holderAddresses = %v, want %v", got, want)
	}
}

// A node known by its IPv4 InternalIP only that serves an IPv6 range says so on the range: its
// claim carries no address (never its IPv4 one, which no node can route IPv6 via), the range's
// Routable condition is False (NoNodeAddressOfFamily) with a Warning Event, while its IPv4 range
// carries no such condition; once the Node has an IPv6 InternalIP the claim carries it and the
// condition goes.
func TestIPv6RangeOfANodeWithoutAnIPv6AddressIsReported(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (the agent's files)")
	}
	ctx, kube, sip, suffix := apiFixture(t, 2*time.Minute)
	node := "cni-nov6-" + suffix
	createNode(ctx, t, kube, node, "192.168.96.1")
	r4, r6 := node+"-v4", node+"-v6"
	createIPRange(ctx, t, sip, r4, jkev1.IPRangeSpec{CIDR: "10.196.0.0/24", Node: node})
	createIPRange(ctx, t, sip, r6, jkev1.IPRangeSpec{CIDR: "fd00:196::/120", Node: node})
	dir := t.TempDir()
	log := &syncBuffer{}
	ag := startedAgent(ctx, t, Config{NodeName: node, CNIBinDir: filepath.Join(dir, "bin"), CNIConfDir: filepath.Join(dir, "net.d"), DataDir: dir}, kube, sip, log)
	state := func(name string) (address string, routable *metav1.Condition) {
		r, err := sip.JkeV1().IPRanges().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range r.Status.Holders {
			if h.Node == node {
				address = h.Address
			}
		}
		return address, meta.FindStatusCondition(r.Status.Conditions, ConditionRoutable)
	}
	testsupport.Eventually(context.Background(), t, 20*time.Second, "the IPv6 range says its node has no IPv6 address", testsupport.True(func() bool {
		if err := ag.SyncOnce(ctx); err != nil {
			t.Fatalf("sync: %v\n%s", err, log.String())
		}
		addr, c := state(r6)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == ReasonNoNodeAddressOfFamily && addr == ""
	}))
	_, c := state(r6)
	if !strings.Contains(c.Message, "no IPv6 InternalIP") || !strings.Contains(c.Message, "--node-ip") {
		t.Errorf("the condition does not say what is missing and what fixes it: %q", c.Message)
	}
	if addr, c := state(r4); addr != "192.168.96.1" || c != nil {
		t.Errorf("IPv4 range: claim address %q, Routable %+v; want its IPv4 address and no condition", addr, c)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		evs, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + r6 + ",reason=" + ReasonNoNodeAddressOfFamily})
		return err == nil && len(evs.Items) > 0 && evs.Items[0].Type == corev1.EventTypeWarning, nil
	}); err != nil {
		t.Errorf("no Warning Event %s on IPRange %s", ReasonNoNodeAddressOfFamily, r6)
	}
	// The node gets its IPv6 address: the claim carries it, the condition goes.
	n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "fd00:96::1"})
	if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(context.Background(), t, 20*time.Second, "the IPv6 range's claim carries the node's IPv6 address", testsupport.True(func() bool {
		if err := ag.SyncOnce(ctx); err != nil {
			t.Fatalf("sync: %v\n%s", err, log.String())
		}
		addr, c := state(r6)
		return addr == "fd00:96::1" && c == nil
	}))
}
