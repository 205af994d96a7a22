package podfitsresources

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/scheduler-plugins/apis/config"
	"github.com/staticip/staticip/scheduler-plugins/pkg/staticipnode"
)

const gpu v1.ResourceName = "example.com/gpu"

func rl(kv ...string) v1.ResourceList {
	out := v1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func mkPod(ns, name, node string, req v1.ResourceList) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name)},
		Spec: v1.PodSpec{NodeName: node, Containers: []v1.Container{{
			Name: "c", Resources: v1.ResourceRequirements{Requests: req},
		}}},
	}
}

func mkNode(name string) *v1.Node {
	alloc := rl("cpu", "8", "memory", "16Gi", "pods", "10", string(gpu), "4")
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1.NodeStatus{Allocatable: alloc, Capacity: alloc}}
}

func mkSIP(ns, name, node string, req v1.ResourceList) *jkev1.StaticIP {
	return &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: jkev1.StaticIPSpec{Node: node, IP: "10.1.2.3", Resources: req}}
}

// smallRange is a /29 on n1: 5 usable addresses (fivePods fill them).
var smallRange = &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "r1"}, Spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/29", Node: "n1"}}

func fivePods() []*v1.Pod {
	var pods []*v1.Pod
	for i := 0; i < 5; i++ {
		pods = append(pods, mkPod("ns", fmt.Sprintf("p%d", i), "n1", nil))
	}
	return pods
}

// filterCase: a pod, what node n1 runs, the cache's StaticIPs and IPRanges, the plugin's args,
// and Filter's verdict.
type filterCase struct {
	name      string
	pod       *v1.Pod
	onNode    []*v1.Pod
	staticIPs []*jkev1.StaticIP
	ranges    []*jkev1.IPRange
	args      *config.PodFitsResourcesWithStaticIPArgs
	// network: the node's NetworkUnavailable condition, "status/reason" ("": none)
	network string
	want    []string // nil: fits
	code    fwk.Code // default Unschedulable
}

var filterCases = []filterCase{
	{
		name: "no reservations: fits",
		pod:  mkPod("ns", "new", "", rl("cpu", "7")),
	},
	{
		name:      "reservation on the node takes the cpu",
		pod:       mkPod("ns", "new", "", rl("cpu", "7")),
		staticIPs: []*jkev1.StaticIP{mkSIP("ns", "web-0", "n1", rl("cpu", "2"))},
		want:      []string{"Insufficient cpu: 2 of 8 cores reserved for absent static-IP pods (StaticIP ns/web-0)"},
		code:      fwk.UnschedulableAndUnresolvable, // 7 > 8 - 2 even on an emptied node
	},
	{
		name:      "reservation on another node does not count here",
		pod:       mkPod("ns", "new", "", rl("cpu", "7")),
		staticIPs: []*jkev1.StaticIP{mkSIP("ns", "web-0", "n2", rl("cpu", "2"))},
	},
	{
		name:      "the pod's own reservation does not compete with it",
		pod:       mkPod("ns", "web-0", "", rl("cpu", "7")),
		staticIPs: []*jkev1.StaticIP{mkSIP("ns", "web-0", "n1", rl("cpu", "2"))},
	},
	{
		name:      "own reservation excluded, another one still counts",
		pod:       mkPod("ns", "web-0", "", rl("cpu", "7")),
		staticIPs: []*jkev1.StaticIP{mkSIP("ns", "web-0", "n1", rl("cpu", "2")), mkSIP("ns", "web-1", "n1", rl("cpu", "1500m"))},
		want:      []string{"Insufficient cpu: 1.5 of 8 cores reserved for absent static-IP pods (StaticIP ns/web-1)"},
		code:      fwk.UnschedulableAndUnresolvable,
	},
	{
		name:      "reservation of a present pod is not counted (its requests already are)",
		pod:       mkPod("ns", "new", "", rl("cpu", "5")),
		onNode:    []*v1.Pod{mkPod("ns", "web-0", "n1", rl("cpu", "2"))},
		staticIPs: []*jkev1.StaticIP{mkSIP("ns", "web-0", "n1", rl("cpu", "2"))},
	},
	{
		name:      "short even without reservations: NodeResourcesFit's verdict, not this plugin's",
		pod:       mkPod("ns", "new", "", rl("cpu", "3")),
		onNode:    []*v1.Pod{mkPod("ns", "big", "n1", rl("cpu", "6"))},
		staticIPs: []*jkev1.StaticIP{mkSIP("ns", "web-0", "n1", rl("cpu", "1"))},
	},
	{
		name:      "memory reserved",
		pod:       mkPod("ns", "new", "", rl("memory", "10Gi")),
		onNode:    []*v1.Pod{mkPod("ns", "big", "n1", rl("memory", "2Gi"))},
		staticIPs: []*jkev1.StaticIP{mkSIP("ns", "web-0", "n1", rl("memory", "5Gi"))},
		want:      []string{"Insufficient memory: 5Gi of 16Gi reserved for absent static-IP pods (StaticIP ns/web-0)"},
	},
	{
		name:      "extended resource reserved",
		pod:       mkPod("ns", "new", "", rl(string(gpu), "2")),
		onNode:    []*v1.Pod{mkPod("ns", "big", "n1", rl(string(gpu), "2"))},
		staticIPs: []*jkev1.StaticIP{mkSIP("ns", "web-0", "n1", rl(string(gpu), "1"))},
		want:      []string{"Insufficient example.com/gpu: 1 of 4 reserved for absent static-IP pods (StaticIP ns/web-0)"},
	},
	{
		name:      "extended resource reserved for the pod itself",
		pod:       mkPod("ns", "web-0", "", rl(string(gpu), "2")),
		onNode:    []*v1.Pod{mkPod("ns", "big", "n1", rl(string(gpu), "2"))},
		staticIPs: []*jkev1.StaticIP{mkSIP("ns", "web-0", "n1", rl(string(gpu), "1"))},
	},
	{
		name: "pod slots reserved",
		pod:  mkPod("ns", "new", "", nil),
		onNode: func() []*v1.Pod {
			var pods []*v1.Pod
			for i := 0; i < 9; i++ {
				pods = append(pods, mkPod("ns", fmt.Sprintf("p%d", i), "n1", nil))
			}
			return pods
		}(),
		staticIPs: []*jkev1.StaticIP{mkSIP("ns", "web-0", "n1", nil)},
		want:      []string{"Too many pods: 1 of 10 pod slots reserved for absent static-IP pods (StaticIP ns/web-0)"},
	},
	{
		name:   "IPs: one left",
		pod:    mkPod("ns", "new", "", nil),
		onNode: fivePods(),
		ranges: []*jkev1.IPRange{smallRange},
	},
	{
		name:      "IPs exhausted by pods and a reservation",
		pod:       mkPod("ns", "new", "", nil),
		onNode:    fivePods(),
		staticIPs: []*jkev1.StaticIP{mkSIP("ns", "web-0", "n1", nil)},
		ranges:    []*jkev1.IPRange{smallRange},
		want:      []string{"no free IP in node's ranges 10.1.2.0/29 (6 usable: 5 used by pods, 1 reserved for absent static-IP pods: StaticIP ns/web-0)"},
	},
	{
		name:      "IPs exhausted, but the pod's own StaticIP holds one there",
		pod:       mkPod("ns", "web-0", "", nil),
		onNode:    append(fivePods(), mkPod("ns", "p5", "n1", nil)),
		staticIPs: []*jkev1.StaticIP{mkSIP("ns", "web-0", "n1", nil)},
		ranges:    []*jkev1.IPRange{smallRange},
	},
	{
		// EnhancedStatefulSet web's record is not the own reservation of StatefulSet web's
		// pod web-0: that pod competes with it like any other.
		name: "IPs exhausted, StaticIP of the same pod name kept for another workload",
		pod: func() *v1.Pod {
			p := mkPod("ns", "web-0", "", nil)
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: "sts", Controller: new(true)}}
			return p
		}(),
		onNode: fivePods(),
		staticIPs: func() []*jkev1.StaticIP {
			s := mkSIP("ns", "web-0", "n1", nil)
			s.Spec.Kind, s.Spec.Ref = "EnhancedStatefulSet", "web"
			return []*jkev1.StaticIP{s}
		}(),
		ranges: []*jkev1.IPRange{smallRange},
		want:   []string{"no free IP in node's ranges 10.1.2.0/29 (6 usable: 5 used by pods, 1 reserved for absent static-IP pods: StaticIP ns/web-0)"},
	},
	{
		// The same kind and name in another API group is another workload too.
		name: "IPs exhausted, StaticIP of the same pod name kept for another group's StatefulSet",
		pod: func() *v1.Pod {
			p := mkPod("ns", "web-0", "", nil)
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps.kruise.io/v1beta1", Kind: "StatefulSet", Name: "web", UID: "asts", Controller: new(true)}}
			return p
		}(),
		onNode: fivePods(),
		staticIPs: func() []*jkev1.StaticIP {
			s := mkSIP("ns", "web-0", "n1", nil)
			s.Spec.Kind, s.Spec.Ref = "StatefulSet", "web"
			return []*jkev1.StaticIP{s}
		}(),
		ranges: []*jkev1.IPRange{smallRange},
		want:   []string{"no free IP in node's ranges 10.1.2.0/29 (6 usable: 5 used by pods, 1 reserved for absent static-IP pods: StaticIP ns/web-0)"},
	},
	{
		name: "IPs exhausted, hostNetwork pod needs none",
		pod: func() *v1.Pod {
			p := mkPod("ns", "new", "", nil)
			p.Spec.HostNetwork = true
			return p
		}(),
		onNode: append(fivePods(), mkPod("ns", "p5", "n1", nil)),
		ranges: []*jkev1.IPRange{smallRange},
	},
	{
		name:   "IPs exhausted, checkIPs off",
		pod:    mkPod("ns", "new", "", nil),
		onNode: append(fivePods(), mkPod("ns", "p5", "n1", nil)),
		ranges: []*jkev1.IPRange{smallRange},
		args:   &config.PodFitsResourcesWithStaticIPArgs{CheckIPs: false, NodesWithoutIPRange: config.NodesWithoutIPRangeAllow},
	},
	{
		name: "node without ranges and without a staticip agent, Allow: fits (another IPAM serves it)",
		pod:  mkPod("ns", "new", "", nil),
	},
	{
		name: "another CNI's NetworkUnavailable=False: not a staticip node, fits",
		pod:  mkPod("ns", "new", "", nil), network: "False/CalicoIsUp",
	},
	{
		name: "staticip node without a range, Allow: refused",
		pod:  mkPod("ns", "new", "", nil), network: "True/" + "StaticIPNoRange",
		want: []string{noUsableRangeReason},
		code: fwk.UnschedulableAndUnresolvable,
	},
	{
		name: "staticip node whose ranges drain or wait (an IPRange still names it): refused",
		pod:  mkPod("ns", "new", "", nil), network: "True/StaticIPNoRange", ranges: []*jkev1.IPRange{smallRange},
		want: []string{noUsableRangeReason},
		code: fwk.UnschedulableAndUnresolvable,
	},
	{
		name: "staticip node without a range, even the pod's own StaticIP on it: refused",
		pod:  mkPod("ns", "web-0", "", nil), network: "True/StaticIPNoRange", ranges: []*jkev1.IPRange{smallRange},
		staticIPs: []*jkev1.StaticIP{mkSIP("ns", "web-0", "n1", nil)},
		want:      []string{noUsableRangeReason},
		code:      fwk.UnschedulableAndUnresolvable,
	},
	{
		name: "staticip node without a range, hostNetwork pod: fits",
		pod: func() *v1.Pod {
			p := mkPod("ns", "new", "", nil)
			p.Spec.HostNetwork = true
			return p
		}(),
		network: "True/StaticIPNoRange",
	},
	{
		name: "staticip node without a range, checkIPs off: fits",
		pod:  mkPod("ns", "new", "", nil), network: "True/StaticIPNoRange",
		args: &config.PodFitsResourcesWithStaticIPArgs{CheckIPs: false, NodesWithoutIPRange: config.NodesWithoutIPRangeAllow},
	},
	{
		name: "staticip node with a usable range: fits",
		pod:  mkPod("ns", "new", "", nil), network: "False/StaticIPRangeReady", ranges: []*jkev1.IPRange{smallRange},
	},
	{
		name: "node without ranges, Reject",
		pod:  mkPod("ns", "new", "", nil),
		args: &config.PodFitsResourcesWithStaticIPArgs{CheckIPs: true, NodesWithoutIPRange: config.NodesWithoutIPRangeReject},
		want: []string{"node owns no IPRange to give the pod an IP from"},
		code: fwk.UnschedulableAndUnresolvable,
	},
}

func TestFilter(t *testing.T) {
	for _, tc := range filterCases {
		t.Run(tc.name, func(t *testing.T) { runFilterCase(t, tc) })
	}
}

// syncedCache is a synced cache holding staticIPs and ranges, applied through its informer
// handlers.
func syncedCache(staticIPs []*jkev1.StaticIP, ranges []*jkev1.IPRange) *staticipnode.Cache {
	c := staticipnode.NewEmpty()
	c.MarkSynced()
	for _, s := range staticIPs {
		c.OnStaticIPUpdate(nil, s)
	}
	for _, r := range ranges {
		c.OnIPRangeUpdate(nil, r)
	}
	return c
}

func runFilterCase(t *testing.T, tc filterCase) {
	t.Helper()
	c := syncedCache(tc.staticIPs, tc.ranges)
	args := config.PodFitsResourcesWithStaticIPArgs{CheckIPs: true, NodesWithoutIPRange: config.NodesWithoutIPRangeAllow}
	if tc.args != nil {
		args = *tc.args
	}
	pl := NewWithCache(c, args)
	pl.fitFiltersFirst = func() bool { return true } // as in the shipped profiles
	nodeInfo := framework.NewNodeInfo(tc.onNode...)
	node := mkNode("n1")
	if tc.network != "" {
		status, reason, _ := strings.Cut(tc.network, "/")
		node.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeNetworkUnavailable, Status: v1.ConditionStatus(status), Reason: reason}}
	}
	nodeInfo.SetNode(node)
	state := framework.NewCycleState()
	_, pre := pl.PreFilter(context.Background(), state, tc.pod, []fwk.NodeInfo{nodeInfo})
	if !pre.IsSuccess() && !pre.IsSkip() {
		t.Fatalf("PreFilter: %v", pre)
	}
	// Filter runs even when PreFilter skipped it: a skip is right only where Filter admits the
	// pod or NodeResourcesFit (first in the profile) refuses it for its pod slots anyway.
	st := pl.Filter(context.Background(), state, tc.pod, nodeInfo)
	if pre.IsSkip() && !st.IsSuccess() && len(nodeInfo.GetPods())+1 <= nodeInfo.GetAllocatable().GetAllowedPodNumber() {
		t.Fatalf("PreFilter skipped Filter, which refuses the pod where NodeResourcesFit admits it: %v", st)
	}
	if tc.want == nil {
		if !st.IsSuccess() {
			t.Fatalf("Filter = %v, want success", st)
		}
		return
	}
	code := tc.code
	if code == fwk.Success {
		code = fwk.Unschedulable
	}
	if st.Code() != code || !reflect.DeepEqual(st.Reasons(), tc.want) {
		t.Fatalf("Filter = %v %q, want %v %q", st.Code(), st.Message(), code, tc.want)
	}
}

func TestNotSyncedIsAnError(t *testing.T) {
	pl := NewWithCache(staticipnode.NewEmpty(), config.PodFitsResourcesWithStaticIPArgs{})
	_, st := pl.PreFilter(context.Background(), framework.NewCycleState(), mkPod("ns", "p", "", nil), nil)
	if st.Code() != fwk.Error {
		t.Fatalf("PreFilter on an unsynced cache = %v, want Error (retry)", st)
	}
}

func TestQueueingHints(t *testing.T) {
	c := staticipnode.NewEmpty()
	c.MarkSynced()
	pl := NewWithCache(c, config.PodFitsResourcesWithStaticIPArgs{CheckIPs: true, NodesWithoutIPRange: config.NodesWithoutIPRangeAllow})
	pod := mkPod("ns", "waiting", "", rl("cpu", "1"))
	logger := klog.Background()

	held := mkSIP("ns", "web-0", "n1", rl("cpu", "2"))
	released := held.DeepCopy()
	released.Status.Phase = jkev1.StaticIPReleased
	moved := held.DeepCopy()
	moved.Spec.Node = "n2"
	shrunk := held.DeepCopy()
	shrunk.Spec.Resources = rl("cpu", "1")
	grown := held.DeepCopy()
	grown.Spec.Resources = rl("cpu", "3")
	conditions := held.DeepCopy()
	conditions.Status.Conditions = []metav1.Condition{{Type: "Conflict", Status: metav1.ConditionFalse}}
	unplaced := mkSIP("ns", "web-1", "", nil)
	own := mkSIP("ns", "waiting", "n1", nil)
	for _, tc := range []struct {
		name     string
		old, new interface{}
		want     fwk.QueueingHint
	}{
		{"released", held, released, fwk.Queue},
		{"deleted", held, nil, fwk.Queue},
		{"moved to another node", held, moved, fwk.Queue},
		{"reservation shrank", held, shrunk, fwk.Queue},
		{"reservation grew", held, grown, fwk.QueueSkip},
		{"status conditions only", held, conditions, fwk.QueueSkip},
		{"new record on a node", nil, held, fwk.QueueSkip},
		{"record without node deleted", unplaced, nil, fwk.QueueSkip},
		{"the pod's own record created", nil, own, fwk.Queue},
	} {
		if got := hintAfter(t, c, pl.hint, pod, tc.old, tc.new); got != tc.want {
			t.Errorf("StaticIP %s: %v, want %v", tc.name, got, tc.want)
		}
	}

	deletedBound := mkPod("ns", "other", "n1", nil)
	deletedPending := mkPod("ns", "other", "", nil)
	for _, tc := range []struct {
		name string
		old  *v1.Pod
		want fwk.QueueingHint
	}{
		{"bound pod deleted", deletedBound, fwk.Queue},
		{"pending pod deleted", deletedPending, fwk.QueueSkip},
	} {
		got, err := pl.isSchedulableAfterPodDelete(logger, pod, tc.old, nil)
		if err != nil || got != tc.want {
			t.Errorf("Pod %s: %v %v, want %v", tc.name, got, err, tc.want)
		}
	}

	r := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/29", Node: "n1"}}
	grownRange := r.DeepCopy()
	grownRange.Spec.CIDR = "10.1.2.0/28"
	statusOnly := r.DeepCopy()
	statusOnly.Status.Used = 4
	unowned := r.DeepCopy()
	unowned.Spec.Node = ""
	for _, tc := range []struct {
		name     string
		old, new interface{}
		want     fwk.QueueingHint
	}{
		{"range added", nil, r, fwk.Queue},
		{"range grown", r, grownRange, fwk.Queue},
		{"status only", r, statusOnly, fwk.QueueSkip},
		{"range left unowned: n1 lost its last range", r, unowned, fwk.Queue},
	} {
		if got := hintAfter(t, c, pl.hint, pod, tc.old, tc.new); got != tc.want {
			t.Errorf("IPRange %s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// SignPod: pods without a StaticIP sign by requests and hostNetwork (so batching stays on
// for the profile), a pod with a StaticIP is refused.
func TestSignPod(t *testing.T) {
	c := staticipnode.NewEmpty()
	c.MarkSynced()
	c.OnStaticIPUpdate(nil, mkSIP("ns", "web-0", "n1", rl("cpu", "2")))
	pl := NewWithCache(c, config.PodFitsResourcesWithStaticIPArgs{CheckIPs: true})
	ctx := context.Background()
	sign := func(p *v1.Pod) map[string]any {
		t.Helper()
		frags, st := pl.SignPod(ctx, p)
		if !st.IsSuccess() {
			t.Fatalf("pod %s not signed: %v", p.Name, st)
		}
		out := map[string]any{}
		for _, f := range frags {
			out[f.Key] = f.Value
		}
		return out
	}
	a, b := sign(mkPod("ns", "a", "", rl("cpu", "1"))), sign(mkPod("other", "b", "", rl("cpu", "1")))
	if !reflect.DeepEqual(a, b) {
		t.Errorf("same requests, different signatures: %v vs %v", a, b)
	}
	if bigger := sign(mkPod("ns", "c", "", rl("cpu", "2"))); reflect.DeepEqual(a, bigger) {
		t.Errorf("different requests, same signature %v", a)
	}
	host := mkPod("ns", "d", "", rl("cpu", "1"))
	host.Spec.HostNetwork = true // needs no pod IP
	if reflect.DeepEqual(a, sign(host)) {
		t.Error("a hostNetwork pod signs like one that needs an IP")
	}
	if _, st := pl.SignPod(ctx, mkPod("ns", "web-0", "", rl("cpu", "2"))); st.Code() != fwk.Unschedulable {
		t.Errorf("a pod with a StaticIP was signed (%v); its own reservation makes it unlike others", st)
	}
}

// Filter's per-node summary is keyed by NodeInfo generation and the cache's view: a pod
// arriving on the node (new generation) or a record changing (new view) must show in the
// very next Filter, with no stale answer kept.
func TestFilterSummaryFollowsNodeAndCache(t *testing.T) {
	c := staticipnode.NewEmpty()
	c.MarkSynced()
	c.OnStaticIPUpdate(nil, mkSIP("ns", "web-0", "n1", rl("cpu", "2")))
	pl := NewWithCache(c, config.PodFitsResourcesWithStaticIPArgs{CheckIPs: true, NodesWithoutIPRange: config.NodesWithoutIPRangeAllow})
	pod := mkPod("ns", "new", "", rl("cpu", "5"))
	state := framework.NewCycleState()
	if _, st := pl.PreFilter(context.Background(), state, pod, nil); !st.IsSuccess() {
		t.Fatal(st)
	}
	nodeInfo := framework.NewNodeInfo(mkPod("ns", "big", "n1", rl("cpu", "2")))
	nodeInfo.SetNode(mkNode("n1"))
	if st := pl.Filter(context.Background(), state, pod, nodeInfo); st.Code() != fwk.Unschedulable {
		t.Fatalf("web-0 absent: %v, want Unschedulable (2 of 8 reserved, 2 used, 5 wanted)", st)
	}
	// web-0 arrives: the node's generation changes and its reservation is no longer counted.
	nodeInfo.AddPod(mkPod("ns", "web-0", "n1", rl("cpu", "1")))
	if st := pl.Filter(context.Background(), state, pod, nodeInfo); !st.IsSuccess() {
		t.Fatalf("web-0 present: %v, want success", st)
	}
	// Another record appears on the node (the cache's view changes), same NodeInfo.
	c.OnStaticIPUpdate(nil, mkSIP("ns", "web-1", "n1", rl("cpu", "1")))
	if st := pl.Filter(context.Background(), state, pod, nodeInfo); st.Code() != fwk.Unschedulable ||
		!strings.Contains(st.Message(), "StaticIP ns/web-1") {
		t.Fatalf("web-1 reserved: %v, want Unschedulable naming ns/web-1", st)
	}
}

// A status-only update (same generation, same phase: the agents' and controllers' status
// writes) is dropped by the cache before anything else is read: not applied, no hint asked.
func TestStatusOnlyUpdatesRequeueNobody(t *testing.T) {
	c := staticipnode.NewEmpty()
	c.MarkSynced()
	pl := NewWithCache(c, config.PodFitsResourcesWithStaticIPArgs{CheckIPs: true, NodesWithoutIPRange: config.NodesWithoutIPRangeAllow})
	held := mkSIP("ns", "web-0", "n1", rl("cpu", "2"))
	held.Generation, held.ResourceVersion = 1, "10"
	status := held.DeepCopy()
	status.ResourceVersion = "11"
	status.Status.Conditions = []metav1.Condition{{Type: "Bound", Status: metav1.ConditionTrue}}
	status.Spec.Node = "n2" // not what the API server does; shows the update was not read
	asked := 0
	hint := func(l klog.Logger, p *v1.Pod, ch staticipnode.Change) bool { asked++; return pl.hint(l, p, ch) }
	if got := hintAfter(t, c, hint, mkPod("ns", "w", "", rl("cpu", "1")), held, status); got != fwk.QueueSkip || asked != 0 {
		t.Fatalf("status-only update: %v, hint asked %d times; want QueueSkip without asking", got, asked)
	}
	if len(c.Node("n1").Held)+len(c.Node("n2").Held) != 0 {
		t.Fatal("a status-only update was applied to the cache")
	}
}

func TestQueueWhenAStaticIPNodeGetsARange(t *testing.T) {
	withNetwork := func(status v1.ConditionStatus, reason string) *v1.Node {
		n := mkNode("n1")
		n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeNetworkUnavailable, Status: status, Reason: reason}}
		return n
	}
	hostNet := mkPod("ns", "h", "", nil)
	hostNet.Spec.HostNetwork = true
	for _, tc := range []struct {
		name          string
		pod           *v1.Pod
		before, after *v1.Node
		want          fwk.QueueingHint
	}{
		{"no range -> range", mkPod("ns", "p", "", nil), withNetwork("True", agentReason("NoRange")), withNetwork("False", agentReason("RangeReady")), fwk.Queue},
		{"no range -> condition gone", mkPod("ns", "p", "", nil), withNetwork("True", agentReason("NoRange")), mkNode("n1"), fwk.Queue},
		{"range -> no range", mkPod("ns", "p", "", nil), withNetwork("False", agentReason("RangeReady")), withNetwork("True", agentReason("NoRange")), fwk.QueueSkip},
		{"another condition changed", mkPod("ns", "p", "", nil), mkNode("n1"), mkNode("n1"), fwk.QueueSkip},
		{"hostNetwork pod was never refused", hostNet, withNetwork("True", agentReason("NoRange")), withNetwork("False", agentReason("RangeReady")), fwk.QueueSkip},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := staticipnode.NewEmpty()
			pl := NewWithCache(c, config.PodFitsResourcesWithStaticIPArgs{CheckIPs: true, NodesWithoutIPRange: config.NodesWithoutIPRangeAllow})
			got, err := pl.isSchedulableAfterNodeNetworkChange(klog.Background(), tc.pod, tc.before, tc.after)
			if err != nil || got != tc.want {
				t.Fatalf("hint %v (%v), want %v", got, err, tc.want)
			}
		})
	}
}

// agentReason is an agent's reason (cni/agent: StaticIPNoRange, StaticIPRangeReady).
func agentReason(s string) string { return agentReasonPrefix + s }
