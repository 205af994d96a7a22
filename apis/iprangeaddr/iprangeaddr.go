// Package iprangeaddr is the one rule for which addresses of an IP range pods may get. The
// node-local IPAM (what the CNI ADD hands out), the scheduler's per-node IP capacity, the IP
// pool allocator (whether a block is fully excluded), the node agent and the CNI's conflist
// parsing all use it, so the scheduler counts exactly what ADD can give.
//
// The rule:
//   - The subnet is network-aligned (no host bits set).
//   - Default bounds are the subnet's host addresses: IPv4 skips the network and broadcast
//     addresses, IPv6 the subnet-router anycast address (the first one, RFC 4291 2.6.1) — except
//     where a prefix has no such addresses: a /31 (RFC 3021) and an IPv6 /127 (RFC 6164) give
//     both, a /32 and a /128 their one address.
//   - An explicit rangeStart/rangeEnd is taken as written (as CNI host-local does): it must lie
//     inside the subnet and rangeStart must not come after rangeEnd, but it may name a network,
//     broadcast or anycast address — the operator's word for it. Clamping it instead would
//     strand a pod already holding such an address.
//   - The gateway and excluded addresses lie inside the subnet; each is never given to a pod
//     and is subtracted from the count once, when it lies within the bounds.
//
// The package has no dependencies (the scheduler and the CNI binary import it without bbolt or
// the API machinery).
package iprangeaddr

import (
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"slices"
)

// Range is an IP range's address fields. After Canonical (or Parse) RangeStart and RangeEnd
// are set, and Exclude is sorted, de-duplicated and nil when empty.
type Range struct {
	// Subnet is the network, e.g. 10.10.0.0/24.
	Subnet netip.Prefix
	// RangeStart and RangeEnd bound the allocatable addresses (inclusive); zero means the
	// subnet's first/last host address (HostBounds).
	RangeStart, RangeEnd netip.Addr
	// Gateway is never given to a pod; zero means none.
	Gateway netip.Addr
	// Exclude are addresses never given to a pod.
	Exclude []netip.Addr
}

// Fields are a range's fields as written in an IPRange spec or a conflist: strings, "" for
// unset.
type Fields struct {
	CIDR, RangeStart, RangeEnd, Gateway string
	Exclude                             []string
}

// Parse parses and validates f (Canonical). Errors name the offending field.
func Parse(f Fields) (Range, error) {
	var r Range
	if f.CIDR == "" {
		return r, fmt.Errorf("subnet is required")
	}
	var err error
	if r.Subnet, err = netip.ParsePrefix(f.CIDR); err != nil {
		return r, fmt.Errorf("subnet %q is not a CIDR", f.CIDR)
	}
	for _, a := range []struct {
		name, in string
		out      *netip.Addr
	}{{"rangeStart", f.RangeStart, &r.RangeStart}, {"rangeEnd", f.RangeEnd, &r.RangeEnd}, {"gateway", f.Gateway, &r.Gateway}} {
		if a.in == "" {
			continue
		}
		if *a.out, err = netip.ParseAddr(a.in); err != nil {
			return r, fmt.Errorf("%s %q is not an IP address", a.name, a.in)
		}
	}
	for _, e := range f.Exclude {
		a, err := netip.ParseAddr(e)
		if err != nil {
			return r, fmt.Errorf("exclude %q is not an IP address", e)
		}
		r.Exclude = append(r.Exclude, a)
	}
	return r.Canonical()
}

// Canonical validates r and fills in the defaults: RangeStart/RangeEnd become the subnet's
// host bounds when unset, Exclude is sorted and de-duplicated. r itself is not modified.
func (r Range) Canonical() (Range, error) {
	if !r.Subnet.IsValid() {
		return r, fmt.Errorf("range has no valid subnet")
	}
	if r.Subnet.Masked() != r.Subnet {
		return r, fmt.Errorf("subnet %s has host bits set (did you mean %s?)", r.Subnet, r.Subnet.Masked())
	}
	first, last := HostBounds(r.Subnet)
	if !r.RangeStart.IsValid() {
		r.RangeStart = first
	}
	if !r.RangeEnd.IsValid() {
		r.RangeEnd = last
	}
	for _, a := range []struct {
		name string
		ip   netip.Addr
	}{{"rangeStart", r.RangeStart}, {"rangeEnd", r.RangeEnd}} {
		if !r.Subnet.Contains(a.ip) {
			return r, fmt.Errorf("%s %s is outside subnet %s", a.name, a.ip, r.Subnet)
		}
	}
	if r.RangeEnd.Less(r.RangeStart) {
		return r, fmt.Errorf("rangeStart %s is after rangeEnd %s in %s", r.RangeStart, r.RangeEnd, r.Subnet)
	}
	if r.Gateway.IsValid() && !r.Subnet.Contains(r.Gateway) {
		return r, fmt.Errorf("gateway %s is outside subnet %s", r.Gateway, r.Subnet)
	}
	ex := slices.Clone(r.Exclude)
	for _, e := range ex {
		if !r.Subnet.Contains(e) {
			return r, fmt.Errorf("excluded IP %s is outside subnet %s", e, r.Subnet)
		}
	}
	slices.SortFunc(ex, netip.Addr.Compare)
	r.Exclude = slices.Compact(ex)
	if len(r.Exclude) == 0 {
		r.Exclude = nil
	}
	return r, nil
}

// HostBounds are the first and last addresses of p pods may get when no rangeStart/rangeEnd
// narrows them (the package comment's rule). p must be valid.
func HostBounds(p netip.Prefix) (first, last netip.Addr) {
	p = p.Masked()
	first, last = p.Addr(), LastAddr(p)
	switch hostBits := first.BitLen() - p.Bits(); {
	case hostBits <= 1: // /32, /31, /128, /127: every address is a host's
		return first, last
	case first.Is4():
		return first.Next(), last.Prev()
	default:
		return first.Next(), last
	}
}

// LastAddr is the last address of p (the IPv4 broadcast address).
func LastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - uint(i%8))
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// InBounds reports whether ip lies in [RangeStart, RangeEnd] of the canonical range (the
// gateway and excluded addresses included).
func (r Range) InBounds(ip netip.Addr) bool {
	return r.Subnet.Contains(ip) && !ip.Less(r.RangeStart) && !r.RangeEnd.Less(ip)
}

// Usable reports whether ip may ever be given to a pod from the canonical range.
func (r Range) Usable(ip netip.Addr) bool {
	if !r.InBounds(ip) || (r.Gateway.IsValid() && ip == r.Gateway) {
		return false
	}
	_, excluded := slices.BinarySearchFunc(r.Exclude, ip, netip.Addr.Compare)
	return !excluded
}

// Size is the number of usable addresses of the canonical range, saturated at math.MaxInt64
// (an IPv6 /64 has more).
func (r Range) Size() int64 {
	n := new(big.Int).Sub(addrInt(r.RangeEnd), addrInt(r.RangeStart))
	n.Add(n, big.NewInt(1))
	if r.Gateway.IsValid() && r.InBounds(r.Gateway) {
		n.Sub(n, big.NewInt(1))
	}
	for _, e := range r.Exclude { // sorted and unique after Canonical
		if e != r.Gateway && r.InBounds(e) {
			n.Sub(n, big.NewInt(1))
		}
	}
	if !n.IsInt64() {
		return math.MaxInt64
	}
	return n.Int64()
}

func addrInt(a netip.Addr) *big.Int { return new(big.Int).SetBytes(a.AsSlice()) }
