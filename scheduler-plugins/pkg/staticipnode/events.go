package staticipnode

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/workloadref"
)

// ForHandle is ForScheduler for a plugin's framework handle.
func ForHandle(ctx context.Context, h fwk.Handle) (*Cache, error) {
	if h.KubeConfig() == nil {
		return nil, fmt.Errorf("staticipnode: the framework handle has no kubeconfig")
	}
	client, err := versioned.NewForConfig(h.KubeConfig())
	if err != nil {
		return nil, fmt.Errorf("staticipnode: staticip client: %w", err)
	}
	return ForScheduler(ctx, h.SharedInformerFactory(), client)
}

// StaticIPFields is what the scheduler needs of one StaticIP.
type StaticIPFields struct {
	Namespace, Name, UID, ResourceVersion string
	// Generation is metadata.generation (0 when unknown: objects not from an API server).
	Generation int64
	Deleting   bool
	Phase      jkev1.StaticIPPhase
	// Pod is the pod the record belongs to (spec.pod, or the record's name).
	Pod, Node, IP string
	// Workload the record belongs to (spec.apiGroup, spec.kind, spec.ref).
	Workload workloadref.Ref
	Request  Resources
}

// Active reports whether the record may hold its pod's place on a node (its pod may still
// be present; see the package comment).
func (f *StaticIPFields) Active() bool {
	return f != nil && f.Node != "" && !f.Deleting && f.Phase != jkev1.StaticIPReleased
}

// IPRangeFields is what the scheduler needs of one IPRange.
type IPRangeFields struct {
	Name, UID, ResourceVersion string
	Generation                 int64
	Spec                       jkev1.IPRangeSpec
	// Restricted: a namespace pool's block (label jkev1.LabelIPPoolRestricted, set when the
	// allocator creates it): only pods of that pool get its addresses.
	Restricted bool
}

func staticIPFieldsOf(sip *jkev1.StaticIP) *StaticIPFields {
	return &StaticIPFields{
		Namespace: sip.Namespace, Name: sip.Name, UID: string(sip.UID), ResourceVersion: sip.ResourceVersion,
		Generation: sip.Generation, Deleting: sip.DeletionTimestamp != nil, Phase: sip.Status.Phase,
		Pod: StaticIPPodName(sip), Node: sip.Spec.Node, IP: sip.Spec.IP, Workload: workloadref.FromRecord(sip.Spec.APIGroup, sip.Spec.Kind, sip.Spec.Ref),
		Request: ResourcesFromList(sip.Spec.Resources),
	}
}

func ipRangeFieldsOf(r *jkev1.IPRange) *IPRangeFields {
	return &IPRangeFields{Name: r.Name, UID: string(r.UID), ResourceVersion: r.ResourceVersion, Generation: r.Generation, Spec: r.Spec,
		Restricted: r.Labels[jkev1.LabelIPPoolRestricted] == "true"}
}

// StaticIPEvent is one StaticIP change the cache applied, as the plugins' hints see it
// (status-only updates are dropped before: they change nothing the scheduler reads).
type StaticIPEvent struct {
	// Old is nil for an add, New for a deletion.
	Old, New *StaticIPFields
}

// IPRangeEvent is one IPRange change the cache applied.
type IPRangeEvent struct {
	Old, New *IPRangeFields
}

// statusOnly: both come from the API server (generation set), the spec did not change
// (same generation) and neither did the deletion state.
func statusOnly(a, b metav1.Object) bool {
	return a.GetGeneration() != 0 && a.GetGeneration() == b.GetGeneration() &&
		(a.GetDeletionTimestamp() == nil) == (b.GetDeletionTimestamp() == nil)
}

// StaticIPPodName is the name of the pod a StaticIP belongs to.
func StaticIPPodName(sip *jkev1.StaticIP) string {
	if sip.Spec.Pod != "" {
		return sip.Spec.Pod
	}
	return sip.Name
}
