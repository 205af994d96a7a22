// Package podip is the one answer to "which IP must this pod get", for the scheduler (which
// node to pin the pod to) and the CNI (which address to hand out). Both call Choose, so when
// the pod's StaticIP record and its ip-address annotation disagree they resolve it the same way.
//
// The order: the pod's own StaticIP record first, then the annotation. The record is the truth
// the annotation is copied from: the controller copies the StaticIP's IP into the annotation of
// the pods it creates, admission lets only the controller-manager (and the CNI, adding it to a
// pod that has none) change the annotation of an existing pod, and the record's spec.ip cannot
// change once set. So an annotation can be stale — the StaticIP was deleted and re-created with
// another IP while the pod, or a template copy of it, kept the old one — while the record cannot
// be stale about itself. Preferring the annotation would let a stale copy take an IP the record
// no longer names (and may already have given to another pod) and leave the record's own IP
// reserved and unused; preferring the record gives the pod what its StaticIP says, on the node
// that holds it. The annotation decides only for a pod with no record of its own, or one whose
// record has no IP yet (a user's request in an opted-in namespace, or the first start).
//
// "The pod's own record" is the caller's to find: the scheduler's cache lookup (the StaticIP of
// the pod's name that belongs to its workload, apis/workloadref, and is active); on a node, the
// reservation the agent synced from that record into the node's IPAM for the pod's name (not
// when it is kept for another workload).
//
// The package has no dependencies so the CNI binary can use it without the API machinery.
package podip

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// AnnotationIPAddress is the pod annotation carrying the IP the pod must get. It is one constant
// for every component (the scheduler no longer makes it configurable): the admission policies
// (manifests/admission, manifests/cni) guard this very key.
const AnnotationIPAddress = "staticip.jke.jdcloud.com/ip-address"

// Source says what decided a pod's IP.
type Source string

const (
	// None: neither a record nor the annotation names an IP.
	None Source = ""
	// StaticIP: the pod's own StaticIP record.
	StaticIP Source = "StaticIP"
	// Annotation: the pod's ip-address annotation.
	Annotation Source = "annotation"
)

// Addresses are a pod's fixed addresses: Primary, and on a dual-stack pod Secondary, of the
// other IP family (Kubernetes' podIPs: the first is the pod's podIP). Written as the annotation
// and a StaticIP's spec.ips are: "10.0.0.5" or "10.0.0.5,fd00::5".
type Addresses struct {
	Primary, Secondary netip.Addr
}

// IsValid: at least one address.
func (a Addresses) IsValid() bool { return a.Primary.IsValid() }

// List is the addresses in order (none, one or two).
func (a Addresses) List() []netip.Addr {
	var l []netip.Addr
	for _, ip := range []netip.Addr{a.Primary, a.Secondary} {
		if ip.IsValid() {
			l = append(l, ip)
		}
	}
	return l
}

// Of returns the address of one family (4 or 6), zero when the pod has none of it.
func (a Addresses) Of(family int) netip.Addr {
	for _, ip := range a.List() {
		if Family(ip) == family {
			return ip
		}
	}
	return netip.Addr{}
}

// String is the annotation's form: "10.0.0.5,fd00::5"; "" for none.
func (a Addresses) String() string {
	l := a.List()
	s := make([]string, len(l))
	for i, ip := range l {
		s[i] = ip.String()
	}
	return strings.Join(s, ",")
}

// Family is 4 or 6 (an IPv4-mapped IPv6 address is IPv4), 0 for the zero Addr.
func Family(ip netip.Addr) int {
	switch {
	case !ip.IsValid():
		return 0
	case ip.Unmap().Is4():
		return 4
	default:
		return 6
	}
}

// AddressesError says why a value is not one address or two of different families.
type AddressesError struct {
	Value string
	// Reason completes "<value> ...": "is not an IP address", "holds two IPv4 addresses; ...".
	Reason string
}

func (e *AddressesError) Error() string { return fmt.Sprintf("%q %s", e.Value, e.Reason) }

// ParseAddresses reads the annotation's (and spec.ips's joined) form: one IP address, or two
// of different IP families separated by a comma, in the pod's order of preference. Spaces around
// an address are ignored and IPv4-mapped IPv6 addresses unmapped; "" is no address. Two of one
// family, three or more, an empty element or a malformed address are an AddressesError.
func ParseAddresses(value string) (Addresses, error) {
	value = strings.TrimSpace(value)
	if value == "" {
		return Addresses{}, nil
	}
	parts := strings.Split(value, ",")
	if len(parts) > 2 {
		return Addresses{}, &AddressesError{Value: value, Reason: fmt.Sprintf("holds %d addresses; it takes one address per IP family, at most two (e.g. 10.0.0.5,fd00::5)", len(parts))}
	}
	var ips [2]netip.Addr
	for i, part := range parts {
		part = strings.TrimSpace(part)
		if part == "" {
			return Addresses{}, &AddressesError{Value: value, Reason: "has an empty address; it takes one address per IP family separated by a comma (e.g. 10.0.0.5,fd00::5)"}
		}
		ip, err := netip.ParseAddr(part)
		if err == nil && ip.Zone() != "" {
			err = fmt.Errorf("a zone is no pod address")
		}
		if err != nil {
			if len(parts) == 1 {
				return Addresses{}, &AddressesError{Value: value, Reason: "is not an IP address"}
			}
			return Addresses{}, &AddressesError{Value: value, Reason: fmt.Sprintf("holds %q, which is not an IP address", part)}
		}
		ips[i] = ip.Unmap()
	}
	if ips[1].IsValid() && Family(ips[0]) == Family(ips[1]) {
		return Addresses{}, &AddressesError{Value: value, Reason: fmt.Sprintf("holds two IPv%d addresses; it takes one address per IP family (e.g. 10.0.0.5,fd00::5)", Family(ips[0]))}
	}
	return Addresses{Primary: ips[0], Secondary: ips[1]}, nil
}

// Choice is the addresses a pod must get and what decided them.
type Choice struct {
	// IP is the pod's primary address, Secondary its address of the other family (zero on a
	// single-stack pod or when the other family is left to the allocator).
	IP, Secondary netip.Addr
	Source        Source
	// Overrode is the annotated addresses the record won over (a stale annotation); zero when
	// the annotation agrees, is absent, or was not looked at.
	Overrode Addresses
}

// Addresses returns the chosen addresses.
func (c Choice) Addresses() Addresses { return Addresses{Primary: c.IP, Secondary: c.Secondary} }

// BadAnnotationError: the annotation decides and is not one address, or two of different
// families.
type BadAnnotationError struct {
	Value string
	// Reason completes the message; "" means "is not an IP address".
	Reason string
}

func (e *BadAnnotationError) Error() string {
	reason := e.Reason
	if reason == "" {
		reason = "is not an IP address"
	}
	return fmt.Sprintf("annotation %s=%q %s", AnnotationIPAddress, e.Value, reason)
}

// Choose returns the addresses a pod must get. record is what its own StaticIP records, in the
// annotation's form (its spec.ips joined with a comma, or spec.ip of a single-stack record; ""
// when it has none or the record names no IP yet); annotation is the value of its
// AnnotationIPAddress ("" when unset). Both are read with ParseAddresses. A malformed annotation
// is an error only when it decides (no record IP).
func Choose(record, annotation string) (Choice, error) {
	if strings.TrimSpace(record) != "" {
		rec, err := ParseAddresses(record)
		if err != nil {
			var bad *AddressesError
			errors.As(err, &bad)
			return Choice{}, fmt.Errorf("the pod's StaticIP records %q, which %s", bad.Value, bad.Reason)
		}
		c := Choice{IP: rec.Primary, Secondary: rec.Secondary, Source: StaticIP}
		a, err := ParseAddresses(annotation)
		if err != nil || !a.IsValid() {
			return c, nil
		}
		// Per family the record's address wins. An annotation that agrees on every family it
		// names (a subset of a dual-stack record included) is no stale copy; one that agrees on
		// the record's only family and adds the other (a single-stack record of a pod now given
		// both families) decides that family, which the record then gains (spec.ips).
		for _, ip := range a.List() {
			switch mine := rec.Of(Family(ip)); {
			case mine == ip:
			case !mine.IsValid() && a.Primary == rec.Primary:
				c.Secondary = ip
			default:
				c.Overrode = a
			}
		}
		if c.Overrode.IsValid() {
			c.Secondary = rec.Secondary
		}
		return c, nil
	}
	a, err := ParseAddresses(annotation)
	if err != nil {
		var bad *AddressesError
		errors.As(err, &bad)
		return Choice{}, &BadAnnotationError{Value: bad.Value, Reason: bad.Reason}
	}
	if !a.IsValid() {
		return Choice{}, nil
	}
	return Choice{IP: a.Primary, Secondary: a.Secondary, Source: Annotation}, nil
}
