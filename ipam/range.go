package ipam

import (
	"math"
	"net/netip"
	"slices"

	"github.com/staticip/staticip/apis/iprangeaddr"
)

// addrs is r's address fields for package iprangeaddr, which owns the rule of which addresses
// of a range pods may get (the scheduler counts with the same rule).
func (r Range) addrs() iprangeaddr.Range {
	return iprangeaddr.Range{Subnet: r.Subnet, RangeStart: r.RangeStart, RangeEnd: r.RangeEnd, Gateway: r.Gateway, Exclude: r.Exclude}
}

// ParseRange parses a range as written in a conflist or an IPRange spec and validates it
// (Canonical). Errors wrap ErrInvalid and name the offending field.
func ParseRange(f iprangeaddr.Fields) (Range, error) {
	c, err := iprangeaddr.Parse(f)
	if err != nil {
		return Range{}, invalidf("%v", err)
	}
	return rangeOf(c), nil
}

func rangeOf(c iprangeaddr.Range) Range {
	return Range{Subnet: c.Subnet, RangeStart: c.RangeStart, RangeEnd: c.RangeEnd, Gateway: c.Gateway, Exclude: c.Exclude}
}

// Canonical validates r and fills in the defaults (iprangeaddr.Range.Canonical): RangeStart/
// RangeEnd become the first/last host addresses of Subnet when unset, and Exclude is sorted
// and de-duplicated.
func (r Range) Canonical() (Range, error) {
	c, err := r.addrs().Canonical()
	if err != nil {
		return r, invalidf("%v", err)
	}
	out := rangeOf(c)
	out.Pool, out.Restricted = r.Pool, r.Restricted
	return out, nil
}

// Contains reports whether ip is inside the allocatable bounds (not checking gateway/exclude).
func (r Range) Contains(ip netip.Addr) bool { return r.addrs().InBounds(ip) }

// allocatable reports whether ip may ever be given to a pod from this (canonical) range.
func (r Range) allocatable(ip netip.Addr) bool { return r.addrs().Usable(ip) }

// Size is the number of allocatable addresses (range minus gateway and exclusions), saturated
// at MaxInt32 (IPRange status counts are int32).
func (r Range) Size() int {
	return int(min(r.addrs().Size(), math.MaxInt32))
}

func (r Range) equal(o Range) bool {
	return r.Subnet == o.Subnet && r.RangeStart == o.RangeStart && r.RangeEnd == o.RangeEnd &&
		r.Gateway == o.Gateway && slices.Equal(r.Exclude, o.Exclude) && r.Draining == o.Draining &&
		r.Pool == o.Pool && r.Restricted == o.Restricted
}

func netipHost(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }
