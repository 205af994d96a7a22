package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
)

// The datacenter router (issue 36): a real network routes a cluster's pod addresses by what the
// nodes announce over BGP, not by routes written by hand. The local cluster has one — FRR's bgpd
// and zebra (Debian's frr, tools/deps/cni.list) in the network namespace <prefix>-router, on the
// nodes' bridge at .253 of the node subnet — and behind it an "outside" network namespace,
// <prefix>-outside, whose only route is its default route via the router. The router accepts a
// BGP session from every address of the node subnet (a dynamic-neighbor listen range: nodes and
// spares alike, whatever their number), keeps only prefixes inside the pod address space, sends
// nothing back, and zebra installs what bgpd chose into the router's kernel table. `up` creates
// the BGPConfiguration and the BGPPeer that make every node's staticip-agent announce its
// IPRanges to it (bgpObjects). The host and the control plane send the pod address space to the
// router (setupNetwork): they reach a pod through what FRR learned, as any machine of the
// datacenter would, and nothing else keeps routes for them.
//
// FRR's files stay under the state dir (<state>/router: configs, the vty and zserv sockets, pid
// and log files); nothing under /etc/frr or /var/run/frr is read or written, and the packaged
// service is never started.

// Router ASNs and timers of the local cluster. The nodes' hold time is short (RouterHoldTime):
// a powered-off node's routes leave the router when its session's hold timer expires, and that
// must happen well within the e2e's node-failover window (5 s, tools/make/cluster.mk).
const (
	RouterASN      = 64500
	ClusterASN     = 64512
	RouterHoldTime = 4 * time.Second
	// RouterKeepalive is a quarter of the hold time: one lost keepalive on a loaded machine
	// does not drop a session.
	RouterKeepalive = 1 * time.Second
	// BGPPeerName is the BGPPeer `up` creates for the router.
	BGPPeerName = "datacenter-router"
)

// routerLayout is the router's and the outside's names, addresses and paths.
type routerLayout struct {
	netns, outsideNetns string
	hostVeth            string // the router's link to the bridge, host end
	ip                  string // on the bridge
	outsideSubnet       netip.Prefix
	outsideGateway      string // the router's address on the outside link
	outsideIP           string // the outside namespace's address
	dir                 string
}

func newRouterLayout(o Options, nodeIP func(int) string) routerLayout {
	sub, _ := netip.ParsePrefix(o.OutsideSubnet)
	gw := sub.Masked().Addr().Next()
	return routerLayout{
		netns:          o.Prefix + "-router",
		outsideNetns:   o.Prefix + "-outside",
		hostVeth:       o.Prefix + "-vrt",
		ip:             nodeIP(253),
		outsideSubnet:  sub.Masked(),
		outsideGateway: gw.String(),
		outsideIP:      gw.Next().String(),
		dir:            filepath.Join(o.StateDir, "router"),
	}
}

// frrConfig is what FRR's bgpd configuration is made of.
type frrConfig struct {
	RouterID    string
	RouterASN   uint32
	NodeASN     uint32
	NodeSubnet  string // the listen range: every node may open a session
	PodSpace    string // accepted prefixes lie inside it
	Keepalive   time.Duration
	HoldTime    time.Duration
	LogFile     string
	MaxNeighbor int
}

// bgpdConfig renders FRR's bgpd.conf: a passive peer group over the node subnet (the agents
// connect; they do not listen by default, BGPConfiguration.spec.listenPort), prefixes inside
// the pod space accepted (a host route /32 too: a pool may hand out single addresses), nothing
// announced to the nodes (staticip rejects every route anyway), one best path per prefix
// (maximum-paths 1: the route the kernel gets is the one `show bgp` marks best, so a test that
// reads FRR's best path reads where traffic goes).
func bgpdConfig(c frrConfig) string {
	var b strings.Builder
	fmt.Fprintf(&b, "! written by tools/localcluster (router.go); FRR reads it from here, never /etc/frr\n")
	fmt.Fprintf(&b, "hostname router\n")
	fmt.Fprintf(&b, "log file %s informational\n", c.LogFile)
	fmt.Fprintf(&b, "!\n")
	fmt.Fprintf(&b, "ip prefix-list pod-space seq 5 permit %s le 32\n", c.PodSpace)
	fmt.Fprintf(&b, "route-map from-nodes permit 10\n match ip address prefix-list pod-space\n")
	fmt.Fprintf(&b, "route-map to-nodes deny 10\n")
	fmt.Fprintf(&b, "!\n")
	fmt.Fprintf(&b, "router bgp %d\n", c.RouterASN)
	fmt.Fprintf(&b, " bgp router-id %s\n", c.RouterID)
	fmt.Fprintf(&b, " bgp log-neighbor-changes\n")
	fmt.Fprintf(&b, " neighbor nodes peer-group\n")
	fmt.Fprintf(&b, " neighbor nodes remote-as %d\n", c.NodeASN)
	fmt.Fprintf(&b, " neighbor nodes timers %d %d\n", int(c.Keepalive.Seconds()), int(c.HoldTime.Seconds()))
	fmt.Fprintf(&b, " bgp listen limit %d\n", c.MaxNeighbor)
	fmt.Fprintf(&b, " bgp listen range %s peer-group nodes\n", c.NodeSubnet)
	fmt.Fprintf(&b, " address-family ipv4 unicast\n")
	fmt.Fprintf(&b, "  maximum-paths 1\n")
	fmt.Fprintf(&b, "  neighbor nodes activate\n")
	fmt.Fprintf(&b, "  neighbor nodes route-map from-nodes in\n")
	fmt.Fprintf(&b, "  neighbor nodes route-map to-nodes out\n")
	fmt.Fprintf(&b, " exit-address-family\n")
	return b.String()
}

func (l *layout) frrConfig() frrConfig {
	return frrConfig{
		RouterID: l.router.ip, RouterASN: RouterASN, NodeASN: ClusterASN,
		NodeSubnet: l.NodeSubnet, PodSpace: l.clusterCIDR,
		Keepalive: RouterKeepalive, HoldTime: RouterHoldTime,
		LogFile: filepath.Join(l.router.dir, "bgpd.log"), MaxNeighbor: 250,
	}
}

// setupRouter creates the router's and the outside's network namespaces and links, and writes
// FRR's configuration (the daemons start with the rest, routerDaemons).
func (l *layout) setupRouter() error {
	r := l.router
	if err := l.addNetns(r.netns, r.hostVeth, r.ip); err != nil {
		return err
	}
	steps := [][]string{
		{"ip", "netns", "add", r.outsideNetns},
		{"ip", "-n", r.netns, "link", "add", "ext0", "type", "veth", "peer", "name", "eth0", "netns", r.outsideNetns},
		{"ip", "-n", r.netns, "addr", "add", fmt.Sprintf("%s/%d", r.outsideGateway, r.outsideSubnet.Bits()), "dev", "ext0"},
		{"ip", "-n", r.netns, "link", "set", "ext0", "up"},
		{"ip", "-n", r.outsideNetns, "addr", "add", fmt.Sprintf("%s/%d", r.outsideIP, r.outsideSubnet.Bits()), "dev", "eth0"},
		{"ip", "-n", r.outsideNetns, "link", "set", "eth0", "up"},
		{"ip", "-n", r.outsideNetns, "link", "set", "lo", "up"},
		// The outside's one way out: the router. Nothing routes the pod space to it but FRR.
		{"ip", "-n", r.outsideNetns, "route", "add", "default", "via", r.outsideGateway},
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			return err
		}
	}
	// The router forwards; it sends no ICMP redirects: the host and the control plane share the
	// bridge with the nodes, and a redirect would let them cache a route straight to a node —
	// a route FRR did not choose, which would outlive a failover.
	for _, s := range []string{"net.ipv4.ip_forward=1", "net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.default.send_redirects=0", "net.ipv4.conf.eth0.send_redirects=0"} {
		if err := run("ip", "netns", "exec", r.netns, "sysctl", "-q", "-w", s); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(r.dir, 0o750); err != nil {
		return err
	}
	// FRR's daemons run as the user frr (below), which must reach its directory: the state dir
	// becomes traversable (0711: no listing; pki/ stays 0700, keys and kubeconfigs 0600).
	if err := os.Chmod(l.StateDir, 0o711); err != nil {
		return err
	}
	files := map[string]string{
		"bgpd.conf":  bgpdConfig(l.frrConfig()),
		"zebra.conf": "! written by tools/localcluster (router.go)\nhostname router\n",
		// vtysh reads its own file from --config_dir (here, never /etc/frr).
		"vtysh.conf": "! written by tools/localcluster (router.go)\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(r.dir, name), []byte(content), 0o640); err != nil {
			return err
		}
	}
	// FRR's daemons drop to the user frr (zebra cannot run as root: root is not in its vty
	// group), so they own their directory.
	return chownTree(r.dir, "frr")
}

func chownTree(dir, user string) error {
	out, err := exec.Command("chown", "-R", user+":"+user, dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("chown -R %s %s (is Debian's frr installed? tools/install-deps.sh): %w: %s", user, dir, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// frrDaemon runs one FRR daemon in the router's namespace, every path under the router's dir.
func (l *layout) frrDaemon(name string) daemon {
	d := l.router.dir
	return daemon{
		name:  "router-" + name,
		netns: l.router.netns,
		argv: []string{"/usr/lib/frr/" + name, "-u", "frr", "-g", "frr",
			"-z", filepath.Join(d, "zserv.api"), "--vty_socket", d,
			"-i", filepath.Join(d, name+".pid"), "-f", filepath.Join(d, name+".conf"),
			"-P", "0", // no TCP vty; vtysh uses the socket
		},
	}
}

// routerDaemons are zebra, then bgpd (bgpd connects to zebra's socket).
func (l *layout) routerDaemons() []daemon { return []daemon{l.frrDaemon("zebra"), l.frrDaemon("bgpd")} }

// startRouter starts zebra and bgpd and waits until bgpd answers on its vty.
func (l *layout) startRouter(ctx context.Context) error {
	zebra, bgpd := l.routerDaemons()[0], l.routerDaemons()[1]
	if _, err := l.start(zebra); err != nil {
		return l.componentError(zebra.name, err)
	}
	if err := l.waitFor(ctx, 20*time.Second, []string{zebra.name}, "zebra's socket", func() (bool, error) {
		_, err := os.Stat(filepath.Join(l.router.dir, "zserv.api"))
		return err == nil, nil
	}); err != nil {
		return err
	}
	if _, err := l.start(bgpd); err != nil {
		return l.componentError(bgpd.name, err)
	}
	return l.waitFor(ctx, 20*time.Second, []string{zebra.name, bgpd.name}, "bgpd's vty", func() (bool, error) {
		_, err := l.vtysh("show bgp summary json")
		return err == nil, nil
	})
}

// vtysh runs one FRR command against the router's daemons and returns its output.
func (l *layout) vtysh(command string) (string, error) {
	return vtysh(l.router.dir, command)
}

// vtysh's answer is its standard output; its notes ("% Can't open configuration file") go to
// standard error and only into the error.
func vtysh(dir, command string) (string, error) {
	var stderr strings.Builder
	cmd := exec.Command("vtysh", "--vty_socket", dir, "--config_dir", dir, "-c", command)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("vtysh -c %q: %w: %s %s", command, err, strings.TrimSpace(string(out)), strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// bgpObjects are the BGPConfiguration and the BGPPeer that make every node announce its
// IPRanges to the router: the cluster's ASN and short timers (RouterHoldTime), the router's
// address and ASN (eBGP).
func (l *layout) bgpObjects() string {
	return fmt.Sprintf(`apiVersion: jke.jdcloud.com/v1
kind: BGPConfiguration
metadata:
  name: default
spec:
  asNumber: %d
  holdTime: %s
  keepaliveTime: %s
---
apiVersion: jke.jdcloud.com/v1
kind: BGPPeer
metadata:
  name: %s
spec:
  peerIP: %s
  asNumber: %d
`, ClusterASN, RouterHoldTime, RouterKeepalive, BGPPeerName, l.router.ip, RouterASN)
}

// waitRangesRouted waits until the router has a best path for every IPRange a node serves, via
// that node: what range-routes used to write by hand before `up` waited for DNS, the router now
// learns from the agents.
func (l *layout) waitRangesRouted(ctx context.Context) error {
	cs, err := l.staticipClient(10 * time.Second)
	if err != nil {
		return err
	}
	var missing []string
	err = l.waitFor(ctx, 120*time.Second, l.daemonNames(), "the router's BGP routes to every served IPRange", func() (bool, error) {
		list, err := cs.JkeV1().IPRanges().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		out, err := l.vtysh("show bgp ipv4 unicast json")
		if err != nil {
			return false, nil
		}
		table, err := ParseBGPTable([]byte(out))
		if err != nil {
			return false, err
		}
		ips := l.nodeIPs()
		missing = missing[:0]
		for _, r := range list.Items {
			if r.Spec.Node == "" || ips[r.Spec.Node] == "" || strings.Contains(r.Spec.CIDR, ":") {
				continue // the router carries IPv4 only: IPv6 ranges are routed between the nodes
			}
			if via := table.BestNextHop(r.Spec.CIDR); via != ips[r.Spec.Node] {
				missing = append(missing, fmt.Sprintf("%s (%s): want via %s, FRR has %q", r.Spec.CIDR, r.Spec.Node, ips[r.Spec.Node], via))
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%w; not routed: %s (the agents' BGPNodeStatus: kubectl get bgpns; FRR: vtysh --vty_socket %s -c 'show bgp summary')", err, strings.Join(missing, "; "), l.router.dir)
	}
	return nil
}

func (l *layout) nodeIPs() map[string]string {
	ips := map[string]string{}
	for _, n := range l.nodes {
		ips[n.name] = n.ip
	}
	return ips
}

// BGPTable is FRR's `show bgp ipv4 unicast json`: every prefix's paths.
type BGPTable struct {
	RouterID string               `json:"routerId"`
	LocalAS  uint32               `json:"localAS"`
	Routes   map[string][]BGPPath `json:"routes"`
}

// BGPPath is one path of a prefix as FRR shows it.
type BGPPath struct {
	Valid    bool         `json:"valid"`
	Best     bool         `json:"bestpath"`
	Multi    bool         `json:"multipath"`
	PeerID   string       `json:"peerId"`
	ASPath   string       `json:"path"`
	NextHops []BGPNextHop `json:"nexthops"`
}

// BGPNextHop is a path's next hop.
type BGPNextHop struct {
	IP       string `json:"ip"`
	Hostname string `json:"hostname"`
	Used     bool   `json:"used"`
}

// ParseBGPTable reads `vtysh -c 'show bgp ipv4 unicast json'`.
func ParseBGPTable(b []byte) (BGPTable, error) {
	var t BGPTable
	if err := json.Unmarshal(b, &t); err != nil {
		return t, fmt.Errorf("FRR's BGP table: %w: %.200s", err, b)
	}
	if t.Routes == nil {
		t.Routes = map[string][]BGPPath{}
	}
	return t, nil
}

// BestNextHop is the next hop of prefix's best path, "" when FRR has no valid best path for it.
func (t BGPTable) BestNextHop(prefix string) string {
	for _, p := range t.Routes[prefix] {
		if p.Best && p.Valid {
			for _, nh := range p.NextHops {
				if nh.Used || len(p.NextHops) == 1 {
					return nh.IP
				}
			}
		}
	}
	return ""
}

// NextHops are the next hops of every path FRR has for prefix (best or not), sorted.
func (t BGPTable) NextHops(prefix string) []string {
	var out []string
	for _, p := range t.Routes[prefix] {
		for _, nh := range p.NextHops {
			out = append(out, nh.IP)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Via are the prefixes with a path whose next hop is ip, sorted.
func (t BGPTable) Via(ip string) []string {
	var out []string
	for prefix := range t.Routes {
		if slices.Contains(t.NextHops(prefix), ip) {
			out = append(out, prefix)
		}
	}
	slices.Sort(out)
	return out
}

// String is the table one prefix a line: "10.244.1.0/24 best via 172.30.0.11 (also 172.30.0.14)".
func (t BGPTable) String() string {
	var prefixes []string
	for p := range t.Routes {
		prefixes = append(prefixes, p)
	}
	slices.Sort(prefixes)
	var b strings.Builder
	for _, p := range prefixes {
		fmt.Fprintf(&b, "%s best via %s", p, orNone(t.BestNextHop(p)))
		var others []string
		for _, nh := range t.NextHops(p) {
			if nh != t.BestNextHop(p) {
				others = append(others, nh)
			}
		}
		if len(others) > 0 {
			fmt.Fprintf(&b, " (also %s)", strings.Join(others, ", "))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// Router is the local cluster's datacenter router and outside network, for the e2e and
// tools/failoverbench.
type Router struct {
	// Netns is the router's network namespace, OutsideNetns the outside's.
	Netns, OutsideNetns string
	// IP is the router's address on the nodes' bridge (the BGPPeer's peerIP).
	IP string
	// OutsideIP is the outside namespace's address; OutsideGateway the router's on that link.
	OutsideIP, OutsideGateway string
	// Dir holds FRR's sockets (vtysh --vty_socket Dir).
	Dir string
	// HoldTime is the hold time the router and the nodes agree on.
	HoldTime time.Duration
}

// RouterOf is the router of the cluster recorded in o's state dir.
func RouterOf(o Options) (Router, error) {
	l := newLayout(recordedOptions(o))
	if _, err := os.Stat(filepath.Join(l.router.dir, "bgpd.vty")); err != nil {
		return Router{}, fmt.Errorf("no datacenter router in %s (a cluster brought up before it existed? run down and up): %w", o.StateDir, err)
	}
	r := l.router
	return Router{Netns: r.netns, OutsideNetns: r.outsideNetns, IP: r.ip, OutsideIP: r.outsideIP, OutsideGateway: r.outsideGateway, Dir: r.dir, HoldTime: RouterHoldTime}, nil
}

// Vtysh runs one FRR command on the router.
func (r Router) Vtysh(command string) (string, error) { return vtysh(r.Dir, command) }

// BGPTable is FRR's IPv4 unicast table now.
func (r Router) BGPTable() (BGPTable, error) {
	out, err := r.Vtysh("show bgp ipv4 unicast json")
	if err != nil {
		return BGPTable{}, err
	}
	return ParseBGPTable([]byte(out))
}

// Kernel are the router's kernel routes into prefix space (what zebra installed), one a line.
func (r Router) Kernel() (string, error) {
	out, err := exec.Command("ip", "-n", r.Netns, "-4", "route", "show", "proto", "bgp").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ip -n %s route: %w: %s", r.Netns, err, out)
	}
	return string(out), nil
}

// staticipClient is a client of the cluster's staticip API. timeout bounds every request.
func (l *layout) staticipClient(timeout time.Duration) (versioned.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = timeout
	return versioned.NewForConfig(cfg)
}
