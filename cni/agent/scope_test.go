package agent

import (
	"context"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	sipfake "github.com/staticip/staticip/apis/generated/clientset/versioned/fake"
	"github.com/staticip/staticip/apis/iprangelabel"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/internal/testsupport"
)

// staticIPsSeen names the StaticIPs (namespace/name) in the agent's picture of the API, once
// it has one.
func staticIPsSeen(ctx context.Context, t *testing.T, a *Agent) []string {
	t.Helper()
	var names []string
	testsupport.Eventually(ctx, t, time.Minute, "a snapshot of the agent's caches", testsupport.True(func() bool {
		snap, err := a.view.snapshot(a.cfg.NodeName)
		if err != nil {
			return false
		}
		names = names[:0]
		for _, s := range snap.staticIPs {
			names = append(names, s.Namespace+"/"+s.Name)
		}
		sort.Strings(names)
		return true
	}))
	return names
}

func createStaticIP(ctx context.Context, t *testing.T, sip versioned.Interface, ns, name, ip, rangeName string) {
	t.Helper()
	s := &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: jkev1.StaticIPSpec{IP: ip, Pod: name}}
	if rangeName != "" {
		s.Labels = map[string]string{iprangelabel.Key: iprangelabel.Value(rangeName)}
	}
	if _, err := sip.JkeV1().StaticIPs(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestAgentWatchesOnlyTheStaticIPsOfItsRanges: an agent receives the StaticIPs of the ranges its
// node holds (label iprangelabel.Key, set by the StaticIP controller) and the unlabelled ones
// (no IP yet, or written before the label existed) — not another node's records. Before, every
// agent watched every StaticIP of the cluster: one failover's 110 re-pointed records reached
// each of 1,000 agents (1.2–1.7 MiB each, tools/scalebench). A range that moves to the node
// (failover) brings its records into view.
func TestAgentWatchesOnlyTheStaticIPsOfItsRanges(t *testing.T) {
	ctx, kube, sip, suffix := apiFixture(t, 2*time.Minute)
	nodeA, nodeB, ns := "cni-scope-a-"+suffix, "cni-scope-b-"+suffix, "cni-scope-"+suffix
	ra, rb := "cni-scope-a-"+suffix, "cni-scope-b-"+suffix
	createIPRange(ctx, t, sip, ra, jkev1.IPRangeSpec{CIDR: "10.158.1.0/24", Node: nodeA})
	createIPRange(ctx, t, sip, rb, jkev1.IPRangeSpec{CIDR: "10.158.2.0/24", Node: nodeB})
	createNamespace(ctx, t, kube, ns)
	createStaticIP(ctx, t, sip, ns, "a-1", "10.158.1.5", ra)
	createStaticIP(ctx, t, sip, ns, "b-1", "10.158.2.5", rb)
	createStaticIP(ctx, t, sip, ns, "pending", "", "")            // no IP yet: no label
	createStaticIP(ctx, t, sip, ns, "legacy-b", "10.158.2.6", "") // written before the label

	a := startedAgent(ctx, t, Config{NodeName: nodeA}, kube, sip, nil)
	mine := func(names []string) []string {
		return slices.DeleteFunc(names, func(n string) bool { return len(n) < len(ns) || n[:len(ns)] != ns })
	}
	want := []string{ns + "/a-1", ns + "/legacy-b", ns + "/pending"}
	if got := mine(staticIPsSeen(ctx, t, a)); !slices.Equal(got, want) {
		t.Fatalf("the agent of node %s holds StaticIPs %v, want %v (not %s/b-1 of node %s's range %s)", nodeA, got, want, ns, nodeB, rb)
	}

	// Failover moves rb to node A: its records come into view.
	r, err := sip.JkeV1().IPRanges().Get(ctx, rb, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.Spec.Node, r.Spec.OwnerGeneration = nodeA, 1
	if _, err := sip.JkeV1().IPRanges().Update(ctx, r, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want = []string{ns + "/a-1", ns + "/b-1", ns + "/legacy-b", ns + "/pending"}
	testsupport.Eventually(ctx, t, time.Minute, "b-1 in the view of the range's new holder", testsupport.True(func() bool {
		return slices.Equal(mine(staticIPsSeen(ctx, t, a)), want)
	}))
}

func TestStaticIPScopes(t *testing.T) {
	r := func(name, cidr, node string, holders ...string) *jkev1.IPRange {
		ir := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: jkev1.IPRangeSpec{CIDR: cidr, Node: node}}
		for _, h := range holders {
			ir.Status.Holders = append(ir.Status.Holders, jkev1.IPRangeHolder{Node: h})
		}
		return ir
	}
	ranges := []*jkev1.IPRange{
		r("a", "10.1.0.0/24", "n1"),
		r("b", "10.2.0.0/24", "n2", "n2"),
		r("moved", "10.3.0.0/24", "n2", "n1"), // n1 drains it, n2 waits
		r("wide", "10.1.0.0/16", ""),          // overlaps a: its records may hide a's addresses
		r("c", "10.4.0.0/24", "n3"),
		r("bad", "nope", "n1"),
		r(strings.Repeat("x", 70), "10.5.0.0/24", "n3"),
	}
	for _, tt := range []struct {
		node string
		want []string
	}{
		{"n1", []string{"a", "bad", "moved", "wide"}},
		{"n2", []string{"b", "moved"}},
		{"n3", []string{"c", iprangelabel.Value(strings.Repeat("x", 70))}},
		{"n4", []string{}},
	} {
		if got := StaticIPScopes(ranges, tt.node); !slices.Equal(got, tt.want) {
			t.Errorf("StaticIPScopes(%s) = %v, want %v", tt.node, got, tt.want)
		}
	}
	// StaticIPWatchers is its inverse.
	for _, v := range []string{"a", "b", "moved", "wide", "c", "bad", iprangelabel.Value(strings.Repeat("x", 70)), "none"} {
		var want []string
		for _, n := range []string{"n1", "n2", "n3", "n4"} {
			if slices.Contains(StaticIPScopes(ranges, n), v) {
				want = append(want, n)
			}
		}
		if got := StaticIPWatchers(ranges, v); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Errorf("StaticIPWatchers(%s) = %v, want %v", v, got, want)
		}
	}
}

func TestDecideVanished(t *testing.T) {
	held := []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")}
	sip := func(ip string) *jkev1.StaticIP { return &jkev1.StaticIP{Spec: jkev1.StaticIPSpec{IP: ip}} }
	for _, tt := range []struct {
		name    string
		sip     *jkev1.StaticIP
		present bool
		age     time.Duration
		want    vanishedDecision
	}{
		{"seen again", sip("10.1.0.5"), true, 0, vanishedDrop},
		{"an address of a held range: ask", sip("10.1.0.5"), false, time.Hour, vanishedConfirm},
		{"an address of another range", sip("10.2.0.5"), false, 0, vanishedDrop},
		{"no IP yet, just left", sip(""), false, time.Second, vanishedKeep},
		{"no IP yet, long gone", sip(""), false, vanishedHold, vanishedDrop},
		{"an IP that does not parse", sip("x"), false, 0, vanishedDrop},
	} {
		if got := decideVanished(tt.sip, tt.present, held, tt.age); got != tt.want {
			t.Errorf("%s: decideVanished = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestVanishedRecordIsConfirmedBeforeItsReservationGoes: a record with an address of a range this
// node holds that left one informer (its label changed: the DELETED of one watch can come before
// the ADDED of the other) stays in view until a GET says it is gone or labelled for a range the
// node does not watch.
func TestVanishedRecordIsConfirmedBeforeItsReservationGoes(t *testing.T) {
	labelled := &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "relabelled", UID: "u1",
		Labels: map[string]string{iprangelabel.Key: "ra"}}, Spec: jkev1.StaticIPSpec{IP: "10.1.0.5"}}
	elsewhere := &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "elsewhere", UID: "u3",
		Labels: map[string]string{iprangelabel.Key: "rz"}}, Spec: jkev1.StaticIPSpec{IP: "10.1.0.7"}}
	client := sipfake.NewSimpleClientset(labelled, elsewhere)
	now := time.Unix(1e9, 0)
	s := &staticIPScopes{ctx: context.Background(), client: client, now: func() time.Time { return now }, vanished: map[string]vanishedRecord{}}
	for _, v := range []*jkev1.StaticIP{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "relabelled", UID: "u1"}, Spec: jkev1.StaticIPSpec{IP: "10.1.0.5"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "deleted", UID: "u2"}, Spec: jkev1.StaticIPSpec{IP: "10.1.0.6"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "elsewhere", UID: "u3"}, Spec: jkev1.StaticIPSpec{IP: "10.1.0.7"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pending", UID: "u4"}},
	} {
		s.vanished[v.Namespace+"/"+v.Name] = vanishedRecord{sip: v, since: now}
	}
	held := []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")}
	names := func(l []*jkev1.StaticIP) []string {
		var out []string
		for _, x := range l {
			out = append(out, x.Name)
		}
		return out
	}
	got := names(s.withVanished(context.Background(), map[string]*jkev1.StaticIP{}, []string{"ra"}, held))
	if want := []string{"pending", "relabelled"}; !slices.Equal(got, want) {
		t.Fatalf("in view while the informers do not show them: %v, want %v (deleted: gone; elsewhere: labelled for a range not watched)", got, want)
	}
	// The informer shows it now: no more GETs for it.
	got = names(s.withVanished(context.Background(), map[string]*jkev1.StaticIP{"ns/relabelled": labelled}, []string{"ra"}, held))
	if want := []string{"pending", "relabelled"}; !slices.Equal(got, want) || len(s.vanished) != 1 {
		t.Fatalf("after the informer caught up: %v (held %d), want %v and only the pending record held", got, len(s.vanished), want)
	}
	now = now.Add(vanishedHold)
	if got := names(s.withVanished(context.Background(), map[string]*jkev1.StaticIP{}, []string{"ra"}, held)); len(got) != 0 || len(s.vanished) != 0 {
		t.Fatalf("after %v: %v still in view, %d held", vanishedHold, got, len(s.vanished))
	}
}
