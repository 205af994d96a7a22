package agent

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
)

// syncRoutes makes the routes with RouteProtocol exactly "range CIDR via the address of the
// node it is routed to" (planRoutes: the node that holds addresses of it; addresses: its
// addresses by family from status.holders, holderAddresses), in the agent's network namespace,
// and says which ranges are routed now (programmed, by IPRange name). A range goes via its
// node's address of the range's own family — Linux routes IPv4 via an IPv6 next hop (RFC 5549)
// but not IPv6 via an IPv4 one ("IPv6 does not support RTA_VIA attribute") — so a dual-stack
// node's IPv6 range goes via its IPv6 address. A range whose node's address of that family is not
// known (assigned to a node that has not claimed it, to a node whose agent predates
// status.holders before the controller-manager labelled it, or to a node without an InternalIP
// of the family, which reports that on the range) is listed in unroutable and keeps the route it
// has, if any: that is no failure of this agent, whose health must not depend on it. A route
// that cannot be programmed is an error of this pass and leaves only its own range unrouted.
func (a *Agent) syncRoutes(routes []rangeRoute, addresses map[string]familyAddrs) (n int, unroutable []string, programmed map[string]bool, err error) {
	want := map[string]*netlink.Route{}
	names := map[string][]string{} // dst -> IPRange names
	programmed = map[string]bool{}
	keep := map[string]bool{} // dst of unroutable ranges: an existing route stays
	var errs []error
	for _, rt := range routes {
		_, dst, err := net.ParseCIDR(rt.r.Spec.CIDR)
		if err != nil {
			continue
		}
		fam, _ := rangeFamily(rt.r) // the CIDR parsed above
		addrs := addresses[rt.via]
		gw := net.ParseIP(addrs[fam])
		if gw == nil {
			why := fmt.Sprintf("%s (node %s)", rt.r.Name, rt.via)
			if other := addrs[1-fam]; other != "" {
				// Said, not skipped in silence: the node is known by its other family's address
				// only, which cannot carry this range's traffic.
				why = fmt.Sprintf("%s (node %s: it claims no %s address, only %s, which is not of the range's IP family)", rt.r.Name, rt.via, familyName(fam), other)
			}
			unroutable = append(unroutable, why)
			keep[dst.String()] = true
			continue
		}
		want[dst.String()] = &netlink.Route{Dst: dst, Gw: gw, Protocol: RouteProtocol}
		names[dst.String()] = append(names[dst.String()], rt.r.Name)
	}
	done := func(dst string) {
		for _, name := range names[dst] {
			programmed[name] = true
		}
	}
	existing, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return 0, unroutable, programmed, errors.Join(append(errs, err)...)
	}
	for _, r := range existing {
		if w, ok := want[r.Dst.String()]; ok && w.Gw.Equal(r.Gw) {
			delete(want, r.Dst.String())
			done(r.Dst.String())
			continue
		}
		if _, ok := want[r.Dst.String()]; !ok && keep[r.Dst.String()] {
			continue
		}
		if err := netlink.RouteDel(&r); err != nil {
			errs = append(errs, fmt.Errorf("delete route %s: %w", r.Dst, err))
		}
	}
	for dst, r := range want {
		if err := netlink.RouteReplace(r); err != nil {
			errs = append(errs, fmt.Errorf("route %s via %s: %w", r.Dst, r.Gw, err))
			continue
		}
		done(dst)
	}
	all, _ := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
	return len(all), unroutable, programmed, errors.Join(errs...)
}
