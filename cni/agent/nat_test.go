package agent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/knftables"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/cni/nstest"
)

// natRange is a range assigned to node-1.
func natRange(name, cidr string, nat *bool) *jkev1.IPRange {
	return &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: jkev1.IPRangeSpec{CIDR: cidr, Node: "node-1", NATOutgoing: nat}}
}

func prefixes(ss ...string) []netip.Prefix {
	out := []netip.Prefix{}
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// TestPlanNAT: which CIDRs go in which set.
func TestPlanNAT(t *testing.T) {
	on, off := true, false
	pool := natRange("pool-a", "10.244.0.0/24", &on)
	private := natRange("private", "10.244.1.0/24", &off)
	hand := natRange("hand", "10.50.0.0/24", nil)
	refused := natRange("refused", "10.244.0.0/25", &on) // overlaps pool-a (older): no node serves it
	v6 := natRange("v6", "fd00:10:244::/120", nil)
	bad := natRange("bad", "not-a-cidr", &on)
	// released: unassigned (the allocator gave it back: its pool is deleted, or its node gone)
	// and no node holds an address of it: no NAT source any more, still the cluster's space.
	released := natRange("released", "10.244.2.0/24", &on)
	released.Spec.Node = ""
	// draining: unassigned, but a node's pods still hold addresses of it: still NATed.
	draining := natRange("draining", "10.244.3.0/24", &on)
	draining.Spec.Node = ""
	draining.Status.Holders = []jkev1.IPRangeHolder{{Node: "node-2", Generation: 0, State: jkev1.HolderDraining}}
	all := []*jkev1.IPRange{pool, private, hand, refused, v6, bad, released, draining}
	accepted := []*jkev1.IPRange{pool, private, hand, v6, bad, released, draining}
	nodes := addrs("172.30.0.11", "172.30.0.12", "fd00::11", "::ffff:172.30.0.13")
	for _, tc := range []struct {
		name                       string
		cfg                        NATConfig
		sources4, sources6, clust4 []netip.Prefix
		clust6                     []netip.Prefix
	}{
		{
			name:     "default on: a hand-written range is NATed; natOutgoing false is not; a refused or released range is no source, a draining one is",
			cfg:      NATConfig{Enabled: true, Default: true},
			sources4: prefixes("10.50.0.0/24", "10.244.0.0/24", "10.244.3.0/24"),
			sources6: prefixes("fd00:10:244::/120"),
			clust4:   prefixes("10.50.0.0/24", "10.244.0.0/24", "10.244.1.0/24", "10.244.2.0/24", "10.244.3.0/24", "172.30.0.11/32", "172.30.0.12/32", "172.30.0.13/32"),
			clust6:   prefixes("fd00::11/128", "fd00:10:244::/120"),
		},
		{
			name:     "default off: only ranges that say natOutgoing true",
			cfg:      NATConfig{Enabled: true},
			sources4: prefixes("10.244.0.0/24", "10.244.3.0/24"),
			sources6: prefixes(),
			clust4:   prefixes("10.50.0.0/24", "10.244.0.0/24", "10.244.1.0/24", "10.244.2.0/24", "10.244.3.0/24", "172.30.0.11/32", "172.30.0.12/32", "172.30.0.13/32"),
			clust6:   prefixes("fd00::11/128", "fd00:10:244::/120"),
		},
		{
			name: "Service and non-masquerade CIDRs are the cluster; CIDRs inside them are left out (nftables refuses overlapping intervals)",
			cfg: NATConfig{Enabled: true, Default: true, ServiceCIDRs: prefixes("10.96.0.0/16", "fd00:96::/112"),
				NonMasqueradeCIDRs: prefixes("10.0.0.0/8", "192.168.0.0/16", "10.96.0.0/16")},
			sources4: prefixes("10.50.0.0/24", "10.244.0.0/24", "10.244.3.0/24"),
			sources6: prefixes("fd00:10:244::/120"),
			clust4:   prefixes("10.0.0.0/8", "172.30.0.11/32", "172.30.0.12/32", "172.30.0.13/32", "192.168.0.0/16"),
			clust6:   prefixes("fd00::11/128", "fd00:10:244::/120", "fd00:96::/112"),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planNAT(tc.cfg, all, accepted, nodes)
			got := []any{orNone(p.sources[0]), orNone(p.sources[1]), orNone(p.cluster[0]), orNone(p.cluster[1])}
			want := []any{orNone(tc.sources4), orNone(tc.sources6), orNone(tc.clust4), orNone(tc.clust6)}
			for i, what := range []string{"sources v4", "sources v6", "cluster v4", "cluster v6"} {
				if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
					t.Errorf("%s: %v, want %v", what, got[i], want[i])
				}
			}
		})
	}
}

func orNone(p []netip.Prefix) []netip.Prefix {
	if p == nil {
		return []netip.Prefix{}
	}
	return p
}

func TestDisjoint(t *testing.T) {
	got := disjoint(prefixes("10.1.0.0/24", "10.0.0.0/8", "10.1.0.0/24", "11.0.0.1/32", "11.0.0.0/31", "9.0.0.0/8"))
	if want := prefixes("9.0.0.0/8", "10.0.0.0/8", "11.0.0.0/31"); !slices.Equal(got, want) {
		t.Errorf("disjoint: %v, want %v", got, want)
	}
}

// TestNATNodeAddresses: the node addresses NAT leaves alone come from the claims every agent
// watches (status.holders) and the Nodes it still reads (its own, legacy agents'), InternalIP and
// ExternalIP only — no cluster-wide Node watch (issue 37).
func TestNATNodeAddresses(t *testing.T) {
	held := natRange("held", "10.80.1.0/24", nil)
	held.Status.Holders = []jkev1.IPRangeHolder{{Node: "a", Address: "172.30.0.11"}, {Node: "b", Address: "::ffff:172.30.0.12"}, {Node: "c", Address: "not-an-ip"}}
	node := func(addrs ...corev1.NodeAddress) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Addresses: addrs}}
	}
	self := node(corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "172.30.0.13"}, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "198.51.100.13"},
		corev1.NodeAddress{Type: corev1.NodeHostName, Address: "10.0.0.1"})
	legacy := node(corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "fd00::14"})
	got := natNodeAddresses([]*jkev1.IPRange{held, natRange("unclaimed", "10.80.2.0/24", nil)}, []*corev1.Node{self}, []*corev1.Node{legacy})
	if want := addrs("172.30.0.11", "172.30.0.12", "172.30.0.13", "198.51.100.13", "fd00::14"); !slices.Equal(got, want) {
		t.Errorf("natNodeAddresses: %v, want %v", got, want)
	}
}

// TestNATTableTransaction: the transaction makes the table exactly the plan, and a second one
// replaces the first's content (knftables' fake: what `nft` is given, not whether the kernel
// takes it — TestOutgoingNATByTraffic does that).
func TestNATTableTransaction(t *testing.T) {
	fake := knftables.NewFake(knftables.InetFamily, NATTable)
	apply := func(p natPlan) string {
		tx := fake.NewTransaction()
		p.write(tx)
		if err := fake.Run(context.Background(), tx); err != nil {
			t.Fatal(err)
		}
		return fake.Dump()
	}
	on := true
	first := []*jkev1.IPRange{natRange("a", "10.244.0.0/24", &on), natRange("b", "10.244.1.0/24", nil), natRange("v6", "fd00:10:244::/120", nil)}
	dump := apply(planNAT(NATConfig{Default: true}, first, first, addrs("172.30.0.11")))
	for _, want := range []string{
		"add chain inet staticip postrouting { type nat hook postrouting priority 100 ; }",
		"add rule inet staticip postrouting ip saddr @nat-sources-v4 ip daddr != @cluster-v4 masquerade",
		"add rule inet staticip postrouting ip6 saddr @nat-sources-v6 ip6 daddr != @cluster-v6 masquerade",
		"add element inet staticip nat-sources-v4 { 10.244.1.0/24 }",
		"add element inet staticip cluster-v4 { 172.30.0.11/32 }",
	} {
		if !strings.Contains(dump, want) {
			t.Errorf("table lacks %q:\n%s", want, dump)
		}
	}
	dump = apply(planNAT(NATConfig{}, []*jkev1.IPRange{natRange("a", "10.244.0.0/24", &on)}, []*jkev1.IPRange{natRange("a", "10.244.0.0/24", &on)}, nil))
	// No IPv6 source left: no IPv6 rule (a kernel without IPv6 NAT takes the table).
	if strings.Contains(dump, "10.244.1.0/24") || strings.Contains(dump, "fd00:10:244::/120") || strings.Count(dump, " masquerade comment") != 1 ||
		strings.Contains(dump, "ip6 saddr") {
		t.Errorf("second pass left the first's content:\n%s", dump)
	}
}

// natNet is the test's world, each part a network namespace: a node with a pod behind it and an
// uplink to the outside, where UDP servers record the source address of what reaches them.
//
//	pod 10.80.1.5/24 (range "nat"), 10.81.1.5/24 (range "private")
//	 └─ node: 10.80.1.1/24, 10.81.1.1/24; uplink 192.168.50.1/24; 10.90.0.0/24 (another node's
//	    range) and 203.0.113.0/24 (non-masquerade) via 192.168.50.2
//	     └─ outside: 192.168.50.2 (the world), 192.168.50.3 (another node's address),
//	        10.90.0.1 (a pod of another range), 203.0.113.1 (a non-masquerade network);
//	        routes back to the pod space via the node, so only the source seen tells NAT apart
type natNet struct {
	pod, node, outside *nstest.NetNS
	// seen receives "destination source" for every datagram the outside servers get.
	seen chan string
}

const natNodeAddr = "192.168.50.1"

func newNATNet(t testing.TB) *natNet {
	t.Helper()
	n := &natNet{seen: make(chan string, 100)}
	for _, p := range []**nstest.NetNS{&n.pod, &n.node, &n.outside} {
		netns, err := nstest.New("nat")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { netns.Close() })
		*p = netns
	}
	ip := func(netns *nstest.NetNS, args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"-n", netns.Name}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip -n %s %s: %v: %s", netns.Name, strings.Join(args, " "), err, out)
		}
	}
	ip(n.node, "link", "add", "natpod0", "type", "veth", "peer", "name", "eth0", "netns", n.pod.Name)
	ip(n.node, "link", "add", "natup0", "type", "veth", "peer", "name", "eth0", "netns", n.outside.Name)
	for _, a := range []string{"10.80.1.5/24", "10.81.1.5/24"} {
		ip(n.pod, "addr", "add", a, "dev", "eth0")
	}
	ip(n.pod, "link", "set", "eth0", "up")
	ip(n.pod, "route", "add", "default", "via", "10.80.1.1")
	for _, a := range []string{"10.80.1.1/24", "10.81.1.1/24"} {
		ip(n.node, "addr", "add", a, "dev", "natpod0")
	}
	ip(n.node, "addr", "add", natNodeAddr+"/24", "dev", "natup0")
	ip(n.node, "link", "set", "natpod0", "up")
	ip(n.node, "link", "set", "natup0", "up")
	for _, dst := range []string{"10.90.0.0/24", "203.0.113.0/24"} {
		ip(n.node, "route", "add", dst, "via", "192.168.50.2")
	}
	for _, a := range []string{"192.168.50.2/24", "192.168.50.3/24", "10.90.0.1/32", "203.0.113.1/32"} {
		ip(n.outside, "addr", "add", a, "dev", "eth0")
	}
	ip(n.outside, "link", "set", "eth0", "up")
	for _, dst := range []string{"10.80.0.0/16", "10.81.0.0/16"} {
		ip(n.outside, "route", "add", dst, "via", natNodeAddr)
	}
	if out, err := exec.Command("ip", "netns", "exec", n.node.Name, "sysctl", "-qw", "net.ipv4.ip_forward=1").CombinedOutput(); err != nil {
		t.Fatalf("ip_forward: %v: %s", err, out)
	}
	for _, dst := range []string{"192.168.50.2", "192.168.50.3", "10.90.0.1", "203.0.113.1"} {
		var conn net.PacketConn
		if err := n.outside.Do(func(ns.NetNS) (err error) {
			conn, err = net.ListenPacket("udp4", net.JoinHostPort(dst, "4789"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		go func() {
			buf := make([]byte, 64)
			for {
				_, from, err := conn.ReadFrom(buf)
				if err != nil {
					return
				}
				n.seen <- dst + " " + from.(*net.UDPAddr).IP.String()
				_, _ = conn.WriteTo(buf[:1], from)
			}
		}()
	}
	return n
}

// sourceSeen sends one datagram from the pod's address src to dst (a new socket: a new flow)
// and returns the source address the outside saw, and whether the answer came back.
func (n *natNet) sourceSeen(t *testing.T, src, dst string) (string, bool) {
	t.Helper()
	var answered bool
	if err := n.pod.Do(func(ns.NetNS) error {
		conn, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(src)}, &net.UDPAddr{IP: net.ParseIP(dst), Port: 4789})
		if err != nil {
			return err
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("x")); err != nil {
			return err
		}
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		_, err = conn.Read(make([]byte, 8))
		answered = err == nil
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-n.seen:
		d, from, _ := strings.Cut(s, " ")
		if d != dst {
			t.Fatalf("sent to %s, %s received it", dst, d)
		}
		return from, answered
	case <-time.After(2 * time.Second):
		t.Fatalf("nothing from %s reached %s", src, dst)
		return "", false
	}
}

// TestOutgoingNATByTraffic (issue 36): the agent's table, applied by the real nft in a node's
// network namespace, proven by traffic: a NAT-enabled range's pod leaves with the node's address
// for the outside and keeps its own for another range, a node address and a non-masquerade
// CIDR; a natOutgoing false range is never NATed; flipping natOutgoing is followed; a deleted
// range's pods are NATed no more; a rule deleted by hand is back after the next sync; cleanup
// removes the table.
func TestOutgoingNATByTraffic(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces and nftables")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatalf("nft not found (Debian nftables, tools/deps/cni.list: make deps): %v", err)
	}
	n := newNATNet(t)
	on, off := true, false
	cfg := NATConfig{Enabled: true, Default: true, NonMasqueradeCIDRs: prefixes("203.0.113.0/24")}
	a := New(Config{NAT: cfg}, nil, nil, nil)
	nodes := addrs(natNodeAddr, "192.168.50.3")
	ranges := []*jkev1.IPRange{natRange("nat", "10.80.1.0/24", &on), natRange("private", "10.81.1.0/24", &off), natRange("other-node", "10.90.0.0/24", nil)}
	sync := func(rs []*jkev1.IPRange) {
		t.Helper()
		if err := n.node.Do(func(ns.NetNS) error { return a.syncNAT(context.Background(), planNAT(cfg, rs, rs, nodes)) }); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(phase, src, dst, want string) {
		t.Helper()
		got, answered := n.sourceSeen(t, src, dst)
		if got != want {
			t.Errorf("%s: %s -> %s arrived from %s, want %s", phase, src, dst, got, want)
		}
		if !answered {
			t.Errorf("%s: %s -> %s: no answer came back", phase, src, dst)
		}
	}
	sync(ranges)
	expect("natOutgoing true, outside", "10.80.1.5", "192.168.50.2", natNodeAddr)
	expect("another range", "10.80.1.5", "10.90.0.1", "10.80.1.5")
	expect("a node address", "10.80.1.5", "192.168.50.3", "10.80.1.5")
	expect("a non-masquerade CIDR", "10.80.1.5", "203.0.113.1", "10.80.1.5")
	expect("natOutgoing false, outside", "10.81.1.5", "192.168.50.2", "10.81.1.5")

	ranges[1] = natRange("private", "10.81.1.0/24", &on)
	sync(ranges)
	expect("natOutgoing flipped to true", "10.81.1.5", "192.168.50.2", natNodeAddr)
	ranges[1] = natRange("private", "10.81.1.0/24", &off)
	sync(ranges)
	expect("natOutgoing flipped back to false", "10.81.1.5", "192.168.50.2", "10.81.1.5")

	sync(ranges[1:]) // range "nat" deleted
	expect("range deleted", "10.80.1.5", "192.168.50.2", "10.80.1.5")

	ranges[1] = natRange("private", "10.81.1.0/24", &on)
	sync(ranges)
	// Drift: the masquerade rule deleted by hand.
	listing, err := exec.Command("ip", "netns", "exec", n.node.Name, "nft", "-a", "list", "chain", "inet", NATTable, natChain).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v: %s", err, listing)
	}
	m := regexp.MustCompile(`ip saddr @nat-sources-v4 .* masquerade .*# handle (\d+)`).FindSubmatch(listing)
	if m == nil {
		t.Fatalf("no IPv4 masquerade rule in:\n%s", listing)
	}
	if out, err := exec.Command("ip", "netns", "exec", n.node.Name, "nft", "delete", "rule", "inet", NATTable, natChain, "handle", string(m[1])).CombinedOutput(); err != nil {
		t.Fatalf("nft delete rule: %v: %s", err, out)
	}
	expect("rule deleted by hand (drift)", "10.81.1.5", "192.168.50.2", "10.81.1.5")
	sync(ranges)
	expect("drift repaired by the next sync", "10.81.1.5", "192.168.50.2", natNodeAddr)
	if got := a.natErrors.Load(); got != 0 {
		t.Errorf("NAT sync errors %d", got)
	}

	// Cleanup mode removes the table (and says so); again, nothing to remove.
	var removed []string
	if err := n.node.Do(func(ns.NetNS) (err error) { removed, err = Cleanup(Config{NAT: cfg}); return err }); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(removed, "nftables table inet "+NATTable) {
		t.Errorf("cleanup removed %v, want the NAT table", removed)
	}
	if out, _ := exec.Command("ip", "netns", "exec", n.node.Name, "nft", "list", "tables").CombinedOutput(); strings.Contains(string(out), NATTable) {
		t.Errorf("after cleanup: %s", out)
	}
	expect("after cleanup", "10.81.1.5", "192.168.50.2", "10.81.1.5")
	if err := n.node.Do(func(ns.NetNS) (err error) { removed, err = Cleanup(Config{NAT: cfg}); return err }); err != nil || len(removed) != 0 {
		t.Errorf("cleanup again: removed %v, %v", removed, err)
	}
}

// failingNFT is an nftables that refuses every transaction (as nft does without CAP_NET_ADMIN).
type failingNFT struct{ knftables.Interface }

func (failingNFT) NewTransaction() *knftables.Transaction {
	return knftables.NewFake(knftables.InetFamily, NATTable).NewTransaction()
}

func (failingNFT) Run(context.Context, *knftables.Transaction) error {
	return fmt.Errorf("netlink: Error: Could not process rule: Operation not permitted")
}

// TestNATSyncFailureIsAnEvent (issue 36 item 5): a table that cannot be written is a Warning
// Event on the node — once per distinct failure, not once per pass — and its recovery a Normal one;
// the metric counts every failed pass.
func TestNATSyncFailureIsAnEvent(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	a := New(Config{NodeName: "n1", NAT: NATConfig{Enabled: true, Default: true}}, nil, nil, nil)
	a.recorder = rec
	a.nft = failingNFT{}
	plan := planNAT(a.cfg.NAT, nil, nil, nil)
	for range 3 {
		a.reportNAT(a.syncNAT(context.Background(), plan))
	}
	if got := a.natErrors.Load(); got != 3 {
		t.Errorf("nat sync errors = %d, want 3", got)
	}
	a.nft = knftables.NewFake(knftables.InetFamily, NATTable)
	a.reportNAT(a.syncNAT(context.Background(), plan))
	close(rec.Events)
	var events []string
	for e := range rec.Events {
		events = append(events, e)
	}
	if len(events) != 2 || !strings.HasPrefix(events[0], "Warning "+ReasonNATSyncFailed+" ") || !strings.Contains(events[0], "Operation not permitted") ||
		events[1] != "Normal "+ReasonNATSynced+" outgoing NAT rules written again" {
		t.Errorf("events = %q, want one %s naming the error, then one %s", events, ReasonNATSyncFailed, ReasonNATSynced)
	}
}

// BenchmarkOutgoingNAT (issue 36, "Measure"): the cost of outgoing NAT on the pod's path, in
// one run: TCP connections (connect, one byte each way, close) from a pod of a natOutgoing range
// to a server outside (masqueraded by the agent's nftables table in the node's namespace) against
// the same from a range with natOutgoing false (routed, not translated; the kind of an exported
// pool's traffic). ns/op is one connection's latency. -count repeats each sub-benchmark in a
// row; for rounds that alternate (both sides see the same machine load), loop over -count 1:
//
//	go test -c -o /tmp/agent.test ./cni/agent/ && for i in 1 2 3 4 5; do
//	  sudo /tmp/agent.test -test.run '^$' -test.bench BenchmarkOutgoingNAT -test.benchtime 2000x; done
func BenchmarkOutgoingNAT(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root for network namespaces and nftables")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		b.Skipf("nft not found (Debian nftables, tools/deps/cni.list: make deps): %v", err)
	}
	n := newNATNet(b)
	on, off := true, false
	cfg := NATConfig{Enabled: true, Default: true}
	a := New(Config{NAT: cfg}, nil, nil, nil)
	ranges := []*jkev1.IPRange{natRange("nat", "10.80.1.0/24", &on), natRange("private", "10.81.1.0/24", &off)}
	if err := n.node.Do(func(ns.NetNS) error {
		return a.syncNAT(context.Background(), planNAT(cfg, ranges, ranges, addrs(natNodeAddr)))
	}); err != nil {
		b.Fatal(err)
	}
	const server = "192.168.50.2:8080"
	var ln net.Listener
	if err := n.outside.Do(func(ns.NetNS) (err error) {
		ln, err = net.Listen("tcp4", server)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	seen := make(chan string, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				select {
				case seen <- c.RemoteAddr().(*net.TCPAddr).IP.String():
				default:
				}
				buf := make([]byte, 1)
				if _, err := c.Read(buf); err == nil {
					_, _ = c.Write(buf)
				}
			}()
		}
	}()
	for _, tc := range []struct{ name, src, wantSeen string }{
		{"natOutgoing=true", "10.80.1.5", natNodeAddr},
		{"natOutgoing=false", "10.81.1.5", "10.81.1.5"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			dialer := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(tc.src)}, Timeout: 5 * time.Second}
			connect := func() error {
				return n.pod.Do(func(ns.NetNS) error {
					c, err := dialer.Dial("tcp4", server)
					if err != nil {
						return err
					}
					defer c.Close()
					buf := []byte{'x'}
					if _, err := c.Write(buf); err != nil {
						return err
					}
					_, err = io.ReadFull(c, buf)
					return err
				})
			}
			for len(seen) > 0 {
				<-seen
			}
			if err := connect(); err != nil { // and the server saw the address the table says
				b.Fatal(err)
			}
			if got := <-seen; got != tc.wantSeen {
				b.Fatalf("the server saw %s from %s, want %s", got, tc.src, tc.wantSeen)
			}
			b.ResetTimer()
			for range b.N {
				if err := connect(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
