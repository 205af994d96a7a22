package agent

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/cni/plugin"
	"github.com/staticip/staticip/ipam"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ipr(name string, age int, cidr, node string) *jkev1.IPRange {
	return &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second))},
		Spec: jkev1.IPRangeSpec{CIDR: cidr, Node: node}}
}

func names(rs []*jkev1.IPRange) string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Name)
	}
	return strings.Join(out, ",")
}

func TestPlanRanges(t *testing.T) {
	cases := []struct {
		name                 string
		ranges               []*jkev1.IPRange
		mine, others, refuse string // refuse: name=reason,...
		refusedMine          string
	}{
		{name: "disjoint", ranges: []*jkev1.IPRange{ipr("a", 0, "10.0.0.0/24", "n1"), ipr("b", 0, "10.0.1.0/24", "n2"), ipr("c", 0, "10.0.2.0/24", "")},
			mine: "a", others: "b"},
		{name: "the newer of two overlapping ranges is refused, whichever node owns it",
			ranges: []*jkev1.IPRange{ipr("new", 5, "10.0.0.128/25", "n1"), ipr("old", 1, "10.0.0.0/24", "n2")},
			others: "old", refuse: "new=Overlaps", refusedMine: "new"},
		{name: "an unassigned older range still blocks a newer one",
			ranges: []*jkev1.IPRange{ipr("pool", 1, "10.0.0.0/16", ""), ipr("n1", 2, "10.0.3.0/24", "n1")},
			refuse: "n1=Overlaps", refusedMine: "n1"},
		{name: "same age: by name", ranges: []*jkev1.IPRange{ipr("b", 1, "10.0.0.0/24", "n1"), ipr("a", 1, "10.0.0.0/24", "n2")},
			others: "a", refuse: "b=Overlaps", refusedMine: "b"},
		{name: "a refused range blocks nothing", ranges: []*jkev1.IPRange{ipr("a", 1, "10.0.0.0/24", "n2"), ipr("b", 2, "10.0.0.0/23", "n2"), ipr("c", 3, "10.0.1.0/24", "n1")},
			mine: "c", others: "a", refuse: "b=Overlaps"},
		{name: "invalid", ranges: []*jkev1.IPRange{ipr("x", 1, "10.0.0.1/24", "n1"), ipr("y", 2, "10.0.0.0/24", "n1")},
			mine: "y", refuse: "x=Invalid", refusedMine: "x"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := planRanges(c.ranges, "n1")
			var refused []string
			for n, r := range p.refused {
				refused = append(refused, n+"="+r.Reason)
			}
			sort.Strings(refused)
			if names(p.mine) != c.mine || names(p.others) != c.others || strings.Join(refused, ",") != c.refuse || names(p.refusedMine) != c.refusedMine {
				t.Fatalf("mine %q others %q refused %q refusedMine %q; want %q %q %q %q", names(p.mine), names(p.others), refused,
					names(p.refusedMine), c.mine, c.others, c.refuse, c.refusedMine)
			}
			if len(p.ipam) != len(p.mine) {
				t.Fatalf("%d ipam ranges for %d IPRanges", len(p.ipam), len(p.mine))
			}
		})
	}
}

func TestDropSkipped(t *testing.T) {
	p := planRanges([]*jkev1.IPRange{ipr("resized", 1, "10.0.0.0/25", "n1"), ipr("other", 2, "10.0.1.0/24", "n1")}, "n1")
	p.dropSkipped([]ipam.RangeConflict{{Range: ipam.Range{Subnet: netip.MustParsePrefix("10.0.0.0/25")}, Reason: "overlaps range 10.0.0.0/24, which left this node"}})
	if names(p.mine) != "other" || len(p.ipam) != 1 || p.refused["resized"].Reason != ReasonResizedWhileUsed || names(p.refusedMine) != "resized" ||
		!strings.Contains(p.refused["resized"].Message, "10.0.0.0/24") {
		t.Fatalf("mine %q refused %v", names(p.mine), p.refused)
	}
}

func sipRec(name string, age int, ip string) *jkev1.StaticIP {
	return &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second))},
		Spec: jkev1.StaticIPSpec{Pod: name, IP: ip, Node: "whatever"}}
}

func TestPlanReservations(t *testing.T) {
	served := []ipam.Range{{Subnet: netip.MustParsePrefix("10.0.0.0/24")}, {Subnet: netip.MustParsePrefix("fd00::/120")}}
	a := netip.MustParseAddr
	dual := func(name string, age int, ips ...string) *jkev1.StaticIP {
		s := sipRec(name, age, ips[0])
		s.Spec.IPs = ips
		return s
	}
	cases := []struct {
		name             string
		sips             []*jkev1.StaticIP
		holder, reserved map[netip.Addr]string
		want             string // ip=pod,...
		duplicates, wins string // names of records reported; of the winners they name
		invalid          string
	}{
		{name: "by range, not by node", sips: []*jkev1.StaticIP{sipRec("in", 1, "10.0.0.5"), sipRec("out", 1, "10.0.1.5"), sipRec("none", 1, "")},
			want: "10.0.0.5=ns/in"},
		{name: "same IP: the oldest wins", sips: []*jkev1.StaticIP{sipRec("b", 2, "10.0.0.5"), sipRec("a", 1, "10.0.0.5"), sipRec("c", 3, "10.0.0.6")},
			want: "10.0.0.5=ns/a,10.0.0.6=ns/c", duplicates: "a,b", wins: "a,a"},
		{name: "same IP: the holder wins", sips: []*jkev1.StaticIP{sipRec("a", 1, "10.0.0.5"), sipRec("b", 2, "10.0.0.5")},
			holder: map[netip.Addr]string{a("10.0.0.5"): "ns/b"}, want: "10.0.0.5=ns/b", duplicates: "a,b", wins: "b,b"},
		{name: "same IP: the current reservation wins", sips: []*jkev1.StaticIP{sipRec("a", 1, "10.0.0.5"), sipRec("b", 2, "10.0.0.5")},
			reserved: map[netip.Addr]string{a("10.0.0.5"): "ns/b"}, want: "10.0.0.5=ns/b", duplicates: "a,b", wins: "b,b"},
		{name: "one pod, two IPs", sips: []*jkev1.StaticIP{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x", CreationTimestamp: metav1.NewTime(t0)}, Spec: jkev1.StaticIPSpec{Pod: "p", IP: "10.0.0.7"}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "y", CreationTimestamp: metav1.NewTime(t0.Add(time.Second))}, Spec: jkev1.StaticIPSpec{Pod: "p", IP: "10.0.0.8"}}},
			want: "10.0.0.7=ns/p", duplicates: "x,y", wins: "x,x"},
		{name: "the same claim twice is no conflict", sips: []*jkev1.StaticIP{sipRec("a", 1, "10.0.0.5"), sipRec("a", 1, "10.0.0.5")},
			want: "10.0.0.5=ns/a"},
		{name: "dual-stack: both addresses reserved", sips: []*jkev1.StaticIP{dual("d", 1, "10.0.0.5", "fd00::5"), dual("e", 1, "fd00::6", "10.0.0.6")},
			want: "10.0.0.5=ns/d,10.0.0.6=ns/e,fd00::5=ns/d,fd00::6=ns/e"},
		{name: "dual-stack: only the families this node serves", sips: []*jkev1.StaticIP{dual("d", 1, "10.0.1.5", "fd00::5")},
			want: "fd00::5=ns/d"},
		{name: "dual-stack: an IPv6 address contested, the IPv4 one not", sips: []*jkev1.StaticIP{dual("a", 1, "10.0.0.5", "fd00::5"), dual("b", 2, "10.0.0.6", "fd00::5")},
			want: "10.0.0.5=ns/a,10.0.0.6=ns/b,fd00::5=ns/a", duplicates: "a,b", wins: "a,a"},
		{name: "malformed IP", sips: []*jkev1.StaticIP{sipRec("bad", 1, "10.0.0"), sipRec("ok", 1, "::ffff:10.0.0.9")},
			want: "10.0.0.9=ns/ok", invalid: "bad"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := planReservations(c.sips, served, c.holder, c.reserved)
			var got, dups, wins, invalid []string
			for _, r := range p.reservations {
				got = append(got, r.IP.String()+"="+r.Pod.Key())
			}
			sort.Strings(got)
			sort.Slice(p.duplicates, func(i, j int) bool { return p.duplicates[i].sip.Name < p.duplicates[j].sip.Name })
			for _, d := range p.duplicates {
				dups = append(dups, d.sip.Name)
				wins = append(wins, d.winner.Name)
			}
			for _, s := range p.invalid {
				invalid = append(invalid, s.Name)
			}
			if strings.Join(got, ",") != c.want || strings.Join(dups, ",") != c.duplicates || strings.Join(wins, ",") != c.wins || strings.Join(invalid, ",") != c.invalid {
				t.Fatalf("reservations %v duplicates %v winners %v invalid %v; want %s / %s / %s / %s", got, dups, wins, invalid, c.want, c.duplicates, c.wins, c.invalid)
			}
		})
	}
}

func TestJudge(t *testing.T) {
	now := t0.Add(time.Hour)
	pods := indexPods([]*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "run", UID: "u-run"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "etcd-n1", UID: "u-mirror", Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "h"}}},
	})
	old, young := now.Add(-10*time.Minute), now.Add(-10*time.Second)
	al := func(ns, name, uid, cid string, at time.Time) ipam.Allocation {
		return ipam.Allocation{Pod: ipam.PodRef{Namespace: ns, Name: name, UID: uid}, Attachment: ipam.Attachment{ContainerID: cid, IfName: "eth0"}, AllocatedAt: at}
	}
	veths := map[string]bool{plugin.HostVethName("c-sandbox", "eth0"): true, "sip0123456789a": true}
	cases := []struct {
		al     ipam.Allocation
		free   bool
		spared string
	}{
		{al("ns", "run", "u-run", "c1", old), false, ""},
		{al("ns", "run", "u-old", "c2", old), true, ""}, // an earlier incarnation of run
		{al("ns", "run", "", "c3", old), false, ""},     // no UID recorded: by name
		{al("kube-system", "etcd-n1", "u-kubelet", "c4", old), false, ""},
		{al("ns", "gone", "u-gone", "c5", old), true, ""},
		{al("ns", "gone", "u-gone", "c6", young), false, spareYoung},
		{al("ns", "gone", "u-gone", "c-sandbox", old), false, spareSandbox},
		{al("", "", "", "c7", old), false, ""}, // not a pod's
		{al("ns", "gone", "u-gone", "c8", time.Time{}), true, ""},
		{ipam.Allocation{Pod: ipam.PodRef{Namespace: "ns", Name: "gone"}, Attachment: ipam.RecoveredAttachment("sip0123456789a"), AllocatedAt: old}, false, spareSandbox},
		{ipam.Allocation{Pod: ipam.PodRef{Namespace: "ns", Name: "gone"}, Attachment: ipam.RecoveredAttachment("sip00000000000"), AllocatedAt: old}, true, ""},
		{ipam.Allocation{Attachment: ipam.RecoveredAttachment("sip0123456789a"), AllocatedAt: old}, false, spareSandbox},
		{ipam.Allocation{Attachment: ipam.RecoveredAttachment("sip00000000000"), AllocatedAt: old}, true, ""},
	}
	for i, c := range cases {
		free, spared := judge(c.al, pods, veths, now, 2*time.Minute)
		if free != c.free || spared != c.spared {
			t.Errorf("case %d (%s %s): free=%v spared=%q, want %v %q", i, c.al.Pod, c.al.Attachment.ContainerID, free, spared, c.free, c.spared)
		}
	}
}

func TestWaitForPreviousOwners(t *testing.T) {
	gen := func(r *jkev1.IPRange, g int64) *jkev1.IPRange { r.Spec.OwnerGeneration = g; return r }
	cases := []struct {
		name     string
		observed map[string]string // node -> annotation
		mine     string
		waiting  string // the refused range's message names these nodes
		// served: the generation this node's database records serving r at (0: no record).
		served    int64
		contested string
	}{
		{name: "nobody else holds it", observed: map[string]string{"n2": `{"r":"n1/2","s":"n2/0"}`}, mine: "r"},
		{name: "the old owner drains it at the same generation",
			observed: map[string]string{"n2": `{"r":"n2/2"}`}, waiting: "n2"},
		{name: "a report at a lower generation: failover moved it, the old node revokes",
			observed: map[string]string{"n2": `{"r":"n2/1"}`}, mine: "r"},
		{name: "the node's own report is no claim of another", observed: map[string]string{"n1": `{"r":"n1/2"}`}, mine: "r"},
		{name: "a route entry naming another node is no claim", observed: map[string]string{"n3": `{"r":"n2/2"}`}, mine: "r"},
		{name: "two nodes hold it", observed: map[string]string{"n3": `{"r":"n3/2"}`, "n2": `{"r":"n2/5"}`}, waiting: "n2, n3"},
		{name: "an unparsable report is ignored", observed: map[string]string{"n2": `{r`, "n3": `{"r":"n3/x"}`}, mine: "r"},
		{name: "a claim never takes a range the node serves already", served: 2, observed: map[string]string{"n2": `{"r":"n2/2"}`}, mine: "r", contested: "n2"},
		{name: "a range served at an older generation does not count", served: 1, observed: map[string]string{"n2": `{"r":"n2/2"}`}, waiting: "n2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := planRanges([]*jkev1.IPRange{gen(ipr("r", 1, "10.0.0.0/24", "n1"), 2)}, "n1")
			var served map[string]ipam.ServedRange
			if c.served > 0 {
				served = map[string]ipam.ServedRange{"r": {Subnet: netip.MustParsePrefix("10.0.0.0/24"), OwnerGeneration: c.served}}
			}
			p.waitForPreviousOwners(claims(nil, c.observed, "n1"), served)
			if got := strings.Join(p.contested["r"], ", "); got != c.contested {
				t.Errorf("contested by %q, want %q", got, c.contested)
			}
			if names(p.mine) != c.mine || len(p.ipam) != len(p.mine) {
				t.Fatalf("mine %q (%d ipam), want %q", names(p.mine), len(p.ipam), c.mine)
			}
			why, refused := p.refused["r"]
			if refused != (c.waiting != "") {
				t.Fatalf("refused %v (%+v), want waiting for %q", refused, why, c.waiting)
			}
			// The message names where the claim is and never advises deleting the Node (which
			// does not release the range: issue 37, defect 5).
			if refused && (why.Reason != ReasonWaitingForPreviousOwner || !strings.HasPrefix(why.Message, "node "+c.waiting+" still holds") ||
				!strings.Contains(why.Message, "status.holders") || !strings.Contains(why.Message, "deleting its Node object does not release the range") ||
				names(p.refusedMine) != "r") {
				t.Fatalf("refusal %+v (refusedMine %q), want %s naming %s", why, names(p.refusedMine), ReasonWaitingForPreviousOwner, c.waiting)
			}
		})
	}
}

func TestDrainingHeld(t *testing.T) {
	pfx := netip.MustParsePrefix
	served := map[string]ipam.ServedRange{
		"moved": {Subnet: pfx("10.0.0.0/24"), OwnerGeneration: 3},
		"mine":  {Subnet: pfx("10.0.1.0/24"), OwnerGeneration: 1},
		"gone":  {Subnet: pfx("10.0.2.0/24"), OwnerGeneration: 0}, // drained: not in the store
	}
	mine := []*jkev1.IPRange{ipr("mine", 1, "10.0.1.0/24", "n1")}
	stored := []ipam.Range{{Subnet: pfx("10.0.0.0/24"), Draining: true}, {Subnet: pfx("10.0.1.0/24")}, {Subnet: pfx("10.0.3.0/24"), Draining: true}}
	legacy := ipr("legacy", 1, "10.0.3.0/24", "n2")
	legacy.Spec.OwnerGeneration = 4
	got := drainingHeld(served, mine, stored, map[string]*jkev1.IPRange{"mine": mine[0], "legacy": legacy})
	if len(got) != 2 || got["moved"] != 3 || got["legacy"] != 4 {
		t.Fatalf("draining %v, want moved at 3 (its served record) and legacy at 4 (no record: the IPRange of that CIDR)", got)
	}
	obs := observedRanges("n1", mine, []rangeRoute{{r: ipr("moved", 1, "10.0.0.0/24", "n2"), via: "n2"}}, got, nil)
	if obs["moved"] != "n1/3" || obs["mine"] != "n1/0" || obs["legacy"] != "n1/4" {
		t.Fatalf("observed %v: a draining range must be reported as held by this node, in place of its route", obs)
	}
}

// A revocation whose host side is not withdrawn yet (record Revoked) is planned again on every
// pass, whatever the API shows now, and is never forgotten as stale.
func TestPendingRevocationIsRetried(t *testing.T) {
	sub := netip.MustParsePrefix("10.160.0.0/24")
	served := map[string]ipam.ServedRange{
		"pending-gone":  {Subnet: sub, OwnerGeneration: 1, Revoked: true},
		"moved":         {Subnet: netip.MustParsePrefix("10.161.0.0/24"), OwnerGeneration: 1},
		"same":          {Subnet: netip.MustParsePrefix("10.162.0.0/24"), OwnerGeneration: 2},
		"gone-drains":   {Subnet: netip.MustParsePrefix("10.163.0.0/24"), OwnerGeneration: 0},
		"pending-again": {Subnet: netip.MustParsePrefix("10.164.0.0/24"), OwnerGeneration: 3, Revoked: true},
	}
	byName := map[string]*jkev1.IPRange{
		"moved":         {Spec: jkev1.IPRangeSpec{Node: "spare", OwnerGeneration: 2}},
		"same":          {Spec: jkev1.IPRangeSpec{Node: "me", OwnerGeneration: 2}},
		"pending-again": {Spec: jkev1.IPRangeSpec{Node: "me", OwnerGeneration: 3}},
	}
	var names []string
	for _, rv := range planRevocations(served, byName) {
		names = append(names, rv.name)
	}
	if want := []string{"moved", "pending-again", "pending-gone"}; !slices.Equal(names, want) {
		t.Errorf("planned %v, want %v", names, want)
	}
	if stale := staleServed(served, nil, nil); !slices.Equal(stale, []string{"gone-drains", "moved", "same"}) {
		t.Errorf("stale %v: a pending revocation must never be forgotten as stale", stale)
	}
}

// What a converged agent writes: on its Node (ObservedReport) its own claims only; in its
// route-report Lease (RouteReports) its routes to the ranges node failover waits for (marked) and
// its own claim of a marked range it holds (the target of the move), no other range — neither
// grows with the cluster; unassigned and overlapping (refused) ranges are left out.
func TestObservedReport(t *testing.T) {
	moved := ipr("moved", 1, "10.0.1.0/24", "spare")
	moved.Spec.OwnerGeneration = 2
	moved.Annotations = map[string]string{jkev1.AnnotationReportRoutes: "n9"}
	for _, tc := range []struct {
		name       string
		ranges     []*jkev1.IPRange
		self       string
		wantNode   string
		wantRoutes string
	}{
		{"none", nil, "n1", `{}`, `{}`},
		{"its own range and a marked moved range", []*jkev1.IPRange{ipr("a", 1, "10.0.0.0/24", "n1"), moved}, "n1",
			`{"a":"n1/0"}`, `{"moved":"spare/2"}`},
		{"the target of the move", []*jkev1.IPRange{ipr("a", 1, "10.0.0.0/24", "n1"), moved}, "spare", `{"moved":"spare/2"}`, `{"moved":"spare/2"}`},
		{"another node's unmarked range is no entry", []*jkev1.IPRange{ipr("a", 1, "10.0.0.0/24", "n1"), ipr("b", 4, "10.0.4.0/24", "n2")}, "n1",
			`{"a":"n1/0"}`, `{}`},
		{"unassigned and overlapping left out", []*jkev1.IPRange{ipr("a", 1, "10.0.0.0/24", "n1"),
			ipr("free", 2, "10.0.2.0/24", ""), ipr("newer", 3, "10.0.0.0/25", "n2")}, "n1", `{"a":"n1/0"}`, `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ObservedReport(tc.ranges, tc.self)
			if err != nil || got != tc.wantNode {
				t.Errorf("ObservedReport = %s, %v; want %s", got, err, tc.wantNode)
			}
			got, err = RouteReports(tc.ranges)(tc.self)
			if err != nil || got != tc.wantRoutes {
				t.Errorf("RouteReports = %s, %v; want %s", got, err, tc.wantRoutes)
			}
		})
	}
}

// routeLease: a node's route-report Lease as admission wants it (named after the node,
// holderIdentity the node, the label), written only when an entry of a marked range differs
// (present or absent), or the holder or the label: a range whose mark went away costs no write
// (its stale entry stays until the next one); the Lease it starts from is never modified.
func TestRouteLease(t *testing.T) {
	now := time.Unix(1700000000, 0)
	lease := func(report string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n1", Namespace: jkev1.NamespaceRouteReports, ResourceVersion: "7",
			Labels: map[string]string{jkev1.LabelRouteReport: "true", "other": "x"}, Annotations: map[string]string{jkev1.AnnotationRoutesObserved: report},
			OwnerReferences: []metav1.OwnerReference{nodeOwner("n1", "uid-1")}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("n1")}}
	}
	good := lease(`{"r":"s/1"}`)
	r := map[string]bool{"r": true}
	unowned := func() *coordinationv1.Lease { l := good.DeepCopy(); l.OwnerReferences = nil; return l }()
	for _, tc := range []struct {
		name        string
		current     *coordinationv1.Lease
		value       string
		marked      map[string]bool
		wantChanged bool
		uid         types.UID // the Node's; "uid-1" unless set, "-" for unknown
	}{
		{"no owner yet (an agent of the previous release wrote it): written with its Node as owner", unowned, `{"r":"s/1"}`, r, true, ""},
		{"the Node recreated (another UID): the owner follows it", good, `{"r":"s/1"}`, r, true, "uid-2"},
		{"the Node's UID unknown: the owner is left as it is", unowned, `{"r":"s/1"}`, r, false, "-"},
		{"none yet: created", nil, `{}`, nil, true, ""},
		{"same report: no write", good, `{"r":"s/1"}`, r, false, ""},
		{"a marked range's route changed", good, `{"r":"s/2"}`, r, true, ""},
		{"a marked range's route gone", good, `{}`, r, true, ""},
		{"a newly marked range reported", good, `{"q":"s/3"}`, map[string]bool{"q": true}, true, ""},
		{"the mark went away: the stale entry stays, no write", good, `{}`, map[string]bool{}, false, ""},
		{"another range marked, its route not there yet: nothing to write", good, `{}`, map[string]bool{"q": true}, false, ""},
		{"marks unknown (nil): any difference is written", good, `{}`, nil, true, ""},
		{"a report that does not parse is rewritten", lease(`{`), `{}`, map[string]bool{}, true, ""},
		{"holder wrong", func() *coordinationv1.Lease { l := good.DeepCopy(); l.Spec.HolderIdentity = ptr.To("n2"); return l }(), `{"r":"s/1"}`, r, true, ""},
		{"label gone", func() *coordinationv1.Lease { l := good.DeepCopy(); l.Labels = nil; return l }(), `{"r":"s/1"}`, r, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before *coordinationv1.Lease
			if tc.current != nil {
				before = tc.current.DeepCopy()
			}
			uid := tc.uid
			switch uid {
			case "":
				uid = "uid-1"
			case "-":
				uid = ""
			}
			got, changed := routeLease(tc.current, "n1", uid, tc.value, tc.marked, now)
			if changed != tc.wantChanged {
				t.Fatalf("changed = %v, want %v", changed, tc.wantChanged)
			}
			if tc.current != nil && !reflect.DeepEqual(before, tc.current) {
				t.Errorf("routeLease modified the Lease it was given")
			}
			if !changed {
				return
			}
			if got.Name != "n1" || got.Namespace != jkev1.NamespaceRouteReports || ptr.Deref(got.Spec.HolderIdentity, "") != "n1" ||
				got.Labels[jkev1.LabelRouteReport] != "true" || got.Annotations[jkev1.AnnotationRoutesObserved] != tc.value {
				t.Errorf("Lease %+v", got)
			}
			if uid != "" && !ownedByNode(got, "n1", uid) {
				t.Errorf("owners %+v, want only Node n1 of UID %s", got.OwnerReferences, uid)
			}
			if got.Spec.RenewTime == nil || !got.Spec.RenewTime.Time.Equal(now) {
				t.Errorf("renewTime %v, want %v (when the report was last written)", got.Spec.RenewTime, now)
			}
			if tc.current != nil && (got.ResourceVersion != tc.current.ResourceVersion || (tc.current.Labels["other"] != "" && got.Labels["other"] != "x")) {
				t.Errorf("an update must keep the resourceVersion and the other labels: %+v", got.ObjectMeta)
			}
		})
	}
}

// Claims are read from the IPRanges' status.holders, and from the reports of nodes whose agent
// predates them (legacy) for the ranges their status entry does not cover; a node's own entries
// are its own claims, and the next hops come from the entries' addresses.
func TestClaimsFromStatusAndLegacyReports(t *testing.T) {
	r := ipr("r", 1, "10.0.0.0/24", "n1")
	r.Status.Holders = []jkev1.IPRangeHolder{
		{Node: "n1", Address: "192.0.2.1", Generation: 0, State: jkev1.HolderServing},
		{Node: "n2", Address: "192.0.2.2", Generation: 0, State: jkev1.HolderDraining},
	}
	s := ipr("s", 2, "10.0.1.0/24", "n3")
	legacy := map[string]string{
		"n2": `{"r":"n2/7","s":"n2/1"}`, // r: its status entry wins; s: a claim in its report
		"n3": `{"r":"n2/0","s":"n3/0"}`, // r: a route, no claim
		"n1": `{"s":"n1/4"}`,            // this node's own report
	}
	got := claims([]*jkev1.IPRange{r, s}, legacy, "n1")
	if fmt.Sprint(got["r"]) != "[{n2 0}]" || fmt.Sprint(got["s"]) != "[{n2 1} {n3 0}]" {
		t.Errorf("claims = %v, want r held by n2 at 0 (status), s by n2 at 1 and n3 at 0 (reports)", got)
	}
	if own := ownClaims([]*jkev1.IPRange{r, s}, legacy["n1"], "n1"); len(own) != 2 || own["r"] != 0 || own["s"] != 4 {
		t.Errorf("ownClaims = %v, want r at 0 (its status entry) and s at 4 (its report)", own)
	}
	addrs := holderAddresses([]*jkev1.IPRange{r, s}, map[string][]netip.Addr{"n2": {netip.MustParseAddr("198.51.100.2")}, "n3": {netip.MustParseAddr("198.51.100.3")}})
	if addrs["n1"][0] != "192.0.2.1" || addrs["n2"][0] != "192.0.2.2" || addrs["n3"][0] != "198.51.100.3" {
		t.Errorf("addresses = %v, want the status entries' first, a legacy node's InternalIP otherwise", addrs)
	}
}

// A node writes exactly its own entry: set, changed in place, removed; the others stay as they
// are, in their place (admission refuses any other change).
func TestWithHolder(t *testing.T) {
	a := jkev1.IPRangeHolder{Node: "a", Address: "192.0.2.1", State: jkev1.HolderServing}
	b := jkev1.IPRangeHolder{Node: "b", Address: "192.0.2.2", State: jkev1.HolderDraining}
	b2 := b
	b2.Generation = 3
	for _, c := range []struct {
		name    string
		in      []jkev1.IPRangeHolder
		want    *jkev1.IPRangeHolder
		out     string
		changed bool
	}{
		{"added", []jkev1.IPRangeHolder{a}, &b, "[a b]", true},
		{"unchanged", []jkev1.IPRangeHolder{b, a}, &b, "[b a]", false},
		{"changed in place", []jkev1.IPRangeHolder{b, a}, &b2, "[b a]", true},
		{"removed", []jkev1.IPRangeHolder{a, b}, nil, "[a]", true},
		{"nothing to remove", []jkev1.IPRangeHolder{a}, nil, "[a]", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, changed := withHolder(c.in, "b", c.want)
			var nodes []string
			for _, h := range out {
				nodes = append(nodes, h.Node)
				if h.Node == "b" && *c.want != h {
					t.Errorf("b's entry %+v, want %+v", h, *c.want)
				}
			}
			if fmt.Sprint(nodes) != c.out || changed != c.changed {
				t.Errorf("holders %v changed %v, want %s changed %v", nodes, changed, c.out, c.changed)
			}
		})
	}
	own := ownHolders("n1", familyAddrs{"192.0.2.1"}, []*jkev1.IPRange{ipr("mine", 1, "10.0.1.0/24", "n1")}, map[string]int64{"old": 2}, nil)
	if own["mine"].State != jkev1.HolderServing || own["old"].State != jkev1.HolderDraining || own["old"].Generation != 2 || len(own) != 2 {
		t.Errorf("ownHolders = %+v, want mine Serving and old Draining at 2", own)
	}
	// The label (claims-in-status) waits until the IPRanges show every claim as own has it.
	mine, old := ipr("mine", 1, "10.0.1.0/24", "n1"), ipr("old", 2, "10.0.2.0/24", "n2")
	if claimsInStatus([]*jkev1.IPRange{mine, old}, "n1", own) {
		t.Error("claimsInStatus: true before any claim is in status.holders")
	}
	mine.Status.Holders = []jkev1.IPRangeHolder{own["mine"]}
	if claimsInStatus([]*jkev1.IPRange{mine, old}, "n1", own) {
		t.Error("claimsInStatus: true with the Draining claim of old missing")
	}
	old.Status.Holders = []jkev1.IPRangeHolder{{Node: "n2", State: jkev1.HolderServing, Generation: 2}, own["old"]}
	if !claimsInStatus([]*jkev1.IPRange{mine, old}, "n1", own) {
		t.Error("claimsInStatus: false with every claim in place")
	}
	if claimsInStatus([]*jkev1.IPRange{mine, old}, "n1", map[string]jkev1.IPRangeHolder{"mine": own["mine"]}) {
		t.Error("claimsInStatus: true while an entry own no longer has is still there")
	}
}

// Routes go to the node that holds addresses of a range (issue 37, defect 1): the owner once it
// claims the range, else a node that still drains it at its generation, else the owner.
func TestRouteVia(t *testing.T) {
	at := func(r *jkev1.IPRange, g int64) *jkev1.IPRange { r.Spec.OwnerGeneration = g; return r }
	cases := []struct {
		name     string
		r        *jkev1.IPRange
		observed map[string]string
		want     string
	}{
		{name: "nobody claims it: its owner", r: ipr("r", 1, "10.0.0.0/24", "n2"), want: "n2"},
		{name: "its owner claims it", r: ipr("r", 1, "10.0.0.0/24", "n2"), observed: map[string]string{"n2": `{"r":"n2/0"}`}, want: "n2"},
		{name: "unassigned, drained by its old node", r: ipr("r", 1, "10.0.0.0/24", ""), observed: map[string]string{"n3": `{"r":"n3/0"}`}, want: "n3"},
		{name: "unassigned, nobody holds it", r: ipr("r", 1, "10.0.0.0/24", ""), want: ""},
		{name: "assigned to a node that waits for the old one", r: ipr("r", 1, "10.0.0.0/24", "n2"), observed: map[string]string{"n3": `{"r":"n3/0"}`}, want: "n3"},
		{name: "the owner serving it wins over another claim", r: ipr("r", 1, "10.0.0.0/24", "n2"),
			observed: map[string]string{"n2": `{"r":"n2/0"}`, "n1": `{"r":"n1/0"}`}, want: "n2"},
		{name: "a claim at an older generation holds nothing (failover moved it)", r: at(ipr("r", 1, "10.0.0.0/24", "spare"), 3),
			observed: map[string]string{"old": `{"r":"old/2"}`}, want: "spare"},
		{name: "a route entry is no claim", r: ipr("r", 1, "10.0.0.0/24", "n2"), observed: map[string]string{"n4": `{"r":"n3/0"}`}, want: "n2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := routeVia(c.r, claims(nil, c.observed, "")[c.r.Name]); got != c.want {
				t.Fatalf("routeVia = %q, want %q", got, c.want)
			}
			// The node it goes to routes it nowhere (it holds the range), nor does the owner
			// waiting for it route it anywhere but there.
			holds := func(string) bool { return true }
			if routes := planRoutes([]*jkev1.IPRange{c.r}, c.want, holds, claims(nil, c.observed, c.want)); len(routes) != 0 {
				t.Fatalf("node %s routes %s away via %s", c.want, c.r.Name, routes[0].via)
			}
			if owner := c.r.Spec.Node; owner != "" && owner != c.want {
				routes := planRoutes([]*jkev1.IPRange{c.r}, owner, func(string) bool { return false }, claims(nil, c.observed, owner))
				if len(routes) != 1 || routes[0].via != c.want {
					t.Fatalf("the owner %s routes %s as %+v, want via %s", owner, c.r.Name, routes, c.want)
				}
			}
		})
	}
	targets := RouteTargets([]*jkev1.IPRange{ipr("a", 1, "10.0.0.0/24", "n1"), ipr("b", 2, "10.0.1.0/24", ""), ipr("c", 3, "10.0.2.0/24", "")},
		map[string]string{"n2": `{"b":"n2/0"}`})
	if len(targets) != 2 || targets["10.0.0.0/24"] != "n1" || targets["10.0.1.0/24"] != "n2" {
		t.Fatalf("RouteTargets = %v, want 10.0.0.0/24 via n1 and the drained 10.0.1.0/24 via n2", targets)
	}
}

// A route that could not be programmed leaves only its own entry out of the report; the claims
// stay (issue 37, defect 2).
func TestObservedRangesClaimsDoNotWaitForRoutes(t *testing.T) {
	mine := []*jkev1.IPRange{ipr("mine", 1, "10.0.1.0/24", "n1")}
	routes := []rangeRoute{{r: ipr("ok", 1, "10.0.2.0/24", "n2"), via: "n2"}, {r: ipr("bad", 1, "10.0.3.0/24", "n3"), via: "n3"}}
	got := observedRanges("n1", mine, routes, map[string]int64{"drain": 4}, map[string]bool{"ok": true})
	want := map[string]string{"mine": "n1/0", "ok": "n2/0", "drain": "n1/4"}
	if len(got) != len(want) {
		t.Fatalf("observed %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("observed %v, want %v", got, want)
		}
	}
}

// A database rebuilt after corruption restores what the node held (issue 37, defect 4).
func TestHeldAtRebuild(t *testing.T) {
	at := func(r *jkev1.IPRange, g int64) *jkev1.IPRange { r.Spec.OwnerGeneration = g; return r }
	mine := ipr("mine", 1, "10.0.1.0/24", "n1")
	accepted := []*jkev1.IPRange{mine,
		ipr("drained-here", 2, "10.0.2.0/24", ""),              // unassigned, our pod holds .5
		ipr("moved-by-hand", 3, "10.0.3.0/24", "n2"),           // assigned to n2, our pod holds .5, we claimed it at 0
		at(ipr("failed-over", 4, "10.0.4.0/24", "spare"), 2),   // moved at gen 2, our pod holds .5, we claimed it at 1
		ipr("unknown", 5, "10.0.5.0/24", "n2"),                 // our pod holds .5, no claim of ours
		at(ipr("reported-only", 6, "10.0.6.0/24", "spare"), 3), // no address here, our claim at 2
		ipr("elsewhere", 7, "10.0.7.0/24", "n2"),               // nothing of ours
	}
	var imported []netip.Addr
	for _, s := range []string{"10.0.1.5", "10.0.2.5", "10.0.3.5", "10.0.4.5", "10.0.5.5"} {
		imported = append(imported, netip.MustParseAddr(s))
	}
	served, held := heldAtRebuild("n1", accepted, []*jkev1.IPRange{mine}, imported,
		map[string]int64{"moved-by-hand": 0, "failed-over": 1, "reported-only": 2, "mine": 0})
	want := map[string]int64{"drained-here": 0, "moved-by-hand": 0, "failed-over": 1, "unknown": -1, "reported-only": 2}
	if len(served) != len(want) {
		t.Fatalf("restored %v, want %v", served, want)
	}
	for name, gen := range want {
		if s, ok := served[name]; !ok || s.OwnerGeneration != gen {
			t.Errorf("%s restored as %+v (present %v), want generation %d", name, s, ok, gen)
		}
	}
	if len(held) != 4 {
		t.Errorf("held in the store for the import: %v, want the four ranges with an address found", held)
	}
	// What the next pass then does with them: revoke those moved at a higher generation (and the
	// one nobody can vouch for), drain the others.
	byName := map[string]*jkev1.IPRange{}
	for _, r := range accepted {
		byName[r.Name] = r
	}
	var revoked []string
	for _, rv := range planRevocations(served, byName) {
		revoked = append(revoked, rv.name)
	}
	if got := strings.Join(revoked, ","); got != "failed-over,reported-only,unknown" {
		t.Errorf("revoked %s, want failed-over,reported-only,unknown", got)
	}
}
