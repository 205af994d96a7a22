package plugin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ip"
	cniipam "github.com/containernetworking/plugins/pkg/ipam"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/utils/sysctl"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/staticip/staticip/ipam"
)

// HostVethPrefix starts the name of every host-side veth the plugin creates.
const HostVethPrefix = "sip"

// HostVethName is the deterministic host-side name of an attachment's veth, so that DEL,
// CHECK and a rollback find it without any state.
func HostVethName(containerID, ifName string) string {
	h := sha256.Sum256([]byte(containerID + "/" + ifName))
	return HostVethPrefix + hex.EncodeToString(h[:])[:15-len(HostVethPrefix)]
}

// podNetwork is what one attachment looks like on the wire: one address per IP family (a
// dual-stack pod two, the primary first), each with its gateway, on one veth pair.
type podNetwork struct {
	Addrs    []podAddr
	IfName   string
	HostVeth string
	MTU      int
}

// podAddr is one of the attachment's addresses and the gateway the pod reaches its family's
// default route through (never an address of the host: a permanent neighbour entry).
type podAddr struct {
	IP      netip.Addr
	Gateway netip.Addr
}

// podAddrs are the addresses of an attachment's allocations, each with its range's gateway.
func podAddrs(ranges []ipam.Range, allocs []ipam.Allocation) []podAddr {
	out := make([]podAddr, len(allocs))
	for i, a := range allocs {
		rng, _ := findRange(ranges, a.IP)
		out[i] = podAddr{IP: a.IP, Gateway: gatewayFor(rng, a.IP)}
	}
	return out
}

func (pn podNetwork) hasIPv6() bool {
	for _, a := range pn.Addrs {
		if a.IP.Is6() {
			return true
		}
	}
	return false
}

func hostPrefix(a netip.Addr) *net.IPNet {
	p := netip.PrefixFrom(a, a.BitLen())
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), a.BitLen())}
}

func defaultDst(a netip.Addr) net.IPNet {
	if a.Is4() {
		return net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
	}
	return net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
}

// result is the CNI result describing pn: one IPConfig per address (per family), as the
// bridge and ptp plugins return a dual-stack attachment, and per family the gateway's link
// route and the default route.
func (pn podNetwork) result(hostMAC, podMAC, sandbox string) *current.Result {
	linkScope := int(netlink.SCOPE_LINK)
	r := &current.Result{
		Interfaces: []*current.Interface{
			{Name: pn.HostVeth, Mac: hostMAC},
			{Name: pn.IfName, Mac: podMAC, Sandbox: sandbox, Mtu: pn.MTU},
		},
	}
	for _, a := range pn.Addrs {
		gw := net.IP(a.Gateway.AsSlice())
		r.IPs = append(r.IPs, &current.IPConfig{Interface: current.Int(1), Address: *hostPrefix(a.IP), Gateway: gw})
		r.Routes = append(r.Routes, &types.Route{Dst: *hostPrefix(a.Gateway), Scope: &linkScope}, &types.Route{Dst: defaultDst(a.IP), GW: gw})
	}
	return r
}

// setUp creates the veth pair and configures both ends. On error everything it created is
// removed again (the caller releases the IP).
func (pn podNetwork) setUp(netns ns.NetNS) (res *current.Result, err error) {
	var hostMAC, podMAC net.HardwareAddr
	defer func() {
		if err != nil {
			pn.tearDown(netns)
		}
	}()
	err = netns.Do(func(hostNS ns.NetNS) error {
		hostIf, podIf, err := ip.SetupVethWithName(pn.IfName, pn.HostVeth, pn.MTU, "", hostNS)
		if err != nil {
			return err
		}
		hostMAC, podMAC = hostIf.HardwareAddr, podIf.HardwareAddr
		// Addresses and routes through the plugins' helper; the gateway is reached through the
		// explicit link-scope route, so the IPConfig carries none (ConfigureIface would
		// otherwise use it as next hop of the link route too).
		r := pn.result(hostMAC.String(), podMAC.String(), netns.Path())
		for _, ipc := range r.IPs {
			ipc.Gateway = nil
		}
		if pn.hasIPv6() {
			// A /128 on a point-to-point link cannot clash: skip duplicate address detection,
			// which would leave the address unusable ("tentative") for a second or more. The
			// kernel only skips it when both the interface's and the namespace-wide "all"
			// setting say so; both live in the pod's own namespace.
			for _, dev := range []string{"all", pn.IfName} {
				if _, err := sysctl.Sysctl(fmt.Sprintf("net/ipv6/conf/%s/accept_dad", dev), "0"); err != nil {
					return err
				}
			}
		}
		if err := cniipam.ConfigureIface(pn.IfName, r); err != nil {
			return err
		}
		if pn.hasIPv6() {
			// Even without DAD the kernel finishes an address asynchronously after link up:
			// wait until nothing is tentative, or the pod's first bind fails.
			if err := settleIPv6(pn.IfName, 5*time.Second); err != nil {
				return err
			}
		}
		link, err := netlink.LinkByName(pn.IfName)
		if err != nil {
			return err
		}
		// A permanent neighbour for each gateway: the pod never ARPs (or solicits) for it, and
		// the host needs neither an address on its veth nor proxy ARP.
		for _, a := range pn.Addrs {
			if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: link.Attrs().Index, State: netlink.NUD_PERMANENT,
				IP: a.Gateway.AsSlice(), HardwareAddr: hostMAC, Family: family(a.Gateway)}); err != nil {
				return fmt.Errorf("neighbour %s on %s: %w", a.Gateway, pn.IfName, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := pn.setUpHost(podMAC); err != nil {
		return nil, err
	}
	return pn.result(hostMAC.String(), podMAC.String(), netns.Path()), nil
}

// settleIPv6 waits until no IPv6 address of the interface is tentative. Without DAD
// (accept_dad 0) the kernel completes the addresses in its work queue right after the link comes
// up, well within a millisecond here; ip.SettleAddresses polls at a fixed 50 ms, so nearly every
// dual-stack ADD slept 50 ms for it (cnibench: dual-stack / single-stack p50 1.32x and 1.36x).
// This polls after 1 ms, doubling up to 50 ms.
func settleIPv6(ifName string, timeout time.Duration) error {
	link, err := netlink.LinkByName(ifName)
	if err != nil {
		return fmt.Errorf("interface %s: %w", ifName, err)
	}
	deadline := time.Now().Add(timeout)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		addrs, err := netlink.AddrList(link, netlink.FAMILY_V6)
		if err != nil {
			return fmt.Errorf("IPv6 addresses of %s: %w", ifName, err)
		}
		settled, err := ipv6Settled(ifName, addrs)
		if settled || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("interface %s still has tentative IPv6 addresses after %s", ifName, timeout)
		}
		time.Sleep(wait)
	}
}

// ipv6Settled: none of addrs is tentative; an address whose duplicate detection failed is an
// error (another host has it).
func ipv6Settled(ifName string, addrs []netlink.Addr) (bool, error) {
	settled := true
	for _, a := range addrs {
		if a.Flags&unix.IFA_F_DADFAILED != 0 {
			return false, fmt.Errorf("interface %s: address %s failed duplicate address detection", ifName, a.IP)
		}
		if a.Flags&unix.IFA_F_TENTATIVE != 0 {
			settled = false
		}
	}
	return settled, nil
}

func family(a netip.Addr) int {
	if a.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

// testHookHostSetup, when set by a test, fails host-side setup after the pod side is fully
// configured: the latest point at which ADD can fail, to prove the rollback.
var testHookHostSetup func() error

func (pn podNetwork) setUpHost(podMAC net.HardwareAddr) error {
	link, err := netlink.LinkByName(pn.HostVeth)
	if err != nil {
		return fmt.Errorf("host veth %s: %w", pn.HostVeth, err)
	}
	for _, a := range pn.Addrs {
		if a.IP.Is4() {
			if err := ip.EnableIP4Forward(); err != nil {
				return fmt.Errorf("enable IPv4 forwarding: %w", err)
			}
		} else {
			if err := ip.EnableIP6Forward(); err != nil {
				return fmt.Errorf("enable IPv6 forwarding: %w", err)
			}
			// The host end carries no address; keep the kernel from autoconfiguring one.
			_, _ = sysctl.Sysctl(fmt.Sprintf("net/ipv6/conf/%s/accept_ra", pn.HostVeth), "0")
		}
		if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: link.Attrs().Index, State: netlink.NUD_PERMANENT,
			IP: a.IP.AsSlice(), HardwareAddr: podMAC, Family: family(a.IP)}); err != nil {
			return fmt.Errorf("neighbour %s on %s: %w", a.IP, pn.HostVeth, err)
		}
		route := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: hostPrefix(a.IP), Scope: netlink.SCOPE_LINK}
		if err := netlink.RouteReplace(route); err != nil {
			return fmt.Errorf("host route %s dev %s: %w", a.IP, pn.HostVeth, err)
		}
	}
	if testHookHostSetup != nil {
		return testHookHostSetup()
	}
	return nil
}

// tearDown deletes the pod's interface (which deletes its peer and the host route with it)
// and, should the netns already be gone, the host veth. Missing pieces are not errors.
func (pn podNetwork) tearDown(netns ns.NetNS) error {
	var errs []error
	if netns != nil {
		err := netns.Do(func(ns.NetNS) error {
			err := ip.DelLinkByName(pn.IfName)
			if err != nil && !errors.Is(err, ip.ErrLinkNotFound) {
				return err
			}
			return nil
		})
		errs = append(errs, err)
	}
	if link, err := netlink.LinkByName(pn.HostVeth); err == nil {
		if err := netlink.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// openNetNS opens the sandbox's netns; a netns that no longer exists is reported as nil.
func openNetNS(path string) (ns.NetNS, error) {
	if path == "" {
		return nil, nil
	}
	n, err := ns.GetNS(path)
	if err != nil {
		var nerr ns.NSPathNotExistErr
		if errors.As(err, &nerr) || errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	return n, nil
}

// check verifies the attachment as CHECK must: the pod interface with each of its addresses and
// their routes, the host veth with a route to each address.
func (pn podNetwork) check(netns ns.NetNS) error {
	err := netns.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName(pn.IfName)
		if err != nil {
			return fmt.Errorf("interface %s is missing in the pod: %w", pn.IfName, err)
		}
		if _, ok := link.(*netlink.Veth); !ok {
			return fmt.Errorf("interface %s in the pod is a %s, not a veth", pn.IfName, link.Type())
		}
		if link.Attrs().MTU != pn.MTU {
			return fmt.Errorf("interface %s has MTU %d, want %d", pn.IfName, link.Attrs().MTU, pn.MTU)
		}
		for _, a := range pn.Addrs {
			if err := checkPodAddr(link, pn.IfName, a); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	link, err := netlink.LinkByName(pn.HostVeth)
	if err != nil {
		return fmt.Errorf("host veth %s is missing: %w", pn.HostVeth, err)
	}
	for _, a := range pn.Addrs {
		routes, err := netlink.RouteListFiltered(family(a.IP), &netlink.Route{Dst: hostPrefix(a.IP)}, netlink.RT_FILTER_DST)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(routes, func(r netlink.Route) bool { return r.LinkIndex == link.Attrs().Index }) {
			return fmt.Errorf("host route %s dev %s is missing", a.IP, pn.HostVeth)
		}
	}
	return nil
}

// checkPodAddr: inside the pod, the interface has a and its family's routes.
func checkPodAddr(link netlink.Link, ifName string, a podAddr) error {
	addrs, err := netlink.AddrList(link, family(a.IP))
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(addrs, func(x netlink.Addr) bool { return x.IP.Equal(a.IP.AsSlice()) }) {
		return fmt.Errorf("interface %s lacks address %s", ifName, a.IP)
	}
	routes, err := netlink.RouteList(link, family(a.IP))
	if err != nil {
		return err
	}
	hasDefault, hasGw := false, false
	for _, r := range routes {
		if (r.Dst == nil || r.Dst.IP.IsUnspecified()) && r.Gw.Equal(a.Gateway.AsSlice()) {
			hasDefault = true
		}
		if r.Dst != nil && r.Dst.String() == hostPrefix(a.Gateway).String() {
			hasGw = true
		}
	}
	if !hasDefault || !hasGw {
		return fmt.Errorf("interface %s lacks its routes (default via %s: %v, %s link route: %v)", ifName, a.Gateway, hasDefault, a.Gateway, hasGw)
	}
	return nil
}
