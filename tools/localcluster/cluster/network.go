package cluster

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
)

// setupNetwork creates the host bridge and one network namespace per control plane and
// node, each joined to the bridge by a veth. Addresses exist only on these links; the host
// keeps ip_forward as it is, so nothing is routed off the machine.
func (l *layout) setupNetwork() error {
	steps := [][]string{
		{"ip", "link", "add", l.bridge, "type", "bridge"},
		{"ip", "addr", "add", l.hostIP + "/24", "dev", l.bridge},
		{"ip", "link", "set", l.bridge, "up"},
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			return err
		}
	}
	if err := l.addNetns(l.cpNetns, l.cpHostVeth, l.cpIP); err != nil {
		return err
	}
	for _, n := range l.nodes {
		if err := l.addNetns(n.netns, n.hostVeth, n.ip); err != nil {
			return err
		}
		// Nodes route pod traffic; bridge-nf-call-iptables lets kube-proxy see traffic
		// between pods on the same CNI bridge (the kernel keeps it per namespace).
		for _, s := range []string{"net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1"} {
			if err := run("ip", "netns", "exec", n.netns, "sysctl", "-q", "-w", s); err != nil {
				return err
			}
		}
	}
	// Routes to every node's pod CIDR: from the host (so `curl <pod IP>` works there),
	// from the control plane (the API server answers pods) and, unless the CNI does it
	// (staticip's agent routes other nodes' IPRanges), from every other node.
	betweenNodes := cniProviders[l.CNI].routesBetweenNodes()
	for _, n := range l.nodes {
		if cniProviders[l.CNI].ownsAddressSpace() {
			break // routeAssignedRanges, once the nodes have their ranges
		}
		if err := run("ip", "route", "add", n.podCIDR, "via", n.ip, "dev", l.bridge); err != nil {
			return fmt.Errorf("route to %s's pod CIDR (is %s used elsewhere on this machine?): %w", n.name, n.podCIDR, err)
		}
		if err := run("ip", "-n", l.cpNetns, "route", "add", n.podCIDR, "via", n.ip); err != nil {
			return err
		}
		for _, m := range l.nodes {
			if betweenNodes && m.index != n.index {
				if err := run("ip", "-n", m.netns, "route", "add", n.podCIDR, "via", n.ip); err != nil {
					return err
				}
			}
		}
	}
	// Service IPs: a node's own processes need a route before kube-proxy's DNAT applies;
	// the host sends Service traffic to node 1, whose kube-proxy masquerades it.
	for _, n := range l.nodes {
		if err := run("ip", "-n", n.netns, "route", "add", l.serviceCIDR, "dev", "eth0"); err != nil {
			return err
		}
	}
	return run("ip", "route", "add", l.serviceCIDR, "via", l.nodes[0].ip, "dev", l.bridge)
}

func (l *layout) addNetns(ns, hostVeth, ip string) error {
	steps := [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "link", "add", hostVeth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "link", "set", hostVeth, "master", l.bridge, "up"},
		{"ip", "-n", ns, "addr", "add", ip + "/24", "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			return err
		}
	}
	return nil
}

// ourNetns lists the network namespaces (by name) this cluster's prefix owns, whether or
// not the layout still knows them (a previous `up` may have had more nodes).
func (l *layout) ourNetns() []string {
	out, _ := exec.Command("ip", "netns", "list").Output()
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if f[0] == l.cpNetns || strings.HasPrefix(f[0], l.Prefix+"-node-") {
			names = append(names, f[0])
		}
	}
	return names
}

// ourLinks lists host links made by this cluster: the bridge and the veths' host ends.
func (l *layout) ourLinks() []string {
	out, _ := exec.Command("ip", "-o", "link", "show").Output()
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name := strings.TrimSuffix(f[1], ":")
		if i := strings.IndexByte(name, '@'); i >= 0 {
			name = name[:i]
		}
		if name == l.bridge || name == l.cpHostVeth || strings.HasPrefix(name, l.Prefix+"-v") {
			names = append(names, name)
		}
	}
	return names
}

// teardownNetwork deletes namespaces (which takes their veth ends, addresses, routes and
// iptables rules with them) and the bridge (which takes the host routes).
func (l *layout) teardownNetwork() error {
	var errs []string
	for _, ns := range l.ourNetns() {
		if err := run("ip", "netns", "del", ns); err != nil {
			errs = append(errs, err.Error())
		}
	}
	for _, link := range l.ourLinks() {
		if err := run("ip", "link", "del", link); err != nil && linkExists(link) {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("network teardown: %s", strings.Join(errs, "; "))
	}
	return nil
}

func linkExists(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

// routeAssignedRanges routes, from the host and the control plane, every IPRange the nodes were
// given (by the IPPool allocator, with the staticip CNI) via its node, as setupNetwork does for
// the layout's fixed per-node CIDRs with other CNIs, and removes the routes of ranges that
// moved or went away. The nodes route each other's ranges themselves (the agent); the host and
// the control plane run no agent, so `up` calls this once the nodes are Ready and `localcluster
// routes` (SyncRoutes) again after ranges changed — a failover moves a node's ranges to the spare
// and gives the returned node a new block, which the API server must reach to proxy to pods.
func (l *layout) routeAssignedRanges() error {
	out, err := l.kubectl("", "get", "ipranges", "-o", `jsonpath={range .items[*]}{.spec.cidr} {.spec.node}{"\n"}{end}`)
	if err != nil {
		return err
	}
	ipOf := map[string]string{}
	for _, n := range l.nodes {
		ipOf[n.name] = n.ip
	}
	want := map[string]string{} // cidr -> node IP
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		cidr, node, _ := strings.Cut(strings.TrimSpace(line), " ")
		if ip := ipOf[node]; cidr != "" && ip != "" {
			want[cidr] = ip
		}
	}
	for _, where := range []struct{ netns, dev, what string }{{"", l.bridge, "the host"}, {l.cpNetns, "", "the control plane"}} {
		if err := syncRangeRoutes(where.netns, where.dev, l.clusterCIDR, want, ipOf); err != nil {
			return fmt.Errorf("routes from %s (is an IPRange's CIDR used elsewhere on this machine?): %w", where.what, err)
		}
	}
	l.Logf("network: %d IPRanges routed via their nodes from the host and the control plane", len(want))
	return nil
}

// syncRangeRoutes makes the routes via node IPs to destinations inside the pod address space
// (podSpace) in one network namespace ("" = the host) equal want: replaces what is missing or
// points elsewhere, deletes what points at a node but is no longer any node's range. Every
// other route stays — the host's route to the Service CIDR via node-1 above all (deleting it
// sent Service traffic to the default route).
func syncRangeRoutes(netns, dev, podSpace string, want, nodeIPs map[string]string) error {
	space, err := netip.ParsePrefix(podSpace)
	if err != nil {
		return fmt.Errorf("pod address space %q: %w", podSpace, err)
	}
	ip := func(args ...string) []string {
		if netns != "" {
			return append([]string{"ip", "-n", netns}, args...)
		}
		return append([]string{"ip"}, args...)
	}
	isNode := map[string]bool{}
	for _, a := range nodeIPs {
		isNode[a] = true
	}
	argv := ip("-j", "-4", "route", "show")
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		return err
	}
	var have []struct{ Dst, Gateway string }
	if err := json.Unmarshal(out, &have); err != nil {
		return fmt.Errorf("ip -j route show: %w", err)
	}
	current := map[string]string{}
	for _, r := range have {
		dst, err := netip.ParsePrefix(r.Dst)
		if err != nil || !isNode[r.Gateway] || !space.Overlaps(dst) || dst.Bits() < space.Bits() {
			continue // not a route to a piece of the pod address space via a node: not ours
		}
		current[r.Dst] = r.Gateway
	}
	for dst, gw := range current {
		if want[dst] == "" {
			if err := run(ip("route", "del", dst, "via", gw)...); err != nil {
				return err
			}
		}
	}
	for cidr, gw := range want {
		if current[cidr] == gw {
			continue
		}
		args := []string{"route", "replace", cidr, "via", gw}
		if dev != "" {
			args = append(args, "dev", dev)
		}
		if err := run(ip(args...)...); err != nil {
			return fmt.Errorf("%s via %s: %w", cidr, gw, err)
		}
	}
	return nil
}

// SyncRoutes re-routes, from the host and the control plane, the IPRanges of the cluster
// recorded in o's state dir (`localcluster routes`); a no-op for CNIs that do not own the
// address space (their routes are the layout's fixed per-node CIDRs).
func SyncRoutes(o Options) error {
	if err := o.validate(); err != nil {
		return err
	}
	l := newLayout(o)
	rec, err := l.readRecord()
	if err != nil {
		return fmt.Errorf("no cluster recorded in %s (run `up`): %w", o.StateDir, err)
	}
	l = newLayout(rec.options(o))
	if !cniProviders[l.CNI].ownsAddressSpace() {
		return nil
	}
	return l.routeAssignedRanges()
}
