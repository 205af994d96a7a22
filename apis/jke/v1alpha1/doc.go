// Package v1alpha1 holds the jke.jdcloud.com/v1alpha1 API: EnhancedStatefulSet, a StatefulSet
// that updates many pods at once under an availability budget and keeps their fixed IPs, and
// NodeFailover, the record of one failed node's ranges and static IPs moving to a spare.
//
// +k8s:deepcopy-gen=package
// +groupName=jke.jdcloud.com
// +kubebuilder:object:generate=true
package v1alpha1
