package staticipnode

import (
	"fmt"
	"math"
	"math/big"
	"net/netip"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// ipRange is an IPRange parsed once, when the informer delivers it.
type ipRange struct {
	name string
	node string
	cidr string
	// prefix is the parsed cidr; invalid when the spec could not be parsed (err says why).
	prefix netip.Prefix
	// first and last bound the addresses pods may get (rangeStart/rangeEnd, never the IPv4
	// network or broadcast address).
	first, last netip.Addr
	// capacity is how many addresses pods may get: last-first+1 minus gateway and excluded
	// addresses inside [first, last], saturated at MaxInt64 (IPv6 /64s are huge).
	capacity int64
	err      error
}

// parseIPRange computes the usable addresses of an IPRange spec the way the node-local IPAM
// hands them out: inside cidr, within [rangeStart, rangeEnd] (default: the first and last
// host address), never the IPv4 network/broadcast address (prefixes up to /30) nor the IPv6
// subnet-router anycast address (prefixes up to /126), never the gateway nor an excluded IP.
func parseIPRange(r *jkev1.IPRange) *ipRange {
	out := &ipRange{name: r.Name, node: r.Spec.Node, cidr: r.Spec.CIDR}
	prefix, err := netip.ParsePrefix(r.Spec.CIDR)
	if err != nil {
		out.err = fmt.Errorf("IPRange %s: invalid cidr %q: %v", r.Name, r.Spec.CIDR, err)
		return out
	}
	prefix = prefix.Masked()
	out.prefix = prefix
	bits := prefix.Addr().BitLen()
	first := prefix.Addr()
	last := lastAddr(prefix)
	switch {
	case bits == 32 && prefix.Bits() <= 30:
		first, last = first.Next(), last.Prev()
	case bits == 128 && prefix.Bits() <= 126:
		first = first.Next()
	}
	if s := r.Spec.RangeStart; s != "" {
		a, err := netip.ParseAddr(s)
		if err != nil || !prefix.Contains(a) {
			out.err = fmt.Errorf("IPRange %s: rangeStart %q is not an address inside %s", r.Name, s, prefix)
			return out
		}
		if a.Compare(first) > 0 {
			first = a
		}
	}
	if s := r.Spec.RangeEnd; s != "" {
		a, err := netip.ParseAddr(s)
		if err != nil || !prefix.Contains(a) {
			out.err = fmt.Errorf("IPRange %s: rangeEnd %q is not an address inside %s", r.Name, s, prefix)
			return out
		}
		if a.Compare(last) < 0 {
			last = a
		}
	}
	out.first, out.last = first, last
	if first.Compare(last) > 0 {
		return out // empty range: capacity 0
	}
	count := new(big.Int).Sub(new(big.Int).SetBytes(last.AsSlice()), new(big.Int).SetBytes(first.AsSlice()))
	count.Add(count, big.NewInt(1))
	// Gateway and excluded addresses, counted once each, only when inside [first, last].
	skipped := map[netip.Addr]struct{}{}
	for _, s := range append([]string{r.Spec.Gateway}, r.Spec.ExcludeIPs...) {
		if s == "" {
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue // the CRD validates these; an unparsable one removes nothing
		}
		if a.Compare(first) >= 0 && a.Compare(last) <= 0 {
			skipped[a] = struct{}{}
		}
	}
	count.Sub(count, big.NewInt(int64(len(skipped))))
	if count.IsInt64() {
		out.capacity = count.Int64()
	} else {
		out.capacity = math.MaxInt64
	}
	return out
}

// contains reports whether ip lies inside the range's cidr (not only its usable part: an
// annotated IP outside [rangeStart, rangeEnd] still belongs to the node owning the cidr).
func (r *ipRange) contains(ip netip.Addr) bool {
	return r.err == nil && r.prefix.Contains(ip)
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - uint(i%8))
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
