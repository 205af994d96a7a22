// Package workloadref answers one question for the StaticIP controller, the scheduler plugins
// and the CNI plugin: does a StaticIP record belong to a pod's controller? A record names its
// workload by spec.apiGroup, spec.kind and spec.ref; a workload is identified by all three.
// Kind and name alone are not enough: apps' StatefulSet "web" and OpenKruise's StatefulSet
// "web" (apps.kruise.io) are different workloads whose pods are both called web-0, and the IP
// one retains must never be handed to the other.
//
// The package has no dependencies so the CNI binary can use it without the API machinery.
package workloadref

import "strings"

// The API groups of the workloads whose pods the StaticIP controller records.
const (
	// AppsGroup is the group of the native StatefulSet.
	AppsGroup = "apps"
	// JKEGroup is the group of the EnhancedStatefulSet.
	JKEGroup = "jke.jdcloud.com"
	// KruiseGroup is the group of OpenKruise's Advanced StatefulSet (kind StatefulSet).
	KruiseGroup = "apps.kruise.io"
)

// Ref identifies a workload: its API group ("" for the core group), kind and name.
type Ref struct {
	Group, Kind, Name string
}

// String is "Kind.group name", the form Events and logs use ("StatefulSet.apps web").
func (r Ref) String() string {
	if r.Group == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + "." + r.Group + " " + r.Name
}

// FromOwner is the workload an owner reference names: apiVersion "apps/v1" is group "apps",
// "v1" the core group.
func FromOwner(apiVersion, kind, name string) Ref {
	group, _, found := strings.Cut(apiVersion, "/")
	if !found {
		group = ""
	}
	return Ref{Group: group, Kind: kind, Name: name}
}

// FromRecord is the workload a StaticIP's spec names (spec.apiGroup, spec.kind, spec.ref). A
// record written before spec.apiGroup existed has the group its kind implies: the controller
// only ever recorded StatefulSets (apps) and EnhancedStatefulSets (jke.jdcloud.com). For any
// other kind without a group the group stays unknown ("") and is not compared.
func FromRecord(apiGroup, kind, ref string) Ref {
	if apiGroup == "" {
		apiGroup = ImpliedGroup(kind)
	}
	return Ref{Group: apiGroup, Kind: kind, Name: ref}
}

// ImpliedGroup is the group of a kind the controller records, "" for any other kind.
func ImpliedGroup(kind string) string {
	switch kind {
	case "StatefulSet":
		return AppsGroup
	case "EnhancedStatefulSet":
		return JKEGroup
	}
	return ""
}

// Belongs reports whether a record naming workload rec (see FromRecord) may be used by a pod
// whose controller is owner (nil: the pod has no controller). A record that names no workload
// yet (empty name) belongs to any pod of its pod name, as before workloads were recorded;
// otherwise the name, the kind (when the record has one) and the group (when known) must match.
func Belongs(rec Ref, owner *Ref) bool {
	if rec.Name == "" {
		return true
	}
	if owner == nil || owner.Name != rec.Name {
		return false
	}
	if rec.Kind != "" && owner.Kind != rec.Kind {
		return false
	}
	return rec.Group == "" || owner.Group == rec.Group
}
