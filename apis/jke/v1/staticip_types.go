package v1

import (
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/staticip/staticip/apis/podip"
)

// Annotations and labels that are part of the staticip contract.
const (
	// AnnotationEnable on a workload (or its pod template) with value "true" gives its pods fixed IPs.
	AnnotationEnable = "staticip.jke.jdcloud.com/enable"
	// LabelAllowIPRequest on a namespace with value "true" lets its users create pods that carry
	// the ip-address annotation (podip.AnnotationIPAddress, manifests/admission); elsewhere only the staticip controller-manager
	// and CNI set it.
	LabelAllowIPRequest = "staticip.jke.jdcloud.com/allow-ip-request"
)

// StaticIPPhase is where a StaticIP is in its life.
// +kubebuilder:validation:Enum=Pending;Bound;Reserved;Released
type StaticIPPhase string

const (
	// StaticIPPending: the record exists but no pod has received an IP yet.
	StaticIPPending StaticIPPhase = "Pending"
	// StaticIPBound: a live pod holds the IP on spec.node.
	StaticIPBound StaticIPPhase = "Bound"
	// StaticIPReserved: the pod is absent; its IP and node resources are kept for it.
	StaticIPReserved StaticIPPhase = "Reserved"
	// StaticIPReleased: the retention policy released the record; it is about to be deleted.
	StaticIPReleased StaticIPPhase = "Released"
)

// RetentionPolicyType says whether a StaticIP outlives an event of its workload.
// +kubebuilder:validation:Enum=Retain;Delete
type RetentionPolicyType string

const (
	// RetainStaticIP keeps the record (and so the IP).
	RetainStaticIP RetentionPolicyType = "Retain"
	// DeleteStaticIP deletes the record and frees the IP.
	DeleteStaticIP RetentionPolicyType = "Delete"
)

// StaticIPRetentionPolicy says when a StaticIP (and so its IP) goes away, like a
// StatefulSet's persistentVolumeClaimRetentionPolicy. Retain on both means never.
type StaticIPRetentionPolicy struct {
	// WhenScaled applies when the workload scales below this pod's ordinal. Default Delete.
	// +optional
	// +kubebuilder:default=Delete
	WhenScaled RetentionPolicyType `json:"whenScaled,omitempty"`
	// WhenDeleted applies when the workload is deleted. Default Delete.
	// +optional
	// +kubebuilder:default=Delete
	WhenDeleted RetentionPolicyType `json:"whenDeleted,omitempty"`
}

// StaticIPSpec is the desired fixed IP of one pod.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.ip) || size(oldSelf.ip) == 0 || (has(self.ip) && self.ip == oldSelf.ip)",message="ip is immutable once set"
// +kubebuilder:validation:XValidation:rule="!has(self.ips) || size(self.ips) == 0 || (has(self.ip) && self.ips[0] == self.ip)",message="ips[0] must be ip (the pod's primary address)"
// +kubebuilder:validation:XValidation:rule="!has(self.ips) || size(self.ips) < 2 || ip(self.ips[0]).family() != ip(self.ips[1]).family()",message="ips takes one address per IP family (e.g. [10.0.0.5, fd00::5])"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.ips) || size(oldSelf.ips) < 2 || (has(self.ips) && self.ips == oldSelf.ips)",message="ips is immutable once it holds an address of each family"
type StaticIPSpec struct {
	// Ref is the name of the workload that owns the pod.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Ref string `json:"ref,omitempty"`
	// APIGroup is the API group of the workload that owns the pod: apps for a StatefulSet,
	// jke.jdcloud.com for an EnhancedStatefulSet. Group, kind and name together identify the
	// workload (OpenKruise's StatefulSet web is not apps' StatefulSet web). Empty in records
	// written before it existed: the kind then implies the group.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	APIGroup string `json:"apiGroup,omitempty"`
	// Kind is the kind of the workload that owns the pod, e.g. EnhancedStatefulSet or StatefulSet.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind,omitempty"`
	// Node is the node that holds the IP (it owns the IPRange the IP belongs to).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node,omitempty"`
	// IP is the fixed IP address. Empty until the first pod gets one; immutable once set.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="size(self) == 0 || isIP(self)",message="must be a valid IP address such as 10.10.0.1"
	IP string `json:"ip,omitempty"`
	// IPs are every fixed address of a dual-stack pod, one per IP family, the first equal to ip
	// (Kubernetes' podIP and podIPs). Empty on a single-stack record (ip alone, as every record
	// written before it existed); a single-stack record gains its other family's address once
	// its pod gets one (a second pool family added), then both are immutable. Read a record's
	// addresses with Addresses(), never ip alone.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:XValidation:rule="isIP(self)",message="must be a valid IP address such as 10.10.0.1 or fd00::1"
	IPs []string `json:"ips,omitempty"`
	// Pod is the name of the pod that owns the IP (normally equal to the record's name).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod,omitempty"`
	// Resources are the pod's resource requests; the scheduler keeps them reserved on Node
	// while the pod is absent, so it can always come back.
	// +optional
	Resources corev1.ResourceList `json:"resources,omitempty"`
	// RetentionPolicy says when this record is deleted. Copied from the workload.
	// +optional
	RetentionPolicy *StaticIPRetentionPolicy `json:"retentionPolicy,omitempty"`
}

// Addresses returns every fixed address the record holds, in the annotation's form
// (apis/podip.ParseAddresses): "10.0.0.5,fd00::5" for a dual-stack record, spec.ip alone for a
// single-stack one, "" before the first pod got an address.
func (s *StaticIPSpec) Addresses() string {
	if len(s.IPs) > 0 {
		return strings.Join(s.IPs, ",")
	}
	return s.IP
}

// ParsedAddresses returns the record's addresses parsed (apis/podip.ParseAddresses); the zero
// Addresses when it has no IP yet or its value does not parse (the API server's CEL rules
// refuse that).
func (s *StaticIPSpec) ParsedAddresses() podip.Addresses {
	a, err := podip.ParseAddresses(s.Addresses())
	if err != nil {
		return podip.Addresses{}
	}
	return a
}

// AddressList returns the record's addresses (ParsedAddresses), primary first; none when it has
// no IP yet or its value does not parse. Every check "does this record hold an address of X"
// asks it, never spec.ip alone: a dual-stack record's IPv6 address lies in another range than
// its IPv4 one.
func (s *StaticIPSpec) AddressList() []netip.Addr { return s.ParsedAddresses().List() }

// StaticIPStatus is the observed state of a StaticIP.
type StaticIPStatus struct {
	// Phase: Pending, Bound, Reserved or Released.
	// +optional
	Phase StaticIPPhase `json:"phase,omitempty"`
	// PodUID is the UID of the pod that last held the IP.
	// +optional
	PodUID types.UID `json:"podUID,omitempty"`
	// ObservedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions, e.g. Conflict when another record or the pod's annotation disagrees.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Condition types of StaticIP.
const (
	// StaticIPConditionConflict is True when another StaticIP claims the same IP or the pod's
	// annotation disagrees with this record.
	StaticIPConditionConflict = "Conflict"
)

// StaticIP is the record that keeps one pod's IP. Its name is the pod's name.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sip,categories=staticip
// +kubebuilder:printcolumn:name="IP",type=string,JSONPath=`.spec.ip`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.node`
// +kubebuilder:printcolumn:name="Pod",type=string,JSONPath=`.spec.pod`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.kind`,priority=1
// +kubebuilder:printcolumn:name="Workload",type=string,JSONPath=`.spec.ref`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type StaticIP struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   StaticIPSpec   `json:"spec,omitempty"`
	Status StaticIPStatus `json:"status,omitempty"`
}

// StaticIPList is a list of StaticIPs.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type StaticIPList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StaticIP `json:"items"`
}
