// Package v1 holds the jke.jdcloud.com/v1 API: StaticIP (one record per pod that owns a
// fixed IP) and IPRange (a CIDR owned by one node).
//
// +k8s:deepcopy-gen=package
// +groupName=jke.jdcloud.com
// +kubebuilder:object:generate=true
package v1
