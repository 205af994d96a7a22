// Package ipam is the node-local IP range allocator of staticip.
//
// A node owns whole IP ranges (CIDRs). The allocator hands out addresses from them to pod
// attachments (container ID + interface), keeps addresses reserved for absent pods that own a
// fixed IP, and garbage-collects attachments that no longer exist. State lives in one bbolt file
// (default /var/lib/staticip/ipam.db); every public operation is exactly one bbolt transaction,
// so a crash at any point leaves either the state before or the state after it, never a mix.
//
// The package has no Kubernetes imports: the CNI plugin and the node agent translate between
// Kubernetes objects and the plain values here.
package ipam

import (
	"net/netip"
	"time"
)

// DefaultPath is where the allocator keeps its database unless told otherwise.
const DefaultPath = "/var/lib/staticip/ipam.db"

// DefaultQuarantine is how long a released IP is skipped by "next free" allocation, so that a
// just-freed address is not handed straight to another pod while peers may still cache it.
const DefaultQuarantine = 5 * time.Second

// DefaultOpenTimeout bounds how long Open waits for another process holding the database.
const DefaultOpenTimeout = 10 * time.Second

// Range is one CIDR owned by this node and the part of it pods may get.
type Range struct {
	// Subnet is the network, e.g. 10.10.0.0/24 (no host bits).
	Subnet netip.Prefix `json:"subnet"`
	// RangeStart is the first allocatable IP; zero means the first host address of Subnet.
	RangeStart netip.Addr `json:"rangeStart,omitzero"`
	// RangeEnd is the last allocatable IP; zero means the last host address of Subnet.
	RangeEnd netip.Addr `json:"rangeEnd,omitzero"`
	// Gateway is the pods' gateway; never given to a pod. Zero means none inside the subnet.
	Gateway netip.Addr `json:"gateway,omitzero"`
	// Exclude are addresses never given to a pod.
	Exclude []netip.Addr `json:"exclude,omitempty"`
	// Pool is the IPPool the range was cut from ("" for a hand-written range or a conflist's).
	Pool string `json:"pool,omitempty"`
	// Restricted: the range is address space of the pods that chose Pool (a pool with a
	// namespaceSelector, apis/poolchoice): "next free" gives its addresses only to a request
	// naming Pool (AllocateRequest.Pools), and never one of it to a request naming no pool.
	Restricted bool `json:"restricted,omitempty"`
	// Draining is set by the store, never taken from input: the range left this node (it is no
	// longer among the ranges of SyncRanges/SetNodeRanges) while some of its IPs are still
	// allocated here. No new allocation of any kind comes from a draining range; its existing
	// attachments can still be checked and released. It goes away once nothing holds its IPs.
	Draining bool `json:"draining,omitempty"`
}

// PodRef names the pod an attachment or reservation belongs to. Outside Kubernetes the fields
// may be empty; allocation then works per attachment only.
type PodRef struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	UID       string `json:"uid,omitempty"`
}

// Key is "namespace/name", the identity reservations are keyed by (a recreated pod keeps its
// name but gets a new UID).
func (p PodRef) Key() string {
	if p.Name == "" {
		return ""
	}
	return p.Namespace + "/" + p.Name
}

func (p PodRef) String() string {
	if p.Name == "" {
		return "<no pod>"
	}
	return p.Key()
}

// Attachment identifies one network attachment, as CNI does: the container ID and interface.
type Attachment struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifname"`
}

func (a Attachment) key() []byte { return []byte(a.ContainerID + "\x00" + a.IfName) }

// Allocation is an IP held by a live (or believed live) attachment.
type Allocation struct {
	IP          netip.Addr   `json:"ip"`
	Subnet      netip.Prefix `json:"subnet"`
	Attachment  Attachment   `json:"attachment"`
	Pod         PodRef       `json:"pod"`
	AllocatedAt time.Time    `json:"allocatedAt"`
	// Previous is the allocation of the same pod's earlier attachment that this one took the
	// IP over from (a recreated pod), kept so that Unallocate can put it back.
	Previous *Allocation `json:"previous,omitempty"`
}

// ReservationSource says who created a reservation.
type ReservationSource string

const (
	// SourceStaticIP reservations mirror StaticIP records (SyncReservations, Reserve).
	SourceStaticIP ReservationSource = "StaticIP"
	// SourceRelease reservations were left by Release(keep=true): the pod went away but its IP
	// is kept for it until the authoritative StaticIP sync says otherwise.
	SourceRelease ReservationSource = "Release"
)

// Reservation keeps an IP for a pod (namespace/name) whether or not the pod currently runs.
// Only that pod may be given the IP.
type Reservation struct {
	IP     netip.Addr        `json:"ip"`
	Pod    PodRef            `json:"pod"`
	Source ReservationSource `json:"source"`
}

// AllocateRequest asks for an IP for one attachment of one pod.
type AllocateRequest struct {
	Attachment Attachment
	Pod        PodRef
	// IP, when valid, is the address the pod must get (its annotation, CNI_ARGS IP=, ...).
	IP netip.Addr
	// Family (4 or 6), when set, is the IP family of the address asked for: a dual-stack pod's
	// attachment makes one request per family and holds one address of each; the attachment's
	// and the pod's reservation of that family are the ones looked at, and next free comes only
	// from ranges of that family. 0: the family of IP when valid, else the attachment's first
	// address and the pod's first reservation, any range (a single-stack caller).
	Family int
	// SkipPodReservation: the reservation under the pod's name is not this pod's (its StaticIP
	// is retained for another workload whose pod has the same name); a free IP is taken and the
	// reservation stays where it is. A requested IP (IP) that is that reservation's is refused
	// (InUseError.OtherWorkload), and its quarantine is not waived for the name.
	SkipPodReservation bool
	// Pools, when set, are the pools the pod's address must come from (apis/poolchoice), in
	// order of preference: "next free" takes an address of the first of them that has one on
	// this node, and of no other range. Unset: any range that is not Restricted (or, with
	// NamespacePoolsFromStore, the pools SetNamespacePools recorded for the pod's namespace). A
	// requested IP (IP) or the pod's reservation is not held to it: a static IP keeps its pool.
	Pools []string
	// PoolFamilies are the IP families (4, 6) of Pools, as the caller read the pools: AllocatePod
	// gives the pod an address of each even when no range of that family is on this node yet
	// (it fails with ErrExhausted naming the pools, and the CNI waits for the block), so a
	// dual-stack pod never starts with one family because its IPv6 block came a moment late.
	PoolFamilies []int
	// NamespacePoolsFromStore: the caller could not learn the pod's pools (the CNI plugin cut off
	// from the API server), so a request naming none takes the store's copy of its namespace's
	// pools, as the agent last wrote them. Otherwise that copy is never read: it lags the API.
	NamespacePoolsFromStore bool
	// Alive, when set, is asked (inside the transaction: keep it cheap) whether another
	// attachment of the same pod still exists before its IP is taken over. A recreated pod
	// whose earlier sandbox still runs (a force-deleted pod) is refused with a TakeoverError
	// instead of sharing the IP with it. Nil: the earlier attachment is assumed gone.
	Alive func(Attachment) bool
}

// GCOptions controls garbage collection.
type GCOptions struct {
	// Live are the attachments that still exist; every other allocation is released.
	Live []Attachment
	// KeepReserved, when set, is asked (inside the transaction, so it must be a cheap lookup)
	// whether a released allocation's IP should stay reserved for its pod.
	KeepReserved func(Allocation) bool
	// Alive, when set, is asked (inside the transaction) about every allocation not in Live:
	// those it reports alive are kept (e.g. the attachment's host veth still exists, or the
	// allocation was imported after a corruption and has no runtime attachment ID).
	Alive func(Allocation) bool
}

// RangeSync reports what SetNodeRanges did.
type RangeSync struct {
	// Draining are ranges no longer wanted that still have allocations: kept, but nothing new
	// is allocated from them.
	Draining []netip.Prefix
	// Removed are ranges that left the node with nothing allocated in them (or whose
	// allocations all lie inside a wanted range that replaces them, e.g. a CIDR grown in place).
	Removed []netip.Prefix
	// Skipped are wanted ranges not applied because they overlap a draining range; the
	// other wanted ranges are applied.
	Skipped []RangeConflict
}

// RangeConflict is a wanted range that could not be applied.
type RangeConflict struct {
	Range  Range
	Reason string
}

// ImportResult reports what Import stored.
type ImportResult struct {
	Imported, Unchanged int
	// Conflicts were not stored: their IP is already allocated to another attachment, or
	// their attachment already holds another IP.
	Conflicts []Allocation
}

// RecoveryState describes a store being rebuilt after its database was found corrupt.
type RecoveryState struct {
	// Since is when the rebuild started.
	Since time.Time `json:"since"`
	// MovedAside is where the corrupt file was moved.
	MovedAside string `json:"movedAside"`
}

// SyncResult reports what SyncReservations changed.
type SyncResult struct {
	Added, Removed, Unchanged int
	// Conflicts are reservations whose IP is currently allocated to a different pod. They are
	// stored anyway (the StaticIP record is the truth), so the IP goes only to its owner once
	// the other pod releases it.
	Conflicts []Allocation
}

// RangeUsage counts a range's addresses.
type RangeUsage struct {
	Range Range
	// Total is allocatable addresses: the range minus gateway and excluded IPs.
	Total int
	// Used are allocated addresses.
	Used int
	// Reserved are addresses reserved but not allocated.
	Reserved int
	// Free is Total - Used - Reserved; 0 for a draining range (nothing is allocated from it).
	Free int
	// Draining: see Range.Draining.
	Draining bool
}
