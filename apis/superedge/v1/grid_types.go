package v1

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels and annotations SuperEdge defines.
const (
	// LabelGridSelector on generated objects names the grid that owns them.
	LabelGridSelector = "superedge.io/grid-selector"
	// LabelGridUniqKey on generated objects names the grid's gridUniqKey.
	LabelGridUniqKey = "superedge.io/grid-uniq-key"
	// AnnotationTopologyKeys on a Service is a JSON list of node label keys; endpoints are
	// only served to nodes that share the value of the first key present.
	AnnotationTopologyKeys = "topologyKeys"
)

// Labels and annotations staticip adds on the objects a grid generates, so that the grid, its
// key and the unit can be read back from a workload alone.
const (
	// LabelGridUnit on a unit workload is the unit: the gridUniqKey value its nodes carry
	// (always a valid label value: it comes from a node label).
	LabelGridUnit = "superedge.io/grid-unit"
	// AnnotationGridUniqKey on a generated object is the grid's gridUniqKey as written. The
	// label LabelGridUniqKey holds it too, but encoded when the key is not a valid label value
	// (a prefixed key such as topology.kubernetes.io/zone: "/" becomes "_"; too long: hashed).
	AnnotationGridUniqKey = "superedge.io/grid-uniq-key"
	// AnnotationTemplateHash on a generated object is a hash of what the grid last wrote into
	// it; the controller rewrites the object only when the hash of what it wants differs.
	AnnotationTemplateHash = "superedge.io/template-hash"
)

// Condition types and reasons of the grids' status.
const (
	// ConditionReady is True when every unit's workload (or the Service) exists, runs the
	// grid's current template and, for workloads, has every replica ready and available.
	ConditionReady = "Ready"
	// ConditionConflict is True when a unit could not get its workload (or the Service its
	// name) because the name is taken by an object the grid does not own.
	ConditionConflict = "Conflict"
)

// GridUnitStatus is the workload of one node unit.
type GridUnitStatus struct {
	// Value is the unit: the gridUniqKey value its nodes carry.
	Value string `json:"value"`
	// Name of the unit's workload; empty when the unit has none (see the Conflict condition).
	// +optional
	Name string `json:"name,omitempty"`
	// Replicas, ReadyReplicas, AvailableReplicas and UpdatedReplicas are the workload's.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// +optional
	AvailableReplicas int32 `json:"availableReplicas,omitempty"`
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas,omitempty"`
	// Ready: the workload has seen its current spec and every replica is updated, ready and available.
	Ready bool `json:"ready"`
	// Message says why the unit has no workload or is not ready, when it can be told.
	// +optional
	Message string `json:"message,omitempty"`
}

// WorkloadGridStatus is the observed state of a DeploymentGrid or StatefulSetGrid.
type WorkloadGridStatus struct {
	// ObservedGeneration is the grid generation the units reflect.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// UnitCount is the number of node units (values of gridUniqKey on nodes).
	// +optional
	UnitCount int32 `json:"unitCount,omitempty"`
	// ReadyUnits is the number of units whose workload is Ready.
	// +optional
	ReadyUnits int32 `json:"readyUnits,omitempty"`
	// Units lists every node unit and its workload, by value.
	// +optional
	// +listType=map
	// +listMapKey=value
	Units []GridUnitStatus `json:"units,omitempty"`
	// Conditions: Ready, Conflict.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// DeploymentGridSpec: one Deployment per node unit.
type DeploymentGridSpec struct {
	// GridUniqKey is the node label whose values define the node units.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`
	GridUniqKey string `json:"gridUniqKey"`
	// Template is the Deployment spec each unit gets.
	// +kubebuilder:validation:XValidation:rule="self.selector == oldSelf.selector",message="selector is immutable (as a Deployment's)",fieldPath=".selector"
	Template appsv1.DeploymentSpec `json:"template"`
}

// DeploymentGrid replicates a Deployment into every node unit as {name}-{unit}.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=dg,categories=superedge
// +kubebuilder:printcolumn:name="GridUniqKey",type=string,JSONPath=`.spec.gridUniqKey`
// +kubebuilder:printcolumn:name="Units",type=integer,JSONPath=`.status.unitCount`
// +kubebuilder:printcolumn:name="ReadyUnits",type=integer,JSONPath=`.status.readyUnits`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.template.replicas`,description="replicas per unit"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Conflict",type=string,JSONPath=`.status.conditions[?(@.type=="Conflict")].status`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DeploymentGrid struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   DeploymentGridSpec `json:"spec"`
	Status WorkloadGridStatus `json:"status,omitempty"`
}

// DeploymentGridList is a list of DeploymentGrids.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type DeploymentGridList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DeploymentGrid `json:"items"`
}

// StatefulSetGridSpec: one StatefulSet per node unit.
type StatefulSetGridSpec struct {
	// GridUniqKey is the node label whose values define the node units.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`
	GridUniqKey string `json:"gridUniqKey"`
	// Template is the StatefulSet spec each unit gets.
	// +kubebuilder:validation:XValidation:rule="self.selector == oldSelf.selector",message="selector is immutable (as a StatefulSet's)",fieldPath=".selector"
	// +kubebuilder:validation:XValidation:rule="(has(self.serviceName) ? self.serviceName : '') == (has(oldSelf.serviceName) ? oldSelf.serviceName : '')",message="serviceName is immutable (as a StatefulSet's)",fieldPath=".serviceName"
	// +kubebuilder:validation:XValidation:rule="(has(self.podManagementPolicy) ? self.podManagementPolicy : 'OrderedReady') == (has(oldSelf.podManagementPolicy) ? oldSelf.podManagementPolicy : 'OrderedReady')",message="podManagementPolicy is immutable (as a StatefulSet's)",fieldPath=".podManagementPolicy"
	Template appsv1.StatefulSetSpec `json:"template"`
}

// StatefulSetGrid replicates a StatefulSet into every node unit as {name}-{unit}.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ssg,categories=superedge
// +kubebuilder:printcolumn:name="GridUniqKey",type=string,JSONPath=`.spec.gridUniqKey`
// +kubebuilder:printcolumn:name="Units",type=integer,JSONPath=`.status.unitCount`
// +kubebuilder:printcolumn:name="ReadyUnits",type=integer,JSONPath=`.status.readyUnits`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.template.replicas`,description="replicas per unit"
// +kubebuilder:printcolumn:name="Service",type=string,JSONPath=`.spec.template.serviceName`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Conflict",type=string,JSONPath=`.status.conditions[?(@.type=="Conflict")].status`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type StatefulSetGrid struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   StatefulSetGridSpec `json:"spec"`
	Status WorkloadGridStatus  `json:"status,omitempty"`
}

// StatefulSetGridList is a list of StatefulSetGrids.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type StatefulSetGridList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StatefulSetGrid `json:"items"`
}

// ServiceGridSpec: one Service whose endpoints each node unit sees only inside itself.
type ServiceGridSpec struct {
	// GridUniqKey is the node label whose values define the node units.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`
	GridUniqKey string `json:"gridUniqKey"`
	// TopologyKeys are the Service's topologyKeys: node label keys in order, the first one this
	// node has that selects a ready endpoint wins, "*" (only last) selects any endpoint (e.g.
	// ["zone","*"] to fall back to any unit). Unset: [gridUniqKey], as SuperEdge writes it, or
	// the ServiceGrid's own topologyKeys annotation (a JSON list; not both). The rule is
	// ValidateTopologyKeys'; the API server checks it here, the controller checks the annotation.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=317
	// +kubebuilder:validation:XValidation:rule="self.all(k, self.exists_one(x, x == k))",message="a key may appear only once"
	// +kubebuilder:validation:XValidation:rule="!self.exists(k, k == '*') || self[size(self) - 1] == '*'",message="\"*\" may only be the last key"
	TopologyKeys []string `json:"topologyKeys,omitempty"`
	// Template is the spec of the Service {name}-svc.
	Template corev1.ServiceSpec `json:"template"`
}

// ServiceGridStatus is the observed state of a ServiceGrid.
type ServiceGridStatus struct {
	// ObservedGeneration is the generation the generated Service reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// ServiceName is the name of the generated Service ({name}-svc, or a safe name).
	// +optional
	ServiceName string `json:"serviceName,omitempty"`
	// Conditions: Ready, Conflict.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ServiceGrid makes the Service {name}-svc with topologyKeys set to its gridUniqKey.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sg,categories=superedge
// +kubebuilder:printcolumn:name="GridUniqKey",type=string,JSONPath=`.spec.gridUniqKey`
// +kubebuilder:printcolumn:name="Service",type=string,JSONPath=`.status.serviceName`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.template.type`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ServiceGrid struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ServiceGridSpec   `json:"spec"`
	Status ServiceGridStatus `json:"status,omitempty"`
}

// ServiceGridList is a list of ServiceGrids.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type ServiceGridList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ServiceGrid `json:"items"`
}
