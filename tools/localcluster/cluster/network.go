package cluster

import (
	"fmt"
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
		// Dual-stack nodes: a ULA on the bridge beside the IPv4 address (no duplicate address
		// detection: the tool hands the addresses out), the kubelet's second InternalIP, the
		// next hop of other nodes' routes to this node's IPv6 ranges. Nothing routes it off
		// the machine: no node has an IPv6 default route.
		if err := run("ip", "-n", n.netns, "-6", "addr", "add", n.ip6+"/64", "dev", "eth0", "nodad"); err != nil {
			return err
		}
		// Nodes route pod traffic; bridge-nf-call-iptables lets kube-proxy see traffic
		// between pods on the same CNI bridge (the kernel keeps it per namespace).
		for _, s := range []string{"net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1", "net.bridge.bridge-nf-call-iptables=1", "net.bridge.bridge-nf-call-ip6tables=1"} {
			if err := run("ip", "netns", "exec", n.netns, "sysctl", "-q", "-w", s); err != nil {
				return err
			}
		}
	}
	if err := l.setupRouter(); err != nil {
		return fmt.Errorf("datacenter router: %w", err)
	}
	// Every node's default gateway is the datacenter router (router.go), as on a real network:
	// a pod's traffic to the outside leaves its node NATed (or not: IPPool natOutgoing) and goes
	// there; the router knows the outside, and the pod space from what the nodes announce.
	for _, n := range l.nodes {
		if err := run("ip", "-n", n.netns, "route", "add", "default", "via", l.router.ip); err != nil {
			return err
		}
	}
	if cniProviders[l.CNI].ownsAddressSpace() {
		// The staticip CNI's ranges move (failover, new blocks): the host and the control
		// plane — which run no agent — send the whole pod address space to the router, which
		// routes it by what the nodes announce over BGP, as any machine of a datacenter would.
		if err := run("ip", "route", "add", l.clusterCIDR, "via", l.router.ip, "dev", l.bridge); err != nil {
			return fmt.Errorf("route to the pod address space %s (is it used elsewhere on this machine?): %w", l.clusterCIDR, err)
		}
		if err := run("ip", "-n", l.cpNetns, "route", "add", l.clusterCIDR, "via", l.router.ip); err != nil {
			return err
		}
	} else {
		if err := l.routeFixedNodeCIDRs(); err != nil {
			return err
		}
	}
	// Service IPs: a node's own processes need a route before kube-proxy's DNAT applies;
	// the host sends Service traffic to node 1, whose kube-proxy masquerades it.
	for _, n := range l.nodes {
		if err := run("ip", "-n", n.netns, "route", "add", l.serviceCIDR, "dev", "eth0"); err != nil {
			return err
		}
		if err := run("ip", "-n", n.netns, "-6", "route", "add", l.serviceCIDR6, "dev", "eth0"); err != nil {
			return err
		}
	}
	return run("ip", "route", "add", l.serviceCIDR, "via", l.nodes[0].ip, "dev", l.bridge)
}

// routeFixedNodeCIDRs routes every node's fixed pod CIDR (the bridge and spiderpool CNIs: one
// /24 per node for the cluster's life, announced by nobody) from the host (so `curl <pod IP>`
// works there), from the control plane (the API server answers pods) and, unless the CNI does
// it, from every other node: static routes, as a network without BGP would configure them.
func (l *layout) routeFixedNodeCIDRs() error {
	betweenNodes := cniProviders[l.CNI].routesBetweenNodes()
	for _, n := range l.nodes {
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
	// The whole pod address space onto the bridge, below the per-node routes: an address no
	// node has fails there instead of following the host's default route off the machine.
	if err := run("ip", "route", "add", l.clusterCIDR, "dev", l.bridge); err != nil {
		return fmt.Errorf("route to the pod address space %s (is it used elsewhere on this machine?): %w", l.clusterCIDR, err)
	}
	return nil
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
		if f[0] == l.cpNetns || f[0] == l.router.netns || f[0] == l.router.outsideNetns || strings.HasPrefix(f[0], l.Prefix+"-node-") {
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
