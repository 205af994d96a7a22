package nodefailover

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/nodegone"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

type nodeBuilder struct{ n *corev1.Node }

func node(name string) *nodeBuilder {
	return &nodeBuilder{n: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"),
			corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")}}}}
}

func (b *nodeBuilder) ready(status corev1.ConditionStatus, since time.Time) *nodeBuilder {
	b.n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(since)}}
	return b
}

func (b *nodeBuilder) taint(key string, effect corev1.TaintEffect) *nodeBuilder {
	b.n.Spec.Taints = append(b.n.Spec.Taints, corev1.Taint{Key: key, Value: "true", Effect: effect})
	return b
}

func (b *nodeBuilder) label(k, v string) *nodeBuilder {
	b.n.Labels[k] = v
	return b
}

func (b *nodeBuilder) spare() *nodeBuilder {
	return b.label(jkev1alpha1.LabelSpare, "true").taint(jkev1alpha1.TaintSpare, corev1.TaintEffectNoSchedule)
}

func (b *nodeBuilder) cpu(q string) *nodeBuilder {
	b.n.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse(q)
	return b
}

func TestFencing(t *testing.T) {
	const window = 2 * time.Minute
	now := t0.Add(10 * time.Minute)
	for _, tc := range []struct {
		name            string
		node            *corev1.Node
		goneSince       time.Time
		fenced, cand    bool
		reason          string
		recheckAfter    time.Duration
		deletionIsFence bool
		gone            *nodegone.Verdict
	}{
		{name: "NotReady for long, no taint: a partition, never moved",
			node: node("n").ready(corev1.ConditionUnknown, t0).n, reason: ReasonNotOutOfService},
		{name: "NotReady with only the lifecycle controller's taints",
			node: node("n").ready(corev1.ConditionFalse, t0).taint("node.kubernetes.io/unreachable", corev1.TaintEffectNoExecute).n, reason: ReasonNotOutOfService},
		{name: "out-of-service but Ready: wait",
			node: node("n").ready(corev1.ConditionTrue, t0).taint(jkev1alpha1.TaintOutOfService, corev1.TaintEffectNoExecute).n, cand: true, reason: ReasonNodeReady},
		{name: "out-of-service, NotReady for less than the window",
			node: node("n").ready(corev1.ConditionUnknown, now.Add(-30*time.Second)).taint(jkev1alpha1.TaintOutOfService, corev1.TaintEffectNoExecute).n,
			cand: true, reason: ReasonWithinWindow, recheckAfter: 90 * time.Second},
		{name: "out-of-service NoSchedule, NotReady for the window: fenced",
			node:   node("n").ready(corev1.ConditionFalse, now.Add(-window)).taint(jkev1alpha1.TaintOutOfService, corev1.TaintEffectNoSchedule).n,
			fenced: true, cand: true, reason: ReasonFenced},
		{name: "out-of-service, no Ready condition at all: window from the record",
			node: node("n").taint(jkev1alpha1.TaintOutOfService, corev1.TaintEffectNoExecute).n, goneSince: now.Add(-time.Minute),
			cand: true, reason: ReasonWithinWindow, recheckAfter: time.Minute},
		{name: "Node deleted, deletion is a fence, recorded within the window", goneSince: now.Add(-time.Minute), deletionIsFence: true,
			cand: true, reason: ReasonWithinWindow, recheckAfter: time.Minute},
		{name: "Node deleted, deletion is a fence, recorded a window ago", goneSince: now.Add(-window), deletionIsFence: true,
			fenced: true, cand: true, reason: ReasonFenced},
		{name: "Node deleted, deletion is not a fence (default): never fenced by the deletion alone, however long ago",
			goneSince: now.Add(-time.Hour), cand: true, reason: ReasonNodeDeleted},
		{name: "Node deleted, not proven gone (its Lease is renewed): waits, looked at again when the rule says",
			goneSince: now.Add(-time.Hour), gone: &nodegone.Verdict{Reason: nodegone.ReasonLeaseRenewed, Message: "renewed", RecheckAfter: 30 * time.Second},
			cand: true, reason: ReasonNodeDeleted, recheckAfter: 30 * time.Second},
		{name: "Node deleted, not proven gone even with --node-deletion-is-fence (the rule took the operator's word and a renewed Lease beat it)",
			goneSince: now.Add(-time.Hour), deletionIsFence: true, gone: &nodegone.Verdict{Reason: nodegone.ReasonLeaseRenewed, RecheckAfter: 30 * time.Second},
			cand: true, reason: ReasonNodeDeleted, recheckAfter: 30 * time.Second},
		{name: "Node deleted and proven gone (no Lease renewal for the bound, no pod holding its IPs): fenced after the window",
			goneSince: now.Add(-window), gone: &nodegone.Verdict{Gone: true, Reason: nodegone.ReasonLeaseExpired, Message: "silent"},
			fenced: true, cand: true, reason: ReasonFenced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Fencing(tc.node, tc.goneSince, now, FenceRules{Window: window, NodeDeletionIsFence: tc.deletionIsFence, NodeGone: tc.gone})
			if got.Fenced != tc.fenced || got.Candidate != tc.cand || got.Reason != tc.reason || got.RecheckAfter != tc.recheckAfter {
				t.Errorf("got %+v, want fenced=%v candidate=%v reason=%s recheck=%v", got, tc.fenced, tc.cand, tc.reason, tc.recheckAfter)
			}
		})
	}
}

func TestTooManyUnhealthy(t *testing.T) {
	ready := node("r").ready(corev1.ConditionTrue, t0).n
	down := node("d").ready(corev1.ConditionUnknown, t0).n
	noCond := node("x").n
	for _, tc := range []struct {
		name    string
		nodes   []*corev1.Node
		deleted int
		max     int
		stop    bool
	}{
		{name: "1 of 3 at 34%", nodes: []*corev1.Node{ready, ready, down}, max: 34},
		{name: "1 of 4 (3 + spare)", nodes: []*corev1.Node{ready, ready, ready, down}, max: 34},
		{name: "2 of 4", nodes: []*corev1.Node{ready, ready, down, down}, max: 34, stop: true},
		{name: "2 of 3 incl. a deleted node", nodes: []*corev1.Node{ready, down}, deleted: 1, max: 34, stop: true},
		{name: "a node without a Ready condition counts as unhealthy", nodes: []*corev1.Node{ready, noCond, down}, max: 34, stop: true},
		{name: "exactly the share is allowed", nodes: []*corev1.Node{ready, down}, max: 50},
		{name: "0% stops at the first", nodes: []*corev1.Node{ready, ready, down}, max: 0, stop: true},
		{name: "100% never stops", nodes: []*corev1.Node{down, down}, max: 100},
	} {
		nr, total := Unhealthy(tc.nodes, tc.deleted)
		if got := TooManyUnhealthy(nr, total, tc.max); got != tc.stop {
			t.Errorf("%s: %d/%d at %d%%: stop=%v, want %v", tc.name, nr, total, tc.max, got, tc.stop)
		}
	}
}

func TestParsePercent(t *testing.T) {
	for in, want := range map[string]int{"34%": 34, "0": 0, "100%": 100, " 50% ": 50} {
		if got, err := ParsePercent(in); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "101%", "-1", "half", "%"} {
		if _, err := ParsePercent(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func pod(name, nodeName string, hostNetwork bool, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: corev1.PodSpec{NodeName: nodeName, HostNetwork: hostNetwork}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return p
}

func TestHoldingPods(t *testing.T) {
	ranges := ParsePrefixes([]string{"10.1.3.0/24", "bad", "fd00:3::/64"})
	pods := []*corev1.Pod{
		pod("on-node-no-ip-yet", "n3", false),
		pod("on-node-hostnet", "n3", true, "172.31.0.3"),
		pod("elsewhere-with-range-ip", "n1", false, "10.1.3.7"),
		pod("unscheduled-with-range-ip-v6", "", false, "fd00:3::9"),
		pod("elsewhere", "n1", false, "10.1.1.7"),
		pod("unscheduled", "", false),
	}
	got := nodegone.HoldingPods(pods, "n3", ranges)
	want := []string{"ns/elsewhere-with-range-ip", "ns/on-node-no-ip-yet", "ns/unscheduled-with-range-ip-v6"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestFencedAt(t *testing.T) {
	now := t0.Add(10 * time.Minute)
	n := node("n").ready(corev1.ConditionUnknown, t0).taint(jkev1alpha1.TaintOutOfService, corev1.TaintEffectNoExecute).n
	if got := Fencing(n, time.Time{}, now, FenceRules{Window: time.Minute}); !got.FencedAt.Equal(t0.Add(time.Minute)) {
		t.Errorf("fenced at %v, want the NotReady transition + the window %v", got.FencedAt, t0.Add(time.Minute))
	}
}

func TestCheckCommit(t *testing.T) {
	fenced := Fence{Fenced: true, Candidate: true}
	waiting := Fence{Candidate: true, Reason: ReasonNodeReady}
	running := Fence{Reason: ReasonNotOutOfService}
	for _, tc := range []struct {
		name    string
		fence   Fence
		written bool
		want    CommitCheck
	}{
		{"still fenced, nothing written", fenced, false, CommitProceed},
		{"still fenced, some written", fenced, true, CommitProceed},
		{"back and un-tainted before any write: cancel, nothing moved", running, false, CommitCancel},
		{"back and un-tainted after a range moved: hold, never write more", running, true, CommitHold},
		{"Ready again but still tainted: hold", waiting, false, CommitHold},
		{"Ready again after a range moved: hold", waiting, true, CommitHold},
	} {
		if got := CheckCommit(tc.fence, tc.written); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestFencedPodDeletion(t *testing.T) {
	ranges := ParsePrefixes([]string{"10.1.3.0/24"})
	tolerating := pod("logship-n3", "n3", false, "10.1.3.50")
	noIPYet := pod("b-no-ip-yet", "n3", false)
	terminating := pod("a-terminating", "n3", false, "10.1.3.51")
	terminating.DeletionTimestamp = &metav1.Time{Time: t0}
	pods := []*corev1.Pod{
		tolerating, noIPYet, terminating,
		pod("node-exporter", "n3", true, "172.31.0.3"),          // host network: never
		pod("elsewhere-with-range-ip", "n1", false, "10.1.3.7"), // bound to a live node: never
		pod("unscheduled-with-range-ip", "", false, "10.1.3.8"),
		pod("other-node", "n1", false, "10.1.1.7"),
	}
	fencedAt := t0
	if got, wait := FencedPodDeletion(pods, "n3", ranges, fencedAt, t0.Add(10*time.Second), 30*time.Second); got != nil || wait != 20*time.Second {
		t.Errorf("within the grace: %v, wait %v; want none, 20s", got, wait)
	}
	got, wait := FencedPodDeletion(pods, "n3", ranges, fencedAt, t0.Add(30*time.Second), 30*time.Second)
	var names []string
	for _, p := range got {
		names = append(names, p.Name)
	}
	if want := []string{"a-terminating", "b-no-ip-yet", "logship-n3"}; !slices.Equal(names, want) || wait != 0 {
		t.Errorf("after the grace: %v (wait %v), want %v", names, wait, want)
	}
	if got, wait := FencedPodDeletion(pods[3:], "n3", ranges, fencedAt, t0.Add(time.Hour), 0); got != nil || wait != 0 {
		t.Errorf("only host-network pods and pods elsewhere: %v, %v; want nothing", got, wait)
	}
}

func sip(name, nodeName, ip, cpu string) *jkev1.StaticIP {
	s := &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: jkev1.StaticIPSpec{Node: nodeName, IP: ip}}
	if cpu != "" {
		s.Spec.Resources = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	}
	return s
}

func TestMovingStaticIPsAndNeeded(t *testing.T) {
	ranges := ParsePrefixes([]string{"10.1.3.0/24"})
	deleting := sip("deleting", "n3", "10.1.3.9", "1")
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	got := MovingStaticIPs([]*jkev1.StaticIP{
		sip("b-on-node", "n3", "10.1.3.5", "500m"),
		sip("a-ip-in-range-other-node", "n9", "10.1.3.6", "250m"),
		sip("elsewhere", "n1", "10.1.1.6", "8"),
		sip("pending-on-node", "n3", "", ""),
		deleting,
	}, "n3", ranges)
	var names []string
	for _, s := range got {
		names = append(names, s.Name)
	}
	if want := []string{"a-ip-in-range-other-node", "b-on-node", "pending-on-node"}; !slices.Equal(names, want) {
		t.Fatalf("moving %v, want %v", names, want)
	}
	need := Needed(got)
	if cpu := need[corev1.ResourceCPU]; cpu.Cmp(resource.MustParse("750m")) != 0 {
		t.Errorf("cpu %s, want 750m", cpu.String())
	}
	if pods := need[corev1.ResourcePods]; pods.Value() != 3 {
		t.Errorf("pods %s, want 3", pods.String())
	}
}

func TestChooseTarget(t *testing.T) {
	ok := corev1.ConditionTrue
	need := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourcePods: resource.MustParse("2")}
	failed := FailedNode{Name: "n3", Zone: "z1", InstanceType: "big"}
	for _, tc := range []struct {
		name     string
		failed   FailedNode
		nodes    []*corev1.Node
		used     map[string]corev1.ResourceList
		want     string
		rejected map[string]string // node -> substring of the reason
	}{
		{name: "the only fitting spare", failed: failed,
			nodes: []*corev1.Node{node("s1").ready(ok, t0).spare().label(LabelZone, "z1").n}, want: "s1"},
		{name: "plain nodes are never targets", failed: failed,
			nodes: []*corev1.Node{node("n1").ready(ok, t0).label(LabelZone, "z1").n}, rejected: map[string]string{}},
		{name: "spare label without the spare taint", failed: failed,
			nodes:    []*corev1.Node{node("s1").ready(ok, t0).label(jkev1alpha1.LabelSpare, "true").label(LabelZone, "z1").n},
			rejected: map[string]string{"s1": "lacks the taint"}},
		{name: "other zone, NotReady, another taint, claimed, cordoned", failed: failed,
			nodes: []*corev1.Node{
				node("s1").ready(ok, t0).spare().label(LabelZone, "z2").n,
				node("s2").ready(corev1.ConditionFalse, t0).spare().label(LabelZone, "z1").n,
				node("s3").ready(ok, t0).spare().label(LabelZone, "z1").taint("dedicated", corev1.TaintEffectNoSchedule).n,
				node("s4").ready(ok, t0).spare().label(LabelZone, "z1").label(jkev1alpha1.LabelFailoverFor, "n7").n,
				func() *corev1.Node {
					n := node("s5").ready(ok, t0).spare().label(LabelZone, "z1").n
					n.Spec.Unschedulable = true
					return n
				}(),
			},
			rejected: map[string]string{"s1": `zone "z2"`, "s2": "not Ready", "s3": "tainted dedicated", "s4": "claimed for n7", "s5": "cordoned"}},
		{name: "claimed for this node is fine (resume)", failed: failed,
			nodes: []*corev1.Node{node("s1").ready(ok, t0).spare().label(LabelZone, "z1").label(jkev1alpha1.LabelFailoverFor, "n3").n}, want: "s1"},
		{name: "instance type must match where both have one", failed: failed,
			nodes: []*corev1.Node{
				node("s1").ready(ok, t0).spare().label(LabelZone, "z1").label(LabelInstanceType, "small").n,
				node("s2").ready(ok, t0).spare().label(LabelZone, "z1").n,
			},
			want: "s2", rejected: map[string]string{"s1": `instance type "small"`}},
		{name: "unknown zone of a deleted node: any zone", failed: FailedNode{Name: "n3"},
			nodes: []*corev1.Node{node("s1").ready(ok, t0).spare().label(LabelZone, "z9").n}, want: "s1"},
		{name: "all or nothing: used + need over allocatable", failed: failed,
			nodes: []*corev1.Node{
				node("s1").ready(ok, t0).spare().label(LabelZone, "z1").n,
				node("s2").ready(ok, t0).spare().label(LabelZone, "z1").cpu("1").n,
			},
			used:     map[string]corev1.ResourceList{"s1": {corev1.ResourceCPU: resource.MustParse("2500m")}},
			rejected: map[string]string{"s1": "cpu: 1500m free, need 2", "s2": "cpu: 1 free, need 2"}},
		{name: "first by name among fitting spares", failed: failed,
			nodes: []*corev1.Node{
				node("s2").ready(ok, t0).spare().label(LabelZone, "z1").n,
				node("s1").ready(ok, t0).spare().label(LabelZone, "z1").n,
			}, want: "s1"},
		{name: "the failed node itself is never its target", failed: FailedNode{Name: "s1"},
			nodes: []*corev1.Node{node("s1").ready(ok, t0).spare().n}, rejected: map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ChooseTarget(tc.failed, tc.nodes, tc.used, need)
			if got.Target != tc.want {
				t.Fatalf("target %q, want %q (%s)", got.Target, tc.want, got.Message())
			}
			for n, why := range tc.rejected {
				if !strings.Contains(got.Rejected[n], why) {
					t.Errorf("%s rejected for %q, want %q", n, got.Rejected[n], why)
				}
			}
			if tc.rejected != nil && len(got.Rejected) != len(tc.rejected) {
				t.Errorf("rejected %v, want %v", got.Rejected, tc.rejected)
			}
		})
	}
}

func TestDecideRangeMove(t *testing.T) {
	mv := jkev1alpha1.MovedRange{Name: "r", FromNode: "n3", ToNode: "s1", OwnerGeneration: 5}
	rng := func(nodeName string, gen int64) *jkev1.IPRange {
		return &jkev1.IPRange{Spec: jkev1.IPRangeSpec{Node: nodeName, OwnerGeneration: gen}}
	}
	for _, tc := range []struct {
		name string
		r    *jkev1.IPRange
		want RangeMove
	}{
		{name: "recorded, not written yet", r: rng("n3", 4), want: RangeWrite},
		{name: "written (a restart after the write): never again", r: rng("s1", 5), want: RangeDone},
		{name: "moved on further by someone later", r: rng("s1", 6), want: RangeDone},
		{name: "deleted", r: nil, want: RangeGone},
		{name: "moved elsewhere by an operator", r: rng("n1", 5), want: RangeChanged},
		{name: "still on the failed node but bumped by someone else", r: rng("n3", 5), want: RangeChanged},
		{name: "target named but at an older generation", r: rng("s1", 4), want: RangeChanged},
	} {
		if got := DecideRangeMove(mv, tc.r); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// RoutesLagging over (Ready nodes, route reports): a node's Lease report decides for it; a node
// without one (an agent of the previous release) is read from its Node annotation; the failed
// node and nodes that are not Ready are not waited for; a report that does not parse lags.
func TestRoutesLagging(t *testing.T) {
	moved := []jkev1alpha1.MovedRange{{Name: "ra", ToNode: "s1", OwnerGeneration: 1}, {Name: "rb", ToNode: "s1", OwnerGeneration: 5}}
	ok, unknown := corev1.ConditionTrue, corev1.ConditionUnknown
	n := func(name string, ready corev1.ConditionStatus, annotation string) *corev1.Node {
		b := node(name).ready(ready, t0)
		if annotation != "" {
			b.n.Annotations = map[string]string{jkev1alpha1.AnnotationIPRangesObserved: annotation}
		}
		return b.n
	}
	lease := func(routes map[string]string) RouteReport { return RouteReport{Routes: routes, Lease: true} }
	both := map[string]string{"ra": "s1/1", "rb": "s1/5"}
	for _, tc := range []struct {
		name    string
		nodes   []*corev1.Node
		reports map[string]RouteReport
		want    []string
	}{
		{"every Lease reports both ranges", []*corev1.Node{n("n1", ok, ""), n("s1", ok, "")},
			map[string]RouteReport{"n1": lease(both), "s1": lease(both)}, nil},
		{"a Lease with one range at the old owner", []*corev1.Node{n("n1", ok, ""), n("n2", ok, "")},
			map[string]RouteReport{"n1": lease(both), "n2": lease(map[string]string{"ra": "s1/1", "rb": "n3/4"})}, []string{"n2"}},
		{"the Lease decides, not a stale annotation", []*corev1.Node{n("n1", ok, `{"ra":"s1/1","rb":"s1/5"}`)},
			map[string]RouteReport{"n1": lease(map[string]string{})}, []string{"n1"}},
		{"the Lease decides, an annotation without routes does not hold it back", []*corev1.Node{n("n1", ok, `{"own":"n1/0"}`)},
			map[string]RouteReport{"n1": lease(both)}, nil},
		{"no Lease: the Node annotation (an agent of the previous release)", []*corev1.Node{n("old", ok, `{"ra":"s1/1","rb":"s1/5","other":"n2/0"}`),
			n("oldlag", ok, `{"ra":"s1/1"}`), n("none", ok, "")}, nil, []string{"none", "oldlag"}},
		{"a broken report lags", []*corev1.Node{n("n4", ok, `not json`), n("n7", ok, "")},
			map[string]RouteReport{"n7": {Lease: true, Err: errors.New("bad")}}, []string{"n4", "n7"}},
		{"not Ready and the failed node are not waited for", []*corev1.Node{n("n6", unknown, `{}`), n("n3", unknown, `{"ra":"n3/0"}`), n("n8", ok, "")},
			map[string]RouteReport{"n8": lease(both)}, nil},
		{"no moved range has nothing to wait for", nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reports := func(node string) (RouteReport, bool) { r, ok := tc.reports[node]; return r, ok }
			if got := RoutesLagging(tc.nodes, reports, "n3", moved); !slices.Equal(got, tc.want) {
				t.Errorf("lagging %v, want %v", got, tc.want)
			}
		})
	}
}

// A route-report Lease is read only as the report of the node it is named after.
func TestLeaseRouteReport(t *testing.T) {
	l := func(name, holder, report string) *coordinationv1.Lease {
		out := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: jkev1.NamespaceRouteReports}}
		if holder != "" {
			out.Spec.HolderIdentity = &holder
		}
		if report != "" {
			out.Annotations = map[string]string{jkev1.AnnotationRoutesObserved: report}
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		lease   *coordinationv1.Lease
		want    map[string]string
		wantOK  bool
		wantErr bool
	}{
		{"its report", l("n1", "n1", `{"r":"s/1"}`), map[string]string{"r": "s/1"}, true, false},
		{"no report yet", l("n1", "n1", ""), nil, true, false},
		{"another holder: not its report", l("n1", "n2", `{"r":"s/1"}`), nil, false, false},
		{"no holder", l("n1", "", `{"r":"s/1"}`), nil, false, false},
		{"does not parse", l("n1", "n1", `{`), nil, true, true},
		{"nil", nil, nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := LeaseRouteReport(tc.lease)
			if ok != tc.wantOK || (err != nil) != tc.wantErr || !maps.Equal(got, tc.want) {
				t.Errorf("= %v, %v, %v; want %v, %v, error %v", got, ok, err, tc.want, tc.wantOK, tc.wantErr)
			}
		})
	}
}

func TestRouteReportTurns(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, tc := range []struct {
		name    string
		waiting []RouteWait
		max     int
		want    []string // the records that may mark, sorted
	}{
		{name: "alone, fits", max: 4, waiting: []RouteWait{{Record: "a", Since: at(0), Ranges: 2}}, want: []string{"a"}},
		{name: "a zone fails: the first that fit, in the order they reached RangesMoved", max: 4, waiting: []RouteWait{
			{Record: "c", Since: at(2), Ranges: 2}, {Record: "a", Since: at(0), Ranges: 1}, {Record: "b", Since: at(1), Ranges: 1},
			{Record: "d", Since: at(3), Ranges: 1}}, want: []string{"a", "b", "c"}},
		{name: "same time: by name", max: 2, waiting: []RouteWait{
			{Record: "b", Since: at(0), Ranges: 1}, {Record: "a", Since: at(0), Ranges: 1}, {Record: "c", Since: at(0), Ranges: 1}},
			want: []string{"a", "b"}},
		{name: "marked ones keep their turn and fill the cap", max: 2, waiting: []RouteWait{
			{Record: "old", Since: at(0), Ranges: 1}, {Record: "m1", Since: at(5), Ranges: 1, Marked: true},
			{Record: "m2", Since: at(6), Ranges: 1, Marked: true}}, want: []string{"m1", "m2"}},
		{name: "no overtaking: a large one first in line stops smaller ones behind it", max: 4, waiting: []RouteWait{
			{Record: "m", Since: at(0), Ranges: 2, Marked: true}, {Record: "big", Since: at(1), Ranges: 3}, {Record: "small", Since: at(2), Ranges: 1}},
			want: []string{"m"}},
		{name: "more ranges than the cap: alone once nothing is marked", max: 2, waiting: []RouteWait{
			{Record: "huge", Since: at(0), Ranges: 5}, {Record: "next", Since: at(1), Ranges: 1}}, want: []string{"huge"}},
		{name: "more ranges than the cap: waits while others mark", max: 2, waiting: []RouteWait{
			{Record: "m", Since: at(3), Ranges: 1, Marked: true}, {Record: "huge", Since: at(0), Ranges: 5}}, want: []string{"m"}},
		{name: "a migration whose ranges are all gone takes no slot", max: 1, waiting: []RouteWait{
			{Record: "m", Since: at(0), Ranges: 1, Marked: true}, {Record: "empty", Since: at(1), Ranges: 0}}, want: []string{"empty", "m"}},
		{name: "no cap", max: 0, waiting: []RouteWait{
			{Record: "a", Since: at(0), Ranges: 100}, {Record: "b", Since: at(1), Ranges: 100}}, want: []string{"a", "b"}},
		{name: "nobody waits", max: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			turns := RouteReportTurns(tc.waiting, tc.max)
			var got []string
			marked := 0
			for _, w := range tc.waiting {
				if turns[w.Record] {
					got = append(got, w.Record)
					marked += w.Ranges
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("turns %v, want %v", got, tc.want)
			}
			if len(turns) != len(got) {
				t.Errorf("turns name records that do not wait: %v", turns)
			}
			// The bound: at most max ranges marked, or one migration's alone.
			if tc.max > 0 && marked > tc.max && len(got) > 1 {
				t.Errorf("%d ranges marked by %v, over the cap %d", marked, got, tc.max)
			}
		})
	}
}

func TestRangeSynced(t *testing.T) {
	r := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
	r.Status.ObservedGeneration = 2
	r.Status.Conditions = []metav1.Condition{{Type: "Synced", Status: metav1.ConditionTrue}}
	if RangeSynced(r) {
		t.Error("Synced for an older generation counted")
	}
	r.Status.ObservedGeneration = 3
	if !RangeSynced(r) {
		t.Error("Synced at the current generation not counted")
	}
	r.Status.Conditions[0].Status = metav1.ConditionFalse
	if RangeSynced(r) {
		t.Error("Synced=False counted")
	}
}

func TestNeverStarted(t *testing.T) {
	lastSeen := t0 // the node turned NotReady
	created := func(p *corev1.Pod, at time.Time) *corev1.Pod { p.CreationTimestamp = metav1.Time{Time: at}; return p }
	started := created(pod("started-no-ip", "n3", false), lastSeen.Add(time.Minute))
	started.Status.StartTime = &metav1.Time{Time: lastSeen.Add(time.Minute)}
	pods := []*corev1.Pod{
		created(pod("recreated-after", "n3", false), lastSeen.Add(time.Minute)),           // the DaemonSet's new pod: dropped
		created(pod("before-no-ip", "n3", false), lastSeen.Add(-time.Minute)),             // may have a sandbox: kept
		created(pod("after-with-ip", "n3", false, "10.1.3.9"), lastSeen.Add(time.Minute)), // an IP: kept
		started, // the kubelet reported it: kept
		created(pod("elsewhere", "n1", false), lastSeen.Add(time.Minute)), // another node: kept
	}
	var names []string
	for _, p := range NeverStarted(pods, "n3", lastSeen) {
		names = append(names, p.Name)
	}
	if want := []string{"before-no-ip", "after-with-ip", "started-no-ip", "elsewhere"}; !slices.Equal(names, want) {
		t.Errorf("kept %v, want %v", names, want)
	}
	if got := NeverStarted(pods, "n3", time.Time{}); len(got) != len(pods) {
		t.Errorf("with the node Ready nothing may be dropped: kept %d of %d", len(got), len(pods))
	}
	ready := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Time{Time: t0}}}}}
	if !NotReadySince(ready).IsZero() || !NotReadySince(nil).IsZero() {
		t.Error("a Ready node (or none) has no NotReady time")
	}
	ready.Status.Conditions[0].Status = corev1.ConditionUnknown
	if got := NotReadySince(ready); !got.Equal(t0) {
		t.Errorf("NotReadySince %v, want the transition %v", got, t0)
	}
}

func TestLeftToAllocator(t *testing.T) {
	pooled := func(name, cidr string) *jkev1.IPRange {
		return &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{jkev1.LabelIPPool: "p"}}, Spec: jkev1.IPRangeSpec{CIDR: cidr, Node: "n"}}
	}
	hand := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "hand"}, Spec: jkev1.IPRangeSpec{CIDR: "10.1.0.0/24", Node: "n"}}
	sip := &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-0"}, Spec: jkev1.StaticIPSpec{IP: "10.0.0.5", Node: "n"}}
	for _, tc := range []struct {
		name      string
		allocator bool
		owned     []*jkev1.IPRange
		sips      []*jkev1.StaticIP
		want      bool
	}{
		{"pool blocks only, no StaticIP, the allocator runs: it returns them", true, []*jkev1.IPRange{pooled("a", "10.0.0.0/24"), pooled("b", "10.0.1.0/24")}, nil, true},
		{"the allocator does not run: failover is the only way out", false, []*jkev1.IPRange{pooled("a", "10.0.0.0/24")}, nil, false},
		{"a StaticIP moves with the node: failover", true, []*jkev1.IPRange{pooled("a", "10.0.0.0/24")}, []*jkev1.StaticIP{sip}, false},
		{"a hand-written range: the allocator never touches it", true, []*jkev1.IPRange{pooled("a", "10.0.0.0/24"), hand}, nil, false},
		{"nothing owned: nothing to hand over", true, nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := LeftToAllocator(tc.allocator, tc.owned, tc.sips); got != tc.want {
				t.Errorf("LeftToAllocator = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestNodeConcernsMigrations: a kubelet's heartbeat (condition times only) does not re-run the
// running migrations; every change a migration reads does.
func TestNodeConcernsMigrations(t *testing.T) {
	base := func() *corev1.Node {
		n := node("n").ready(corev1.ConditionTrue, t0).n
		n.Annotations = map[string]string{jkev1alpha1.AnnotationIPRangesObserved: `{"r":"a/1"}`}
		n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(t0)
		return n
	}
	for _, tc := range []struct {
		name   string
		change func(n *corev1.Node)
		want   bool
	}{
		{"nothing", func(*corev1.Node) {}, false},
		{"heartbeat only", func(n *corev1.Node) { n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(t0.Add(time.Minute)) }, false},
		{"resourceVersion only", func(n *corev1.Node) { n.ResourceVersion = "42" }, false},
		{"route report", func(n *corev1.Node) { n.Annotations[jkev1alpha1.AnnotationIPRangesObserved] = `{"r":"b/2"}` }, true},
		{"Ready to Unknown", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionUnknown }, true},
		{"a new condition", func(n *corev1.Node) {
			n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue})
		}, true},
		{"spare label", func(n *corev1.Node) { n.Labels[jkev1alpha1.LabelSpare] = "true" }, true},
		{"a taint", func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoExecute}} }, true},
		{"cordoned", func(n *corev1.Node) { n.Spec.Unschedulable = true }, true},
		{"allocatable", func(n *corev1.Node) { n.Status.Allocatable[corev1.ResourcePods] = resource.MustParse("10") }, true},
		{"deleting", func(n *corev1.Node) { now := metav1.NewTime(t0); n.DeletionTimestamp = &now }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, cur := base(), base()
			tc.change(cur)
			if got := NodeConcernsMigrations(old, cur); got != tc.want {
				t.Errorf("NodeConcernsMigrations = %v, want %v", got, tc.want)
			}
		})
	}
}

// A moved pod counts as running with its IP only when it holds every address of its record
// (issue 39 item 2): both of a dual-stack record, the one of a single-stack record; a record
// without an address yet waits for nothing.
func TestRunsWithItsAddresses(t *testing.T) {
	pod := func(ips ...string) *corev1.Pod {
		p := &corev1.Pod{}
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		return p
	}
	rec := func(ip string, ips ...string) *jkev1.StaticIP {
		return &jkev1.StaticIP{Spec: jkev1.StaticIPSpec{IP: ip, IPs: ips}}
	}
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		s    *jkev1.StaticIP
		want bool
	}{
		{"single-stack, its IP", pod("10.0.0.5"), rec("10.0.0.5"), true},
		{"single-stack, another IP", pod("10.0.0.6"), rec("10.0.0.5"), false},
		{"single-stack record, dual-stack pod", pod("10.0.0.5", "fd00::5"), rec("10.0.0.5"), true},
		{"no address recorded yet", pod("10.0.0.6"), rec(""), true},
		{"dual-stack, both", pod("10.0.0.5", "fd00::5"), rec("10.0.0.5", "10.0.0.5", "fd00::5"), true},
		{"dual-stack, IPv4 only", pod("10.0.0.5"), rec("10.0.0.5", "10.0.0.5", "fd00::5"), false},
		{"dual-stack, another IPv6", pod("10.0.0.5", "fd00::6"), rec("10.0.0.5", "10.0.0.5", "fd00::5"), false},
		{"dual-stack, IPv6 primary", pod("fd00::5", "10.0.0.5"), rec("fd00::5", "fd00::5", "10.0.0.5"), true},
		{"IPv6 written in another form", pod("fd00:0::5"), rec("fd00::5"), true},
	} {
		if got := RunsWithItsAddresses(c.pod, c.s); got != c.want {
			t.Errorf("%s: RunsWithItsAddresses = %v, want %v", c.name, got, c.want)
		}
	}
}
