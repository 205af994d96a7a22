package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IPPoolMode says how a pool hands out ranges.
// +kubebuilder:validation:Enum=Blocks;NodePodCIDR
type IPPoolMode string

const (
	// IPPoolBlocks cuts the pool's CIDRs into blocks of spec.blockSize and gives every matching
	// node without a range the first free block.
	IPPoolBlocks IPPoolMode = "Blocks"
	// IPPoolNodePodCIDR mirrors each matching node's spec.podCIDRs (allocated by
	// kube-controller-manager) that lie inside a pool CIDR into an IPRange.
	IPPoolNodePodCIDR IPPoolMode = "NodePodCIDR"
)

// IPPoolGatewayPolicy says which gateway each block's IPRange gets.
// +kubebuilder:validation:Enum=None;FirstHost
type IPPoolGatewayPolicy string

const (
	// GatewayNone: the IPRange has no gateway; the CNI routes pods through 169.254.1.1.
	GatewayNone IPPoolGatewayPolicy = "None"
	// GatewayFirstHost: the block's first host address (network + 1) is the gateway.
	GatewayFirstHost IPPoolGatewayPolicy = "FirstHost"
)

// IPPool label and annotation keys on the IPRanges the range allocator creates.
const (
	// LabelIPPool names the pool an IPRange was cut from. The allocator only ever touches
	// ranges with this label and a controller reference to that pool.
	LabelIPPool = "jke.jdcloud.com/ippool"
	// LabelIPPoolRestricted ("true") marks a block of a pool with a non-empty namespaceSelector:
	// only pods whose pools (apis/poolchoice) name the block's pool get its addresses; the node's
	// CNI never gives one to a pod naming no pool. The allocator keeps it equal to the pool's.
	LabelIPPoolRestricted = "jke.jdcloud.com/ippool-restricted"
	// AnnotationNodeGoneSince is when the allocator first saw the range's node gone (RFC 3339);
	// the block returns to the pool releaseAfter later, once nothing holds an IP of it.
	AnnotationNodeGoneSince = "jke.jdcloud.com/node-gone-since"
	// AnnotationReleasedGeneration is the ownerGeneration at which the allocator released the
	// block: it unassigns the range (spec.node "") and raises its ownerGeneration by one instead
	// of deleting it, so a node that comes back revokes it (cni/README.md), and hands the same
	// IPRange to the next node that needs a block, at that generation.
	AnnotationReleasedGeneration = "jke.jdcloud.com/released-generation"
	// AnnotationEmptySince is when the allocator first saw a block of a namespace pool unused
	// on its live node (RFC 3339); the block returns to the pool releaseAfter later if it
	// stays unused.
	AnnotationEmptySince = "jke.jdcloud.com/empty-since"
	// AnnotationIPPools on a pod (its template) or a namespace names the pools the pod's
	// address comes from: a JSON list of IPPool names, e.g. ["db-pool"] (like Calico's
	// cni.projectcalico.org/ipv4pools). The pod's annotation wins over its namespace's.
	// Each named pool must exist and select the pod's namespace (spec.namespaceSelector).
	AnnotationIPPools = "staticip.jke.jdcloud.com/ippools"
)

// IPPool conditions.
const (
	// IPPoolReady: the spec is usable (True), or why not (False: e.g. its CIDRs overlap an older pool).
	IPPoolReady = "Ready"
	// IPPoolExhausted: True while a matching node waits for a block and none is free.
	IPPoolExhausted = "Exhausted"
	// IPPoolExportedWithNAT: True (a warning) when the pool is announced over BGP
	// (disableBGPExport unset or false, and a BGPPeer exists) and natOutgoing is on: the
	// outside can reach its pods, but sees the node's address as their source, not the
	// static IP.
	IPPoolExportedWithNAT = "ExportedWithNAT"
	// IPPoolNamespaceSelectorOverlaps: True while the pool's namespaceSelector selects an
	// existing namespace an older pool's selects too (set on the younger pool only).
	IPPoolNamespaceSelectorOverlaps = "NamespaceSelectorOverlaps"
)

// IPPoolSpec is the address space of a set of nodes.
// +kubebuilder:validation:XValidation:rule="!has(self.blockSize) || self.cidrs.all(c, !isCIDR(c) || (cidr(c).prefixLength() <= self.blockSize && self.blockSize <= (cidr(c).ip().family() == 4 ? 30 : 126)))",message="blockSize must be at least every CIDR's prefix length and at most 30 (IPv4) or 126 (IPv6), so each block fits in its CIDR and holds addresses for pods",fieldPath=".blockSize"
// +kubebuilder:validation:XValidation:rule="self.cidrs.all(c, !isCIDR(c) || (has(self.blockSize) ? self.blockSize : (cidr(c).ip().family() == 4 ? 24 : 120)) - cidr(c).prefixLength() <= 32)",message="a CIDR may hold at most 2^32 blocks: use a larger blockSize or a smaller CIDR",fieldPath=".cidrs"
// +kubebuilder:validation:XValidation:rule="self.cidrs.all(c, !isCIDR(c) || self.cidrs.all(d, !isCIDR(d) || cidr(c).ip().family() == cidr(d).ip().family()))",message="all CIDRs of a pool must be of one IP family (make one pool per family)",fieldPath=".cidrs"
// +kubebuilder:validation:XValidation:rule="!has(self.excludeIPs) || self.excludeIPs.all(e, !isIP(e) || self.cidrs.exists(c, isCIDR(c) && cidr(c).containsIP(e)))",message="every excluded IP must lie inside one of the pool's CIDRs",fieldPath=".excludeIPs"
// +kubebuilder:validation:XValidation:rule="oldSelf.cidrs.all(c, c in self.cidrs)",message="CIDRs may be added to a pool but never removed or changed: blocks may have been assigned from them",fieldPath=".cidrs"
// +kubebuilder:validation:XValidation:rule="has(self.blockSize) == has(oldSelf.blockSize) && (!has(self.blockSize) || self.blockSize == oldSelf.blockSize)",message="blockSize is immutable: blocks have been cut at this size",fieldPath=".blockSize"
type IPPoolSpec struct {
	// CIDRs are the pool's networks, all of one IP family, each network-aligned. CIDRs may be
	// added (the pool grows) but never removed or changed.
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 10.244.0.0/16"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || cidr(self) == cidr(self).masked()",message="must be network-aligned: no host bits may be set after the prefix length"
	CIDRs []string `json:"cidrs"`
	// BlockSize is the prefix length of each block handed to a node. Default: 24 for IPv4
	// (254 pod addresses), 120 for IPv6 (256 addresses: the same scale as IPv4; the node's
	// IPAM keeps every address of a range, so a /64 block would be unusable). Immutable.
	// Ignored in NodePodCIDR mode.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=126
	BlockSize *int32 `json:"blockSize,omitempty"`
	// Mode: Blocks (default) cuts the CIDRs into blocks; NodePodCIDR mirrors each node's
	// spec.podCIDRs that lie inside a pool CIDR (kubeadm, kind: kube-controller-manager
	// allocates them).
	// +optional
	// +kubebuilder:default=Blocks
	Mode IPPoolMode `json:"mode,omitempty"`
	// NodeSelector chooses the pool's nodes; empty or absent: every node. A node matched by
	// several pools takes its block from the oldest of them (then the first by name).
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// NamespaceSelector chooses the namespaces whose pods may take addresses from the pool
	// (Calico's IPPool.namespaceSelector); empty or absent: every namespace. A pod names its
	// pools in the annotation staticip.jke.jdcloud.com/ippools (on the pod, or its namespace:
	// the pod's wins); a pod naming no pool takes the oldest pool whose non-empty selector
	// selects its namespace, else the node's pool as before. A pool with a non-empty selector
	// is never a node's pool. Admission (manifests/admission/ippools-policy.yaml) refuses a pod
	// naming a pool that does not select its namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// ExcludeIPs are never given to a pod: each is copied into the excludeIPs of the block that
	// holds it.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=1024
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:XValidation:rule="isIP(self)",message="must be a valid IP address"
	ExcludeIPs []string `json:"excludeIPs,omitempty"`
	// GatewayPolicy: None (default; the CNI routes pods through 169.254.1.1) or FirstHost (each
	// block's first host address is its gateway, never given to a pod).
	// +optional
	// +kubebuilder:default=None
	GatewayPolicy IPPoolGatewayPolicy `json:"gatewayPolicy,omitempty"`
	// ReleaseAfter is the quarantine of a deleted node's block: it returns to the pool this long
	// after the node was seen gone, and only once no pod object holds an IP of it, no StaticIP's
	// spec.ip lies in it and no node failover is moving it.
	// +optional
	// +kubebuilder:default="5m"
	ReleaseAfter *metav1.Duration `json:"releaseAfter,omitempty"`
	// NATOutgoing: traffic of the pool's pods to a destination outside the cluster — in no
	// IPRange, not a node address, not in the agents' --service-cidrs or --non-masquerade-cidrs
	// — leaves with its node's address (masqueraded by each node's staticip-agent), so pods
	// reach the outside on any network. Traffic inside the cluster always keeps the pod's IP.
	// false: the pod's own IP is its source outside too; then the network around the cluster
	// must route the pool's CIDRs to the nodes, or no answer ever comes back. Default true.
	// Copied into spec.natOutgoing of every block (IPRange) the pool gives; edits follow.
	// +optional
	// +kubebuilder:default=true
	NATOutgoing *bool `json:"natOutgoing,omitempty"`
	// DisableBGPExport keeps the pool private: no node announces its blocks to the BGPPeers
	// (Calico's name). Default false: every block is announced by the node that serves it,
	// when BGP is configured (a BGPConfiguration and BGPPeers). An exported pool usually sets
	// natOutgoing: false, so that its pods' static IPs are their source outside; exported and
	// NATed, the pool gets the warning condition ExportedWithNAT. Copied into
	// spec.disableBGPExport of every block; edits follow.
	// +optional
	DisableBGPExport *bool `json:"disableBGPExport,omitempty"`
}

// IPPoolStatus counts the pool's blocks.
type IPPoolStatus struct {
	// BlockSize is the block prefix length in effect (spec.blockSize or the family's default).
	// +optional
	BlockSize int32 `json:"blockSize,omitempty"`
	// BlocksTotal is the number of blocks the CIDRs hold (saturates at 2^63-1).
	// +optional
	BlocksTotal int64 `json:"blocksTotal,omitempty"`
	// BlocksAssigned is the number of IPRanges cut from this pool.
	// +optional
	BlocksAssigned int64 `json:"blocksAssigned,omitempty"`
	// BlocksFree is the number of blocks that overlap no IPRange at all.
	// +optional
	BlocksFree int64 `json:"blocksFree,omitempty"`
	// ObservedGeneration is the generation of the spec these counts describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, Exhausted.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// IPPool is address space staticip owns: CIDRs cut into blocks, one block (an IPRange) per
// matching node, handed out by the range allocator of staticip-controller-manager.
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ipp,categories=staticip
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 200",message="an IPPool name is at most 200 characters: its blocks are named <pool>-<cidr>"
// +kubebuilder:printcolumn:name="CIDRs",type=string,JSONPath=`.spec.cidrs`
// +kubebuilder:printcolumn:name="Block",type=integer,JSONPath=`.status.blockSize`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.blocksTotal`
// +kubebuilder:printcolumn:name="Assigned",type=integer,JSONPath=`.status.blocksAssigned`
// +kubebuilder:printcolumn:name="Free",type=integer,JSONPath=`.status.blocksFree`
// +kubebuilder:printcolumn:name="NAT",type=boolean,JSONPath=`.spec.natOutgoing`,priority=1
// +kubebuilder:printcolumn:name="No-Export",type=boolean,JSONPath=`.spec.disableBGPExport`,priority=1
// +kubebuilder:printcolumn:name="Exhausted",type=string,JSONPath=`.status.conditions[?(@.type=="Exhausted")].status`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type IPPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   IPPoolSpec   `json:"spec"`
	Status IPPoolStatus `json:"status,omitempty"`
}

// IPPoolList is a list of IPPools.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type IPPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPPool `json:"items"`
}
