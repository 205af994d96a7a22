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

// Choice is the IP a pod must get and what decided it.
type Choice struct {
	IP     netip.Addr
	Source Source
	// Overrode is the annotated IP the record won over (a stale annotation); zero when the
	// annotation agrees, is absent, or was not looked at.
	Overrode netip.Addr
}

// BadAnnotationError: the annotation decides and is not an IP address.
type BadAnnotationError struct{ Value string }

func (e *BadAnnotationError) Error() string {
	return fmt.Sprintf("annotation %s=%q is not an IP address", AnnotationIPAddress, e.Value)
}

// Choose returns the IP a pod must get. record is the IP its own StaticIP records ("" when it
// has none or the record names no IP yet); annotation is the value of its
// AnnotationIPAddress ("" when unset). Addresses are trimmed and IPv4-mapped IPv6 addresses
// unmapped. A malformed annotation is an error only when it decides (no record IP).
func Choose(record, annotation string) (Choice, error) {
	record, annotation = strings.TrimSpace(record), strings.TrimSpace(annotation)
	if record != "" {
		ip, err := netip.ParseAddr(record)
		if err != nil {
			return Choice{}, fmt.Errorf("the pod's StaticIP records %q, which is not an IP address", record)
		}
		c := Choice{IP: ip.Unmap(), Source: StaticIP}
		if a, err := netip.ParseAddr(annotation); err == nil && a.Unmap() != c.IP {
			c.Overrode = a.Unmap()
		}
		return c, nil
	}
	if annotation == "" {
		return Choice{}, nil
	}
	ip, err := netip.ParseAddr(annotation)
	if err != nil {
		return Choice{}, &BadAnnotationError{Value: annotation}
	}
	return Choice{IP: ip.Unmap(), Source: Annotation}, nil
}
