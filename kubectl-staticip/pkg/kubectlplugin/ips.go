package kubectlplugin

import (
	"fmt"
	"io"
	"net/netip"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// IP states in the ips report.
const (
	// StateAllocated: a live pod holds the IP.
	StateAllocated = "Allocated"
	// StateReserved: a StaticIP keeps the IP for a pod that is absent.
	StateReserved = "Reserved"
)

// IPFilter narrows the ips report; empty fields match everything.
type IPFilter struct {
	Node  string
	Range string
	Pool  string
	// IP: only this address and the range it lies in (ips --ip).
	IP netip.Addr
}

// RangeSummary is one IPRange and the counts its owning agent reports in its status.
type RangeSummary struct {
	Name            string `json:"name"`
	CIDR            string `json:"cidr"`
	Node            string `json:"node,omitempty"`
	Pool            string `json:"pool,omitempty"`
	OwnerGeneration int64  `json:"ownerGeneration,omitempty"`
	Synced          string `json:"synced,omitempty"`
	// NodeGoneSince is set while the range's node is deleted and its block waits out the
	// pool's releaseAfter quarantine (the jke.jdcloud.com/node-gone-since annotation).
	NodeGoneSince string `json:"nodeGoneSince,omitempty"`
	Total         int32  `json:"total"`
	Used          int32  `json:"used"`
	Reserved      int32  `json:"reserved"`
	Free          int32  `json:"free"`
}

// IPEntry is one address that is allocated or reserved.
type IPEntry struct {
	IP       string `json:"ip"`
	State    string `json:"state"`
	Node     string `json:"node,omitempty"`
	Range    string `json:"range,omitempty"`
	Pool     string `json:"pool,omitempty"`
	Pod      string `json:"pod,omitempty"`
	StaticIP string `json:"staticIP,omitempty"`
	// Since when: the holding pod's start (status.startTime; an allocated IP) and phase, the
	// StaticIP's creation and phase.
	PodStarted      *metav1.Time `json:"podStarted,omitempty"`
	PodPhase        string       `json:"podPhase,omitempty"`
	StaticIPCreated *metav1.Time `json:"staticIPCreated,omitempty"`
	StaticIPPhase   string       `json:"staticIPPhase,omitempty"`
}

// IPReport is the ips command's output.
type IPReport struct {
	Ranges []RangeSummary `json:"ranges"`
	IPs    []IPEntry      `json:"ips"`
}

// BuildIPReport lists the ranges and every allocated or reserved address of s that f selects.
// Allocated: a live pod's IP. Reserved: a StaticIP's spec.ip that no live pod holds.
func BuildIPReport(s *Snapshot, f IPFilter) IPReport {
	ranges := parseRanges(s.Ranges)
	pools := map[string]string{} // range name -> pool
	rep := IPReport{Ranges: []RangeSummary{}, IPs: []IPEntry{}}
	var ipRange *parsedRange // the range f.IP lies in
	if f.IP.IsValid() {
		ipRange = rangeOf(ranges, f.IP)
	}
	for _, r := range ranges {
		pools[r.r.Name] = poolOf(s.Pools, r)
		sum := RangeSummary{Name: r.r.Name, CIDR: r.r.Spec.CIDR, Node: r.r.Spec.Node, Pool: pools[r.r.Name],
			OwnerGeneration: r.r.Spec.OwnerGeneration, Total: r.r.Status.Total, Used: r.r.Status.Used,
			Reserved: r.r.Status.Reserved, Free: r.r.Status.Free, NodeGoneSince: r.r.Annotations[jkev1.AnnotationNodeGoneSince]}
		if c := meta.FindStatusCondition(r.r.Status.Conditions, "Synced"); c != nil {
			sum.Synced = string(c.Status)
		}
		if f.IP.IsValid() && (ipRange == nil || ipRange.r.Name != r.r.Name) {
			continue
		}
		if f.matches(sum.Node, sum.Name, sum.Pool) {
			rep.Ranges = append(rep.Ranges, sum)
		}
	}
	// StaticIPs by IP, to name the record of an allocated address.
	sipByIP := map[netip.Addr]*jkev1.StaticIP{}
	for i := range s.StaticIPs {
		sip := &s.StaticIPs[i]
		for _, a := range sip.Spec.AddressList() { // both of a dual-stack record
			if _, dup := sipByIP[a]; !dup {
				sipByIP[a] = sip
			}
		}
	}
	withStaticIP := func(e *IPEntry, sip *jkev1.StaticIP) {
		if sip == nil {
			return
		}
		e.StaticIP, e.StaticIPPhase = nsName(sip.Namespace, sip.Name), string(sip.Status.Phase)
		if !sip.CreationTimestamp.IsZero() {
			created := sip.CreationTimestamp
			e.StaticIPCreated = &created
		}
	}
	held := map[netip.Addr]bool{}
	for i := range s.Pods {
		p := &s.Pods[i]
		if !livePod(p) {
			continue
		}
		for _, a := range podIPs(p) {
			held[a] = true
			if f.IP.IsValid() && a != f.IP {
				continue
			}
			e := IPEntry{IP: a.String(), State: StateAllocated, Node: p.Spec.NodeName, Pod: nsName(p.Namespace, p.Name),
				PodStarted: p.Status.StartTime, PodPhase: string(p.Status.Phase)}
			withStaticIP(&e, sipByIP[a])
			if r := rangeOf(ranges, a); r != nil {
				e.Range, e.Pool = r.r.Name, pools[r.r.Name]
			}
			if f.matches(e.Node, e.Range, e.Pool) {
				rep.IPs = append(rep.IPs, e)
			}
		}
	}
	for i := range s.StaticIPs {
		sip := &s.StaticIPs[i]
		for _, a := range sip.Spec.AddressList() { // every address of the record: both of a dual-stack one
			if held[a] || (f.IP.IsValid() && a != f.IP) {
				continue
			}
			e := IPEntry{IP: a.String(), State: StateReserved, Node: sip.Spec.Node}
			withStaticIP(&e, sip)
			if sip.Spec.Pod != "" {
				e.Pod = nsName(sip.Namespace, sip.Spec.Pod)
			}
			if r := rangeOf(ranges, a); r != nil {
				e.Range, e.Pool = r.r.Name, pools[r.r.Name]
			}
			if f.matches(e.Node, e.Range, e.Pool) {
				rep.IPs = append(rep.IPs, e)
			}
		}
	}
	sort.SliceStable(rep.IPs, func(i, j int) bool {
		a, _ := netip.ParseAddr(rep.IPs[i].IP)
		b, _ := netip.ParseAddr(rep.IPs[j].IP)
		if a != b {
			return a.Less(b)
		}
		return rep.IPs[i].Pod < rep.IPs[j].Pod
	})
	return rep
}

func (f IPFilter) matches(node, rng, pool string) bool {
	return (f.Node == "" || f.Node == node) && (f.Range == "" || f.Range == rng) && (f.Pool == "" || f.Pool == pool)
}

// PrintIPReport writes rep as two kubectl-style tables: the ranges, then the addresses.
// wide adds the pool, owner generation and Synced columns.
func PrintIPReport(out io.Writer, rep IPReport, wide bool) error {
	w := printers.GetNewTabWriter(out)
	if len(rep.Ranges) == 0 {
		fmt.Fprintln(w, "No IPRanges found.")
	} else {
		if wide {
			fmt.Fprintln(w, "RANGE\tCIDR\tNODE\tPOOL\tOWNER-GEN\tSYNCED\tNODE-GONE-SINCE\tTOTAL\tUSED\tRESERVED\tFREE")
		} else {
			fmt.Fprintln(w, "RANGE\tCIDR\tNODE\tTOTAL\tUSED\tRESERVED\tFREE")
		}
		for _, r := range rep.Ranges {
			if wide {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\t%d\t%d\n", r.Name, r.CIDR, none(r.Node), none(r.Pool),
					r.OwnerGeneration, none(r.Synced), none(r.NodeGoneSince), r.Total, r.Used, r.Reserved, r.Free)
			} else {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\n", r.Name, r.CIDR, none(r.Node), r.Total, r.Used, r.Reserved, r.Free)
			}
		}
	}
	fmt.Fprintln(w)
	if err := w.Flush(); err != nil { // the address table has its own columns
		return err
	}
	w = printers.GetNewTabWriter(out)
	if len(rep.IPs) == 0 {
		fmt.Fprintln(w, "No allocated or reserved IPs found.")
		return w.Flush()
	}
	if wide {
		fmt.Fprintln(w, "IP\tSTATE\tNODE\tRANGE\tPOOL\tPOD\tSTATICIP")
	} else {
		fmt.Fprintln(w, "IP\tSTATE\tNODE\tRANGE\tPOD\tSTATICIP")
	}
	for _, e := range rep.IPs {
		if wide {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.IP, e.State, none(e.Node), none(e.Range), none(e.Pool), none(e.Pod), none(e.StaticIP))
		} else {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", e.IP, e.State, none(e.Node), none(e.Range), none(e.Pod), none(e.StaticIP))
		}
	}
	return w.Flush()
}

func none(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// PrintIPDescription writes what `ips --ip` says about one address: each entry holding it
// (pod and since when, StaticIP and since when, range, pool, node), or that it is free in its
// range, or outside every range.
func PrintIPDescription(out io.Writer, ip netip.Addr, rep IPReport, now time.Time) error {
	var r *RangeSummary
	if len(rep.Ranges) > 0 {
		r = &rep.Ranges[0]
	}
	rangeLine := "<none> (the address lies in no IPRange)"
	if r != nil {
		rangeLine = fmt.Sprintf("%s (%s, pool %s, owned by node %s)", r.Name, r.CIDR, none(r.Pool), none(r.Node))
	}
	w := printers.GetNewTabWriter(out)
	if len(rep.IPs) == 0 {
		state := "Free (no live pod holds it and no StaticIP records it)"
		if r == nil {
			state = "Unmanaged (outside every IPRange)"
		}
		fmt.Fprintf(w, "IP:\t%s\nState:\t%s\nRange:\t%s\n", ip, state, rangeLine)
		return w.Flush()
	}
	for i, e := range rep.IPs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "IP:\t%s\nState:\t%s\nRange:\t%s\nNode:\t%s\n", e.IP, e.State, rangeLine, none(e.Node))
		pod := none(e.Pod)
		switch {
		case e.State == StateReserved && e.Pod != "":
			pod += " (absent: the StaticIP keeps the address for it)"
		case e.PodStarted != nil:
			pod += fmt.Sprintf(", %s since %s (%s)", e.PodPhase, e.PodStarted.UTC().Format(time.RFC3339), age(now, e.PodStarted.Time))
		case e.PodPhase != "":
			pod += ", " + e.PodPhase + " (not started)"
		}
		fmt.Fprintf(w, "Pod:\t%s\n", pod)
		sip := none(e.StaticIP)
		if e.StaticIPCreated != nil {
			sip += fmt.Sprintf(", %s, created %s (%s)", none(e.StaticIPPhase), e.StaticIPCreated.UTC().Format(time.RFC3339), age(now, e.StaticIPCreated.Time))
		}
		fmt.Fprintf(w, "StaticIP:\t%s\n", sip)
	}
	return w.Flush()
}

// age is a duration as kubectl prints ages (5m3s, 2d4h), "ago".
func age(now, t time.Time) string {
	return duration.HumanDuration(now.Sub(t)) + " ago"
}
