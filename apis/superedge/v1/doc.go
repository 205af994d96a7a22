// Package v1 holds the superedge.io/v1 API as SuperEdge defines it: DeploymentGrid,
// StatefulSetGrid and ServiceGrid, which replicate a workload or a Service into every
// node unit (the nodes sharing one value of the label spec.gridUniqKey).
//
// +k8s:deepcopy-gen=package
// +groupName=superedge.io
// +kubebuilder:object:generate=true
package v1
