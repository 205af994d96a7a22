package v1alpha1

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// PodUpdatePolicyType says how a pod moves to a new revision.
// +kubebuilder:validation:Enum=ReCreate;InPlaceIfPossible
type PodUpdatePolicyType string

const (
	// RecreatePodUpdatePolicy deletes the pod and creates it again from the new revision.
	RecreatePodUpdatePolicy PodUpdatePolicyType = "ReCreate"
	// InPlaceIfPossiblePodUpdatePolicy patches container images in place when nothing else in
	// the pod template changed, so the pod, its node and its IP stay; otherwise it recreates.
	InPlaceIfPossiblePodUpdatePolicy PodUpdatePolicyType = "InPlaceIfPossible"
)

// RollingUpdateEnhancedStatefulSetStrategy extends the StatefulSet rolling update.
type RollingUpdateEnhancedStatefulSetStrategy struct {
	// Partition: only pods with an ordinal >= partition are moved to the update revision.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Partition *int32 `json:"partition,omitempty"`
	// MaxUnavailable is the most pods (a number, or a percentage of replicas rounded down,
	// at least 1) that may be unavailable during the update, counting pods that were
	// already unavailable. Default 1.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^(100|[1-9][0-9]?)%$')",message="must be a positive number or a percentage from 1% to 100%"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	// Paused stops the update: no pod is moved to a new revision while true. Scaling still works.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// PodUpdatePolicy is ReCreate (default) or InPlaceIfPossible.
	// +optional
	// +kubebuilder:default=ReCreate
	PodUpdatePolicy PodUpdatePolicyType `json:"podUpdatePolicy,omitempty"`
}

// EnhancedStatefulSetUpdateStrategy is RollingUpdate (default) or OnDelete.
// +kubebuilder:validation:XValidation:rule="!has(self.rollingUpdate) || !has(self.type) || self.type == 'RollingUpdate'",message="rollingUpdate may only be set when type is RollingUpdate"
type EnhancedStatefulSetUpdateStrategy struct {
	// Type is RollingUpdate or OnDelete.
	// +optional
	// +kubebuilder:validation:Enum=RollingUpdate;OnDelete
	// +kubebuilder:default=RollingUpdate
	Type appsv1.StatefulSetUpdateStrategyType `json:"type,omitempty"`
	// RollingUpdate parameters, when Type is RollingUpdate.
	// +optional
	RollingUpdate *RollingUpdateEnhancedStatefulSetStrategy `json:"rollingUpdate,omitempty"`
}

// EnhancedStatefulSetSpec is the StatefulSet spec with an enhanced update strategy.
// Like a StatefulSet's, the selector, volumeClaimTemplates, serviceName and
// podManagementPolicy cannot change after creation (the pods' identity, claims and ordering
// depend on them).
// +kubebuilder:validation:XValidation:rule="self.selector == oldSelf.selector",message="selector is immutable",fieldPath=".selector"
// +kubebuilder:validation:XValidation:rule="has(self.serviceName) == has(oldSelf.serviceName) && (!has(self.serviceName) || self.serviceName == oldSelf.serviceName)",message="serviceName is immutable",fieldPath=".serviceName"
// +kubebuilder:validation:XValidation:rule="has(self.podManagementPolicy) == has(oldSelf.podManagementPolicy) && (!has(self.podManagementPolicy) || self.podManagementPolicy == oldSelf.podManagementPolicy)",message="podManagementPolicy is immutable",fieldPath=".podManagementPolicy"
// +kubebuilder:validation:XValidation:rule="has(self.volumeClaimTemplates) == has(oldSelf.volumeClaimTemplates) && (!has(self.volumeClaimTemplates) || self.volumeClaimTemplates == oldSelf.volumeClaimTemplates)",message="volumeClaimTemplates is immutable",fieldPath=".volumeClaimTemplates"
type EnhancedStatefulSetSpec struct {
	// Replicas is the desired number of pods. Default 1.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Replicas *int32 `json:"replicas,omitempty"`
	// Selector must match the labels of the pod template.
	Selector *metav1.LabelSelector `json:"selector"`
	// Template is the pod template.
	Template corev1.PodTemplateSpec `json:"template"`
	// VolumeClaimTemplates: one PVC per template and ordinal, as in a StatefulSet.
	// +optional
	// +listType=atomic
	VolumeClaimTemplates []corev1.PersistentVolumeClaim `json:"volumeClaimTemplates,omitempty"`
	// ServiceName is the headless Service that gives the pods their stable network identity.
	// +optional
	ServiceName string `json:"serviceName,omitempty"`
	// PodManagementPolicy is OrderedReady (default) or Parallel.
	// +optional
	// +kubebuilder:validation:Enum=OrderedReady;Parallel
	// +kubebuilder:default=OrderedReady
	PodManagementPolicy appsv1.PodManagementPolicyType `json:"podManagementPolicy,omitempty"`
	// UpdateStrategy says how pods move to a new revision.
	// +optional
	UpdateStrategy EnhancedStatefulSetUpdateStrategy `json:"updateStrategy,omitempty"`
	// RevisionHistoryLimit is how many old ControllerRevisions are kept. Default 10.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RevisionHistoryLimit *int32 `json:"revisionHistoryLimit,omitempty"`
	// MinReadySeconds a pod must be ready before it counts as available.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MinReadySeconds int32 `json:"minReadySeconds,omitempty"`
	// PersistentVolumeClaimRetentionPolicy as in a StatefulSet.
	// +optional
	PersistentVolumeClaimRetentionPolicy *appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy `json:"persistentVolumeClaimRetentionPolicy,omitempty"`
	// StaticIPRetentionPolicy says when the pods' StaticIP records (and so their IPs) are
	// deleted: when the set scales below an ordinal, and when the set is deleted.
	// +optional
	StaticIPRetentionPolicy *jkev1.StaticIPRetentionPolicy `json:"staticIPRetentionPolicy,omitempty"`
}

// EnhancedStatefulSetStatus is the observed state, as a StatefulSet's plus conditions.
type EnhancedStatefulSetStatus struct {
	// ObservedGeneration is the generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Replicas is the number of pods created by the controller.
	Replicas int32 `json:"replicas"`
	// ReadyReplicas is the number of pods with a Ready condition.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// AvailableReplicas is the number of pods ready for at least minReadySeconds.
	// +optional
	AvailableReplicas int32 `json:"availableReplicas,omitempty"`
	// CurrentReplicas is the number of pods at currentRevision.
	// +optional
	CurrentReplicas int32 `json:"currentReplicas,omitempty"`
	// UpdatedReplicas is the number of pods at updateRevision.
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas,omitempty"`
	// CurrentRevision is the revision the pods below the partition run.
	// +optional
	CurrentRevision string `json:"currentRevision,omitempty"`
	// UpdateRevision is the revision of the current pod template.
	// +optional
	UpdateRevision string `json:"updateRevision,omitempty"`
	// CollisionCount is used to avoid ControllerRevision name collisions.
	// +optional
	CollisionCount *int32 `json:"collisionCount,omitempty"`
	// LabelSelector is the selector in string form, for the scale subresource.
	// +optional
	LabelSelector string `json:"labelSelector,omitempty"`
	// Conditions: Progressing, Available, Paused, StaticIPConflict.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EnhancedStatefulSet is a StatefulSet that can update many pods at once under a
// maxUnavailable budget, pause, roll back, update in place, and keep its pods' IPs.
//
// +genclient
// +genclient:method=GetScale,verb=get,subresource=scale,result=k8s.io/api/autoscaling/v1.Scale
// +genclient:method=UpdateScale,verb=update,subresource=scale,input=k8s.io/api/autoscaling/v1.Scale,result=k8s.io/api/autoscaling/v1.Scale
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.labelSelector
// +kubebuilder:resource:shortName=ests,categories=staticip
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Current",type=integer,JSONPath=`.status.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Updated",type=integer,JSONPath=`.status.updatedReplicas`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.availableReplicas`
// +kubebuilder:printcolumn:name="Partition",type=integer,JSONPath=`.spec.updateStrategy.rollingUpdate.partition`
// +kubebuilder:printcolumn:name="MaxUnavailable",type=string,JSONPath=`.spec.updateStrategy.rollingUpdate.maxUnavailable`
// +kubebuilder:printcolumn:name="Paused",type=boolean,JSONPath=`.spec.updateStrategy.rollingUpdate.paused`
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.status.updateRevision`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EnhancedStatefulSet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   EnhancedStatefulSetSpec   `json:"spec"`
	Status EnhancedStatefulSetStatus `json:"status,omitempty"`
}

// EnhancedStatefulSetList is a list of EnhancedStatefulSets.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type EnhancedStatefulSetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EnhancedStatefulSet `json:"items"`
}
