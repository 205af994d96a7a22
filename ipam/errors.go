package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Sentinel errors. The typed errors below wrap them, so callers can use errors.Is for the class
// and errors.As for the details.
var (
	// ErrExhausted: no free address in any range.
	ErrExhausted = errors.New("no free IP address")
	// ErrOutOfRange: the requested IP is in none of this node's ranges.
	ErrOutOfRange = errors.New("IP address is outside every range of this node")
	// ErrInUse: the requested IP is allocated to, or reserved for, another pod.
	ErrInUse = errors.New("IP address is in use")
	// ErrNotAllocatable: the requested IP is the gateway, excluded, or the network/broadcast.
	ErrNotAllocatable = errors.New("IP address may not be given to a pod")
	// ErrRangeInUse: a range with live allocations cannot be removed.
	ErrRangeInUse = errors.New("range has live allocations")
	// ErrInvalid: malformed input (range, reservation set, request).
	ErrInvalid = errors.New("invalid input")
	// ErrLocked: another process holds the database longer than the open timeout.
	ErrLocked = errors.New("database is locked")
	// ErrCorrupt: the database file cannot be read as an ipam database.
	ErrCorrupt = errors.New("database is corrupt")
	// ErrAttachmentHasIP: a repeated ADD asked for a different IP than the one it already holds.
	ErrAttachmentHasIP = errors.New("attachment already holds a different IP")
	// ErrRecovering: the store is being rebuilt after corruption; nothing is allocated until
	// the allocations found on the host are imported.
	ErrRecovering = errors.New("database is being rebuilt")
	// ErrQuarantined: an explicitly requested IP was released moments ago (try again later).
	ErrQuarantined = errors.New("IP is quarantined")
)

// DrainingError: the IP lies in a range that moved away from this node and only drains.
// It wraps ErrOutOfRange: for new allocations the range is no longer this node's.
type DrainingError struct {
	IP     netip.Addr
	Subnet netip.Prefix
	// Reserved is set when the IP is the pod's reservation (not explicitly requested).
	Reserved bool
}

func (e *DrainingError) Error() string {
	what := "IP " + e.IP.String()
	if e.Reserved {
		what = "the IP reserved for this pod, " + e.IP.String() + ","
	}
	return fmt.Sprintf("%s is in range %s, which moved away from this node: it only drains (its running pods keep their IPs, nothing new is allocated from it); the pod must run on the node that owns the range now", what, e.Subnet)
}
func (e *DrainingError) Unwrap() error { return ErrOutOfRange }

// TakeoverError: the pod's IP is still held by an earlier attachment of the same pod whose
// sandbox still exists (e.g. a force-deleted pod whose containers still run).
type TakeoverError struct {
	IP       netip.Addr
	Pod      PodRef
	Previous Attachment
	// Link names what shows the earlier sandbox is alive (the caller's Alive check), if known.
	Link string
}

func (e *TakeoverError) Error() string {
	link := ""
	if e.Link != "" {
		link = ", host veth " + e.Link + " still exists"
	}
	return fmt.Sprintf("IP %s of pod %s is still attached to an earlier sandbox of the same pod (container %s, interface %s%s); "+
		"it is handed over once that sandbox is gone (the runtime deletes it, or GC finds its veth gone)",
		e.IP, e.Pod, shortID(e.Previous.ContainerID), e.Previous.IfName, link)
}
func (e *TakeoverError) Unwrap() error { return ErrInUse }

// RecoveringError: Allocate on a store that is being rebuilt.
type RecoveringError struct {
	Path  string
	State RecoveryState
}

func (e *RecoveringError) Error() string {
	return fmt.Sprintf("IPAM database %s is being rebuilt after corruption (since %s, the corrupt file is %s): "+
		"no IP is handed out until staticip-agent has imported the IPs this node's pods hold", e.Path,
		e.State.Since.UTC().Format(time.RFC3339), e.State.MovedAside)
}
func (e *RecoveringError) Unwrap() error { return ErrRecovering }

// ExhaustedError says which ranges were full.
type ExhaustedError struct {
	Ranges []netip.Prefix
	// Pools: the request named these pools (AllocateRequest.Pools) and no range of them on this
	// node has a free address (Ranges are theirs).
	Pools []string
}

func (e *ExhaustedError) Error() string {
	if len(e.Pools) > 0 {
		where := "this node holds no range of them yet"
		if len(e.Ranges) > 0 {
			where = "its ranges of them here (" + joinPrefixes(e.Ranges) + ") are full"
		}
		return fmt.Sprintf("no free IP address of IPPool(s) %s on this node: %s; the range allocator of staticip-controller-manager gives "+
			"the node a block of the pod's pool when the pod is bound here (the IPPool's Exhausted condition and the pod's Events say when "+
			"the pool has none left)", strings.Join(e.Pools, ", "), where)
	}
	if len(e.Ranges) == 0 {
		// Said in the pod's events (FailedCreatePodSandBox): why, and what fixes it.
		return "no free IP address: this node has no IP ranges to allocate from (no IPRange names it, or every range it had " +
			"moved away and only drains, or waits for the node that held it before); staticip-agent reports this on the Node " +
			"as NetworkUnavailable=True (StaticIPNoRange). Give the node a range (an IPPool that selects it, or an IPRange " +
			"whose spec.node names it) and the pod starts; host-network pods are not affected"
	}
	return fmt.Sprintf("no free IP address in range(s) %s", joinPrefixes(e.Ranges))
}
func (e *ExhaustedError) Unwrap() error { return ErrExhausted }

// OutOfRangeError is returned when a requested IP belongs to none of this node's ranges.
// OwnerHint may be filled in by a caller that knows which node owns the IP (the CNI asks the
// API server); the allocator itself does not know other nodes.
type OutOfRangeError struct {
	IP        netip.Addr
	Ranges    []netip.Prefix
	OwnerHint string
}

func (e *OutOfRangeError) Error() string {
	msg := fmt.Sprintf("IP %s is outside every range of this node (%s)", e.IP, joinPrefixes(e.Ranges))
	if len(e.Ranges) == 0 {
		msg = fmt.Sprintf("IP %s is outside every range of this node (it has none)", e.IP)
	}
	if e.OwnerHint != "" {
		msg += "; " + e.OwnerHint
	}
	return msg
}
func (e *OutOfRangeError) Unwrap() error { return ErrOutOfRange }

// InUseError names who holds a requested IP.
type InUseError struct {
	IP netip.Addr
	// Holder is the pod the IP is allocated to or reserved for.
	Holder PodRef
	// Attachment is set when the IP is allocated (not only reserved).
	Attachment *Attachment
	// OtherWorkload: the IP is reserved under the requesting pod's own name, for a pod of
	// another workload (AllocateRequest.SkipPodReservation).
	OtherWorkload bool
}

func (e *InUseError) Error() string {
	if e.Attachment != nil {
		return fmt.Sprintf("IP %s is in use by pod %s (container %s, interface %s)",
			e.IP, e.Holder, shortID(e.Attachment.ContainerID), e.Attachment.IfName)
	}
	if e.OtherWorkload {
		return fmt.Sprintf("IP %s is reserved for pod %s of another workload (its StaticIP names another workload than this pod's controller)", e.IP, e.Holder)
	}
	return fmt.Sprintf("IP %s is reserved for pod %s", e.IP, e.Holder)
}
func (e *InUseError) Unwrap() error { return ErrInUse }

// RangeInUseError lists who still holds addresses of a range that was asked to go away.
type RangeInUseError struct {
	Subnet  netip.Prefix
	Holders []Allocation
}

func (e *RangeInUseError) Error() string {
	names := make([]string, 0, 3)
	for i, a := range e.Holders {
		if i == 3 {
			names = append(names, fmt.Sprintf("and %d more", len(e.Holders)-3))
			break
		}
		names = append(names, fmt.Sprintf("%s (%s)", a.IP, a.Pod))
	}
	return fmt.Sprintf("cannot remove range %s: %d live allocation(s): %s",
		e.Subnet, len(e.Holders), strings.Join(names, ", "))
}
func (e *RangeInUseError) Unwrap() error { return ErrRangeInUse }

// LockedError: the database stayed locked for the whole timeout.
type LockedError struct {
	Path    string
	Timeout time.Duration
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("IPAM database %s is locked by another process (waited %s)", e.Path, e.Timeout)
}
func (e *LockedError) Unwrap() error { return ErrLocked }

// CorruptError names the unreadable file.
type CorruptError struct {
	Path string
	Err  error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("IPAM database %s is corrupt or not an ipam database (%v); do not delete it or replace it with "+
		"an empty one: running pods hold IPs that a fresh database would hand out again. staticip-agent rebuilds it "+
		"(moves it to %s.corrupt-<time>, imports the IPs of this node's sip* veths and routes, then allows ADD again); "+
		"without the agent, keep the node's pods stopped while you recover it by hand", e.Path, e.Err, e.Path)
}
func (e *CorruptError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// QuarantinedError: the requested IP was released less than the quarantine ago and is not
// reserved for the requesting pod. Explicit requests (annotation, IP=, ips) wait like next-free
// allocation does, so a just-freed address never moves to another pod by asking for it while
// the network (conntrack, neighbour caches, peers' connections) may still know the old pod.
type QuarantinedError struct {
	IP    netip.Addr
	Until time.Time
}

func (e *QuarantinedError) Error() string {
	return fmt.Sprintf("IP %s was released moments ago and is quarantined until %s; try again later",
		e.IP, e.Until.UTC().Format(time.RFC3339))
}
func (e *QuarantinedError) Unwrap() error { return ErrQuarantined }
