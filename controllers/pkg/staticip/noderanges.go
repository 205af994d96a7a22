package staticip

import (
	"fmt"
	"net/netip"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// ConflictIPOutsideNodeRanges: a pod reports an IP that lies in no IPRange of its node. The
// StaticIP controller trusts the IP the node reports only inside the node's own ranges: a
// compromised node could otherwise pin addresses of other nodes' ranges (or of no range) to any
// enabled workload's records.
const ConflictIPOutsideNodeRanges = "IPOutsideNodeRanges"

// OutsideNodeRanges says why ip may not be recorded for a pod on node ("" when it may): it
// must lie in an IPRange whose spec.node is the node — pool blocks, NodePodCIDR ranges and
// hand-written ranges alike. A range moved by node failover names its target before the
// target's pods start (the move is written, then the pods follow), so a moved pod passes.
func OutsideNodeRanges(ranges []*jkev1.IPRange, ip, node string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return fmt.Sprintf("pod IP %q does not parse", ip)
	}
	a = a.Unmap()
	var owner *jkev1.IPRange
	for _, r := range ranges {
		p, err := netip.ParsePrefix(r.Spec.CIDR)
		if err != nil || !p.Contains(a) || r.DeletionTimestamp != nil {
			continue
		}
		if r.Spec.Node == node {
			return ""
		}
		if owner == nil || r.Name < owner.Name {
			owner = r
		}
	}
	if owner == nil {
		return fmt.Sprintf("IP %s reported on node %s lies in no IPRange (a node without staticip's ranges?): not recorded", ip, node)
	}
	holder := owner.Spec.Node
	if holder == "" {
		holder = "no node (unassigned)"
	}
	return fmt.Sprintf("IP %s reported on node %s lies in IPRange %s (%s), which belongs to %s, not to %s: not recorded", ip, node, owner.Name, owner.Spec.CIDR, holder, node)
}
