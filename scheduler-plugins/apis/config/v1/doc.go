// Package v1 holds the versioned (kubescheduler.config.k8s.io/v1) arguments of the
// staticip scheduler plugins, as written in a KubeSchedulerConfiguration:
//
//	pluginConfig:
//	- name: PodFitsResourcesWithStaticIP
//	  args:
//	    checkIPs: true
//	    nodesWithoutIPRange: Allow
//
// Conversion to the internal types and defaulting are generated (conversion-gen,
// defaulter-gen: tools/codegen.sh), as for kube-scheduler's own config; the conversion to
// the internal types also validates, so a bad value fails the configuration load.
//
// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=github.com/staticip/staticip/scheduler-plugins/apis/config
// +k8s:defaulter-gen=TypeMeta
// +groupName=kubescheduler.config.k8s.io
package v1
