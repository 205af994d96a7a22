package ipam

import (
	"math/big"
	"net/netip"
	"slices"
)

// Canonical validates r and fills in the defaults: RangeStart/RangeEnd become the first/last
// host addresses of Subnet when unset, and Exclude is sorted and de-duplicated.
func (r Range) Canonical() (Range, error) {
	r.Draining = false // the store's to decide
	if !r.Subnet.IsValid() {
		return r, invalidf("range has no valid subnet")
	}
	if r.Subnet.Masked() != r.Subnet {
		return r, invalidf("subnet %s has host bits set (did you mean %s?)", r.Subnet, r.Subnet.Masked())
	}
	first, last := hostBounds(r.Subnet)
	if !first.IsValid() {
		return r, invalidf("subnet %s has no host addresses", r.Subnet)
	}
	if !r.RangeStart.IsValid() {
		r.RangeStart = first
	}
	if !r.RangeEnd.IsValid() {
		r.RangeEnd = last
	}
	for name, a := range map[string]netip.Addr{"rangeStart": r.RangeStart, "rangeEnd": r.RangeEnd} {
		if !r.Subnet.Contains(a) {
			return r, invalidf("%s %s is outside subnet %s", name, a, r.Subnet)
		}
	}
	if r.RangeEnd.Less(r.RangeStart) {
		return r, invalidf("rangeStart %s is after rangeEnd %s in %s", r.RangeStart, r.RangeEnd, r.Subnet)
	}
	if r.Gateway.IsValid() && !r.Subnet.Contains(r.Gateway) {
		return r, invalidf("gateway %s is outside subnet %s", r.Gateway, r.Subnet)
	}
	ex := slices.Clone(r.Exclude)
	for _, e := range ex {
		if !r.Subnet.Contains(e) {
			return r, invalidf("excluded IP %s is outside subnet %s", e, r.Subnet)
		}
	}
	slices.SortFunc(ex, func(a, b netip.Addr) int { return a.Compare(b) })
	r.Exclude = slices.Compact(ex)
	if len(r.Exclude) == 0 {
		r.Exclude = nil
	}
	return r, nil
}

// hostBounds returns the first and last addresses pods may use in p: for IPv4 the network and
// broadcast addresses are skipped (except in /31 and /32), for IPv6 only the subnet-router
// anycast address (the first one).
func hostBounds(p netip.Prefix) (netip.Addr, netip.Addr) {
	first := p.Masked().Addr()
	last := lastAddr(p)
	bits := first.BitLen()
	switch {
	case p.Bits() == bits:
		return first, last
	case first.Is4() && p.Bits() == bits-1:
		return first, last
	case first.Is4():
		return first.Next(), last.Prev()
	default:
		return first.Next(), last
	}
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	ones := p.Bits()
	for i := range b {
		for bit := 0; bit < 8; bit++ {
			if i*8+bit >= ones {
				b[i] |= 0x80 >> bit
			}
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Contains reports whether ip is inside the allocatable bounds (not checking gateway/exclude).
func (r Range) Contains(ip netip.Addr) bool {
	return r.Subnet.Contains(ip) && !ip.Less(r.RangeStart) && !r.RangeEnd.Less(ip)
}

// allocatable reports whether ip may ever be given to a pod from this (canonical) range.
func (r Range) allocatable(ip netip.Addr) bool {
	if !r.Contains(ip) {
		return false
	}
	if r.Gateway.IsValid() && ip == r.Gateway {
		return false
	}
	_, found := slices.BinarySearchFunc(r.Exclude, ip, func(a, b netip.Addr) int { return a.Compare(b) })
	return !found
}

// Size is the number of allocatable addresses (range minus gateway and exclusions).
func (r Range) Size() int {
	n := new(big.Int).Sub(addrInt(r.RangeEnd), addrInt(r.RangeStart))
	n.Add(n, big.NewInt(1))
	if r.Gateway.IsValid() && r.Contains(r.Gateway) {
		n.Sub(n, big.NewInt(1))
	}
	for _, e := range r.Exclude {
		if r.Contains(e) && e != r.Gateway {
			n.Sub(n, big.NewInt(1))
		}
	}
	if !n.IsInt64() || n.Int64() > 1<<31-1 {
		return 1<<31 - 1
	}
	return int(n.Int64())
}

func addrInt(a netip.Addr) *big.Int { return new(big.Int).SetBytes(a.AsSlice()) }

func (r Range) equal(o Range) bool {
	return r.Subnet == o.Subnet && r.RangeStart == o.RangeStart && r.RangeEnd == o.RangeEnd &&
		r.Gateway == o.Gateway && slices.Equal(r.Exclude, o.Exclude) && r.Draining == o.Draining
}

func netipHost(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }
