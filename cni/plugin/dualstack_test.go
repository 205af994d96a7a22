package plugin

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/cni/nstest"
	"github.com/staticip/staticip/ipam"
)

func (h *harness) dualStackConf(extra map[string]any) []byte {
	c := map[string]any{"ranges": []map[string]any{
		{"subnet": "10.124.0.0/28", "gateway": "10.124.0.1"},
		{"subnet": "fd00:dead::/120"},
	}}
	for k, v := range extra {
		c[k] = v
	}
	return h.conf(c)
}

// resultAddrs are a CNI result's addresses, in order.
func resultAddrs(r *current.Result) []netip.Addr {
	var out []netip.Addr
	for _, ipc := range r.IPs {
		a, _ := netip.AddrFromSlice(ipc.Address.IP)
		out = append(out, a.Unmap())
	}
	return out
}

// TestDualStackPods: on a node with an IPv4 and an IPv6 range a pod gets one address of each
// (IPv4 first) on eth0 — both addresses, both default routes, a permanent neighbour for each
// gateway, a host route to each — both are in the result (one IPConfig per family, as the
// kubelet needs for pod.status.podIPs), CHECK verifies both, and two pods talk over both
// families.
func TestDualStackPods(t *testing.T) {
	h := newHarness(t)
	conf := h.dualStackConf(nil)
	a, b := newNS(t, "dsa"), newNS(t, "dsb")
	argsA := podArgs(a, "ctr-dsa", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=a", conf)
	ra := h.mustAdd(argsA)
	rb := h.mustAdd(podArgs(b, "ctr-dsb", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=b", conf))
	got := resultAddrs(ra)
	if len(got) != 2 || got[0] != netip.MustParseAddr("10.124.0.2") || got[1] != netip.MustParseAddr("fd00:dead::1") ||
		ra.IPs[0].Address.String() != "10.124.0.2/32" || ra.IPs[1].Address.String() != "fd00:dead::1/128" {
		t.Fatalf("result IPs %v, want 10.124.0.2/32 and fd00:dead::1/128", ra.IPs)
	}
	if ra.IPs[0].Gateway.String() != "10.124.0.1" || ra.IPs[1].Gateway.String() != DefaultGatewayV6 {
		t.Fatalf("gateways %v %v", ra.IPs[0].Gateway, ra.IPs[1].Gateway)
	}
	if err := a.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		for _, c := range []struct {
			family       int
			addr, defGw  string
			gwLinkRoute  string
			gatewayNeigh string
		}{
			{netlink.FAMILY_V4, "10.124.0.2/32", "10.124.0.1", "10.124.0.1/32", "10.124.0.1"},
			{netlink.FAMILY_V6, "fd00:dead::1/128", DefaultGatewayV6, DefaultGatewayV6 + "/128", DefaultGatewayV6},
		} {
			addrs, _ := netlink.AddrList(link, c.family)
			var have []string
			for _, x := range addrs {
				have = append(have, x.IPNet.String())
			}
			if !strings.Contains(strings.Join(have, " "), c.addr) {
				return fmt.Errorf("eth0 addresses %v lack %s", have, c.addr)
			}
			routes, _ := netlink.RouteList(link, c.family)
			var rs []string
			for _, r := range routes {
				rs = append(rs, fmt.Sprintf("%v via %v", r.Dst, r.Gw))
			}
			joined := strings.Join(rs, "; ")
			if !strings.Contains(joined, c.gwLinkRoute+" via <nil>") || !strings.Contains(joined, "via "+c.defGw) {
				return fmt.Errorf("IPv%d routes %s: want %s and a default via %s", map[int]int{netlink.FAMILY_V4: 4, netlink.FAMILY_V6: 6}[c.family], joined, c.gwLinkRoute, c.defGw)
			}
			neighs, _ := netlink.NeighList(link.Attrs().Index, c.family)
			found := false
			for _, n := range neighs {
				found = found || (n.IP.String() == c.gatewayNeigh && n.State == netlink.NUD_PERMANENT && n.HardwareAddr.String() == ra.Interfaces[0].Mac)
			}
			if !found {
				return fmt.Errorf("no permanent neighbour for %s: %+v", c.gatewayNeigh, neighs)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := h.host.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName(HostVethName("ctr-dsa", "eth0"))
		if err != nil {
			return err
		}
		for _, ip := range got {
			routes, _ := netlink.RouteListFiltered(family(ip), &netlink.Route{Dst: hostPrefix(ip)}, netlink.RT_FILTER_DST)
			if len(routes) != 1 || routes[0].LinkIndex != link.Attrs().Index {
				return fmt.Errorf("host routes to %s: %+v", ip, routes)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := h.check(argsA, ra); err != nil {
		t.Fatalf("CHECK of a dual-stack attachment: %v", err)
	}
	// CHECK needs both: a prevResult without the IPv6 address fails.
	v4only := *ra
	v4only.IPs = ra.IPs[:1]
	if err := h.check(argsA, &v4only); err == nil || !strings.Contains(err.Error(), "prevResult lacks the allocated IP fd00:dead::1") {
		t.Fatalf("CHECK with a prevResult lacking the IPv6 address: %v", err)
	}
	// A repeated ADD returns both again.
	if again := resultAddrs(h.mustAdd(argsA)); len(again) != 2 || again[0] != got[0] || again[1] != got[1] {
		t.Fatalf("repeated ADD gave %v, first %v", again, got)
	}
	for _, ip := range resultAddrs(rb) {
		nstest.Talk(t, a, b, ip, 7778)
	}
	// DEL frees both (no kubeconfig: no Kubernetes).
	if err := h.del(argsA); err != nil {
		t.Fatal(err)
	}
	for _, al := range h.allocations() {
		if al.Pod.Name == "a" {
			t.Fatalf("DEL left %v allocated", al.IP)
		}
	}
}

// TestDualStackStaticPodKeepsBoth: a static pod's DEL keeps both addresses reserved (the API
// server cannot be asked: kept), nobody else gets them, and the recreated pod gets both back;
// a dual-stack annotation gives exactly its two addresses, a single-stack one plus the node's
// other family, and a record's addresses win over a stale annotation per family.
func TestDualStackStaticPodKeepsBoth(t *testing.T) {
	h := newHarness(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	// Port 1 on loopback: connection refused at once, like an API server that is down.
	os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n"+
		"contexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\nusers:\n- name: u\n  user: {token: x}\n"), 0o600)
	annotated := func(value string) []byte {
		return h.dualStackConf(map[string]any{"kubeconfig": kubeconfig, "apiTimeout": "1s",
			"runtimeConfig": map[string]any{PodAnnotationsCapability: map[string]string{podip.AnnotationIPAddress: value}}})
	}
	pod := newNS(t, "dss")
	web := "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0;K8S_POD_UID=a"
	first := resultAddrs(h.mustAdd(podArgs(pod, "ctr-dss-1", web, annotated("fd00:dead::9,10.124.0.9"))))
	if len(first) != 2 || first[0] != netip.MustParseAddr("fd00:dead::9") || first[1] != netip.MustParseAddr("10.124.0.9") {
		t.Fatalf("a dual-stack annotation (IPv6 first) gave %v", first)
	}
	if err := h.del(podArgs(pod, "ctr-dss-1", web, annotated("fd00:dead::9,10.124.0.9"))); err != nil {
		t.Fatal(err)
	}
	db := h.openStore()
	reserved, err := db.PodReservations(ipam.PodRef{Namespace: "ns", Name: "web-0"})
	db.Close()
	if err != nil || len(reserved) != 2 {
		t.Fatalf("after DEL, reserved for web-0: %v, %v; want both addresses", reserved, err)
	}
	// Another pod fills both ranges' free addresses and never gets web-0's.
	for i := 0; i < 3; i++ {
		r := h.mustAdd(podArgs(newNS(t, "dso"), fmt.Sprintf("ctr-other-%d", i), fmt.Sprintf("K8S_POD_NAMESPACE=ns;K8S_POD_NAME=other-%d", i), h.dualStackConf(nil)))
		for _, ip := range resultAddrs(r) {
			if ip == first[0] || ip == first[1] {
				t.Fatalf("another pod got web-0's reserved %v", ip)
			}
		}
	}
	// Recreated with a stale annotation naming other addresses: the reservations win, both.
	again := resultAddrs(h.mustAdd(podArgs(newNS(t, "dss"), "ctr-dss-2", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0;K8S_POD_UID=b", annotated("fd00:dead::7,10.124.0.7"))))
	if len(again) != 2 || again[0] != first[0] || again[1] != first[1] {
		t.Fatalf("recreated web-0 got %v, want its reserved %v", again, first)
	}
	// A single-stack annotation on a dual-stack node: the annotated address and one of the
	// node's other family.
	one := resultAddrs(h.mustAdd(podArgs(newNS(t, "dsone"), "ctr-one", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=one", annotated("10.124.0.12"))))
	if len(one) != 2 || one[0] != netip.MustParseAddr("10.124.0.12") || !one[1].Is6() {
		t.Fatalf("a single-stack annotation on a dual-stack node gave %v", one)
	}
}

func TestIPv6Settled(t *testing.T) {
	addr := func(s string, flags int) netlink.Addr {
		return netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(s), Mask: net.CIDRMask(128, 128)}, Flags: flags}
	}
	for _, tc := range []struct {
		name        string
		addrs       []netlink.Addr
		settled     bool
		errContains string
	}{
		{name: "none", settled: true},
		{name: "all permanent", addrs: []netlink.Addr{addr("fd00::5", 0x80), addr("fe80::1", 0x80)}, settled: true},
		{name: "the link-local still tentative", addrs: []netlink.Addr{addr("fd00::5", 0x80), addr("fe80::1", 0x40)}},
		{name: "duplicate address detection failed", addrs: []netlink.Addr{addr("fd00::5", 0x08)}, errContains: "fd00::5 failed duplicate address detection"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			settled, err := ipv6Settled("eth0", tc.addrs)
			if settled != tc.settled || (err == nil) != (tc.errContains == "") || (err != nil && !strings.Contains(err.Error(), tc.errContains)) {
				t.Errorf("ipv6Settled = %v, %v; want %v, error containing %q", settled, err, tc.settled, tc.errContains)
			}
		})
	}
}
