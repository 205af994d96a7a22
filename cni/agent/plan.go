package agent

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/cni/plugin"
	"github.com/staticip/staticip/ipam"
)

// The pure decisions of a pass: which IPRanges the node serves, which StaticIPs it reserves and
// which allocations GC may free. Each is a function of what the caches and the database say, so
// that the rules are table-tested apart from the API server and netlink.

// Reasons of the IPRange Synced condition (and of the Events the agent records).
const (
	ReasonServing          = "Serving"
	ReasonInvalid          = "Invalid"
	ReasonOverlaps         = "Overlaps"
	ReasonResizedWhileUsed = "ResizedWhileInUse"
	// ReasonReservationsFailed: the node serves the range but could not reserve its StaticIPs.
	ReasonReservationsFailed = "ReservationsFailed"
	// ReasonWaitingForPreviousOwner: the range names this node, but another node still holds
	// addresses of it (it drains there); this node allocates from it once that node has drained.
	ReasonWaitingForPreviousOwner = "WaitingForPreviousOwner"
	// ReasonClaimContested: the node serves the range, and another node reports holding
	// addresses of it too (a Warning Event; the node keeps serving it).
	ReasonClaimContested = "ClaimContested"
	// ReasonDuplicateIP is the Event reason on StaticIPs that claim the same IP (or one pod
	// claimed by records with different IPs).
	ReasonDuplicateIP = "DuplicateIP"
	// ReasonInvalidIP is the Event reason on a StaticIP whose spec.ip does not parse.
	ReasonInvalidIP = "InvalidIP"
	// ReasonNoNodeAddressOfFamily: the node holds a range of an IP family it has no InternalIP
	// of (an IPv6 block on a node known by its IPv4 address only): no other node routes it there.
	// The reason of the range's Routable=False condition and of a Warning Event on it.
	ReasonNoNodeAddressOfFamily = "NoNodeAddressOfFamily"
)

// ConditionRoutable is the IPRange condition its owner sets False (ReasonNoNodeAddressOfFamily)
// while its claim cannot carry an address of the range's family; absent otherwise.
const ConditionRoutable = "Routable"

// refusal says why an IPRange is left out of the node's IPAM (and of every node's routes).
type refusal struct {
	Reason, Message string
}

// rangePlan is what the node does with the cluster's IPRanges.
type rangePlan struct {
	// namespacePools: the pools of each namespace whose pods name none (pools.go), for the store.
	namespacePools map[string][]string
	// mine are this node's IPRanges it serves, ipam their allocator form (same order).
	mine []*jkev1.IPRange
	ipam []ipam.Range
	// others are the other nodes' accepted IPRanges.
	others []*jkev1.IPRange
	// accepted are all IPRanges some node may serve (assigned or not): what routes are planned
	// over (planRoutes).
	accepted []*jkev1.IPRange
	// refused are the IPRanges no node may serve, by name.
	refused map[string]refusal
	// refusedMine are this node's refused IPRanges (it reports them).
	refusedMine []*jkev1.IPRange
	// byName are all IPRanges by name (revocations look up the ranges the node served).
	byName map[string]*jkev1.IPRange
	// reservationsFailed: the pass could not reserve the StaticIPs' IPs (Synced stays False).
	reservationsFailed bool
	// draining are the ranges this node still holds addresses of although they left it, by
	// name, at the ownership generation it served them at (drainingHeld).
	draining map[string]int64
	// waited: waitForPreviousOwners has taken out the ranges other nodes still hold.
	waited bool
	// contested are this node's ranges it serves although other nodes report holding them at the
	// same generation (a claim never takes a served range away), by name: those nodes.
	contested map[string][]string
	// ownReport are the ranges this node's last report claims for itself (its own served and
	// draining ranges), by name, at their generation: what a rebuilt database restores.
	ownReport map[string]int64
}

// holdsItself says whether the node holds addresses of the range itself: it serves it or drains it.
func (p *rangePlan) holdsItself(name string) bool {
	if _, ok := p.draining[name]; ok {
		return true
	}
	for _, r := range p.mine {
		if r.Name == name {
			return true
		}
	}
	return false
}

// olderFirst orders objects by creation time, then name: the order in which overlapping claims
// are settled, so that a new object never takes what an older one holds, and every agent
// settles them alike.
func olderFirst(a, b metav1.Object) bool {
	ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
	if !ta.Equal(&tb) {
		return ta.Before(&tb)
	}
	if a.GetNamespace() != b.GetNamespace() {
		return a.GetNamespace() < b.GetNamespace()
	}
	return a.GetName() < b.GetName()
}

// planRanges settles the IPRanges: a range whose CIDR overlaps an older range's (assigned to
// a node or not) is refused, and so is one that does not parse. Every agent computes the same
// answer from the same objects, so two nodes never serve overlapping ranges.
func planRanges(all []*jkev1.IPRange, node string) rangePlan {
	sorted := append([]*jkev1.IPRange(nil), all...)
	sort.SliceStable(sorted, func(i, j int) bool { return olderFirst(sorted[i], sorted[j]) })
	p := rangePlan{refused: map[string]refusal{}, byName: map[string]*jkev1.IPRange{}}
	for _, r := range all {
		p.byName[r.Name] = r
	}
	var accepted []*jkev1.IPRange
	var acceptedNets []netip.Prefix
	for _, r := range sorted {
		ir, err := toIPAMRange(r)
		if err != nil {
			p.refuse(r, node, refusal{ReasonInvalid, fmt.Sprintf("spec does not describe a range: %v", err)})
			continue
		}
		refused := false
		for i, o := range acceptedNets {
			if o.Overlaps(ir.Subnet) {
				p.refuse(r, node, refusal{ReasonOverlaps, fmt.Sprintf(
					"CIDR %s overlaps IPRange %s (%s, node %q), which is older: no node serves this range until one of them changes",
					ir.Subnet, accepted[i].Name, o, accepted[i].Spec.Node)})
				refused = true
				break
			}
		}
		if refused {
			continue
		}
		accepted = append(accepted, r)
		acceptedNets = append(acceptedNets, ir.Subnet)
		p.accepted = append(p.accepted, r)
		switch r.Spec.Node {
		case node:
			p.mine = append(p.mine, r)
			p.ipam = append(p.ipam, ir)
		case "":
		default:
			p.others = append(p.others, r)
		}
	}
	return p
}

func (p *rangePlan) refuse(r *jkev1.IPRange, node string, why refusal) {
	p.refused[r.Name] = why
	if r.Spec.Node == node {
		p.refusedMine = append(p.refusedMine, r)
	}
}

// dropSkipped takes out of the plan the ranges the database did not apply (SetNodeRanges): a
// range of this node that overlaps a different range the database still holds with
// allocations — its CIDR was shrunk or moved while pods use the old one, or it replaces a
// range that moved away and still drains. The old allocations stay valid; the new range is
// served once they are released, and until then it is reported.
func (p *rangePlan) dropSkipped(skipped []ipam.RangeConflict) {
	if len(skipped) == 0 {
		return
	}
	why := map[netip.Prefix]string{}
	for _, s := range skipped {
		why[s.Range.Subnet] = s.Reason
	}
	var mine []*jkev1.IPRange
	var rs []ipam.Range
	for i, r := range p.ipam {
		if reason, ok := why[r.Subnet]; ok {
			p.refuse(p.mine[i], p.mine[i].Spec.Node, refusal{ReasonResizedWhileUsed, fmt.Sprintf(
				"CIDR %s is not served yet: %s; it is served once those addresses are released", r.Subnet, reason)})
			continue
		}
		mine = append(mine, p.mine[i])
		rs = append(rs, r)
	}
	p.mine, p.ipam = mine, rs
}

// waitForPreviousOwners takes out of the plan this node's ranges that another node still
// reports holding at the range's current ownership generation (or a higher one): the range was
// reassigned by hand (unassigned, then assigned here) while the old node's pods still hold
// addresses of it, and the old node drains it. Only the node that owns a range allocates from it,
// and a range that moved away only drains: this node serves it once the old node has drained it
// and stops reporting it. A report at a lower generation does not hold the range: node failover
// moved it (ownerGeneration+1) and the old node revokes it instead of draining.
//
// A claim never takes a range away from the node that serves it: served (the database's records
// of the ranges this node holds, nil when unknown) at the range's generation means this node
// holds it already, and another node reporting it too is a contest this node reports (an Event
// on the range), not a reason to stop — a node's report is its word about itself, and one node's
// credential must not make every other node drop its ranges.
func (p *rangePlan) waitForPreviousOwners(held map[string][]heldBy, served map[string]ipam.ServedRange) {
	p.waited = true
	var mine []*jkev1.IPRange
	var rs []ipam.Range
	for i, r := range p.mine {
		var by []string
		for _, h := range held[r.Name] {
			if h.generation >= r.Spec.OwnerGeneration {
				by = append(by, h.node)
			}
		}
		if s, ok := served[r.Name]; ok && len(by) > 0 && !s.Revoked && s.OwnerGeneration >= r.Spec.OwnerGeneration {
			if p.contested == nil {
				p.contested = map[string][]string{}
			}
			p.contested[r.Name] = by
			by = nil
		}
		if len(by) > 0 {
			p.refuse(r, r.Spec.Node, refusal{ReasonWaitingForPreviousOwner, fmt.Sprintf(
				"node %s still holds addresses of this range (its pods keep them while it drains; its entry in this IPRange's status.holders): node %s allocates from it once they are released. "+
					"Should that node be gone for good, fence it (the node.kubernetes.io/out-of-service taint) so that node failover moves the range with ownerGeneration+1, or move it so yourself (the node then drops the range when it returns); deleting its Node object does not release the range",
				strings.Join(by, ", "), r.Spec.Node)})
			continue
		}
		mine = append(mine, r)
		rs = append(rs, p.ipam[i])
	}
	p.mine, p.ipam = mine, rs
}

// duplicate is one StaticIP that shares its IP (or its pod) with another record.
type duplicate struct {
	sip *jkev1.StaticIP
	// winner is the record the contested IP (or pod) is reserved for; sip itself when it won.
	winner *jkev1.StaticIP
	ip     string
}

func (d duplicate) message() string {
	w := d.winner.Namespace + "/" + d.winner.Name
	if d.winner == d.sip {
		return fmt.Sprintf("IP %s is also claimed by another StaticIP; it stays reserved for this record (%s) until the conflict is resolved", d.ip, w)
	}
	return fmt.Sprintf("IP %s (pod %s) conflicts with StaticIP %s, for which the node reserves it; this record is not reserved until the conflict is resolved",
		d.ip, sipPod(d.sip), w)
}

func sipPod(s *jkev1.StaticIP) ipam.PodRef {
	name := s.Spec.Pod
	if name == "" {
		name = s.Name
	}
	return ipam.PodRef{Namespace: s.Namespace, Name: name}
}

// reservationPlan is what the node reserves and what it reports.
type reservationPlan struct {
	reservations []ipam.Reservation
	duplicates   []duplicate
	invalid      []*jkev1.StaticIP
}

// planReservations reserves every StaticIP whose IP lies in a range this node serves, whatever
// node the record names: reservations follow range ownership (failover moves ranges first).
// Records that contest an IP (or give one pod two IPs) do not stop the others: the contested
// IP stays reserved for one of them — the pod that holds it now, else the pod it is reserved
// for now, else the oldest record — so it never falls free for a third pod; all of them are
// reported.
func planReservations(sips []*jkev1.StaticIP, served []ipam.Range, holder, reservedFor map[netip.Addr]string) reservationPlan {
	var p reservationPlan
	type claim struct {
		sip *jkev1.StaticIP
		ip  netip.Addr
		pod ipam.PodRef
	}
	var claims []claim
	for _, s := range sips {
		// Every address of the record: both of a dual-stack one (spec.ips), spec.ip alone of a
		// single-stack one.
		addrs, err := podip.ParseAddresses(s.Spec.Addresses())
		if err != nil {
			p.invalid = append(p.invalid, s)
			continue
		}
		for _, ip := range addrs.List() {
			for _, r := range served {
				if r.Subnet.Contains(ip) {
					claims = append(claims, claim{s, ip, sipPod(s)})
					break
				}
			}
		}
	}
	sort.SliceStable(claims, func(i, j int) bool { return olderFirst(claims[i].sip, claims[j].sip) })
	// pick returns the winning claim of a contested group.
	pick := func(group []claim) claim {
		for _, c := range group {
			if holder[c.ip] == c.pod.Key() {
				return c
			}
		}
		for _, c := range group {
			if reservedFor[c.ip] == c.pod.Key() {
				return c
			}
		}
		return group[0] // oldest
	}
	settle := func(cs []claim, key func(claim) string, distinct func(claim) string) []claim {
		groups := map[string][]claim{}
		var order []string
		for _, c := range cs {
			k := key(c)
			if _, ok := groups[k]; !ok {
				order = append(order, k)
			}
			groups[k] = append(groups[k], c)
		}
		var out []claim
		for _, k := range order {
			g := groups[k]
			values := map[string]bool{}
			for _, c := range g {
				values[distinct(c)] = true
			}
			if len(values) == 1 {
				out = append(out, g[0]) // the same reservation twice is no conflict
				continue
			}
			w := pick(g)
			out = append(out, w)
			for _, c := range g {
				p.duplicates = append(p.duplicates, duplicate{sip: c.sip, winner: w.sip, ip: c.ip.String()})
			}
		}
		return out
	}
	claims = settle(claims, func(c claim) string { return c.ip.String() }, func(c claim) string { return c.pod.Key() })
	// One reservation per pod and IP family (a dual-stack pod has two).
	claims = settle(claims, func(c claim) string { return fmt.Sprint(c.pod.Key(), "/", podip.Family(c.ip)) }, func(c claim) string { return c.ip.String() })
	for _, c := range claims {
		p.reservations = append(p.reservations, ipam.Reservation{IP: c.ip, Pod: c.pod})
	}
	return p
}

// podIndex is what GC knows about the pods bound to this node.
type podIndex struct {
	uids map[string]bool
	// names are all pods by namespace/name; mirrors the mirror pods of static pods.
	names, mirrors map[string]bool
}

func indexPods(pods []*corev1.Pod) podIndex {
	ix := podIndex{uids: map[string]bool{}, names: map[string]bool{}, mirrors: map[string]bool{}}
	for _, p := range pods {
		key := p.Namespace + "/" + p.Name
		ix.uids[string(p.UID)] = true
		ix.names[key] = true
		if _, ok := p.Annotations[corev1.MirrorPodAnnotationKey]; ok {
			ix.mirrors[key] = true
		}
	}
	return ix
}

// Why GC leaves an allocation alone although no pod with its UID is in the cache.
const (
	spareYoung   = "young"   // allocated within the grace period: the cache may not show its pod yet
	spareSandbox = "sandbox" // its host veth exists: the sandbox still runs (force-deleted pod)
)

// judge says whether GC may free al. An allocation is live while a pod with its UID is bound
// to this node; a static pod's (the kubelet gives it a UID of its own, not the mirror pod's) while
// its mirror pod exists by namespace/name. One that looks dead is still spared while it is
// younger than grace (its ADD may have committed after the cache was read, or before the
// informer saw the pod) or while its host veth exists (only the plugin's DEL or GC, which tear
// the veth down, may free the IP of a sandbox that still runs). An allocation imported after
// corruption whose pod was unknown lives exactly as long as its veth.
func judge(al ipam.Allocation, pods podIndex, veths map[string]bool, now time.Time, grace time.Duration) (free bool, spared string) {
	key := al.Pod.Key()
	_, recovered := al.Attachment.RecoveredLink()
	switch {
	case al.Pod.Name == "" && !recovered: // not a pod's: not the agent's to judge
		return false, ""
	case al.Pod.UID != "" && pods.uids[al.Pod.UID]:
		return false, ""
	case al.Pod.UID == "" && pods.names[key]:
		return false, ""
	case pods.mirrors[key]:
		return false, ""
	case now.Sub(al.AllocatedAt) < grace:
		return false, spareYoung
	case veths[vethOf(al.Attachment)]:
		return false, spareSandbox
	}
	return true, ""
}

// vethOf is the host veth of an attachment: the plugin's deterministic name, or the link an
// allocation imported after corruption was found on.
func vethOf(att ipam.Attachment) string {
	if link, ok := att.RecoveredLink(); ok {
		return link
	}
	return plugin.HostVethName(att.ContainerID, att.IfName)
}

// Reasons of the Node condition NetworkUnavailable the agent sets (network.go).
const (
	// ReasonNoRange: the node has no range it allocates from (none names it, or every one
	// that does drains, waits for its previous owner or is left out).
	ReasonNoRange = "StaticIPNoRange"
	// ReasonRangeReady: the node allocates from at least one range.
	ReasonRangeReady = "StaticIPRangeReady"
)

// networkCondition is the node's NetworkUnavailable condition for this pass: False while it
// allocates from at least one range; True, saying why and what fixes it, while it has none.
// Status, reason and message only: the caller keeps the transition time while the status
// stays.
func networkCondition(node string, plan rangePlan) (status corev1.ConditionStatus, reason, message string) {
	if len(plan.mine) > 0 {
		return corev1.ConditionFalse, ReasonRangeReady, fmt.Sprintf("staticip: node %s allocates pod IPs from IPRange(s) %s", node, rangeNames(plan.mine))
	}
	var why []string
	for _, r := range plan.refusedMine {
		why = append(why, fmt.Sprintf("IPRange %s is not served (%s: %s)", r.Name, plan.refused[r.Name].Reason, plan.refused[r.Name].Message))
	}
	if len(plan.draining) > 0 {
		var ds []string
		for name := range plan.draining {
			ds = append(ds, name)
		}
		sort.Strings(ds)
		why = append(why, fmt.Sprintf("IPRange(s) %s moved away and only drain", strings.Join(ds, ", ")))
	}
	if len(why) == 0 {
		why = append(why, "no IPRange names this node")
	}
	return corev1.ConditionTrue, ReasonNoRange, fmt.Sprintf(
		"staticip: node %s has no IP range to allocate pod IPs from: %s; pods other than host-network ones cannot get an IP here until an IPRange names this node (an IPPool that matches it, or one written by hand)",
		node, strings.Join(why, "; "))
}

func rangeNames(rs []*jkev1.IPRange) string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Name)
	}
	return strings.Join(out, ", ")
}
