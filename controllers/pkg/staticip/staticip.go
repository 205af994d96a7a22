// Package staticip keeps the StaticIP records of pods with fixed IPs: the helpers a
// workload controller calls before it creates a pod, and the controller that records a
// live pod's IP, node and resource requests and applies the retention policy.
package staticip

import (
	"context"
	"fmt"
	"reflect"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1listers "github.com/staticip/staticip/apis/generated/listers/jke/v1"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/apis/workloadref"
)

// Enabled says whether a workload's pods get fixed IPs: the enable annotation is "true" on
// the workload or on its pod template.
func Enabled(workload, template map[string]string) bool {
	return workload[jkev1.AnnotationEnable] == "true" || template[jkev1.AnnotationEnable] == "true"
}

// RetentionPolicy returns p with the defaults (Delete, Delete) filled in.
func RetentionPolicy(p *jkev1.StaticIPRetentionPolicy) jkev1.StaticIPRetentionPolicy {
	out := jkev1.StaticIPRetentionPolicy{WhenScaled: jkev1.DeleteStaticIP, WhenDeleted: jkev1.DeleteStaticIP}
	if p != nil {
		if p.WhenScaled != "" {
			out.WhenScaled = p.WhenScaled
		}
		if p.WhenDeleted != "" {
			out.WhenDeleted = p.WhenDeleted
		}
	}
	return out
}

// Workload identifies the owner of the pods a StaticIP belongs to.
type Workload struct {
	Object    metav1.Object
	GVK       schema.GroupVersionKind
	Retention jkev1.StaticIPRetentionPolicy
}

// EnhancedStatefulSetWorkload is set as the workload of its pods' StaticIPs, with the set's
// own retention policy.
func EnhancedStatefulSetWorkload(set *jkev1alpha1.EnhancedStatefulSet) Workload {
	return Workload{Object: set, GVK: EnhancedStatefulSetKind, Retention: RetentionPolicy(set.Spec.StaticIPRetentionPolicy)}
}

// Ref is the workload w: API group, kind and name.
func (w Workload) Ref() workloadref.Ref { return refOf(w.GVK, w.Object.GetName()) }

// refOf is workload name of group and kind gvk.
func refOf(gvk schema.GroupVersionKind, name string) workloadref.Ref {
	return workloadref.Ref{Group: gvk.Group, Kind: gvk.Kind, Name: name}
}

// RecordRef is the workload sip names (spec.apiGroup, spec.kind, spec.ref; the group implied
// by the kind in records written before spec.apiGroup).
func RecordRef(sip *jkev1.StaticIP) workloadref.Ref {
	return workloadref.FromRecord(sip.Spec.APIGroup, sip.Spec.Kind, sip.Spec.Ref)
}

// recordOfKind says whether sip names a workload of group and kind gvk.
func recordOfKind(sip *jkev1.StaticIP, gvk schema.GroupVersionKind) bool {
	return RecordRef(sip) == refOf(gvk, sip.Spec.Ref)
}

// ConflictError says a StaticIP with the pod's name belongs to another workload.
type ConflictError struct {
	Name  string
	Owner workloadref.Ref
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("StaticIP %s belongs to %s, not to this workload", e.Name, e.Owner)
}

// desiredOwnerRefs returns sip's owner references with the workload's reference added (when
// whenDeleted is Delete, so the garbage collector deletes the record with the workload) or
// removed (Retain).
func desiredOwnerRefs(refs []metav1.OwnerReference, w Workload) []metav1.OwnerReference {
	var out []metav1.OwnerReference
	for _, r := range refs {
		if r.Kind == w.GVK.Kind && r.APIVersion == w.GVK.GroupVersion().String() && r.Name == w.Object.GetName() {
			continue // ours, possibly of an earlier incarnation (other UID): replaced below
		}
		out = append(out, r)
	}
	if w.Retention.WhenDeleted == jkev1.DeleteStaticIP {
		out = append(out, metav1.OwnerReference{
			APIVersion: w.GVK.GroupVersion().String(), Kind: w.GVK.Kind, Name: w.Object.GetName(), UID: w.Object.GetUID(),
			BlockOwnerDeletion: new(true),
		})
	}
	return out
}

// NewStaticIP is the Pending record for pod podName of w.
func NewStaticIP(w Workload, podName string) *jkev1.StaticIP {
	policy := w.Retention
	return &jkev1.StaticIP{
		ObjectMeta: metav1.ObjectMeta{
			Name: podName, Namespace: w.Object.GetNamespace(),
			OwnerReferences: desiredOwnerRefs(nil, w),
		},
		Spec: jkev1.StaticIPSpec{Ref: w.Object.GetName(), APIGroup: w.GVK.Group, Kind: w.GVK.Kind, Pod: podName, RetentionPolicy: &policy},
	}
}

// AnnotationClaimed on a StaticIP is set by Ensure, to the time it re-used the record for a
// pod about to be created. The write is the point: it changes the record's resourceVersion,
// so a release decided on the older version (the StaticIP controller deletes with a
// resourceVersion precondition) fails instead of deleting the record of a new pod.
const AnnotationClaimed = "staticip.jke.jdcloud.com/claimed"

// ReleasingError says the record of a pod is being released (scale-down retention); the pod
// must not be created with its IP. Retry: the record is gone soon and a fresh one is made.
type ReleasingError struct{ Name string }

func (e *ReleasingError) Error() string {
	return fmt.Sprintf("StaticIP %s is being released; the pod waits for a new record", e.Name)
}

// Ensure makes sure StaticIP podName exists for w before the pod is created and returns it:
// it creates a Pending record, or claims an existing one of the same workload (one write that
// also refreshes the owner reference and retention policy). A record of another workload is a
// *ConflictError and is never taken over; a record being released is a *ReleasingError. A
// claim that conflicts with a write the cache did not show yet is decided again on the record
// as the API server has it (claimAttempts in all).
func Ensure(ctx context.Context, client versioned.Interface, lister jkev1listers.StaticIPLister, w Workload, podName string, now time.Time) (*jkev1.StaticIP, error) {
	ns := w.Object.GetNamespace()
	sip, err := lister.StaticIPs(ns).Get(podName)
	if apierrors.IsNotFound(err) {
		// The cache may lag behind a record created a moment ago: ask the API server.
		sip, err = client.JkeV1().StaticIPs(ns).Get(ctx, podName, metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		created, err := client.JkeV1().StaticIPs(ns).Create(ctx, NewStaticIP(w, podName), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating StaticIP %s/%s: %w (retrying)", ns, podName, err)
		}
		if err != nil {
			return nil, fmt.Errorf("creating StaticIP %s/%s: %w", ns, podName, err)
		}
		created.Status.Phase = jkev1.StaticIPPending
		if withStatus, err := client.JkeV1().StaticIPs(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err == nil {
			created = withStatus
		} // else: the StaticIP controller sets the phase on its next sync.
		return created, nil
	}
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		claimed, err := claim(ctx, client, sip, w, podName, now)
		if !apierrors.IsConflict(err) || attempt == claimAttempts {
			return claimed, err
		}
		// The cache was behind someone else's write (node failover re-pointing the record,
		// the StaticIP controller's status): decide again on the record as it is now, rather
		// than fail the caller's sync and wait out its retry backoff.
		if sip, err = client.JkeV1().StaticIPs(ns).Get(ctx, podName, metav1.GetOptions{}); err != nil {
			return nil, fmt.Errorf("claiming StaticIP %s/%s: re-read after a conflict: %w", ns, podName, err)
		}
	}
}

// claimAttempts bounds Ensure's claims of one record: a record that changes under every
// attempt is left to the caller's retry.
const claimAttempts = 3

// claim re-uses the existing record sip for podName of w: refused if it belongs to another
// workload or is being released, else an optimistic-lock update of that version (the
// workload, the retention policy and the claim annotation): if the StaticIP controller marked
// it Released in the meantime, the update conflicts.
func claim(ctx context.Context, client versioned.Interface, sip *jkev1.StaticIP, w Workload, podName string, now time.Time) (*jkev1.StaticIP, error) {
	ns := w.Object.GetNamespace()
	if !SameWorkload(sip, w) {
		return sip, &ConflictError{Name: podName, Owner: RecordRef(sip)}
	}
	if Releasing(sip) {
		return nil, &ReleasingError{Name: ns + "/" + podName}
	}
	policy := w.Retention
	upd := sip.DeepCopy()
	upd.OwnerReferences = desiredOwnerRefs(sip.OwnerReferences, w)
	upd.Spec.RetentionPolicy = &policy
	upd.Spec.Ref, upd.Spec.APIGroup, upd.Spec.Kind = w.Object.GetName(), w.GVK.Group, w.GVK.Kind
	if upd.Spec.Pod == "" {
		upd.Spec.Pod = podName
	}
	if upd.Annotations == nil {
		upd.Annotations = map[string]string{}
	}
	upd.Annotations[AnnotationClaimed] = now.UTC().Format(time.RFC3339Nano)
	claimed, err := client.JkeV1().StaticIPs(ns).Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("claiming StaticIP %s/%s: %w", ns, podName, err)
	}
	if claimed.Status.Phase == jkev1.StaticIPReleased {
		return nil, &ReleasingError{Name: ns + "/" + podName}
	}
	return claimed, nil
}

// Releasing says whether sip is being released (marked Released, or deleting): it is never
// put on a new pod.
func Releasing(sip *jkev1.StaticIP) bool {
	return sip.DeletionTimestamp != nil || sip.Status.Phase == jkev1.StaticIPReleased
}

// SameWorkload says whether sip belongs to w (or to nobody yet): API group, kind and name.
func SameWorkload(sip *jkev1.StaticIP, w Workload) bool {
	ref := w.Ref()
	return workloadref.Belongs(RecordRef(sip), &ref)
}

// ReconcileOwnership returns sip with the owner references and retention policy w's policy
// asks for (whenDeleted Delete: an owner reference to w; Retain: none), and whether that
// differs from sip.
func ReconcileOwnership(sip *jkev1.StaticIP, w Workload) (*jkev1.StaticIP, bool) {
	refs := desiredOwnerRefs(sip.OwnerReferences, w)
	policy := w.Retention
	if reflect.DeepEqual(refs, sip.OwnerReferences) && sip.Spec.RetentionPolicy != nil && *sip.Spec.RetentionPolicy == policy {
		return sip, false
	}
	upd := sip.DeepCopy()
	upd.OwnerReferences = refs
	upd.Spec.RetentionPolicy = &policy
	return upd, true
}

// NodeAffinityRequired reports whether pod is already pinned to node by a required node
// affinity on metadata.name in every term.
func NodeAffinityRequired(pod *corev1.Pod, node string) bool {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return false
	}
	for _, t := range terms {
		found := false
		for _, f := range t.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 && f.Values[0] == node {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// DecoratePod gives a pod about to be created the IP and node of its StaticIP: the
// ip-address annotation for the CNI and a required node affinity to the node that holds the
// IP. Node selector terms are ORed, so the node requirement is added to every term.
func DecoratePod(pod *corev1.Pod, sip *jkev1.StaticIP) {
	if sip == nil || sip.Spec.IP == "" || sip.Spec.Node == "" {
		return
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[podip.AnnotationIPAddress] = sip.Spec.Addresses() // both of a dual-stack record
	if NodeAffinityRequired(pod, sip.Spec.Node) {
		return
	}
	req := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{sip.Spec.Node}}
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.NodeAffinity == nil {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := pod.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{}}}
	}
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for i := range terms {
		terms[i].MatchFields = append(terms[i].MatchFields, req)
	}
}
