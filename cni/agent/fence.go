package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/ipam"
)

// Node failover, the node side (controllers/README.md, "Node failover"). Two duties:
//
//   - A node that served a range at ownership generation g and finds it at a higher generation
//     (moved by failover while the node was fenced, to another node or even back to itself)
//     revokes it: the addresses were handed out elsewhere, so it drops the range from its IPAM
//     without draining, withdraws the host side of every sandbox it had in the range, and never
//     serves those allocations again (a plain move, same generation, still drains).
//   - Every node reports the routes it has programmed to the ranges node failover is moving
//     (marked jkev1.AnnotationReportRoutes) in its route-report Lease
//     (jkev1.NamespaceRouteReports/<node>, annotation jkev1.AnnotationRoutesObserved), so that
//     the failover controller knows when every route has converged; and its own claims in its
//     Node's annotation ObservedAnnotation, for agents of the previous release.

// ObservedAnnotation on a Node: a JSON object {"<IPRange name>": "<node>/<generation>"} of this
// node's claims (the ranges it serves and drains, "<itself>/<generation>", as in its entries of
// status.holders), read by agents of the previous releases during an upgrade. Its size is
// bounded by this node's own ranges, not by the cluster, and it changes only when they do.
// Written only when it changes. Agents that predate status.holders wrote every range of the
// cluster here, claims and routes alike; their Nodes (no jkev1.LabelClaimsInStatus) are read for
// claims during an upgrade. Agents before the route-report Leases wrote their routes to marked
// ranges here too; the failover controller still reads them from a Node whose agent has no
// Lease (an agent of the previous release).
const ObservedAnnotation = "staticip.jke.jdcloud.com/ipranges-observed"

// ReasonRangeRevoked is the Event reason on an IPRange a returning node withdrew.
const ReasonRangeRevoked = "RangeRevoked"

// revocation is one range the node served at an older ownership generation.
type revocation struct {
	name    string
	subnet  netip.Prefix
	served  int64
	current *jkev1.IPRange
}

// planRevocations lists the ranges recorded as served (name -> subnet, generation) that the
// API now shows at a higher ownership generation, whoever owns them now, and the revocations
// whose withdrawal is not finished (record Revoked), whatever the API shows now. A range whose
// IPRange is gone is not revoked (it drains, as any range leaving the node).
func planRevocations(served map[string]ipam.ServedRange, byName map[string]*jkev1.IPRange) []revocation {
	var out []revocation
	for name, s := range served {
		r, ok := byName[name]
		if !s.Revoked && (!ok || r.Spec.OwnerGeneration <= s.OwnerGeneration) {
			continue
		}
		out = append(out, revocation{name: name, subnet: s.Subnet, served: s.OwnerGeneration, current: r})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// servedRecords are the generations this pass serves the node's ranges at.
func servedRecords(mine []*jkev1.IPRange, rs []ipam.Range) map[string]ipam.ServedRange {
	out := map[string]ipam.ServedRange{}
	for i, r := range mine {
		out[r.Name] = ipam.ServedRange{Subnet: rs[i].Subnet, OwnerGeneration: r.Spec.OwnerGeneration}
	}
	return out
}

// staleServed are the records of ranges that are neither served now nor held by the store any
// more (drained): nothing is left to revoke.
func staleServed(served map[string]ipam.ServedRange, mine []*jkev1.IPRange, stored []ipam.Range) []string {
	keep := map[string]bool{}
	for _, r := range mine {
		keep[r.Name] = true
	}
	inStore := map[netip.Prefix]bool{}
	for _, r := range stored {
		inStore[r.Subnet] = true
	}
	var out []string
	for name, s := range served {
		if !keep[name] && !inStore[s.Subnet] && !s.Revoked {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// drainingHeld are the ranges this node drains — held in its store, draining, not served any
// more — by IPRange name, at the ownership generation it served them at: they stay in its
// ObservedAnnotation as "<this node>/<generation>" until their last address is released, so
// that a node the range is assigned to meanwhile waits (waitForPreviousOwners). A draining range
// without a served record (a database from before those records) is named by the IPRange
// whose CIDR it is, at that range's current generation.
func drainingHeld(served map[string]ipam.ServedRange, mine []*jkev1.IPRange, stored []ipam.Range, byName map[string]*jkev1.IPRange) map[string]int64 {
	serving := map[string]bool{}
	for _, r := range mine {
		serving[r.Name] = true
	}
	draining := map[netip.Prefix]bool{}
	for _, r := range stored {
		if r.Draining {
			draining[r.Subnet] = true
		}
	}
	out := map[string]int64{}
	named := map[netip.Prefix]bool{}
	for name, s := range served {
		if !serving[name] && draining[s.Subnet] {
			out[name] = s.OwnerGeneration
			named[s.Subnet] = true
		}
	}
	for _, r := range byName {
		pfx, err := netip.ParsePrefix(r.Spec.CIDR)
		if err != nil || serving[r.Name] || !draining[pfx.Masked()] || named[pfx.Masked()] {
			continue
		}
		if _, ok := out[r.Name]; !ok {
			out[r.Name] = r.Spec.OwnerGeneration
		}
	}
	return out
}

// revoke withdraws the revoked ranges: first out of the database (one transaction each: from
// then on nothing of the range is handed out, and the served record, marked Revoked, keeps the
// sandboxes to withdraw), then the host side (veths and /32 routes), and only then the served
// record is forgotten. A withdrawal that fails or is interrupted (a crash) leaves the record,
// and the next pass does it again. Called under the database lock, before the node's ranges
// are applied.
func (a *Agent) revoke(db *ipam.DB, revs []revocation) error {
	withdraw := a.withdrawHook
	if withdraw == nil {
		withdraw = withdrawHost
	}
	var errs []string
	for _, rv := range revs {
		removed, err := db.RevokeRange(rv.name, rv.subnet)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		served, err := db.Served()
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		withdrawn, err := withdraw(rv.subnet, served[rv.name].Withdraw)
		if err != nil {
			errs = append(errs, fmt.Sprintf("withdrawing %s (the next pass tries again): %v", rv.subnet, err))
			a.logf("IPRange %s: withdrawing the host side of %s failed, retried on the next pass: %v", rv.name, rv.subnet, err)
			continue
		}
		if err := db.ForgetServed(rv.name); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		now := "gone"
		if rv.current != nil {
			now = fmt.Sprintf("now at %d (node %q)", rv.current.Spec.OwnerGeneration, rv.current.Spec.Node)
		}
		msg := fmt.Sprintf("node %s served %s at owner generation %d; it is %s: it was moved while this node was fenced, so this node dropped it without draining (%d allocation(s) forgotten, %d host veth(s) removed) and never serves those addresses again",
			a.cfg.NodeName, rv.subnet, rv.served, now, len(removed), withdrawn)
		a.logf("IPRange %s: %s", rv.name, msg)
		if a.recorder != nil && rv.current != nil {
			a.recorder.Event(rv.current, corev1.EventTypeWarning, ReasonRangeRevoked, msg)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("revoking ranges: %s", strings.Join(errs, "; "))
	}
	return nil
}

// withdrawHost deletes the host veth of every sandbox that had an address in subnet: those the
// database knew (removed: the attachments recorded at the revocation) and any plugin veth the
// host routes an address of subnet to. With the
// veth go its /32 route and the sandbox's only way onto the wire; the sandbox's CNI DEL later
// finds neither and succeeds.
func withdrawHost(subnet netip.Prefix, removed []ipam.Attachment) (int, error) {
	links, err := pluginLinks()
	if err != nil {
		return 0, err
	}
	doomed := map[string]bool{}
	for _, al := range removed {
		doomed[vethOf(al)] = true
	}
	routes, err := netlink.RouteList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return 0, err
	}
	for _, r := range routes {
		name, ok := links[r.LinkIndex]
		if !ok || r.Dst == nil {
			continue
		}
		if ip, ok := netip.AddrFromSlice(r.Dst.IP); ok && subnet.Contains(ip.Unmap()) {
			doomed[name] = true
		}
	}
	n := 0
	var errs []string
	for _, name := range links {
		if !doomed[name] {
			continue
		}
		l, err := netlink.LinkByName(name)
		if err != nil {
			continue // gone meanwhile
		}
		if err := netlink.LinkDel(l); err != nil {
			errs = append(errs, fmt.Sprintf("delete %s: %v", name, err))
			continue
		}
		n++
	}
	if len(errs) > 0 {
		return n, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return n, nil
}

// observedRanges is the annotation's content for this pass: the node's claims — the ranges its
// IPAM serves and the ranges it drains (drainingHeld: "<this node>/<generation served at>", in
// place of a route) — and the routes it has programmed, each as "<node it routes to>/<range
// generation>": every route of routes when programmed is nil (the agent does not program
// routes), else those programmed names. The claims never depend on the routes: a route that
// cannot be programmed (a peer on no subnet of the node) leaves its own entry out, nothing else.
func observedRanges(self string, mine []*jkev1.IPRange, routes []rangeRoute, draining map[string]int64, programmed map[string]bool) map[string]string {
	out := map[string]string{}
	for _, r := range mine {
		out[r.Name] = fmt.Sprintf("%s/%d", r.Spec.Node, r.Spec.OwnerGeneration)
	}
	for _, rt := range routes {
		if programmed != nil && !programmed[rt.r.Name] {
			continue
		}
		out[rt.r.Name] = fmt.Sprintf("%s/%d", rt.via, rt.r.Spec.OwnerGeneration)
	}
	for name, gen := range draining {
		out[name] = fmt.Sprintf("%s/%d", self, gen)
	}
	return out
}

// reportedRoutes are the routes whose range node failover waits for (jkev1.AnnotationReportRoutes).
func reportedRoutes(routes []rangeRoute) []rangeRoute {
	var out []rangeRoute
	for _, rt := range routes {
		if rt.r.Annotations[jkev1.AnnotationReportRoutes] != "" {
			out = append(out, rt)
		}
	}
	return out
}

// routeReport is the node's route report (jkev1.AnnotationRoutesObserved on its Lease): the
// entries of observed (observedRanges: its claims and its programmed routes) of the ranges
// node failover marks (marked: MarkedRanges), nothing else — so it holds at most as many
// entries as ranges are marked, whatever the cluster's size.
func routeReport(observed map[string]string, marked map[string]bool) map[string]string {
	out := map[string]string{}
	for name := range marked {
		if v, ok := observed[name]; ok {
			out[name] = v
		}
	}
	return out
}

// ObservedReport is the ObservedAnnotation value the agent of node self writes once its IPAM
// serves its own ranges, with nothing left to drain: its claims. Simulated agents
// (tools/scalebench, on kwok nodes that run no agent) write it, so the failover controller and
// the other agents see what real agents report.
func ObservedReport(ranges []*jkev1.IPRange, self string) (string, error) {
	return ObservedReports(ranges)(self)
}

// ObservedReports is ObservedReport for any node, the cluster's ranges planned once.
func ObservedReports(ranges []*jkev1.IPRange) func(self string) (string, error) {
	reports := convergedReports(ranges)
	return func(self string) (string, error) {
		claims, _ := reports(self)
		b, err := json.Marshal(claims)
		return string(b), err
	}
}

// RouteReports is, for any node, the route report (jkev1.AnnotationRoutesObserved) its agent
// writes into its Lease once its routes are in place: its routes to the marked ranges it does
// not hold, its own claim of a marked range it holds. For the simulated agents of
// tools/scalebench, as ObservedReports.
func RouteReports(ranges []*jkev1.IPRange) func(self string) (string, error) {
	reports := convergedReports(ranges)
	return func(self string) (string, error) {
		_, routes := reports(self)
		b, err := json.Marshal(routes)
		return string(b), err
	}
}

// convergedReports plans the cluster's ranges once and gives, for any node, the claims its
// converged agent writes on its Node and the route report it writes into its Lease.
func convergedReports(ranges []*jkev1.IPRange) func(self string) (claims, routes map[string]string) {
	p := planRanges(ranges, "")
	marked := reportedRoutes(planRoutes(p.accepted, "", nil, claims(p.accepted, nil, "")))
	markedNames := MarkedRanges(p.accepted)
	own := map[string][]*jkev1.IPRange{}
	for _, r := range p.accepted {
		if r.Spec.Node != "" {
			own[r.Spec.Node] = append(own[r.Spec.Node], r)
		}
	}
	return func(self string) (map[string]string, map[string]string) {
		var routes []rangeRoute
		for _, rt := range marked {
			if rt.r.Spec.Node != self && rt.via != self {
				routes = append(routes, rt)
			}
		}
		return observedRanges(self, own[self], nil, nil, nil), routeReport(observedRanges(self, own[self], routes, nil, nil), markedNames)
	}
}

// RouteLease is routeLease for the simulated agents of tools/scalebench.
func RouteLease(current *coordinationv1.Lease, node string, nodeUID types.UID, value string, marked map[string]bool, now time.Time) (*coordinationv1.Lease, bool) {
	return routeLease(current, node, nodeUID, value, marked, now)
}

// MarkedRanges names the ranges node failover marks (jkev1.AnnotationReportRoutes), whose
// entries a route report must get right.
func MarkedRanges(ranges []*jkev1.IPRange) map[string]bool {
	out := map[string]bool{}
	for _, r := range ranges {
		if r.Annotations[jkev1.AnnotationReportRoutes] != "" {
			out[r.Name] = true
		}
	}
	return out
}

// routeLease is the node's route-report Lease carrying value (jkev1.AnnotationRoutesObserved),
// made from the Lease as it is (nil: none yet) — named after the node, holderIdentity the node,
// labelled jkev1.LabelRouteReport, as admission (staticip-agent-route-report) wants it — and
// whether a write is due (routeReportDue). renewTime says when the report was last written.
// Its owner is the Node (nodeUID; "": unknown, left as it is), as kubelet's Lease in
// kube-node-lease is: the garbage collector deletes the report with the Node, so reports of
// deleted nodes do not pile up (in an autoscaled cluster) for the failover controller to read.
// current is never modified.
func routeLease(current *coordinationv1.Lease, node string, nodeUID types.UID, value string, marked map[string]bool, now time.Time) (*coordinationv1.Lease, bool) {
	if !routeReportDue(current, node, nodeUID, value, marked) {
		return current, false
	}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: jkev1.NamespaceRouteReports}}
	if current != nil {
		l = current.DeepCopy()
	}
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Labels[jkev1.LabelRouteReport] = "true"
	l.Annotations[jkev1.AnnotationRoutesObserved] = value
	l.Spec.HolderIdentity = ptr.To(node)
	l.Spec.RenewTime = &metav1.MicroTime{Time: now}
	if nodeUID != "" {
		l.OwnerReferences = []metav1.OwnerReference{nodeOwner(node, nodeUID)}
	}
	return l, true
}

// nodeOwner is the owner reference to the Node (no blockOwnerDeletion: that would need delete
// permission on Nodes, and nothing has to wait for the report).
func nodeOwner(node string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node, UID: uid}
}

// ownedByNode says whether the Lease's only owner is the Node of that UID.
func ownedByNode(l *coordinationv1.Lease, node string, uid types.UID) bool {
	return l != nil && len(l.OwnerReferences) == 1 && l.OwnerReferences[0] == nodeOwner(node, uid)
}

// routeReportDue says whether the Lease must be written for the report value: there is none
// yet, its holder, label or owner (nodeUID: its Node; "": unknown, not checked) is not as
// admission and routeLease want it, or an entry of a marked range (marked;
// nil: every entry) differs from the report's, present or absent. Entries of ranges no longer
// marked are left as they are until the next write: the failover controller reads only the
// entries of the ranges it moves, each qualified by the move's generation, so a stale one
// never passes for a route of a later move — and a failover's marks going away costs no write
// on every node (at 1,000 nodes, 1,004 Lease updates during the moved pods' start-up).
func routeReportDue(current *coordinationv1.Lease, node string, nodeUID types.UID, value string, marked map[string]bool) bool {
	if current == nil || current.Labels[jkev1.LabelRouteReport] != "true" || ptr.Deref(current.Spec.HolderIdentity, "") != node ||
		(nodeUID != "" && !ownedByNode(current, node, nodeUID)) {
		return true
	}
	have := current.Annotations[jkev1.AnnotationRoutesObserved]
	if have == value {
		return false
	}
	if marked == nil || have == "" {
		return true
	}
	var had, want map[string]string
	if json.Unmarshal([]byte(have), &had) != nil || json.Unmarshal([]byte(value), &want) != nil {
		return true
	}
	for name := range want {
		if !marked[name] {
			return true // not what routeReport gives: write it as it is
		}
	}
	for name := range marked {
		h, hok := had[name]
		w, wok := want[name]
		if hok != wok || h != w {
			return true
		}
	}
	return false
}

// reportRoutes writes the node's route report into its Lease (jkev1.NamespaceRouteReports/<node>)
// when it differs from what this agent last wrote or read (routeReportDue): one GET when the
// agent starts (or after a failed write), then an update only when the report of a marked
// range changes. A Node write went to every
// Node watcher of the cluster; this one goes to the failover controller alone.
func (a *Agent) reportRoutes(ctx context.Context, nodeUID types.UID, report map[string]string, marked map[string]bool) error {
	b, err := json.Marshal(report) // keys sorted: equal content, equal string
	if err != nil {
		return err
	}
	leases := a.kube.CoordinationV1().Leases(jkev1.NamespaceRouteReports)
	current := a.routeLease
	if current == nil {
		l, err := leases.Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("route report: lease %s/%s: %w", jkev1.NamespaceRouteReports, a.cfg.NodeName, err)
		}
		if err == nil {
			current = l
		}
	}
	want, changed := routeLease(current, a.cfg.NodeName, nodeUID, string(b), marked, time.Now())
	if !changed {
		a.routeLease = current
		return nil
	}
	var written *coordinationv1.Lease
	if current == nil {
		written, err = leases.Create(ctx, want, metav1.CreateOptions{})
	} else {
		written, err = leases.Update(ctx, want, metav1.UpdateOptions{})
	}
	if err != nil {
		a.routeLease = nil // read it again on the next pass (a conflict, or deleted meanwhile)
		return fmt.Errorf("route report: lease %s/%s: %w", jkev1.NamespaceRouteReports, a.cfg.NodeName, err)
	}
	a.routeLease = written
	return nil
}

// reportObserved patches the node's ObservedAnnotation, and LabelClaimsInStatus (this agent
// claims in status.holders: the other agents stop reading this Node), when they differ from what the node carries (or what this agent last wrote, while its cache
// lags).
//
// The label goes out only with claimsWritten (this node's claims are in status.holders): an agent
// upgraded from the annotation claims stays readable there until its claims are elsewhere.
func (a *Agent) reportObserved(ctx context.Context, observed map[string]string, current, currentClaimsInStatus string, claimsWritten bool) error {
	b, err := json.Marshal(observed) // keys sorted: equal content, equal string
	if err != nil {
		return err
	}
	value := string(b)
	labelled := currentClaimsInStatus == "true" || a.labelled
	if (value == current || value == a.lastObserved) && (labelled || !claimsWritten) {
		return nil
	}
	meta := map[string]any{"annotations": map[string]string{ObservedAnnotation: value}}
	if claimsWritten {
		meta["labels"] = map[string]string{jkev1.LabelClaimsInStatus: "true"}
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	if _, err := a.kube.CoreV1().Nodes().Patch(ctx, a.cfg.NodeName, types.MergePatchType, patch, metav1.PatchOptions{}); apierrors.IsNotFound(err) {
		// No Node object (deleted, or not registered yet): nothing to report on, no failure
		// of this agent; the report is written once the Node exists (its cache entry differs).
		return nil
	} else if err != nil {
		return fmt.Errorf("node %s annotation %s: %w", a.cfg.NodeName, ObservedAnnotation, err)
	}
	a.lastObserved = value
	a.labelled = a.labelled || claimsWritten
	return nil
}
