package kubectlplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
)

func ipRange(name, cidr, node string, counts ...int32) jkev1.IPRange {
	r := jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: jkev1.IPRangeSpec{CIDR: cidr, Node: node}}
	if len(counts) == 4 {
		r.Status = jkev1.IPRangeStatus{Total: counts[0], Used: counts[1], Reserved: counts[2], Free: counts[3]}
	}
	return r
}

func pod(ns, name, node string, ips ...string) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
	}
	return p
}

func staticIP(ns, name, node, ip string) jkev1.StaticIP {
	return jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: jkev1.StaticIPSpec{Node: node, IP: ip, Pod: name}}
}

// dualStackIP is a dual-stack StaticIP: spec.ip the first address, spec.ips both.
func dualStackIP(ns, name, node string, ips ...string) jkev1.StaticIP {
	s := staticIP(ns, name, node, ips[0])
	s.Spec.IPs = ips
	return s
}

func withPhase(p corev1.Pod, ph corev1.PodPhase) corev1.Pod { p.Status.Phase = ph; return p }

func synced(r jkev1.IPRange, status metav1.ConditionStatus, reason string) jkev1.IPRange {
	r.Status.Conditions = []metav1.Condition{{Type: "Synced", Status: status, Reason: reason, Message: "m"}}
	return r
}

func TestBuildIPReport(t *testing.T) {
	pooled := ipRange("pool-a-0", "10.1.0.0/24", "node-1", 254, 1, 1, 252)
	pooled.Labels = map[string]string{jkev1.LabelIPPool: "pool-a"}
	pooled.Annotations = map[string]string{jkev1.AnnotationNodeGoneSince: "2026-01-02T03:00:00Z"}
	base := Snapshot{
		Ranges: []jkev1.IPRange{pooled, ipRange("r2", "10.2.0.0/24", "node-2", 254, 1, 0, 253)},
		Pools:  []jkev1.IPPool{{ObjectMeta: metav1.ObjectMeta{Name: "pool-a"}, Spec: jkev1.IPPoolSpec{CIDRs: []string{"10.1.0.0/16"}}}},
		Pods: []corev1.Pod{
			pod("ns", "web-0", "node-1", "10.1.0.5"),
			pod("ns", "api-0", "node-2", "10.2.0.7"),
			withPhase(pod("ns", "done", "node-2", "10.2.0.9"), corev1.PodSucceeded), // terminated: holds nothing
			pod("ns", "pending", "node-2"),                                          // no IP yet
		},
		StaticIPs: []jkev1.StaticIP{
			staticIP("ns", "web-0", "node-1", "10.1.0.5"),                // allocated: its pod holds it
			staticIP("ns", "web-1", "node-1", "10.1.0.6"),                // reserved: pod absent
			staticIP("ns", "new", "", ""),                                // no IP yet: not listed
			dualStackIP("ns", "db-0", "node-2", "10.2.0.8", "fd00:2::8"), // reserved, both addresses
		},
	}
	cases := []struct {
		name   string
		filter IPFilter
		ranges []string
		ips    []string // ip state pod staticip
	}{
		{"all", IPFilter{}, []string{"pool-a-0 pool-a", "r2 "},
			[]string{"10.1.0.5 Allocated ns/web-0 ns/web-0", "10.1.0.6 Reserved ns/web-1 ns/web-1", "10.2.0.7 Allocated ns/api-0 ",
				"10.2.0.8 Reserved ns/db-0 ns/db-0", "fd00:2::8 Reserved ns/db-0 ns/db-0"}},
		{"node", IPFilter{Node: "node-2"}, []string{"r2 "}, []string{"10.2.0.7 Allocated ns/api-0 ", "10.2.0.8 Reserved ns/db-0 ns/db-0", "fd00:2::8 Reserved ns/db-0 ns/db-0"}},
		{"range", IPFilter{Range: "pool-a-0"}, []string{"pool-a-0 pool-a"},
			[]string{"10.1.0.5 Allocated ns/web-0 ns/web-0", "10.1.0.6 Reserved ns/web-1 ns/web-1"}},
		{"pool", IPFilter{Pool: "pool-a"}, []string{"pool-a-0 pool-a"},
			[]string{"10.1.0.5 Allocated ns/web-0 ns/web-0", "10.1.0.6 Reserved ns/web-1 ns/web-1"}},
		{"nothing", IPFilter{Node: "node-9"}, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			rep := BuildIPReport(&s, tc.filter)
			var ranges, ips []string
			for _, r := range rep.Ranges {
				ranges = append(ranges, r.Name+" "+r.Pool)
			}
			for _, e := range rep.IPs {
				ips = append(ips, strings.Join([]string{e.IP, e.State, e.Pod, e.StaticIP}, " "))
			}
			if strings.Join(ranges, "|") != strings.Join(tc.ranges, "|") {
				t.Errorf("ranges = %q, want %q", ranges, tc.ranges)
			}
			if strings.Join(ips, "|") != strings.Join(tc.ips, "|") {
				t.Errorf("ips = %q, want %q", ips, tc.ips)
			}
		})
	}
	var wide bytes.Buffer
	all := base
	if err := PrintIPReport(&wide, BuildIPReport(&all, IPFilter{}), true); err != nil || !strings.Contains(wide.String(), "NODE-GONE-SINCE") ||
		!strings.Contains(wide.String(), "2026-01-02T03:00:00Z") || !strings.Contains(wide.String(), "pool-a") {
		t.Errorf("wide table (err %v):\n%s", err, wide.String())
	}
	// The pool is also found from the pools' CIDRs when the range has no label.
	s := base
	s.Ranges = []jkev1.IPRange{ipRange("plain", "10.1.3.0/24", "node-1")}
	if rep := BuildIPReport(&s, IPFilter{}); rep.Ranges[0].Pool != "pool-a" {
		t.Errorf("pool of an unlabelled range inside pool-a = %q", rep.Ranges[0].Pool)
	}
}

func TestAudit(t *testing.T) {
	ranges := []jkev1.IPRange{ipRange("r1", "10.1.0.0/24", "node-1"), ipRange("r2", "10.2.0.0/24", "node-2")}
	dualRanges := append([]jkev1.IPRange{ipRange("r6", "fd00:1::/120", "node-1")}, ranges...)
	failover := jkev1alpha1.NodeFailover{ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Status: jkev1alpha1.NodeFailoverStatus{Phase: jkev1alpha1.FailoverRangesMoved,
			MovedRanges: []jkev1alpha1.MovedRange{{Name: "r2", CIDR: "10.2.0.0/24", FromNode: "node-1", ToNode: "node-2"}}}}
	completed := *failover.DeepCopy()
	completed.Status.Phase = jkev1alpha1.FailoverCompleted
	hostNet := pod("kube-system", "agent", "node-1", "192.168.0.1")
	hostNet.Spec.HostNetwork = true
	cases := []struct {
		name string
		s    Snapshot
		want []string // "Severity Kind"
	}{
		{"clean", Snapshot{Ranges: ranges,
			Pods:      []corev1.Pod{pod("a", "p", "node-1", "10.1.0.2"), hostNet, withPhase(pod("a", "old", "node-2", "10.1.0.2"), corev1.PodFailed)},
			StaticIPs: []jkev1.StaticIP{staticIP("a", "p", "node-1", "10.1.0.2"), staticIP("a", "q", "", "")}}, nil},
		{"duplicate pod IP", Snapshot{Ranges: ranges,
			Pods: []corev1.Pod{pod("a", "p", "node-1", "10.1.0.2"), pod("b", "q", "node-1", "10.1.0.2")}},
			[]string{"Error DuplicatePodIP"}},
		{"pod IP outside ranges", Snapshot{Ranges: ranges, Pods: []corev1.Pod{pod("a", "p", "node-1", "10.9.0.2")}},
			[]string{"Error PodIPOutsideRanges"}},
		{"pod on another node's range", Snapshot{Ranges: ranges, Pods: []corev1.Pod{pod("a", "p", "node-1", "10.2.0.2")}},
			[]string{"Error PodIPOnOtherNodesRange"}},
		{"range moved by a running failover", Snapshot{Ranges: ranges, Failovers: []jkev1alpha1.NodeFailover{failover},
			Pods: []corev1.Pod{pod("a", "p", "node-1", "10.2.0.2")}}, []string{"Warning PodIPInFailedOverRange"}},
		{"failover completed: the pod should be gone", Snapshot{Ranges: ranges, Failovers: []jkev1alpha1.NodeFailover{completed},
			Pods: []corev1.Pod{pod("a", "p", "node-1", "10.2.0.2")}}, []string{"Error PodIPOnOtherNodesRange"}},
		{"unassigned range drains", Snapshot{Ranges: []jkev1.IPRange{ipRange("r1", "10.1.0.0/24", "")},
			Pods: []corev1.Pod{pod("a", "p", "node-1", "10.1.0.2")}}, []string{"Warning PodIPInUnassignedRange", "Warning UnassignedRangeAwaitingRelease"}},
		{"unassigned range a StaticIP keeps an address of awaits release", Snapshot{Ranges: []jkev1.IPRange{ipRange("r1", "10.1.0.0/24", "")},
			StaticIPs: []jkev1.StaticIP{staticIP("a", "p", "node-1", "10.1.0.7")}}, []string{"Warning UnassignedRangeAwaitingRelease"}},
		{"unassigned range a node still claims (draining) awaits release", Snapshot{Ranges: []jkev1.IPRange{drainedBy(ipRange("r1", "10.1.0.0/24", ""), "node-1")}},
			[]string{"Warning UnassignedRangeAwaitingRelease"}},
		{"a released block nothing holds is free", Snapshot{Ranges: []jkev1.IPRange{ipRange("r1", "10.1.0.0/24", "")},
			Pods: []corev1.Pod{pod("a", "p", "node-1", "10.9.0.2")}}, []string{"Error PodIPOutsideRanges"}},
		{"duplicate StaticIP", Snapshot{Ranges: ranges,
			StaticIPs: []jkev1.StaticIP{staticIP("a", "p", "node-1", "10.1.0.2"), staticIP("b", "p", "node-1", "10.1.0.2")}},
			[]string{"Error DuplicateStaticIP"}},
		{"StaticIP outside ranges", Snapshot{Ranges: ranges, StaticIPs: []jkev1.StaticIP{staticIP("a", "p", "node-1", "10.9.0.2")}},
			[]string{"Error StaticIPOutsideRanges"}},
		// Dual-stack records (issue 39 item 2): both addresses are checked.
		{"dual-stack, clean", Snapshot{Ranges: dualRanges, Pods: []corev1.Pod{pod("a", "p", "node-1", "10.1.0.2", "fd00:1::2")},
			StaticIPs: []jkev1.StaticIP{dualStackIP("a", "p", "node-1", "10.1.0.2", "fd00:1::2")}}, nil},
		{"dual-stack StaticIP's IPv6 address outside ranges", Snapshot{Ranges: ranges,
			StaticIPs: []jkev1.StaticIP{dualStackIP("a", "p", "node-1", "10.1.0.2", "fd00:9::2")}}, []string{"Error StaticIPOutsideRanges"}},
		{"duplicate IPv6 address of two dual-stack StaticIPs", Snapshot{Ranges: dualRanges,
			StaticIPs: []jkev1.StaticIP{dualStackIP("a", "p", "node-1", "10.1.0.2", "fd00:1::2"), dualStackIP("a", "q", "node-1", "10.1.0.3", "fd00:1::2")}},
			[]string{"Error DuplicateStaticIP"}},
		{"dual-stack StaticIP's pod runs with its IPv4 address only", Snapshot{Ranges: dualRanges, Pods: []corev1.Pod{pod("a", "p", "node-1", "10.1.0.2")},
			StaticIPs: []jkev1.StaticIP{dualStackIP("a", "p", "node-1", "10.1.0.2", "fd00:1::2")}}, []string{"Error StaticIPPartlyHeld"}},
		{"unassigned IPv6 range a dual-stack StaticIP keeps an address of awaits release", Snapshot{Ranges: []jkev1.IPRange{ranges[0], ipRange("r6", "fd00:1::/120", "")},
			StaticIPs: []jkev1.StaticIP{dualStackIP("a", "p", "node-1", "10.1.0.7", "fd00:1::7")}}, []string{"Warning UnassignedRangeAwaitingRelease"}},
		{"overlapping ranges", Snapshot{Ranges: append([]jkev1.IPRange{ipRange("r0", "10.1.0.0/16", "node-3")}, ranges...)},
			[]string{"Error OverlappingRanges"}},
		{"range not synced", Snapshot{Ranges: []jkev1.IPRange{synced(ranges[0], metav1.ConditionFalse, "WaitingForPreviousOwner"), synced(ranges[1], metav1.ConditionTrue, "Synced")}},
			[]string{"Error RangeNotSynced"}},
		{"pool not ready", Snapshot{Ranges: ranges, Pools: []jkev1.IPPool{pool("p1", jkev1.IPPoolReady, metav1.ConditionFalse, "Overlaps")}},
			[]string{"Error IPPoolNotReady"}},
		{"pool exhausted: a node waits for a block", Snapshot{Ranges: ranges,
			Pools: []jkev1.IPPool{pool("p1", jkev1.IPPoolExhausted, metav1.ConditionTrue, "PoolExhausted")}},
			[]string{"Error IPPoolExhausted"}},
		{"pool ready, not exhausted", Snapshot{Ranges: ranges,
			Pools: []jkev1.IPPool{pool("p1", jkev1.IPPoolReady, metav1.ConditionTrue, "Ready"), pool("p2", jkev1.IPPoolExhausted, metav1.ConditionFalse, "BlocksAvailable")}},
			nil},
		{"errors before warnings", Snapshot{Ranges: []jkev1.IPRange{ipRange("r1", "10.1.0.0/24", "")},
			Pods: []corev1.Pod{pod("a", "p", "node-1", "10.1.0.2"), pod("a", "q", "node-1", "10.9.0.1")}},
			[]string{"Error PodIPOutsideRanges", "Warning PodIPInUnassignedRange", "Warning UnassignedRangeAwaitingRelease"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := Audit(&tc.s)
			var got []string
			for _, p := range res.Problems {
				got = append(got, p.Severity+" "+p.Kind)
				if p.Message == "" {
					t.Errorf("problem %s without a message", p.Kind)
				}
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("problems = %q, want %q\n%+v", got, tc.want, res.Problems)
			}
		})
	}
}

// pool is an IPPool whose status carries one condition.
func pool(name, condition string, status metav1.ConditionStatus, reason string) jkev1.IPPool {
	return jkev1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: jkev1.IPPoolSpec{CIDRs: []string{"10.8.0.0/16"}},
		Status: jkev1.IPPoolStatus{Conditions: []metav1.Condition{{Type: condition, Status: status, Reason: reason, Message: "m"}}}}
}

func revision(set *jkev1alpha1.EnhancedStatefulSet, n int64, image string) *appsv1.ControllerRevision {
	tpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": set.Name}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}}}
	raw, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": tpl}})
	return &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Namespace: set.Namespace, Name: set.Name + "-" + image,
		Labels:          map[string]string{"app": set.Name},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(set, jkev1alpha1.SchemeGroupVersion.WithKind("EnhancedStatefulSet"))}},
		Revision: n, Data: runtime.RawExtension{Raw: raw}}
}

func ests(image string) *jkev1alpha1.EnhancedStatefulSet {
	return &jkev1alpha1.EnhancedStatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-web", ResourceVersion: "7"},
		Spec: jkev1alpha1.EnhancedStatefulSetSpec{Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}}}}}
}

func TestRevisionSelection(t *testing.T) {
	set := ests("v3")
	other := ests("v1")
	other.Name, other.UID = "other", "uid-other"
	all := []appsv1.ControllerRevision{*revision(set, 3, "v3"), *revision(other, 1, "v1"), *revision(set, 1, "v1"), *revision(set, 2, "v2")}
	revs := ControlledRevisions(all, set)
	if len(revs) != 3 || revs[0].Revision != 1 || revs[2].Revision != 3 {
		t.Fatalf("ControlledRevisions = %v, want the set's 1,2,3", revs)
	}
	cases := []struct {
		to      int64
		revs    []*appsv1.ControllerRevision
		want    int64
		wantErr string
	}{
		{0, revs, 2, ""},
		{1, revs, 1, ""},
		{3, revs, 3, ""},
		{9, revs, 0, "unable to find specified revision 9"},
		{-1, revs, 0, "unable to find specified revision -1"},
		{0, revs[:1], 0, "no last revision to roll back to"},
	}
	for _, tc := range cases {
		r, err := FindRevision(tc.to, tc.revs)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("FindRevision(%d) error = %v, want %q", tc.to, err, tc.wantErr)
			}
			continue
		}
		if err != nil || r.Revision != tc.want {
			t.Errorf("FindRevision(%d) = %v, %v; want revision %d", tc.to, r, err, tc.want)
		}
	}
	if _, done, err := UndoPatch(set, revs[2]); err != nil || !done {
		t.Errorf("undo to the running template: done=%v err=%v, want done", done, err)
	}
	patch, done, err := UndoPatch(set, revs[0])
	if err != nil || done || !strings.Contains(string(patch), `"image":"v1"`) || !strings.Contains(string(patch), `"value":"7"`) {
		t.Errorf("undo to v1: patch %s done=%v err=%v", patch, done, err)
	}
}

func TestRolloutStatus(t *testing.T) {
	mk := func(mut func(s *jkev1alpha1.EnhancedStatefulSet)) *jkev1alpha1.EnhancedStatefulSet {
		s := ests("v2")
		s.Generation = 2
		s.Status = jkev1alpha1.EnhancedStatefulSetStatus{ObservedGeneration: 2, Replicas: 2, ReadyReplicas: 2, CurrentReplicas: 2,
			UpdatedReplicas: 2, CurrentRevision: "web-2", UpdateRevision: "web-2"}
		mut(s)
		return s
	}
	cases := []struct {
		name    string
		set     *jkev1alpha1.EnhancedStatefulSet
		msg     string
		done    bool
		wantErr string
	}{
		{"complete", mk(func(*jkev1alpha1.EnhancedStatefulSet) {}), "rolling update complete 2 pods at revision web-2", true, ""},
		{"not observed", mk(func(s *jkev1alpha1.EnhancedStatefulSet) { s.Generation = 3 }), "spec update to be observed", false, ""},
		{"not ready", mk(func(s *jkev1alpha1.EnhancedStatefulSet) { s.Status.ReadyReplicas = 1 }), "Waiting for 1 pods to be ready", false, ""},
		{"rolling", mk(func(s *jkev1alpha1.EnhancedStatefulSet) {
			s.Status.UpdateRevision, s.Status.UpdatedReplicas = "web-3", 1
		}),
			"waiting for enhancedstatefulset rolling update to complete 1 pods at revision web-3", false, ""},
		{"partitioned", mk(func(s *jkev1alpha1.EnhancedStatefulSet) {
			s.Spec.UpdateStrategy.RollingUpdate = &jkev1alpha1.RollingUpdateEnhancedStatefulSetStrategy{Partition: ptr.To[int32](1)}
			s.Status.UpdateRevision, s.Status.UpdatedReplicas = "web-3", 1
		}), "partitioned roll out complete: 1 new pods", true, ""},
		{"paused", mk(func(s *jkev1alpha1.EnhancedStatefulSet) {
			s.Spec.UpdateStrategy.RollingUpdate = &jkev1alpha1.RollingUpdateEnhancedStatefulSetStrategy{Paused: true}
			s.Status.UpdateRevision = "web-3"
		}), "", true, "rollout is paused"},
		{"on delete", mk(func(s *jkev1alpha1.EnhancedStatefulSet) {
			s.Spec.UpdateStrategy.Type = appsv1.OnDeleteStatefulSetStrategyType
		}),
			"", true, "only available for RollingUpdate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msg, done, err := RolloutStatus(tc.set)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || done != tc.done || !strings.Contains(msg, tc.msg) {
				t.Errorf("= %q, %v, %v; want %q, %v", msg, done, err, tc.msg, tc.done)
			}
		})
	}
}

func TestWaitingFor(t *testing.T) {
	fo := func(phase jkev1alpha1.NodeFailoverPhase, conds ...metav1.Condition) *jkev1alpha1.NodeFailover {
		return &jkev1alpha1.NodeFailover{Status: jkev1alpha1.NodeFailoverStatus{Phase: phase, Conditions: conds}}
	}
	cases := []struct {
		fo   *jkev1alpha1.NodeFailover
		want string
	}{
		{fo(jkev1alpha1.FailoverCompleted), "-"},
		{fo(jkev1alpha1.FailoverFenced, metav1.Condition{Type: "Progressing", Status: "True", Reason: "WaitingForSourceEmpty", Message: "2 pods still on node-1"}),
			"WaitingForSourceEmpty: 2 pods still on node-1"},
		{fo(jkev1alpha1.FailoverDetected, metav1.Condition{Type: "Progressing", Status: "True", Reason: "X"},
			metav1.Condition{Type: "Stopped", Status: "True", Reason: "TooMany", Message: "3 nodes failed"}), "Stopped: 3 nodes failed"},
		{fo(jkev1alpha1.FailoverDetected), "<unknown>"},
	}
	for _, tc := range cases {
		if got := WaitingFor(tc.fo); got != tc.want {
			t.Errorf("WaitingFor = %q, want %q", got, tc.want)
		}
	}
}

// run runs the plugin's command line against fake clientsets (runIn without stdin).
func run(t *testing.T, kube []runtime.Object, sip []runtime.Object, args ...string) (string, int, *Clients) {
	t.Helper()
	return runIn(t, "", kube, sip, args...)
}

func TestCommandsWithFakeClients(t *testing.T) {
	r1 := ipRange("r1", "10.1.0.0/24", "node-1", 254, 1, 1, 252)
	p := pod("ns", "web-0", "node-1", "10.1.0.5")
	sipA, sipB := staticIP("ns", "web-0", "node-1", "10.1.0.5"), staticIP("ns", "web-1", "node-1", "10.1.0.6")
	out, code, _ := run(t, []runtime.Object{&p}, []runtime.Object{&r1, &sipA, &sipB}, "ips")
	for _, want := range []string{"RANGE", "r1", "10.1.0.0/24", "254", "10.1.0.5", "Allocated", "ns/web-0", "10.1.0.6", "Reserved", "ns/web-1"} {
		if !strings.Contains(out, want) || code != 0 {
			t.Fatalf("ips: code %d, output lacks %q:\n%s", code, want, out)
		}
	}
	out, code, _ = run(t, []runtime.Object{&p}, []runtime.Object{&r1, &sipA, &sipB}, "ips", "-o", "json")
	var rep IPReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 || len(rep.IPs) != 2 {
		t.Fatalf("ips -o json: code %d err %v:\n%s", code, err, out)
	}
	if out, code, _ = run(t, nil, []runtime.Object{&r1}, "ips", "--pool", "nope"); code != 1 || !strings.Contains(out, `"nope" not found`) {
		t.Errorf("ips --pool of a missing pool: code %d\n%s", code, out)
	}
	if out, code, _ = run(t, nil, nil, "ips", "-o", "xml"); code != 1 || !strings.Contains(out, "allowed formats") {
		t.Errorf("ips -o xml: code %d\n%s", code, out)
	}

	if out, code, _ = run(t, []runtime.Object{&p}, []runtime.Object{&r1, &sipA}, "check"); code != 0 || !strings.Contains(out, "No problems found") {
		t.Errorf("check clean: code %d\n%s", code, out)
	}
	dup := staticIP("other", "x", "node-1", "10.1.0.5")
	out, code, _ = run(t, []runtime.Object{&p}, []runtime.Object{&r1, &sipA, &dup}, "check")
	if code != 1 || !strings.Contains(out, "DuplicateStaticIP") || !strings.Contains(out, "ns/web-0, other/x") {
		t.Errorf("check duplicate: code %d\n%s", code, out)
	}

	// rollout against the fake: undo replaces the template with revision 1's.
	set := ests("v2")
	r1rev, r2rev := revision(set, 1, "v1"), revision(set, 2, "v2")
	out, code, c := run(t, []runtime.Object{r1rev, r2rev}, []runtime.Object{set}, "rollout", "undo", "ests/web", "-n", "ns")
	if code != 0 || !strings.Contains(out, "enhancedstatefulset.jke.jdcloud.com/web rolled back") {
		t.Fatalf("undo: code %d\n%s", code, out)
	}
	got, err := c.StaticIP.JkeV1alpha1().EnhancedStatefulSets("ns").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil || got.Spec.Template.Spec.Containers[0].Image != "v1" {
		t.Fatalf("after undo: %v %+v", err, got)
	}
	out, code, _ = run(t, []runtime.Object{r1rev, r2rev}, []runtime.Object{set}, "rollout", "history", "enhancedstatefulset", "web", "-n", "ns", "-o", "wide")
	if code != 0 || !strings.Contains(out, "REVISION") || !strings.Contains(out, "web-v1") || !strings.Contains(out, "v2") {
		t.Errorf("history: code %d\n%s", code, out)
	}
	out, code, c = run(t, nil, []runtime.Object{set}, "rollout", "pause", "ests/web", "-n", "ns")
	got, _ = c.StaticIP.JkeV1alpha1().EnhancedStatefulSets("ns").Get(context.Background(), "web", metav1.GetOptions{})
	if code != 0 || got.Spec.UpdateStrategy.RollingUpdate == nil || !got.Spec.UpdateStrategy.RollingUpdate.Paused {
		t.Errorf("pause: code %d\n%s", code, out)
	}
	if out, code, _ = run(t, nil, []runtime.Object{got}, "rollout", "pause", "ests/web", "-n", "ns"); code != 1 || !strings.Contains(out, "already paused") {
		t.Errorf("pause twice: code %d\n%s", code, out)
	}
	if out, code, _ = run(t, nil, []runtime.Object{got}, "rollout", "restart", "ests/web", "-n", "ns"); code != 1 || !strings.Contains(out, "rollout resume first") {
		t.Errorf("restart paused: code %d\n%s", code, out)
	}
	out, code, c = run(t, nil, []runtime.Object{set}, "rollout", "restart", "ests/web", "-n", "ns")
	got, _ = c.StaticIP.JkeV1alpha1().EnhancedStatefulSets("ns").Get(context.Background(), "web", metav1.GetOptions{})
	if code != 0 || got.Spec.Template.Annotations[RestartedAtAnnotation] != "2026-01-02T03:04:05Z" {
		t.Errorf("restart: code %d annotations %v\n%s", code, got.Spec.Template.Annotations, out)
	}
	if out, code, _ = run(t, nil, []runtime.Object{set}, "rollout", "undo", "sts/web"); code != 1 || !strings.Contains(out, "enhancedstatefulset (ests) and statefulsetgrid (ssg) only") {
		t.Errorf("undo sts: code %d\n%s", code, out)
	}

	fo := &jkev1alpha1.NodeFailover{ObjectMeta: metav1.ObjectMeta{Name: "node-1", CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC))},
		Spec: jkev1alpha1.NodeFailoverSpec{Node: "node-1"},
		Status: jkev1alpha1.NodeFailoverStatus{Phase: jkev1alpha1.FailoverFenced, Target: "node-2",
			Conditions: []metav1.Condition{{Type: "Progressing", Status: "True", Reason: "WaitingForSourceEmpty", Message: "pod ns/web-0 still on node-1"}}}}
	out, code, _ = run(t, nil, []runtime.Object{fo}, "failover", "status")
	t.Logf("$ kubectl staticip failover status\n%s", out)
	if code != 0 || !strings.Contains(out, "WaitingForSourceEmpty: pod ns/web-0 still on node-1") || !strings.Contains(out, "node-2") {
		t.Errorf("failover status: code %d\n%s", code, out)
	}
}

func TestHandleError(t *testing.T) {
	var b bytes.Buffer
	if HandleError(&b, &ExitError{Code: 1}) != 1 || b.Len() != 0 {
		t.Errorf("silent exit error printed %q", b.String())
	}
	if HandleError(&b, errors.New("boom")) != 1 || b.String() != "error: boom\n" {
		t.Errorf("error printed %q", b.String())
	}
}

// drainedBy gives r node's claim in status.holders: it drains r.
func drainedBy(r jkev1.IPRange, node string) jkev1.IPRange {
	r.Status.Holders = []jkev1.IPRangeHolder{{Node: node, State: jkev1.HolderDraining}}
	return r
}
