package kubectlplugin

import (
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
)

// Problem severities: an Error makes check exit 1, a Warning does not.
const (
	SeverityError   = "Error"
	SeverityWarning = "Warning"
)

// Problem kinds found by Audit.
const (
	ProblemDuplicatePodIP       = "DuplicatePodIP"
	ProblemPodIPOutsideRanges   = "PodIPOutsideRanges"
	ProblemPodIPOtherNode       = "PodIPOnOtherNodesRange"
	ProblemPodIPFailoverMoved   = "PodIPInFailedOverRange"
	ProblemPodIPUnassignedRange = "PodIPInUnassignedRange"
	ProblemDuplicateStaticIP    = "DuplicateStaticIP"
	ProblemStaticIPOutsideRange = "StaticIPOutsideRanges"
	ProblemOverlappingRanges    = "OverlappingRanges"
	ProblemRangeNotSynced       = "RangeNotSynced"
	ProblemPoolNotReady         = "IPPoolNotReady"
	ProblemPoolExhausted        = "IPPoolExhausted"
	// ProblemUnassignedRangeHeld: an IPRange with no node whose addresses live pods or StaticIPs
	// still hold — a block awaiting release (a hand move in progress, a node's block given back
	// while its pods run): the old node drains it and no node allocates from it until it is free
	// or assigned again.
	ProblemUnassignedRangeHeld = "UnassignedRangeAwaitingRelease"
	// ProblemOrphanedStaticIP: a StaticIP keeps an address for a pod that does not exist, of a
	// workload that does not exist either; nothing will ever use the address again unless the
	// workload is recreated. The one leak `release --from-report` frees (release.go).
	ProblemOrphanedStaticIP = "OrphanedStaticIP"
	// ProblemStaticIPPartlyHeld: a StaticIP's live pod holds some of the record's addresses but
	// not all (a dual-stack record whose pod runs with one family only).
	ProblemStaticIPPartlyHeld = "StaticIPPartlyHeld"
)

// ReportKind names check's machine-readable report (-o json|yaml), the input of
// `release --from-report`.
const ReportKind = "StaticIPCheckReport"

// Problem is one finding of the audit, with the objects it names.
type Problem struct {
	Severity string `json:"severity"`
	Kind     string `json:"kind"`
	IP       string `json:"ip,omitempty"`
	Message  string `json:"message"`
	// StaticIP (namespace/name) and its UID: the record an OrphanedStaticIP names, so that
	// release acts on that very record and never on one recreated under the same name.
	StaticIP    string `json:"staticIP,omitempty"`
	StaticIPUID string `json:"staticIPUID,omitempty"`
	// Releasable: `kubectl staticip release --from-report` can free the address (after
	// re-checking the live state).
	Releasable bool `json:"releasable,omitempty"`
}

// AuditResult is the check command's output and, as JSON, the report release reads.
type AuditResult struct {
	Kind        string         `json:"kind"`
	GeneratedAt *metav1.Time   `json:"generatedAt,omitempty"`
	Checked     map[string]int `json:"checked"`
	Problems    []Problem      `json:"problems"`
}

// Errors counts the problems of severity Error.
func (r AuditResult) Errors() int {
	n := 0
	for _, p := range r.Problems {
		if p.Severity == SeverityError {
			n++
		}
	}
	return n
}

// Audit looks for leaks and duplicates across IPRanges, StaticIPs and live pods, as
// `calicoctl ipam check` does for Calico's IPAM:
//   - an IP held by two live pods;
//   - a live pod IP outside every IPRange;
//   - a pod on node X whose IP lies in a range owned by node Y (a Warning when a NodeFailover
//     moved that range from X to Y: the pod on the fenced node is being replaced; also a
//     Warning when the range is unassigned: its old node is draining it);
//   - two StaticIPs with the same spec.ip; a StaticIP whose spec.ip is outside every IPRange;
//   - overlapping IPRanges; IPRanges whose Synced condition is False;
//   - unassigned IPRanges that live pods or StaticIPs still hold addresses of (a Warning: a
//     block awaiting release, drained by its old node);
//   - IPPools whose Ready condition is False (the allocator cuts no block from them) or whose
//     Exhausted condition is True (a matching node waits for a block: pods there get no IP);
//   - when s.Workloads is loaded: StaticIPs that keep an address for a pod and a workload
//     that are both gone (a Warning: whenDeleted Retain keeps records on purpose, for the
//     workload's return; release --from-report frees them).
func Audit(s *Snapshot) AuditResult {
	ranges := parseRanges(s.Ranges)
	res := AuditResult{Kind: ReportKind, Problems: []Problem{},
		Checked: map[string]int{"ipranges": len(s.Ranges), "ippools": len(s.Pools), "staticips": len(s.StaticIPs), "pods": 0}}
	add := func(sev, kind string, ip netip.Addr, format string, args ...any) {
		p := Problem{Severity: sev, Kind: kind, Message: fmt.Sprintf(format, args...)}
		if ip.IsValid() {
			p.IP = ip.String()
		}
		res.Problems = append(res.Problems, p)
	}

	// Ranges: overlaps and Synced=False.
	for i := range ranges {
		for j := i + 1; j < len(ranges); j++ {
			if ranges[i].prefix.Overlaps(ranges[j].prefix) {
				add(SeverityError, ProblemOverlappingRanges, netip.Addr{}, "IPRange %s (%s) overlaps IPRange %s (%s)",
					ranges[i].r.Name, ranges[i].r.Spec.CIDR, ranges[j].r.Name, ranges[j].r.Spec.CIDR)
			}
		}
		if c := meta.FindStatusCondition(ranges[i].r.Status.Conditions, "Synced"); c != nil && c.Status == metav1.ConditionFalse {
			add(SeverityError, ProblemRangeNotSynced, netip.Addr{}, "IPRange %s (%s, node %s) is not synced: %s: %s",
				ranges[i].r.Name, ranges[i].r.Spec.CIDR, none(ranges[i].r.Spec.Node), c.Reason, c.Message)
		}
	}

	// Pools: what their allocator reports, as the conditions of the newest spec.
	for i := range s.Pools {
		p := &s.Pools[i]
		if c := meta.FindStatusCondition(p.Status.Conditions, jkev1.IPPoolReady); c != nil && c.Status == metav1.ConditionFalse {
			add(SeverityError, ProblemPoolNotReady, netip.Addr{}, "IPPool %s (%s) is not ready, no block is cut from it: %s: %s",
				p.Name, strings.Join(p.Spec.CIDRs, ","), c.Reason, c.Message)
		}
		if c := meta.FindStatusCondition(p.Status.Conditions, jkev1.IPPoolExhausted); c != nil && c.Status == metav1.ConditionTrue {
			add(SeverityError, ProblemPoolExhausted, netip.Addr{}, "IPPool %s (%s) is exhausted, pods on the waiting nodes get no IP "+
				"(add a CIDR to spec.cidrs or free a block): %s", p.Name, strings.Join(p.Spec.CIDRs, ","), c.Message)
		}
	}

	// Ranges moved by a failover that is still running: range name -> from node -> failover.
	moved := map[string]map[string]string{}
	for _, fo := range s.Failovers {
		for _, mr := range fo.Status.MovedRanges {
			if moved[mr.Name] == nil {
				moved[mr.Name] = map[string]string{}
			}
			if fo.Status.Phase != jkev1alpha1.FailoverCompleted {
				moved[mr.Name][mr.FromNode] = fo.Name
			}
		}
	}

	// Live pods.
	holders := map[netip.Addr][]*corev1.Pod{}
	var order []netip.Addr
	for i := range s.Pods {
		p := &s.Pods[i]
		if !livePod(p) {
			continue
		}
		res.Checked["pods"]++
		for _, a := range podIPs(p) {
			if len(holders[a]) == 0 {
				order = append(order, a)
			}
			holders[a] = append(holders[a], p)
			r := rangeOf(ranges, a)
			pod := fmt.Sprintf("pod %s on node %s", nsName(p.Namespace, p.Name), none(p.Spec.NodeName))
			switch {
			case r == nil:
				add(SeverityError, ProblemPodIPOutsideRanges, a, "%s holds %s, which lies in no IPRange", pod, a)
			case p.Spec.NodeName == "" || r.r.Spec.Node == p.Spec.NodeName:
			case r.r.Spec.Node == "":
				add(SeverityWarning, ProblemPodIPUnassignedRange, a, "%s holds %s of IPRange %s, which is unassigned (the node drains it)", pod, a, r.r.Name)
			case moved[r.r.Name][p.Spec.NodeName] != "":
				add(SeverityWarning, ProblemPodIPFailoverMoved, a, "%s holds %s of IPRange %s, which NodeFailover %s moved to node %s (the pod is being replaced)",
					pod, a, r.r.Name, moved[r.r.Name][p.Spec.NodeName], r.r.Spec.Node)
			default:
				add(SeverityError, ProblemPodIPOtherNode, a, "%s holds %s of IPRange %s, which node %s owns", pod, a, r.r.Name, r.r.Spec.Node)
			}
		}
	}
	for _, a := range order {
		if ps := holders[a]; len(ps) > 1 {
			names := make([]string, 0, len(ps))
			for _, p := range ps {
				names = append(names, fmt.Sprintf("%s (node %s)", nsName(p.Namespace, p.Name), none(p.Spec.NodeName)))
			}
			add(SeverityError, ProblemDuplicatePodIP, a, "%s is held by %d live pods: %s", a, len(ps), strings.Join(names, ", "))
		}
	}

	// StaticIPs: every address of a record (both of a dual-stack one).
	byIP := map[netip.Addr][]string{}
	var sipOrder []netip.Addr
	for _, sip := range s.StaticIPs {
		for _, a := range sip.Spec.AddressList() {
			if len(byIP[a]) == 0 {
				sipOrder = append(sipOrder, a)
			}
			byIP[a] = append(byIP[a], nsName(sip.Namespace, sip.Name))
			if rangeOf(ranges, a) == nil {
				add(SeverityError, ProblemStaticIPOutsideRange, a, "StaticIP %s keeps %s, which lies in no IPRange", nsName(sip.Namespace, sip.Name), a)
			}
		}
	}
	for _, a := range sipOrder {
		if names := byIP[a]; len(names) > 1 {
			add(SeverityError, ProblemDuplicateStaticIP, a, "%s is an address (spec.ip or spec.ips) of %d StaticIPs: %s", a, len(names), strings.Join(names, ", "))
		}
	}
	// A record's live pod holds all of its addresses or none of them (it may run elsewhere
	// meanwhile): one family only is a pod that came back with half of its record.
	for i := range s.StaticIPs {
		sip := &s.StaticIPs[i]
		addrs := sip.Spec.AddressList()
		if len(addrs) < 2 {
			continue
		}
		var has, lacks []string
		for _, a := range addrs {
			if slices.ContainsFunc(holders[a], func(p *corev1.Pod) bool { return p.Namespace == sip.Namespace && p.Name == recordPodName(sip) }) {
				has = append(has, a.String())
			} else {
				lacks = append(lacks, a.String())
			}
		}
		if len(has) > 0 && len(lacks) > 0 {
			add(SeverityError, ProblemStaticIPPartlyHeld, addrs[0], "pod %s holds %s of StaticIP %s but not %s: it runs without the record's other address",
				nsName(sip.Namespace, recordPodName(sip)), strings.Join(has, ","), nsName(sip.Namespace, sip.Name), strings.Join(lacks, ","))
		}
	}

	// Orphaned StaticIPs: no pod of the name (live or not) and the workload gone.
	if s.Workloads != nil {
		for i := range s.StaticIPs {
			sip := &s.StaticIPs[i]
			addrs := sip.Spec.AddressList()
			if len(addrs) == 0 {
				continue
			}
			var held []*corev1.Pod
			var list []string
			for _, a := range addrs {
				held = append(held, holders[a]...)
				list = append(list, a.String())
			}
			a := addrs[0]
			if reason := orphaned(s, sip, held); reason != "" {
				add(SeverityWarning, ProblemOrphanedStaticIP, a, "StaticIP %s keeps %s on node %s for %s (kubectl staticip release --from-report frees it)",
					nsName(sip.Namespace, sip.Name), strings.Join(list, ","), none(sip.Spec.Node), reason)
				p := &res.Problems[len(res.Problems)-1]
				p.StaticIP, p.StaticIPUID, p.Releasable = nsName(sip.Namespace, sip.Name), string(sip.UID), true
			}
		}
	}

	auditUnassignedRanges(ranges, holders, s.StaticIPs, add)

	sort.SliceStable(res.Problems, func(i, j int) bool {
		pi, pj := res.Problems[i], res.Problems[j]
		if pi.Severity != pj.Severity {
			return pi.Severity == SeverityError
		}
		return false
	})
	return res
}

// PrintAudit writes one line per problem (severity, kind, message), then a summary line.
func PrintAudit(out io.Writer, res AuditResult) error {
	w := printers.GetNewTabWriter(out)
	if len(res.Problems) > 0 {
		fmt.Fprintln(w, "SEVERITY\tKIND\tMESSAGE")
		for _, p := range res.Problems {
			fmt.Fprintf(w, "%s\t%s\t%s\n", p.Severity, p.Kind, p.Message)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	checked := fmt.Sprintf("%d IPRanges, %d IPPools, %d StaticIPs, %d live pods checked",
		res.Checked["ipranges"], res.Checked["ippools"], res.Checked["staticips"], res.Checked["pods"])
	if errs := res.Errors(); errs > 0 {
		_, err := fmt.Fprintf(out, "%d problem(s), %d warning(s): %s\n", errs, len(res.Problems)-errs, checked)
		return err
	}
	_, err := fmt.Fprintf(out, "No problems found (%d warning(s)): %s\n", len(res.Problems), checked)
	return err
}

// recordPodName is the name of a StaticIP's pod.
func recordPodName(sip *jkev1.StaticIP) string {
	if sip.Spec.Pod != "" {
		return sip.Spec.Pod
	}
	return sip.Name
}

// auditUnassignedRanges warns about every unassigned IPRange that live pods or StaticIPs still
// hold addresses of, or that a node still claims (status.holders: it drains it): a block
// awaiting release, which the node that held it drains and no node allocates from. A released
// block (nothing holds it) is free and no problem.
func auditUnassignedRanges(ranges []parsedRange, holders map[netip.Addr][]*corev1.Pod, sips []jkev1.StaticIP, add func(sev, kind string, ip netip.Addr, format string, args ...any)) {
	for _, r := range ranges {
		if r.r.Spec.Node != "" {
			continue
		}
		var pods, records []string
		nodes := map[string]bool{}
		for a, ps := range holders {
			if !r.prefix.Contains(a) {
				continue
			}
			for _, p := range ps {
				pods = append(pods, nsName(p.Namespace, p.Name))
				nodes[none(p.Spec.NodeName)] = true
			}
		}
		for _, sip := range sips {
			if slices.ContainsFunc(sip.Spec.AddressList(), r.prefix.Contains) {
				records = append(records, nsName(sip.Namespace, sip.Name))
			}
		}
		var claims []string
		for _, h := range r.r.Status.Holders {
			claims = append(claims, fmt.Sprintf("%s (%s at generation %d)", h.Node, h.State, h.Generation))
		}
		if len(pods)+len(records)+len(claims) == 0 {
			continue
		}
		sort.Strings(claims)
		sort.Strings(pods)
		sort.Strings(records)
		var on []string
		for n := range nodes {
			on = append(on, n)
		}
		sort.Strings(on)
		add(SeverityWarning, ProblemUnassignedRangeHeld, netip.Addr{},
			"IPRange %s (%s) is unassigned and awaits release: %d live pod(s) (%s; on %s) and %d StaticIP(s) (%s) hold addresses of it, claimed by %s; "+
				"the node that held it drains it and routes it, no node allocates from it until they are gone or it is assigned again",
			r.r.Name, r.r.Spec.CIDR, len(pods), orNoneList(pods), orNoneList(on), len(records), orNoneList(records), orNoneList(claims))
	}
}

func orNoneList(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}
