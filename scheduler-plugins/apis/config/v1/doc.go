// Package v1 holds the versioned (kubescheduler.config.k8s.io/v1) arguments of the
// staticip scheduler plugins, as written in a KubeSchedulerConfiguration:
//
//	pluginConfig:
//	- name: PodFitsResourcesWithStaticIP
//	  args:
//	    checkIPs: true
//	    nodesWithoutIPRange: Allow
//
// +k8s:deepcopy-gen=package
package v1
