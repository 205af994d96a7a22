package podfitsresources

import (
	"context"
	"fmt"
	"reflect"
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

func TestFilter(t *testing.T) {
	smallRange := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "r1"}, Spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/29", Node: "n1"}}
	fivePods := func() []*v1.Pod {
		var pods []*v1.Pod
		for i := 0; i < 5; i++ {
			pods = append(pods, mkPod("ns", fmt.Sprintf("p%d", i), "n1", nil))
		}
		return pods
	}
	for _, tc := range []struct {
		name      string
		pod       *v1.Pod
		onNode    []*v1.Pod
		staticIPs []*jkev1.StaticIP
		ranges    []*jkev1.IPRange
		args      *config.PodFitsResourcesWithStaticIPArgs
		want      []string // nil: fits
		code      fwk.Code // default Unschedulable
	}{
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
			name: "node without ranges, Reject",
			pod:  mkPod("ns", "new", "", nil),
			args: &config.PodFitsResourcesWithStaticIPArgs{CheckIPs: true, NodesWithoutIPRange: config.NodesWithoutIPRangeReject},
			want: []string{"node owns no IPRange to give the pod an IP from"},
			code: fwk.UnschedulableAndUnresolvable,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := staticipnode.NewEmpty()
			c.MarkSynced()
			for _, p := range tc.onNode {
				c.OnPodUpdate(nil, p)
			}
			for _, s := range tc.staticIPs {
				c.OnStaticIPUpdate(nil, s)
			}
			for _, r := range tc.ranges {
				c.OnIPRangeUpdate(nil, r)
			}
			args := config.PodFitsResourcesWithStaticIPArgs{CheckIPs: true, NodesWithoutIPRange: config.NodesWithoutIPRangeAllow}
			if tc.args != nil {
				args = *tc.args
			}
			pl := NewWithCache(c, args)
			nodeInfo := framework.NewNodeInfo(tc.onNode...)
			nodeInfo.SetNode(mkNode("n1"))
			state := framework.NewCycleState()
			if _, st := pl.PreFilter(context.Background(), state, tc.pod, nil); !st.IsSuccess() {
				t.Fatalf("PreFilter: %v", st)
			}
			st := pl.Filter(context.Background(), state, tc.pod, nodeInfo)
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
				t.Fatalf("Filter = %v %q, want %v %q", st.Code(), st.Reasons(), code, tc.want)
			}
		})
	}
}

func TestReserveDropsOwnReservationUntilUnreserve(t *testing.T) {
	c := staticipnode.NewEmpty()
	c.MarkSynced()
	c.OnStaticIPUpdate(nil, mkSIP("ns", "web-0", "n1", rl("cpu", "2")))
	pl := NewWithCache(c, config.PodFitsResourcesWithStaticIPArgs{CheckIPs: true, NodesWithoutIPRange: config.NodesWithoutIPRangeAllow})
	p := mkPod("ns", "web-0", "", rl("cpu", "2"))
	if st := pl.Reserve(context.Background(), nil, p, "n1"); !st.IsSuccess() {
		t.Fatal(st)
	}
	if got := c.Node("n1").Reserved.MilliCPU; got != 0 {
		t.Fatalf("after Reserve the node still holds %dm for the pod, which the scheduler now counts itself", got)
	}
	pl.Unreserve(context.Background(), nil, p, "n1")
	if got := c.Node("n1").Reserved.MilliCPU; got != 2000 {
		t.Fatalf("after Unreserve the node holds %dm, want 2000m", got)
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
		got, err := pl.isSchedulableAfterStaticIPChange(logger, pod, tc.old, tc.new)
		if err != nil || got != tc.want {
			t.Errorf("StaticIP %s: %v %v, want %v", tc.name, got, err, tc.want)
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
		got, err := pl.isSchedulableAfterIPRangeChange(logger, pod, tc.old, tc.new)
		if err != nil || got != tc.want {
			t.Errorf("IPRange %s: %v %v, want %v", tc.name, got, err, tc.want)
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

// AbsentOthers scans the node's pods for small nodes and builds a set for large ones:
// both give the same answer — the records of absent pods other than the pod's own.
func TestReservedForOthersScanAndSetAgree(t *testing.T) {
	one := staticipnode.Resources{MilliCPU: 100, Memory: 1 << 20}
	for _, tc := range []struct {
		name       string
		pods, held int
	}{
		{"scan: 3 pods, 2 records", 3, 2},
		{"scan: at the limit (16 records x 32 pods)", 32, scanLimit/32 - 1},
		{"set: past the limit", 60, 20},
		{"set: many records, many pods", 110, 110},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var onNode []*v1.Pod
			for i := range tc.pods {
				onNode = append(onNode, mkPod("ns", fmt.Sprintf("p-%d", i), "n1", nil))
			}
			// Records for every other pod on the node (present) and as many absent ones, one of
			// them the pod's own; plus a record of a present name in another namespace (absent).
			var held []staticipnode.Held
			wantSlots := 0
			for i := 0; len(held) < tc.held; i++ {
				present := i%2 == 0 && i/2 < tc.pods
				name := fmt.Sprintf("p-%d", i/2)
				if !present {
					name = fmt.Sprintf("gone-%d", i)
				}
				held = append(held, staticipnode.Held{PodNamespace: "ns", PodName: name, Request: one})
				if !present && name != "gone-1" {
					wantSlots++
				}
			}
			held = append(held, staticipnode.Held{PodNamespace: "other", PodName: "p-0", Request: one})
			wantSlots++
			others := AbsentOthers(mkPod("ns", "gone-1", "", nil), framework.NewNodeInfo(onNode...), held)
			var reserved staticipnode.Resources
			for _, h := range others {
				reserved.Add(h.Request)
			}
			slots := len(others)
			if slots != wantSlots || reserved.MilliCPU != int64(wantSlots)*100 || reserved.Memory != int64(wantSlots)<<20 {
				t.Fatalf("%d pods, %d records: %d slots, %+v reserved; want %d slots", tc.pods, len(held), slots, reserved, wantSlots)
			}
		})
	}
}
