package staticipnode

import (
	"fmt"
	"math"
	"net/netip"

	"github.com/staticip/staticip/apis/iprangeaddr"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// ipRange is an IPRange parsed once, when the informer delivers it.
type ipRange struct {
	name string
	node string
	cidr string
	// prefix is the parsed cidr; invalid when the spec does not describe a range (err says
	// why). Such a range is refused by every node's agent, so it holds no address and no IP.
	prefix netip.Prefix
	// capacity is how many addresses pods may get from the range: iprangeaddr's rule, the one
	// the node-local IPAM allocates by, saturated at MaxInt64 (IPv6 /64s are huge).
	capacity int64
	err      error
}

// parseIPRange computes the usable addresses of an IPRange spec with the rule the node-local
// IPAM hands them out by (package iprangeaddr).
func parseIPRange(r *jkev1.IPRange) *ipRange {
	out := &ipRange{name: r.Name, node: r.Spec.Node, cidr: r.Spec.CIDR}
	parsed, err := iprangeaddr.Parse(iprangeaddr.Fields{CIDR: r.Spec.CIDR, RangeStart: r.Spec.RangeStart, RangeEnd: r.Spec.RangeEnd,
		Gateway: r.Spec.Gateway, Exclude: r.Spec.ExcludeIPs})
	if err != nil {
		out.err = fmt.Errorf("IPRange %s: %v", r.Name, err)
		return out
	}
	out.prefix = parsed.Subnet
	out.capacity = parsed.Size()
	return out
}

// contains reports whether ip lies inside the range's cidr (not only its usable part: an
// annotated IP outside [rangeStart, rangeEnd] still belongs to the node owning the cidr).
func (r *ipRange) contains(ip netip.Addr) bool {
	return r.err == nil && r.prefix.Contains(ip)
}

func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
