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

// DeploymentGridSpec: one Deployment per node unit.
type DeploymentGridSpec struct {
	// GridUniqKey is the node label whose values define the node units.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`
	GridUniqKey string `json:"gridUniqKey"`
	// Template is the Deployment spec each unit gets.
	Template appsv1.DeploymentSpec `json:"template"`
}

// DeploymentGridStatus holds the status of each unit's Deployment, by unit value.
type DeploymentGridStatus struct {
	// States maps a node unit (gridUniqKey value) to the status of its Deployment.
	// +optional
	States map[string]appsv1.DeploymentStatus `json:"states,omitempty"`
}

// DeploymentGrid replicates a Deployment into every node unit as {name}-{unit}.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=dg,categories=superedge
// +kubebuilder:printcolumn:name="GridUniqKey",type=string,JSONPath=`.spec.gridUniqKey`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.template.replicas`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DeploymentGrid struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   DeploymentGridSpec   `json:"spec"`
	Status DeploymentGridStatus `json:"status,omitempty"`
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
	Template appsv1.StatefulSetSpec `json:"template"`
}

// StatefulSetGridStatus holds the status of each unit's StatefulSet, by unit value.
type StatefulSetGridStatus struct {
	// States maps a node unit (gridUniqKey value) to the status of its StatefulSet.
	// +optional
	States map[string]appsv1.StatefulSetStatus `json:"states,omitempty"`
}

// StatefulSetGrid replicates a StatefulSet into every node unit as {name}-{unit}.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ssg,categories=superedge
// +kubebuilder:printcolumn:name="GridUniqKey",type=string,JSONPath=`.spec.gridUniqKey`
// +kubebuilder:printcolumn:name="Service",type=string,JSONPath=`.spec.template.serviceName`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.template.replicas`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type StatefulSetGrid struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   StatefulSetGridSpec   `json:"spec"`
	Status StatefulSetGridStatus `json:"status,omitempty"`
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
	// Template is the spec of the Service {name}-svc.
	Template corev1.ServiceSpec `json:"template"`
}

// ServiceGridStatus is the observed state of a ServiceGrid.
type ServiceGridStatus struct {
	// ObservedGeneration is the generation the generated Service reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions, e.g. Synced.
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
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.template.type`
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
