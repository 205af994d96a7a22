package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels, taints and annotations of node failover (part of the contract with the node agent,
// the local cluster tooling and operators).
const (
	// LabelSpare with value "true" puts a node in the spare pool failover takes targets from.
	LabelSpare = "staticip.jke.jdcloud.com/spare"
	// TaintSpare (value "true", effect NoSchedule) keeps ordinary pods off a spare node. Failover
	// removes it from its target only once ranges and routes are in place: it is the gate that
	// keeps the moved pods from starting too early.
	TaintSpare = "staticip.jke.jdcloud.com/spare"
	// LabelFailoverFor on a spare names the failed node it was claimed for, so a second failure
	// cannot take the same spare.
	LabelFailoverFor = "staticip.jke.jdcloud.com/failover-for"
	// AnnotationFailoverPaused with value "true" on a NodeFailover or on the failed Node stops
	// the controller from writing anything for that migration.
	AnnotationFailoverPaused = "staticip.jke.jdcloud.com/failover-paused"
	// AnnotationNodeOff with value "true" on the NodeFailover of a deleted Node is the
	// operator's statement that the machine is off: the fence of a Node object that no longer
	// exists (it cannot carry the out-of-service taint). Without it, and without the manager's
	// --node-deletion-is-fence, a deleted node's ranges never move.
	AnnotationNodeOff = "staticip.jke.jdcloud.com/node-off"
	// AnnotationIPRangesObserved on a Node is written by that node's agent: a JSON object
	// {"<iprange>": "<owner node>/<ownerGeneration>"} of the ranges it has programmed routes for.
	AnnotationIPRangesObserved = "staticip.jke.jdcloud.com/ipranges-observed"
	// TaintOutOfService is Kubernetes' non-graceful node shutdown taint: the node is known to be
	// off. Failover acts only on nodes that carry it (any effect) or whose Node object is gone.
	TaintOutOfService = "node.kubernetes.io/out-of-service"
)

// NodeFailoverPhase is the last step of a migration that is done. The steps run in this order.
// +kubebuilder:validation:Enum=Detected;Fenced;SourceEmpty;TargetReserved;RangesMoved;RoutesConverged;StaticIPsRebound;PodsRunning;Completed
type NodeFailoverPhase string

const (
	// FailoverDetected: the node is fenced (out-of-service taint or Node deleted) and owns
	// ranges or static IPs; the record exists.
	FailoverDetected NodeFailoverPhase = "Detected"
	// FailoverFenced: it has also been NotReady (or gone) for the failover window.
	FailoverFenced NodeFailoverPhase = "Fenced"
	// FailoverSourceEmpty: no pod object holds an IP of the node's ranges any more.
	FailoverSourceEmpty NodeFailoverPhase = "SourceEmpty"
	// FailoverTargetReserved: a target was chosen and claimed (label failover-for).
	FailoverTargetReserved NodeFailoverPhase = "TargetReserved"
	// FailoverRangesMoved: every range names the target at its new owner generation and the
	// target's agent reported it Synced (it reserved every static IP of the range).
	FailoverRangesMoved NodeFailoverPhase = "RangesMoved"
	// FailoverRoutesConverged: every other Ready node's agent programs the moved ranges'
	// routes towards the target.
	FailoverRoutesConverged NodeFailoverPhase = "RoutesConverged"
	// FailoverStaticIPsRebound: every moved StaticIP names the target.
	FailoverStaticIPsRebound NodeFailoverPhase = "StaticIPsRebound"
	// FailoverPodsRunning: the spare taint is gone and every moved StaticIP's pod runs on the
	// target with its IP.
	FailoverPodsRunning NodeFailoverPhase = "PodsRunning"
	// FailoverCompleted: nothing left to do; the record stays as history.
	FailoverCompleted NodeFailoverPhase = "Completed"
)

// NodeFailoverPhases lists the phases in order.
var NodeFailoverPhases = []NodeFailoverPhase{FailoverDetected, FailoverFenced, FailoverSourceEmpty,
	FailoverTargetReserved, FailoverRangesMoved, FailoverRoutesConverged, FailoverStaticIPsRebound,
	FailoverPodsRunning, FailoverCompleted}

// Condition types of NodeFailover.
const (
	// NodeFailoverConditionFenced is True when the fencing rule holds (out-of-service taint or
	// Node gone, NotReady for the window, no pod left holding one of the node's IPs).
	NodeFailoverConditionFenced = "Fenced"
	// NodeFailoverConditionTargetReserved is True when a target is claimed; False with reason
	// NoTarget when no node qualifies.
	NodeFailoverConditionTargetReserved = "TargetReserved"
	// NodeFailoverConditionStopped is True when failover refuses to act because too many
	// nodes are unhealthy at once (reason TooManyUnhealthy).
	NodeFailoverConditionStopped = "Stopped"
	// NodeFailoverConditionPaused is True while the pause annotation is set.
	NodeFailoverConditionPaused = "Paused"
	// NodeFailoverConditionProgressing says what the migration waits on (reason) while it runs.
	NodeFailoverConditionProgressing = "Progressing"
	// NodeFailoverConditionDeleting is True while a requested deletion of the record is held
	// (finalizer) because its migration is half done; the record goes once it completes.
	NodeFailoverConditionDeleting = "Deleting"
)

// NodeFailoverSpec names the failed node and, optionally, the target.
// +kubebuilder:validation:XValidation:rule="self.node == oldSelf.node",message="node is immutable",fieldPath=".node"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.target) || (has(self.target) && self.target == oldSelf.target)",message="target cannot change once set (delete the record to plan again before any range moved)",fieldPath=".target"
// +kubebuilder:validation:XValidation:rule="!has(self.target) || self.target != self.node",message="target must differ from node",fieldPath=".target"
type NodeFailoverSpec struct {
	// Node is the failed node. It equals the record's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// Target is the node that takes over the failed node's ranges and static IPs. Set by the
	// controller when it chooses one, or pinned by an operator beforehand. Cannot change once set.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Target string `json:"target,omitempty"`
}

// MovedRange is one IPRange moved (or being moved) from the failed node to the target. It is
// recorded before the IPRange is written, so a restart finishes the same move instead of
// bumping the owner generation again.
type MovedRange struct {
	// Name of the IPRange.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// CIDR of the range.
	// +kubebuilder:validation:MaxLength=64
	CIDR string `json:"cidr"`
	// FromNode is the failed node.
	// +kubebuilder:validation:MaxLength=253
	FromNode string `json:"fromNode"`
	// ToNode is the target.
	// +kubebuilder:validation:MaxLength=253
	ToNode string `json:"toNode"`
	// OwnerGeneration is the range's spec.ownerGeneration after the move (old + 1).
	// +kubebuilder:validation:Minimum=1
	OwnerGeneration int64 `json:"ownerGeneration"`
}

// MovedStaticIP is one StaticIP re-pointed from the failed node to the target.
type MovedStaticIP struct {
	// Namespace of the StaticIP.
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// Name of the StaticIP (the pod's name).
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// IP of the StaticIP.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	IP string `json:"ip,omitempty"`
	// FromNode is the node the StaticIP named before.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	FromNode string `json:"fromNode,omitempty"`
	// Rebound is true once the StaticIP names the target.
	// +optional
	Rebound bool `json:"rebound,omitempty"`
}

// NodeFailoverStatus is where the migration stands. Every step is resumable from it.
type NodeFailoverStatus struct {
	// Phase is the last step done.
	// +optional
	Phase NodeFailoverPhase `json:"phase,omitempty"`
	// Target is the node the migration moves to (the claimed spare).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Target string `json:"target,omitempty"`
	// Zone is the failed node's topology.kubernetes.io/zone label when the record was made
	// (the Node may be gone later); the target must be in the same zone.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Zone string `json:"zone,omitempty"`
	// InstanceType is the failed node's node.kubernetes.io/instance-type label when the record
	// was made; a target that has the label must have the same value.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	InstanceType string `json:"instanceType,omitempty"`
	// MovedRanges are the IPRanges moved to the target, each recorded before its write.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=1024
	MovedRanges []MovedRange `json:"movedRanges,omitempty"`
	// MovedStaticIPs are the StaticIPs that move with the ranges (chosen with the target: its
	// allocatable must hold all their resources).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16384
	MovedStaticIPs []MovedStaticIP `json:"movedStaticIPs,omitempty"`
	// StartTime is when the record was made.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// PhaseTime is when the current phase was reached.
	// +optional
	PhaseTime *metav1.Time `json:"phaseTime,omitempty"`
	// CompletionTime is when the migration completed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// LastError is the last error a step met (empty once a step succeeds again).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	LastError string `json:"lastError,omitempty"`
	// ObservedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Fenced, TargetReserved, Stopped, Paused, Progressing.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NodeFailover records the migration of one failed node's IP ranges and static IPs to a target
// node. Its name is the failed node's name. The nodefailover controller creates it when a node
// is fenced and drives it through the phases; it stays as history once Completed.
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=nfo,categories=staticip
// +kubebuilder:validation:XValidation:rule="self.metadata.name == self.spec.node",message="metadata.name must equal spec.node",fieldPath=".spec.node"
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.node`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.status.target`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Waiting",type=string,JSONPath=`.status.conditions[?(@.type=="Progressing")].reason`
// +kubebuilder:printcolumn:name="Error",type=string,JSONPath=`.status.lastError`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodeFailover struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NodeFailoverSpec   `json:"spec"`
	Status NodeFailoverStatus `json:"status,omitempty"`
}

// NodeFailoverList is a list of NodeFailovers.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type NodeFailoverList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeFailover `json:"items"`
}
