// Package nodefailover moves a fenced node's IP ranges and static IPs to a spare node. Every
// decision is pure and table-tested, in this file (decide_test.go): the fencing rule, the
// unhealthy-share stop, the pods that still hold the node's IPs, the target choice, what to do
// with each recorded range move and route convergence. The I/O around them is cut by role:
// controller.go (informers, queue, detection), migration.go (one sync of one record and its
// status), beforemove.go (fence, pods, target, recording the moves), target.go (claiming the
// spare), aftercommit.go (the steps after the commit, one method per phase in a table),
// record.go (finalizer, deletion, cancel, restart).
package nodefailover

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/nodegone"
)

// Well-known node labels failover matches the target on.
const (
	LabelZone         = corev1.LabelTopologyZone       // topology.kubernetes.io/zone
	LabelInstanceType = corev1.LabelInstanceTypeStable // node.kubernetes.io/instance-type
)

// Reasons of the Fenced condition and of the fencing decision.
const (
	ReasonNotOutOfService = "NotOutOfService"
	ReasonNodeReady       = "NodeReady"
	ReasonWithinWindow    = "WithinWindow"
	ReasonPodsRemain      = "PodsRemain"
	ReasonFenced          = "Fenced"
	// ReasonNodeDeleted: the Node object is gone, and deletion is not a fence here.
	ReasonNodeDeleted = "NodeDeleted"
	// ReasonFenceWithdrawn: the node is no longer fenced after a move was recorded.
	ReasonFenceWithdrawn = "FenceWithdrawn"
)

// NodeReady reports whether the node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Fence is the fencing decision for one node.
type Fence struct {
	// Fenced: the node is known to be off for at least the window.
	Fenced bool
	// Candidate: the node is fenced or may become so by waiting (out-of-service or gone). A node
	// that is not a candidate is running, or may be: nothing of it is ever moved.
	Candidate    bool
	Reason       string
	Message      string
	RecheckAfter time.Duration
	// FencedAt: when the node became fenced (NotReady transition or record start + window);
	// set when Fenced.
	FencedAt time.Time
}

// FenceRules are the operator's settings the fencing rule applies.
type FenceRules struct {
	// Window: how long the node must have been NotReady (or gone) before it is fenced.
	Window time.Duration
	// NodeDeletionIsFence: a deleted Node object means its machine is off (the manager's
	// --node-deletion-is-fence, or the record's node-off annotation for one node). Without it
	// a deleted node may be a partitioned one that still runs its pods: never fenced.
	NodeDeletionIsFence bool
	// NodeGone, when set, decides for a deleted Node instead: the one rule of
	// controllers/pkg/nodegone (its Lease, the operator's statement — NodeDeletionIsFence
	// included —, the pod objects), the same the range allocator applies to its blocks.
	NodeGone *nodegone.Verdict
}

// Fencing applies the fencing rule to a node (nil: its Node object is gone). goneSince is when
// the controller first saw the node gone or fenced (the record's start): for a deleted node it
// stands in for the NotReady transition it can no longer read.
func Fencing(node *corev1.Node, goneSince, now time.Time, rules FenceRules) Fence {
	var since time.Time
	gone := rules.NodeDeletionIsFence
	if rules.NodeGone != nil {
		gone = rules.NodeGone.Gone
	}
	switch {
	case node == nil && !gone:
		f := Fence{Candidate: true, Reason: ReasonNodeDeleted, Message: fmt.Sprintf(
			"Node object deleted: deletion alone is not a fence (a deleted node may be partitioned and still run its pods). "+
				"It moves once the node is proven gone (no Lease renewal for --node-gone-after, no pod object holding its IPs), or at once when you "+
				"annotate this record %s=true knowing the machine is off (or run the manager with --node-deletion-is-fence "+
				"if whatever deletes Nodes in this cluster deletes only machines that are off); a kubelet that comes back re-registers its Node and cancels this",
			jkev1alpha1.AnnotationNodeOff)}
		if rules.NodeGone != nil {
			f.Message += ". Now: " + rules.NodeGone.Message
			f.RecheckAfter = rules.NodeGone.RecheckAfter
		}
		return f
	case node == nil:
		since = goneSince
	case !jkev1alpha1.NodeOutOfService(node):
		return Fence{Reason: ReasonNotOutOfService, Message: fmt.Sprintf("node %s has no %s taint: NotReady alone never moves an IP (a partitioned node still runs its pods)", node.Name, jkev1alpha1.TaintOutOfService)}
	case NodeReady(node):
		return Fence{Candidate: true, Reason: ReasonNodeReady, Message: fmt.Sprintf("node %s is tainted out-of-service but Ready", node.Name)}
	default:
		since = goneSince
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && !c.LastTransitionTime.IsZero() {
				since = c.LastTransitionTime.Time
			}
		}
	}
	if since.IsZero() {
		since = now
	}
	window := rules.Window
	if wait := since.Add(window).Sub(now); wait > 0 {
		return Fence{Candidate: true, Reason: ReasonWithinWindow, RecheckAfter: wait,
			Message: fmt.Sprintf("not Ready since %s; failover window %s not over (%s left)", since.UTC().Format(time.RFC3339), window, wait.Round(time.Second))}
	}
	what := "tainted " + jkev1alpha1.TaintOutOfService + " and not Ready"
	switch {
	case node == nil && rules.NodeGone != nil:
		what = "Node object deleted and the node proven gone (" + rules.NodeGone.Message + ")"
	case node == nil:
		what = "Node object deleted (deletion counts as a fence)"
	}
	return Fence{Fenced: true, Candidate: true, Reason: ReasonFenced, FencedAt: since.Add(window),
		Message: fmt.Sprintf("%s since %s (window %s)", what, since.UTC().Format(time.RFC3339), window)}
}

// CommitCheck is what to do before a write that commits a move (an IPRange write, a StaticIP
// re-point), given the fence as it is now.
type CommitCheck int

const (
	// CommitProceed: the node is fenced; write.
	CommitProceed CommitCheck = iota
	// CommitCancel: the node is no longer a candidate (it runs again, un-tainted) and no move
	// was written: cancel the migration with nothing moved.
	CommitCancel
	// CommitHold: the node is not fenced now; write nothing and wait (a move was written
	// already, or the node may still become fenced again).
	CommitHold
)

// CheckCommit re-checks the fence before a committing write. written: a range already names
// the target at its new generation (a move happened).
func CheckCommit(f Fence, written bool) CommitCheck {
	switch {
	case f.Fenced:
		return CommitProceed
	case !f.Candidate && !written:
		return CommitCancel
	default:
		return CommitHold
	}
}

// ParsePrefixes parses the ranges' CIDRs; a range whose CIDR does not parse (the CRD forbids
// it) is skipped.
func ParsePrefixes(cidrs []string) []netip.Prefix {
	var out []netip.Prefix
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// NeverStarted drops from pods those bound to node that its kubelet can never have started: no
// IP, no start time (a kubelet that saw the pod would have set it) and created after the node
// turned NotReady (notReadySince: the node lifecycle controller marks it so only after the
// kubelet has been silent for its grace period). The node is fenced (out-of-service: the operator
// says it is off), so such a pod — a DaemonSet's pod recreated on the fenced node, one the
// scheduler bound there later — holds no address, and waiting for it (or deleting it again and
// again while its controller recreates it) would only stall the move. notReadySince zero: the
// node is Ready or unknown, nothing is dropped.
func NeverStarted(pods []*corev1.Pod, node string, notReadySince time.Time) []*corev1.Pod {
	if notReadySince.IsZero() {
		return pods
	}
	out := make([]*corev1.Pod, 0, len(pods))
	for _, p := range pods {
		if p.Spec.NodeName == node && len(p.Status.PodIPs) == 0 && p.Status.PodIP == "" && p.Status.StartTime == nil &&
			p.CreationTimestamp.Time.After(notReadySince) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// NotReadySince is when the node's Ready condition left True (zero while it is True, or
// without one).
func NotReadySince(node *corev1.Node) time.Time {
	if node == nil {
		return time.Time{}
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// FencedPodDeletion lists the pod objects still bound to a fenced node that hold, or may hold,
// an IP of its ranges (HoldingPods without the pods on other nodes) and that the controller
// force-deletes once the node has been fenced for grace: DaemonSet pods and others that
// tolerate the out-of-service taint, which neither the taint manager nor pod GC ever removes.
// Pods on the host network hold no range IP and are never deleted (unless their IP is in a
// range, which a host address never is). wait > 0: the grace is not over yet; look again then.
func FencedPodDeletion(pods []*corev1.Pod, node string, ranges []netip.Prefix, fencedAt, now time.Time, grace time.Duration) (doomed []*corev1.Pod, wait time.Duration) {
	for _, p := range pods {
		if p.Spec.NodeName != node || node == "" || p.Spec.HostNetwork {
			continue
		}
		if len(nodegone.HoldingPods([]*corev1.Pod{p}, node, ranges)) == 0 {
			continue
		}
		doomed = append(doomed, p)
	}
	if len(doomed) == 0 {
		return nil, 0
	}
	if w := fencedAt.Add(grace).Sub(now); w > 0 {
		return nil, w
	}
	sort.Slice(doomed, func(i, j int) bool {
		return doomed[i].Namespace+"/"+doomed[i].Name < doomed[j].Namespace+"/"+doomed[j].Name
	})
	return doomed, 0
}

// Unhealthy counts the nodes that are not Ready, and all nodes. Deleted failed nodes (their
// Node objects are gone) count as unhealthy nodes too.
func Unhealthy(nodes []*corev1.Node, deleted int) (notReady, total int) {
	for _, n := range nodes {
		total++
		if !NodeReady(n) {
			notReady++
		}
	}
	return notReady + deleted, total + deleted
}

// TooManyUnhealthy: more than maxPercent of the nodes are unhealthy at once. That looks like a
// partition of the control plane from the nodes, not a node failure: failover stops.
func TooManyUnhealthy(notReady, total, maxPercent int) bool {
	return total > 0 && notReady*100 > maxPercent*total
}

// ParsePercent parses "34%" or "34" into 34 (0..100).
func ParsePercent(s string) (int, error) {
	var v int
	if _, err := fmt.Sscanf(strings.TrimSuffix(strings.TrimSpace(s), "%"), "%d", &v); err != nil || v < 0 || v > 100 {
		return 0, fmt.Errorf("want a percentage from 0%% to 100%%, got %q", s)
	}
	return v, nil
}

// IPInPrefixes reports whether ip lies in one of the prefixes.
func IPInPrefixes(ip string, ps []netip.Prefix) bool {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// RunsWithItsAddresses says whether a moved StaticIP's pod holds every address of the record:
// both of a dual-stack record (its IPv6 address lies in another moved range than its IPv4 one,
// and the pod must have come back with both), compared as addresses, not strings. A record
// without an address yet waits for none.
func RunsWithItsAddresses(pod *corev1.Pod, s *jkev1.StaticIP) bool {
	for _, want := range s.Spec.AddressList() {
		if !slices.ContainsFunc(pod.Status.PodIPs, func(ip corev1.PodIP) bool {
			a, err := netip.ParseAddr(ip.IP)
			return err == nil && a.Unmap() == want
		}) {
			return false
		}
	}
	return true
}

// MovingStaticIPs are the StaticIPs that move with the failed node: those that name it, and
// those whose IP lies in one of its ranges.
func MovingStaticIPs(sips []*jkev1.StaticIP, node string, ranges []netip.Prefix) []*jkev1.StaticIP {
	var out []*jkev1.StaticIP
	for _, s := range sips {
		if s.DeletionTimestamp != nil {
			continue
		}
		if s.Spec.Node == node || slices.ContainsFunc(s.Spec.AddressList(), func(ip netip.Addr) bool { return IPInPrefixes(ip.String(), ranges) }) {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name
	})
	return out
}

// Needed sums the StaticIPs' recorded requests, plus one pod each: all of them must fit.
func Needed(sips []*jkev1.StaticIP) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, s := range sips {
		addTo(out, s.Spec.Resources)
	}
	out[corev1.ResourcePods] = *resource.NewQuantity(int64(len(sips)), resource.DecimalSI)
	return out
}

func addTo(sum, add corev1.ResourceList) {
	for name, q := range add {
		cur := sum[name]
		cur.Add(q)
		sum[name] = cur
	}
}

// AddResources returns a + b.
func AddResources(a, b corev1.ResourceList) corev1.ResourceList {
	out := a.DeepCopy()
	if out == nil {
		out = corev1.ResourceList{}
	}
	addTo(out, b)
	return out
}

// FailedNode is what the target must match.
type FailedNode struct {
	Name         string
	Zone         string
	InstanceType string
}

// TargetChoice is the outcome of ChooseTarget.
type TargetChoice struct {
	// Target is the chosen node; empty when none qualifies.
	Target string
	// Rejected says, per node considered, why it was not taken.
	Rejected map[string]string
}

// Message summarises why no target was found.
func (t TargetChoice) Message() string {
	if len(t.Rejected) == 0 {
		return fmt.Sprintf("no node has the label %s=true", jkev1alpha1.LabelSpare)
	}
	names := make([]string, 0, len(t.Rejected))
	for n := range t.Rejected {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, n+": "+t.Rejected[n])
	}
	return "no spare qualifies: " + strings.Join(parts, "; ")
}

// SpareTaint is the taint that keeps a spare free and gates the moved pods.
var SpareTaint = corev1.Taint{Key: jkev1alpha1.TaintSpare, Value: "true", Effect: corev1.TaintEffectNoSchedule}

// ChooseTarget picks the spare that takes over failed: labelled spare, Ready, carrying the
// spare taint and no other, not claimed for another failed node, in failed's zone (when known)
// and of its instance type (where both have one), with allocatable minus used (the requests of
// its pods and the reservations of absent static-IP pods, see used) holding all of need. The
// first by name wins, so two controllers would agree.
func ChooseTarget(failed FailedNode, nodes []*corev1.Node, used map[string]corev1.ResourceList, need corev1.ResourceList) TargetChoice {
	choice := TargetChoice{Rejected: map[string]string{}}
	sorted := slices.Clone(nodes)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, n := range sorted {
		if n.Labels[jkev1alpha1.LabelSpare] != "true" || n.Name == failed.Name {
			continue
		}
		if why := TargetProblem(failed, n, used[n.Name], need, true); why != "" {
			choice.Rejected[n.Name] = why
			continue
		}
		choice.Target = n.Name
		return choice
	}
	return choice
}

// TargetProblem says why n cannot take over failed ("" if it can). spare: n must also be a
// spare (label, taint, zone, instance type); an operator-pinned target need not be.
func TargetProblem(failed FailedNode, n *corev1.Node, used, need corev1.ResourceList, spare bool) string {
	if claimed := n.Labels[jkev1alpha1.LabelFailoverFor]; claimed != "" && claimed != failed.Name {
		return "claimed for " + claimed
	}
	if n.DeletionTimestamp != nil {
		return "being deleted"
	}
	if !NodeReady(n) {
		return "not Ready"
	}
	if n.Spec.Unschedulable {
		return "cordoned"
	}
	hasSpareTaint := false
	for _, t := range n.Spec.Taints {
		if t.MatchTaint(&SpareTaint) {
			hasSpareTaint = true
			continue
		}
		if spare {
			return "tainted " + t.ToString()
		}
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return "tainted " + t.ToString()
		}
	}
	if spare {
		if !hasSpareTaint {
			return "lacks the taint " + SpareTaint.ToString()
		}
		if failed.Zone != "" && n.Labels[LabelZone] != failed.Zone {
			return fmt.Sprintf("zone %q, want %q", n.Labels[LabelZone], failed.Zone)
		}
		if it := n.Labels[LabelInstanceType]; failed.InstanceType != "" && it != "" && it != failed.InstanceType {
			return fmt.Sprintf("instance type %q, want %q", it, failed.InstanceType)
		}
	}
	return Fits(n.Status.Allocatable, used, need)
}

// Fits says which resource of need does not fit into allocatable - used ("" if all fit).
func Fits(allocatable, used, need corev1.ResourceList) string {
	names := make([]string, 0, len(need))
	for name := range need {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, name := range names {
		q := need[corev1.ResourceName(name)]
		if q.IsZero() {
			continue
		}
		alloc, ok := allocatable[corev1.ResourceName(name)]
		if !ok {
			return fmt.Sprintf("no allocatable %s (need %s)", name, q.String())
		}
		free := alloc.DeepCopy()
		if u, ok := used[corev1.ResourceName(name)]; ok {
			free.Sub(u)
		}
		if free.Cmp(q) < 0 {
			return fmt.Sprintf("%s: %s free, need %s", name, free.String(), q.String())
		}
	}
	return ""
}

// ObservedRanges decodes a node's ipranges-observed annotation.
func ObservedRanges(n *corev1.Node) (map[string]string, error) {
	v := n.Annotations[jkev1alpha1.AnnotationIPRangesObserved]
	if v == "" {
		return nil, nil
	}
	out := map[string]string{}
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, fmt.Errorf("annotation %s of node %s: %w", jkev1alpha1.AnnotationIPRangesObserved, n.Name, err)
	}
	return out, nil
}

// ObservedValue is what an agent writes for a range it routes: "<owner node>/<ownerGeneration>".
func ObservedValue(node string, generation int64) string {
	return fmt.Sprintf("%s/%d", node, generation)
}

// LeaseRouteReport decodes a node's route report from its route-report Lease (namespace
// jkev1.NamespaceRouteReports, annotation jkev1.AnnotationRoutesObserved). ok is false for a
// Lease that is not a report of the node it is named after (holderIdentity another node; admission
// refuses such a write by an agent): it is not read, the node's report is missing.
func LeaseRouteReport(l *coordinationv1.Lease) (report map[string]string, ok bool, err error) {
	if l == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != l.Name {
		return nil, false, nil
	}
	v := l.Annotations[jkev1.AnnotationRoutesObserved]
	if v == "" {
		return nil, true, nil
	}
	out := map[string]string{}
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, true, fmt.Errorf("route-report Lease %s/%s annotation %s: %w", l.Namespace, l.Name, jkev1.AnnotationRoutesObserved, err)
	}
	return out, true, nil
}

// RouteReport is one node's report of its routes: from its route-report Lease (Lease true), or,
// for a node without one, from its Node annotation ipranges-observed — an agent of the previous
// release, which reported there; Err: the report does not parse.
type RouteReport struct {
	Routes map[string]string
	Lease  bool
	Err    error
}

// RoutesLagging names the Ready nodes other than failed whose agent has not yet reported
// routes for every moved range at its new owner and generation. reports gives a node's route
// report (its route-report Lease) by node name; a node without one is read from its Node
// annotation (an agent of the previous release during an upgrade). Nodes that are not Ready are
// not waited for: their agent converges (or withdraws) when it comes back.
func RoutesLagging(nodes []*corev1.Node, reports func(node string) (RouteReport, bool), failed string, moved []jkev1alpha1.MovedRange) []string {
	var lagging []string
	for _, n := range nodes {
		if n.Name == failed || !NodeReady(n) {
			continue
		}
		rep, ok := reports(n.Name)
		if !ok {
			rep.Routes, rep.Err = ObservedRanges(n)
		}
		for _, m := range moved {
			if rep.Err != nil || rep.Routes[m.Name] != ObservedValue(m.ToNode, m.OwnerGeneration) {
				lagging = append(lagging, n.Name)
				break
			}
		}
	}
	sort.Strings(lagging)
	return lagging
}

// RouteWait is a migration waiting for the agents' routes to its moved ranges (reached
// RangesMoved, not RoutesConverged).
type RouteWait struct {
	Record string
	// Since: when it reached RangesMoved (status.phaseTime).
	Since time.Time
	// Ranges: how many ranges it marks (its recorded moves whose IPRange exists).
	Ranges int
	// Marked: its ranges carry the report-routes mark already.
	Marked bool
}

// RouteReportTurns says which waiting migrations may have their moved ranges marked
// report-routes now, so that at most max ranges are marked at once over all migrations
// (max <= 0: no cap). Every Ready node's agent reports a route to every marked range in its
// route-report Lease, so the cap is what keeps that report, and the bytes a failover makes each
// agent write, bounded when many nodes fail at once (a zone): O(max), not O(failed nodes).
//   - A marked migration keeps its turn: its agents are at work on the report, taking the
//     marks back would waste it.
//   - The others take turns in the order they reached RangesMoved (then by name): each is
//     admitted while its ranges fit in what is left; the first that does not fit stops the
//     walk, so a migration of many ranges is not overtaken forever by smaller ones behind it.
//   - A migration with more than max ranges is admitted alone, when nothing is marked: it
//     never waits forever. The bound is then its ranges: those of one node, which that
//     node's agent carried as its own claims before the failure.
func RouteReportTurns(waiting []RouteWait, max int) map[string]bool {
	turns := map[string]bool{}
	used := 0
	var queue []RouteWait
	for _, w := range waiting {
		if w.Marked || max <= 0 {
			turns[w.Record] = true
			used += w.Ranges
		} else {
			queue = append(queue, w)
		}
	}
	slices.SortFunc(queue, func(a, b RouteWait) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return strings.Compare(a.Record, b.Record)
	})
	for _, w := range queue {
		if used+w.Ranges > max && used > 0 {
			break
		}
		turns[w.Record] = true
		used += w.Ranges
	}
	return turns
}

// PhaseIndex is the position of p in the step order (-1 for none).
func PhaseIndex(p jkev1alpha1.NodeFailoverPhase) int {
	return slices.Index(jkev1alpha1.NodeFailoverPhases, p)
}

// Reached reports whether status is at or past p.
func Reached(st *jkev1alpha1.NodeFailoverStatus, p jkev1alpha1.NodeFailoverPhase) bool {
	return PhaseIndex(st.Phase) >= PhaseIndex(p)
}

// RangeMove is what to do with one recorded range move, given the IPRange as it is now.
type RangeMove int

const (
	// RangeWrite: the range still names the failed node at the old generation: write the move.
	RangeWrite RangeMove = iota
	// RangeDone: the range names the target at (or past) the recorded generation.
	RangeDone
	// RangeGone: the IPRange was deleted.
	RangeGone
	// RangeChanged: someone else changed the range: never overwrite it.
	RangeChanged
)

// DecideRangeMove compares a recorded move with the range (nil: deleted). The move was
// recorded before its write, so a restart never bumps ownerGeneration twice: a range already at
// the recorded generation is done, one at the generation before is written, anything else was
// changed by someone else.
func DecideRangeMove(m jkev1alpha1.MovedRange, r *jkev1.IPRange) RangeMove {
	switch {
	case r == nil:
		return RangeGone
	case r.Spec.Node == m.ToNode && r.Spec.OwnerGeneration >= m.OwnerGeneration:
		return RangeDone
	case r.Spec.Node == m.FromNode && r.Spec.OwnerGeneration == m.OwnerGeneration-1:
		return RangeWrite
	default:
		return RangeChanged
	}
}

// RangeSynced: the owning agent reported the range's current spec (observedGeneration) with
// Synced True — for a moved range, the target reserved every static IP in it first.
func RangeSynced(r *jkev1.IPRange) bool {
	if r.Status.ObservedGeneration != r.Generation {
		return false
	}
	for _, c := range r.Status.Conditions {
		if c.Type == "Synced" {
			return c.Status == "True"
		}
	}
	return false
}

// LeftToAllocator: what a deleted node owns is for the range allocator to give back, not for
// failover to move — the allocator runs (allocatorRuns), every range the node owns is a pool
// block (label jke.jdcloud.com/ippool) and no StaticIP moves with the node. The allocator
// releases such blocks under the same rule (controllers/pkg/nodegone), at ownerGeneration+1;
// a failover record for them would only wait for a spare while the allocator waits for the
// record: in an autoscaled cluster without spares, no block of a deleted node came back.
func LeftToAllocator(allocatorRuns bool, owned []*jkev1.IPRange, moving []*jkev1.StaticIP) bool {
	if !allocatorRuns || len(owned) == 0 || len(moving) > 0 {
		return false
	}
	for _, r := range owned {
		if r.Labels[jkev1.LabelIPPool] == "" {
			return false
		}
	}
	return true
}
