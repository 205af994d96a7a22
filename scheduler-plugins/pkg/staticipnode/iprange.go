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
	// restricted: a namespace pool's block; only that pool's pods get its addresses.
	restricted bool
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

// podCapacity is how many pods a node's ranges give addresses to. The plugin gives a pod one
// address of every IP family the node's ranges give it (cni/README.md, "Dual-stack"), so each
// family of the node's unrestricted ranges must have an address for every pod: the capacity is
// the smallest family's, not the sum — a dual-stack node with an IPv4 /24 and an IPv6 /120 takes
// 254 pods, not 510. A namespace pool's block (restricted) serves only its pool's pods (which
// the pool check judges) and bounds nobody else; a node with restricted blocks only counts them
// all, as before. Invalid ranges give nothing.
func podCapacity(ranges []*ipRange) int64 {
	var all int64
	var family [2]int64
	var has [2]bool
	for _, r := range ranges {
		if r.err != nil {
			continue
		}
		all = addSat(all, r.capacity)
		if r.restricted {
			continue
		}
		i := 0
		if r.prefix.Addr().Is6() {
			i = 1
		}
		family[i], has[i] = addSat(family[i], r.capacity), true
	}
	switch {
	case has[0] && has[1]:
		return min(family[0], family[1])
	case has[0]:
		return family[0]
	case has[1]:
		return family[1]
	}
	return all
}

func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
