package agent

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
)

// syncRoutes makes the routes with RouteProtocol exactly "range CIDR via the address of the
// node it is routed to" (planRoutes: the node that holds addresses of it; nodeIP: its address
// from status.holders), in the agent's network namespace, and says which ranges are routed now
// (programmed, by IPRange name). A range whose node's address is not known (assigned to a node
// that has not claimed it, or to a node whose agent predates status.holders before the
// controller-manager labelled it) is listed in unroutable and keeps the route it has, if any:
// that is no failure of this agent, whose health must not depend on it. A route that cannot be
// programmed is an error of this pass and leaves only its own range unrouted.
func (a *Agent) syncRoutes(routes []rangeRoute, nodeIP func(string) net.IP) (n int, unroutable []string, programmed map[string]bool, err error) {
	want := map[string]*netlink.Route{}
	names := map[string][]string{} // dst -> IPRange names
	programmed = map[string]bool{}
	keep := map[string]bool{} // dst of unroutable ranges: an existing route stays
	var errs []error
	for _, rt := range routes {
		gw := nodeIP(rt.via)
		if gw == nil {
			unroutable = append(unroutable, fmt.Sprintf("%s (node %s)", rt.r.Name, rt.via))
			if _, dst, err := net.ParseCIDR(rt.r.Spec.CIDR); err == nil {
				keep[dst.String()] = true
			}
			continue
		}
		_, dst, err := net.ParseCIDR(rt.r.Spec.CIDR)
		if err != nil {
			continue
		}
		if (dst.IP.To4() == nil) != (gw.To4() == nil) {
			// A dual-stack node's IPv6 block, its holder known by an IPv4 address only (a claim
			// carries one address). Linux routes IPv4 via an IPv6 next hop (RFC 5549) but not
			// IPv6 via an IPv4 one ("IPv6 does not support RTA_VIA attribute", and "IPv6 routes
			// can not use an IPv4 nexthop" for nexthop objects): it needs the holder's IPv6
			// address, which status.holders does not carry yet. Said, not skipped in silence.
			unroutable = append(unroutable, fmt.Sprintf("%s (node %s: its address %s is not of the range's IP family)", rt.r.Name, rt.via, gw))
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
