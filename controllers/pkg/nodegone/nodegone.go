// Package nodegone is the one rule by which a block may leave a node whose Node object was
// deleted: the range allocator (controllers/pkg/ippool) and node failover
// (controllers/pkg/nodefailover) both ask Decide, so whichever of them runs, a deleted node's
// block leaves it only once the node is proven gone. A Node object that exists is never judged
// here: a live node gives a block up only through its fence (the out-of-service taint, which
// node failover acts on).
//
// Decide is pure: the callers gather the Evidence (a live GET of the node's Lease: ReadLease, the
// operator's annotations, the pod objects bound to the node or holding an IP of its blocks).
// ClaimsHeld is the seam for the per-range claims of issue 37: once agents claim ranges with an
// expiry, the callers feed it the ranges whose claim by this node has not expired.
package nodegone

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
)

// DefaultLeaseGoneAfter is how long a deleted node must have shown no sign of life (its Lease
// kube-node-lease/<node> not renewed, or absent) before it counts as gone.
const DefaultLeaseGoneAfter = 10 * time.Minute

// DefaultLeaseDuration is how long a renewal keeps a node alive when the Lease does not say
// (the kubelet's default leaseDurationSeconds).
const DefaultLeaseDuration = 40 * time.Second

// Reasons of a verdict.
const (
	// ReasonNodeExists: the Node object exists; a live node gives a block up only through its fence.
	ReasonNodeExists = "NodeExists"
	// ReasonLeaseRenewed: the node's Lease was renewed within its duration: its kubelet runs.
	ReasonLeaseRenewed = "LeaseRenewed"
	// ReasonClaimsHeld: the node's agent still holds an unexpired claim on one of the blocks.
	ReasonClaimsHeld = "ClaimsHeld"
	// ReasonPodsRemain: a pod object bound to the node, or holding an IP of its blocks, exists.
	ReasonPodsRemain = "PodsRemain"
	// ReasonWaiting: no sign of life, but not for long enough yet.
	ReasonWaiting = "WaitingForNodeGone"
	// ReasonOperatorSaysOff: the operator said the machine is off.
	ReasonOperatorSaysOff = "OperatorSaysOff"
	// ReasonLeaseExpired: no sign of life for longer than the bound, and nothing holds an IP.
	ReasonLeaseExpired = "LeaseExpired"
)

// Evidence is what is known about a node, read live where a cache could lag.
type Evidence struct {
	Node string
	// NodeExists: a live GET found the Node object.
	NodeExists bool
	// GoneSince: when the node was first seen without its Node object (the allocator's
	// node-gone-since mark, the failover record's start). Zero: not seen gone before now.
	GoneSince time.Time
	// LeaseRenewed: the renewTime of kube-node-lease/<node> (zero: no Lease, or never renewed).
	LeaseRenewed time.Time
	// LeaseDuration: the Lease's leaseDurationSeconds (0: DefaultLeaseDuration).
	LeaseDuration time.Duration
	// OperatorSaysOff: the operator stated that the machine is off: the node-off annotation
	// (on the NodeFailover or on the IPRange), --node-deletion-is-fence, or the out-of-service
	// taint the Node carried when it was deleted.
	OperatorSaysOff bool
	// ClaimsHeld: ranges the node's agent still claims (unexpired). Fed by the claims protocol;
	// nil until it exists.
	ClaimsHeld []string
	// HoldingPods: pod objects bound to the node (not on the host network) or holding an IP of
	// the blocks in question.
	HoldingPods []string
	Now         time.Time
	// GoneAfter: how long without a sign of life proves the node gone (0: DefaultLeaseGoneAfter).
	GoneAfter time.Duration
}

// Verdict says whether the node is proven gone, why, and when to look again if not.
type Verdict struct {
	Gone         bool
	Reason       string
	Message      string
	RecheckAfter time.Duration
}

// Decide applies the rule. A node is alive while its Node object exists or its Lease is
// renewed (even after its Node was deleted: a kubelet that still runs recreates and renews it),
// and held while its agent claims a block. Otherwise it is gone once the operator says so (a
// fence), or once it has shown no sign of life (Lease renewal, the deletion itself) for
// GoneAfter and no pod object may hold one of its IPs.
func Decide(e Evidence) Verdict {
	if e.NodeExists {
		return Verdict{Reason: ReasonNodeExists, Message: fmt.Sprintf("Node %s exists: its blocks leave it only through its fence (%s)", e.Node, jkev1alpha1.TaintOutOfService)}
	}
	leaseFor := e.LeaseDuration
	if leaseFor <= 0 {
		leaseFor = DefaultLeaseDuration
	}
	if !e.LeaseRenewed.IsZero() {
		if left := e.LeaseRenewed.Add(leaseFor).Sub(e.Now); left > 0 {
			return Verdict{Reason: ReasonLeaseRenewed, RecheckAfter: left, Message: fmt.Sprintf(
				"node %s: its Node object is deleted but its Lease kube-node-lease/%s was renewed at %s: its kubelet still runs, so it may still serve its addresses",
				e.Node, e.Node, e.LeaseRenewed.UTC().Format(time.RFC3339))}
		}
	}
	if len(e.ClaimsHeld) > 0 {
		return Verdict{Reason: ReasonClaimsHeld, Message: fmt.Sprintf("node %s still claims %s", e.Node, shortList(e.ClaimsHeld))}
	}
	if e.OperatorSaysOff {
		// A fence: what pod objects still hold is then the business of whoever acts on it (node
		// failover's SourceEmpty step, the allocator's holders), as for the out-of-service taint.
		return Verdict{Gone: true, Reason: ReasonOperatorSaysOff, Message: fmt.Sprintf("node %s: the operator says the machine is off", e.Node)}
	}
	if len(e.HoldingPods) > 0 {
		return Verdict{Reason: ReasonPodsRemain, Message: fmt.Sprintf("node %s: pod objects may still hold its IPs: %s", e.Node, shortList(e.HoldingPods))}
	}
	after := e.GoneAfter
	if after <= 0 {
		after = DefaultLeaseGoneAfter
	}
	// The last sign of life: the later of the Lease's renewal and the moment the node was seen
	// gone (the Lease goes with the Node through its owner reference, so "absent" alone says
	// nothing about how long).
	last := e.GoneSince
	if last.IsZero() {
		last = e.Now
	}
	if e.LeaseRenewed.After(last) {
		last = e.LeaseRenewed
	}
	if left := last.Add(after).Sub(e.Now); left > 0 {
		return Verdict{Reason: ReasonWaiting, RecheckAfter: left, Message: fmt.Sprintf(
			"node %s: no sign of life since %s; it counts as gone %s after that (%s left), or at once when the operator says it is off (annotation %s=true)",
			e.Node, last.UTC().Format(time.RFC3339), after, left.Round(time.Second), jkev1alpha1.AnnotationNodeOff)}
	}
	return Verdict{Gone: true, Reason: ReasonLeaseExpired, Message: fmt.Sprintf(
		"node %s: no Node object, no Lease renewal since %s (longer than %s) and no pod object holds one of its IPs",
		e.Node, last.UTC().Format(time.RFC3339), after)}
}

func shortList(items []string) string {
	if len(items) > 10 {
		return strings.Join(items[:10], ", ") + fmt.Sprintf(" and %d more", len(items)-10)
	}
	return strings.Join(items, ", ")
}

// ReadLease fills e.LeaseRenewed and e.LeaseDuration from the node's Lease
// kube-node-lease/<e.Node>, read live (a cached Lease would lag the renewals it is about).
// A Lease that does not exist leaves them zero.
func ReadLease(ctx context.Context, kube kubernetes.Interface, e *Evidence) error {
	lease, err := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, e.Node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("read the Lease %s/%s: %w", corev1.NamespaceNodeLease, e.Node, err)
	}
	if lease.Spec.RenewTime != nil {
		e.LeaseRenewed = lease.Spec.RenewTime.Time
	}
	if lease.Spec.LeaseDurationSeconds != nil {
		e.LeaseDuration = time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	}
	return nil
}

// HoldingPods names the pod objects that may still hold an IP of the failed node: any pod with
// an IP inside one of the node's ranges, and any pod bound to the node that is not on the
// host network (its sandbox may hold an address the API never saw). Pod GC force-deletes them
// once the node is out-of-service; until then nothing moves.
func HoldingPods(pods []*corev1.Pod, node string, ranges []netip.Prefix) []string {
	var out []string
	for _, p := range pods {
		holds := p.Spec.NodeName == node && node != "" && !p.Spec.HostNetwork
		for _, ip := range p.Status.PodIPs {
			a, err := netip.ParseAddr(ip.IP)
			if err != nil {
				continue
			}
			for _, r := range ranges {
				if r.Contains(a) {
					holds = true
				}
			}
		}
		if holds {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	sort.Strings(out)
	return out
}
