package agent

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// syncRoutes makes the routes with RouteProtocol exactly "other node's CIDR via its
// InternalIP", in the agent's network namespace. An IPRange whose node has no known InternalIP
// (created before its node joined, say) gets no route and is listed in unroutable: that is no
// failure of this agent, whose health must not depend on it.
func (a *Agent) syncRoutes(others []*jkev1.IPRange, nodeIP func(string) net.IP) (routes int, unroutable []string, err error) {
	want := map[string]*netlink.Route{}
	var errs []error
	for _, r := range others {
		if r.Spec.Node == "" {
			continue
		}
		gw := nodeIP(r.Spec.Node)
		if gw == nil {
			unroutable = append(unroutable, fmt.Sprintf("%s (node %s)", r.Name, r.Spec.Node))
			continue
		}
		_, dst, err := net.ParseCIDR(r.Spec.CIDR)
		if err != nil {
			continue
		}
		if (dst.IP.To4() == nil) != (gw.To4() == nil) {
			continue
		}
		want[dst.String()] = &netlink.Route{Dst: dst, Gw: gw, Protocol: RouteProtocol}
	}
	existing, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return 0, unroutable, errors.Join(append(errs, err)...)
	}
	for _, r := range existing {
		if w, ok := want[r.Dst.String()]; ok && w.Gw.Equal(r.Gw) {
			delete(want, r.Dst.String())
			continue
		}
		if err := netlink.RouteDel(&r); err != nil {
			errs = append(errs, fmt.Errorf("delete route %s: %w", r.Dst, err))
		}
	}
	for _, r := range want {
		if err := netlink.RouteReplace(r); err != nil {
			errs = append(errs, fmt.Errorf("route %s via %s: %w", r.Dst, r.Gw, err))
		}
	}
	all, _ := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
	return len(all), unroutable, errors.Join(errs...)
}
