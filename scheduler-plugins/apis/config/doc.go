// Package config holds the internal (unversioned) types of the staticip scheduler plugins'
// arguments. They are registered into the kube-scheduler's config API group, so that a
// KubeSchedulerConfiguration pluginConfig entry named after a plugin decodes into them.
//
// +k8s:deepcopy-gen=package
package config
