package plugin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ip"
	"github.com/containernetworking/plugins/pkg/ipam"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/utils/sysctl"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// HostVethPrefix starts the name of every host-side veth the plugin creates.
const HostVethPrefix = "sip"

// HostVethName is the deterministic host-side name of an attachment's veth, so that DEL,
// CHECK and a rollback find it without any state.
func HostVethName(containerID, ifName string) string {
	h := sha256.Sum256([]byte(containerID + "/" + ifName))
	return HostVethPrefix + hex.EncodeToString(h[:])[:15-len(HostVethPrefix)]
}

// podNetwork is what one attachment looks like on the wire.
type podNetwork struct {
	IP       netip.Addr
	Gateway  netip.Addr
	IfName   string
	HostVeth string
	MTU      int
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

// result is the CNI result describing pn.
func (pn podNetwork) result(hostMAC, podMAC, sandbox string) *current.Result {
	linkScope := int(netlink.SCOPE_LINK)
	gw := net.IP(pn.Gateway.AsSlice())
	return &current.Result{
		Interfaces: []*current.Interface{
			{Name: pn.HostVeth, Mac: hostMAC},
			{Name: pn.IfName, Mac: podMAC, Sandbox: sandbox, Mtu: pn.MTU},
		},
		IPs: []*current.IPConfig{{Interface: current.Int(1), Address: *hostPrefix(pn.IP), Gateway: gw}},
		Routes: []*types.Route{
			{Dst: *hostPrefix(pn.Gateway), Scope: &linkScope},
			{Dst: defaultDst(pn.IP), GW: gw},
		},
	}
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
		r.IPs[0].Gateway = nil
		if pn.IP.Is6() {
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
		if err := ipam.ConfigureIface(pn.IfName, r); err != nil {
			return err
		}
		if pn.IP.Is6() {
			// Even without DAD the kernel finishes an address asynchronously after link up:
			// wait until nothing is tentative, or the pod's first bind fails.
			if err := ip.SettleAddresses(pn.IfName, 5*time.Second); err != nil {
				return err
			}
		}
		link, err := netlink.LinkByName(pn.IfName)
		if err != nil {
			return err
		}
		// A permanent neighbour for the gateway: the pod never ARPs for it, and the host needs
		// neither an address on its veth nor proxy ARP.
		return netlink.NeighSet(&netlink.Neigh{LinkIndex: link.Attrs().Index, State: netlink.NUD_PERMANENT,
			IP: pn.Gateway.AsSlice(), HardwareAddr: hostMAC, Family: family(pn.Gateway)})
	})
	if err != nil {
		return nil, err
	}
	if err := pn.setUpHost(podMAC); err != nil {
		return nil, err
	}
	return pn.result(hostMAC.String(), podMAC.String(), netns.Path()), nil
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
	if pn.IP.Is4() {
		if err := ip.EnableIP4Forward(); err != nil {
			return fmt.Errorf("enable IPv4 forwarding: %w", err)
		}
	} else if err := ip.EnableIP6Forward(); err != nil {
		return fmt.Errorf("enable IPv6 forwarding: %w", err)
	}
	link, err := netlink.LinkByName(pn.HostVeth)
	if err != nil {
		return fmt.Errorf("host veth %s: %w", pn.HostVeth, err)
	}
	if pn.IP.Is6() {
		// The host end carries no address; keep the kernel from autoconfiguring one.
		_, _ = sysctl.Sysctl(fmt.Sprintf("net/ipv6/conf/%s/accept_ra", pn.HostVeth), "0")
	}
	if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: link.Attrs().Index, State: netlink.NUD_PERMANENT,
		IP: pn.IP.AsSlice(), HardwareAddr: podMAC, Family: family(pn.IP)}); err != nil {
		return fmt.Errorf("neighbour %s on %s: %w", pn.IP, pn.HostVeth, err)
	}
	route := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: hostPrefix(pn.IP), Scope: netlink.SCOPE_LINK}
	if err := netlink.RouteReplace(route); err != nil {
		return fmt.Errorf("host route %s dev %s: %w", pn.IP, pn.HostVeth, err)
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

// check verifies the attachment as CHECK must: the pod interface with its address and routes,
// the host veth with its route.
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
		addrs, err := netlink.AddrList(link, family(pn.IP))
		if err != nil {
			return err
		}
		found := false
		for _, a := range addrs {
			if a.IP.Equal(pn.IP.AsSlice()) {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("interface %s lacks address %s", pn.IfName, pn.IP)
		}
		routes, err := netlink.RouteList(link, family(pn.IP))
		if err != nil {
			return err
		}
		hasDefault, hasGw := false, false
		for _, r := range routes {
			if (r.Dst == nil || r.Dst.IP.IsUnspecified()) && r.Gw.Equal(pn.Gateway.AsSlice()) {
				hasDefault = true
			}
			if r.Dst != nil && r.Dst.String() == hostPrefix(pn.Gateway).String() {
				hasGw = true
			}
		}
		if !hasDefault || !hasGw {
			return fmt.Errorf("interface %s lacks its routes (default via %s: %v, %s link route: %v)", pn.IfName, pn.Gateway, hasDefault, pn.Gateway, hasGw)
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
	routes, err := netlink.RouteListFiltered(family(pn.IP), &netlink.Route{Dst: hostPrefix(pn.IP)}, netlink.RT_FILTER_DST)
	if err != nil {
		return err
	}
	for _, r := range routes {
		if r.LinkIndex == link.Attrs().Index {
			return nil
		}
	}
	return fmt.Errorf("host route %s dev %s is missing", pn.IP, pn.HostVeth)
}
