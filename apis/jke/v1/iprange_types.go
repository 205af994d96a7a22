package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IPRangeSpec is one CIDR and the node that owns it ("IP range mode": a node holds whole
// CIDRs, and node failover moves a whole CIDR).
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || size(self.gateway) == 0 || !isCIDR(self.cidr) || !isIP(self.gateway) || cidr(self.cidr).containsIP(self.gateway)",message="gateway must lie inside cidr",fieldPath=".gateway"
// +kubebuilder:validation:XValidation:rule="!has(self.rangeStart) || !isCIDR(self.cidr) || !isIP(self.rangeStart) || cidr(self.cidr).containsIP(self.rangeStart)",message="rangeStart must lie inside cidr",fieldPath=".rangeStart"
// +kubebuilder:validation:XValidation:rule="!has(self.rangeEnd) || !isCIDR(self.cidr) || !isIP(self.rangeEnd) || cidr(self.cidr).containsIP(self.rangeEnd)",message="rangeEnd must lie inside cidr",fieldPath=".rangeEnd"
// +kubebuilder:validation:XValidation:rule="!has(self.excludeIPs) || !isCIDR(self.cidr) || self.excludeIPs.all(e, !isIP(e) || cidr(self.cidr).containsIP(e))",message="every excluded IP must lie inside cidr",fieldPath=".excludeIPs"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.ownerGeneration) || (has(self.ownerGeneration) && self.ownerGeneration >= oldSelf.ownerGeneration)",message="ownerGeneration may only go up",fieldPath=".ownerGeneration"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.node) || size(oldSelf.node) == 0 || !has(self.node) || size(self.node) == 0 || self.node == oldSelf.node || (has(self.ownerGeneration) && self.ownerGeneration == (has(oldSelf.ownerGeneration) ? oldSelf.ownerGeneration : 0) + 1)",message="node may not change from one node straight to another: the old node may still run pods with addresses of this range. To move a range, unassign it (node empty), then assign it to the new node: the new node serves it once the old node has drained it (its Synced condition says WaitingForPreviousOwner meanwhile). Only ownerGeneration+1 moves it at once (node failover of a fenced node: the old node then drops the range and deletes the network of its pods in it)",fieldPath=".node"
type IPRangeSpec struct {
	// CIDR is the network, e.g. 10.10.0.0/24. It must be network-aligned (no host bits set).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 10.10.0.0/24"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self) == cidr(self).masked()",message="must be network-aligned: no host bits may be set after the prefix length"
	CIDR string `json:"cidr"`
	// Node is the node that currently owns the range. Empty: not assigned. It changes from one
	// node straight to another only together with ownerGeneration+1 (node failover); an
	// operator unassigns a range, then assigns it, and the new node allocates from it only once
	// no other node holds addresses of it (status.holders).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node,omitempty"`
	// OwnerGeneration counts forced moves of the range between nodes (node failover). It only
	// goes up. A node's agent remembers the generation it served the range at; when the range
	// comes back to it — or stays named after it — at a higher generation, the addresses it held
	// were handed out elsewhere while it was fenced, so it withdraws them instead of draining.
	// A plain reassignment by an operator (drain, then move) leaves it unchanged.
	// +optional
	// +kubebuilder:validation:Minimum=0
	OwnerGeneration int64 `json:"ownerGeneration,omitempty"`
	// Gateway is the pods' default gateway inside the range; never given to a pod.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="size(self) == 0 || isIP(self)",message="must be a valid IP address"
	Gateway string `json:"gateway,omitempty"`
	// RangeStart is the first allocatable IP (default: the first host address of cidr).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be a valid IP address"
	RangeStart string `json:"rangeStart,omitempty"`
	// RangeEnd is the last allocatable IP (default: the last host address of cidr).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be a valid IP address"
	RangeEnd string `json:"rangeEnd,omitempty"`
	// ExcludeIPs are addresses inside cidr that are never given to a pod.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=4096
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:XValidation:rule="isIP(self)",message="must be a valid IP address"
	ExcludeIPs []string `json:"excludeIPs,omitempty"`
	// NATOutgoing: traffic of this range's pods to a destination outside the cluster leaves
	// with its node's address (IPPool spec.natOutgoing). The range allocator copies it from
	// the block's IPPool and keeps it equal to the pool's; on a hand-written range, unset means
	// the agents' --nat-outgoing-default (true unless changed).
	// +optional
	NATOutgoing *bool `json:"natOutgoing,omitempty"`
	// DisableBGPExport: the node serving this range does not announce it over BGP (IPPool
	// spec.disableBGPExport). The range allocator copies it from the block's IPPool and keeps
	// it equal to the pool's; on a hand-written range, unset means announced (when BGP is
	// configured).
	// +optional
	DisableBGPExport *bool `json:"disableBGPExport,omitempty"`
}

// IPRangeStatus counts the addresses of the range, as the owning node's agent sees them.
type IPRangeStatus struct {
	// Total is the number of addresses pods can get: the range minus gateway and excluded IPs.
	// +optional
	Total int32 `json:"total,omitempty"`
	// Used is the number of addresses held by live pods.
	// +optional
	Used int32 `json:"used,omitempty"`
	// Reserved is the number of addresses kept for absent pods by their StaticIP.
	// +optional
	Reserved int32 `json:"reserved,omitempty"`
	// Free is Total - Used - Reserved.
	// +optional
	Free int32 `json:"free,omitempty"`
	// ObservedGeneration is the generation of the spec these counts describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions, e.g. Synced when the owning node's IPAM holds this range.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Holders are the nodes that hold addresses of the range, each entry written by the node it
	// names and by no other (the ValidatingAdmissionPolicy staticip-agent-range-status checks
	// the writer's node-bound token): the owner once it serves the range, and a node the range
	// moved away from while its pods still hold addresses of it (it drains). The range's
	// traffic goes to the address of the owner once it holds the range at the current
	// ownerGeneration, else to a node that drains it at that generation; an entry at a lower
	// generation holds nothing (node failover moved the range away from that node). A node
	// assigned a range that another node holds at its generation waits until that entry is
	// gone. Few entries: one per node that held the range at its generation, and none grows
	// with the cluster.
	// +optional
	// +listType=map
	// +listMapKey=node
	// +kubebuilder:validation:MaxItems=32
	Holders []IPRangeHolder `json:"holders,omitempty"`
}

// AnnotationReportRoutes on an IPRange, set by node failover while it waits for every node's
// route to a range it moved (RoutesConverged), names that move (its NodeFailover record). Every
// agent reports its route to a range so marked in its node's route report (the Lease
// NamespaceRouteReports/<node>, annotation AnnotationRoutesObserved), and only to ranges so
// marked: the report stays as small as the moves in flight.
const AnnotationReportRoutes = "staticip.jke.jdcloud.com/report-routes"

// NamespaceRouteReports holds one coordination.k8s.io Lease per node, named after the node,
// spec.holderIdentity the node, labelled LabelRouteReport=true: its agent's route report
// (AnnotationRoutesObserved). The reports left the Node object (its annotation
// staticip.jke.jdcloud.com/ipranges-observed) for the reason kubelet heartbeats left Node status
// for kube-node-lease (KEP-589): a Node write is a large object sent to every Node watcher. A
// namespace of their own, created by the install with the agent, so that the agent's Role there
// reaches no other Lease (the controller-manager's leader Lease lives in staticip-system) and
// the failover controller's informer sees only reports.
const NamespaceRouteReports = "staticip-node-routes"

// LabelRouteReport ("true") on the Leases of NamespaceRouteReports that carry a route report.
const LabelRouteReport = "staticip.jke.jdcloud.com/route-report"

// AnnotationRoutesObserved on a node's route-report Lease: a JSON object
// {"<IPRange>": "<node it routes to>/<ownerGeneration>"} of the routes the node's agent has
// programmed to the ranges marked AnnotationReportRoutes ("<itself>/<generation>" for a marked
// range it holds itself), nothing else: at most as many entries as ranges are marked (node
// failover's --node-failover-max-marked-ranges, 64), each at most 532 bytes.
const AnnotationRoutesObserved = "staticip.jke.jdcloud.com/routes-observed"

// LabelClaimsInStatus ("true") on a Node: its agent writes its claims into the IPRanges'
// status.holders. The upgrade from the claims in the Node annotation
// staticip.jke.jdcloud.com/ipranges-observed (agents before status.holders): every agent labels
// its own Node, and reads the claims of the Nodes WITHOUT the label (selector
// "claims-in-status!=true": agents of the previous release, and Nodes whose agent has not
// started yet) besides status.holders. An agent that has not labelled its Node is never
// overlooked — there is no window between an old agent's claim and anyone's label — and once
// every agent is upgraded the selected set is only the Nodes that run no agent.
const LabelClaimsInStatus = "staticip.jke.jdcloud.com/claims-in-status"

// IPRangeHolderState says whether a holder allocates from the range or only drains it.
// +kubebuilder:validation:Enum=Serving;Draining
type IPRangeHolderState string

const (
	// HolderServing: the node owns the range and allocates from it.
	HolderServing IPRangeHolderState = "Serving"
	// HolderDraining: the range moved away (or waits to be assigned) while pods of the node
	// still hold addresses of it; nothing new is allocated from it there.
	HolderDraining IPRangeHolderState = "Draining"
)

// IPRangeHolder is one node's claim that it holds addresses of the range.
type IPRangeHolder struct {
	// Node is the node that holds addresses of the range; only that node's agent writes
	// this entry.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// Address is the node's InternalIP of the range's IP family: the next hop of every other
	// node's route to the range (an IPv6 range's is the node's IPv6 InternalIP: Linux takes no
	// IPv4 next hop for an IPv6 route). Empty while the node has none of that family (its agent
	// then sets the range's Routable condition False).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="size(self) == 0 || isIP(self)",message="must be a valid IP address"
	Address string `json:"address,omitempty"`
	// Generation is the ownerGeneration the node holds the range at.
	// +kubebuilder:validation:Minimum=0
	Generation int64 `json:"generation"`
	// State: Serving (it allocates from the range) or Draining (it only keeps the addresses
	// its pods hold).
	State IPRangeHolderState `json:"state"`
}

// IPRange is a CIDR owned by one node; that node's CNI allocates pod IPs from it.
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ipr,categories=staticip
// +kubebuilder:printcolumn:name="CIDR",type=string,JSONPath=`.spec.cidr`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.node`
// +kubebuilder:printcolumn:name="Owner-Gen",type=integer,JSONPath=`.spec.ownerGeneration`,priority=1
// +kubebuilder:printcolumn:name="Gateway",type=string,JSONPath=`.spec.gateway`,priority=1
// +kubebuilder:printcolumn:name="NAT",type=boolean,JSONPath=`.spec.natOutgoing`,priority=1
// +kubebuilder:printcolumn:name="No-Export",type=boolean,JSONPath=`.spec.disableBGPExport`,priority=1
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.total`
// +kubebuilder:printcolumn:name="Used",type=integer,JSONPath=`.status.used`
// +kubebuilder:printcolumn:name="Reserved",type=integer,JSONPath=`.status.reserved`
// +kubebuilder:printcolumn:name="Free",type=integer,JSONPath=`.status.free`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type IPRange struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   IPRangeSpec   `json:"spec"`
	Status IPRangeStatus `json:"status,omitempty"`
}

// IPRangeList is a list of IPRanges.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type IPRangeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []IPRange `json:"items"`
}
