package podfitsresources

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	jkefake "github.com/staticip/staticip/apis/generated/clientset/versioned/fake"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/scheduler-plugins/apis/config"
	"github.com/staticip/staticip/scheduler-plugins/pkg/poolfit"
	"github.com/staticip/staticip/scheduler-plugins/pkg/staticipnode"
)

func TestIPSafe(t *testing.T) {
	allow, reject := config.NodesWithoutIPRangeAllow, config.NodesWithoutIPRangeReject
	for _, tc := range []struct {
		name         string
		network      nodeNetwork
		hasRanges    bool
		ips, slots   int64
		withoutRange config.NodesWithoutIPRangePolicy
		want         bool
	}{
		{"more IPs than pod slots", notStaticIP, true, 254, 110, allow, true},
		{"as many IPs as pod slots", networkReady, true, 110, 110, allow, true},
		{"fewer IPs than pod slots: the IP check can refuse first", networkReady, true, 109, 110, allow, false},
		{"a range that gives no address", notStaticIP, true, 0, 110, allow, false},
		{"no range, Allow: no IP check", notStaticIP, false, 0, 110, allow, true},
		{"no range, Reject: refused", notStaticIP, false, 0, 110, reject, false},
		{"staticip node without a usable range", networkUnavailable, true, 254, 110, allow, false},
		{"staticip node without a usable range, no range", networkUnavailable, false, 0, 110, allow, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ipSafe(tc.network, tc.hasRanges, tc.ips, tc.slots, tc.withoutRange); got != tc.want {
				t.Fatalf("ipSafe = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFiltersBefore(t *testing.T) {
	plugins := func(names ...string) []schedconfig.Plugin {
		var out []schedconfig.Plugin
		for _, n := range names {
			out = append(out, schedconfig.Plugin{Name: n})
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		enabled []schedconfig.Plugin
		want    bool
	}{
		{"multiPoint: defaults, then ours", plugins("NodeUnschedulable", "NodeName", "NodeResourcesFit", "CheckPodAnnotationWithStaticIP", Name), true},
		{"ours first", plugins(Name, "NodeResourcesFit"), false},
		{"NodeResourcesFit disabled", plugins("NodeName", Name), false},
		{"nothing", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := filtersBefore(tc.enabled, "NodeResourcesFit", Name); got != tc.want {
				t.Fatalf("filtersBefore = %v, want %v", got, tc.want)
			}
		})
	}
}

// skipNode is a node with 10 pod slots (mkNode) and the given NetworkUnavailable condition
// ("": none).
func skipNode(name string, network v1.ConditionStatus) *v1.Node {
	n := mkNode(name)
	if network != "" {
		n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeNetworkUnavailable, Status: network, Reason: agentReasonPrefix + "Test"}}
	}
	return n
}

func skipRange(name, cidr, node string) *jkev1.IPRange {
	return &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1, ResourceVersion: "1"}, Spec: jkev1.IPRangeSpec{CIDR: cidr, Node: node}}
}

// TestPreFilterSkipsFilter: when PreFilter returns Skip (the framework then calls no Filter of
// the plugin for the pod). Nodes have 10 pod slots; a /24 gives 253 IPs, a /29 5.
func TestPreFilterSkipsFilter(t *testing.T) {
	released := mkSIP("ns", "gone-0", "n1", rl("cpu", "1"))
	released.Status.Phase = jkev1.StaticIPReleased
	hostNetwork := mkPod("ns", "h", "", rl("cpu", "1"))
	hostNetwork.Spec.HostNetwork = true
	checkIPs := config.PodFitsResourcesWithStaticIPArgs{CheckIPs: true, NodesWithoutIPRange: config.NodesWithoutIPRangeAllow}
	for _, tc := range []struct {
		name      string
		pod       *v1.Pod
		args      *config.PodFitsResourcesWithStaticIPArgs
		staticIPs []*jkev1.StaticIP
		ranges    []*jkev1.IPRange
		nodes     []*v1.Node
		// fitFirst: NodeResourcesFit filters before the plugin (nil: unknown).
		fitFirst *bool
		want     bool
	}{
		{name: "no StaticIP, ranges with room for every pod slot", ranges: []*jkev1.IPRange{skipRange("r1", "10.1.1.0/24", "n1"), skipRange("r2", "10.1.2.0/24", "n2")},
			nodes: []*v1.Node{skipNode("n1", ""), skipNode("n2", "")}, want: true},
		{name: "no StaticIP, a node without range (Allow)", ranges: []*jkev1.IPRange{skipRange("r1", "10.1.1.0/24", "n1")},
			nodes: []*v1.Node{skipNode("n1", ""), skipNode("n2", "")}, want: true},
		{name: "no StaticIP, a node without range (Reject)", args: &config.PodFitsResourcesWithStaticIPArgs{CheckIPs: true, NodesWithoutIPRange: config.NodesWithoutIPRangeReject},
			ranges: []*jkev1.IPRange{skipRange("r1", "10.1.1.0/24", "n1")}, nodes: []*v1.Node{skipNode("n1", ""), skipNode("n2", "")}, want: false},
		{name: "a range smaller than the node's pod slots", ranges: []*jkev1.IPRange{skipRange("r1", "10.1.1.0/24", "n1"), skipRange("r2", "10.1.2.0/29", "n2")},
			nodes: []*v1.Node{skipNode("n1", ""), skipNode("n2", "")}, want: false},
		{name: "a staticip node without a usable range", ranges: []*jkev1.IPRange{skipRange("r1", "10.1.1.0/24", "n1"), skipRange("r2", "10.1.2.0/24", "n2")},
			nodes: []*v1.Node{skipNode("n1", ""), skipNode("n2", v1.ConditionTrue)}, want: false},
		{name: "a staticip node whose range is ready", ranges: []*jkev1.IPRange{skipRange("r1", "10.1.1.0/24", "n1"), skipRange("r2", "10.1.2.0/24", "n2")},
			nodes: []*v1.Node{skipNode("n1", ""), skipNode("n2", v1.ConditionFalse)}, want: true},
		{name: "an active StaticIP on another node", staticIPs: []*jkev1.StaticIP{mkSIP("ns", "web-0", "n9", rl("cpu", "1"))},
			ranges: []*jkev1.IPRange{skipRange("r1", "10.1.1.0/24", "n1")}, nodes: []*v1.Node{skipNode("n1", "")}, want: false},
		{name: "the pod's own active StaticIP", pod: mkPod("ns", "web-0", "", rl("cpu", "1")), staticIPs: []*jkev1.StaticIP{mkSIP("ns", "web-0", "n1", rl("cpu", "1"))},
			ranges: []*jkev1.IPRange{skipRange("r1", "10.1.1.0/24", "n1")}, nodes: []*v1.Node{skipNode("n1", "")}, want: false},
		{name: "a released StaticIP holds nothing", staticIPs: []*jkev1.StaticIP{released},
			ranges: []*jkev1.IPRange{skipRange("r1", "10.1.1.0/24", "n1")}, nodes: []*v1.Node{skipNode("n1", "")}, want: true},
		{name: "NodeResourcesFit does not filter first: the IP check is this plugin's alone", fitFirst: ptrTo(false),
			ranges: []*jkev1.IPRange{skipRange("r1", "10.1.1.0/24", "n1")}, nodes: []*v1.Node{skipNode("n1", "")}, want: false},
		{name: "unknown profile (no framework)", fitFirst: nil,
			ranges: []*jkev1.IPRange{skipRange("r1", "10.1.1.0/24", "n1")}, nodes: []*v1.Node{skipNode("n1", "")}, want: false},
		{name: "hostNetwork pod: no IP check, whatever the nodes", pod: hostNetwork, fitFirst: ptrTo(false),
			ranges: []*jkev1.IPRange{skipRange("r2", "10.1.2.0/29", "n2")}, nodes: []*v1.Node{skipNode("n1", v1.ConditionTrue), skipNode("n2", "")}, want: true},
		{name: "checkIPs off: no IP check", args: &config.PodFitsResourcesWithStaticIPArgs{CheckIPs: false, NodesWithoutIPRange: config.NodesWithoutIPRangeReject},
			nodes: []*v1.Node{skipNode("n1", v1.ConditionTrue)}, want: true},
		{name: "hostNetwork pod, an active StaticIP", pod: hostNetwork, staticIPs: []*jkev1.StaticIP{mkSIP("ns", "web-0", "n1", rl("cpu", "1"))},
			nodes: []*v1.Node{skipNode("n1", "")}, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := syncedCache(tc.staticIPs, tc.ranges)
			args := checkIPs
			if tc.args != nil {
				args = *tc.args
			}
			pl := NewWithCache(c, args)
			fitFirst := tc.fitFirst
			if fitFirst == nil && tc.name != "unknown profile (no framework)" {
				fitFirst = ptrTo(true)
			}
			if fitFirst != nil {
				pl.fitFiltersFirst = func() bool { return *fitFirst }
			}
			pod := tc.pod
			if pod == nil {
				pod = mkPod("ns", "new", "", rl("cpu", "1"))
			}
			var nodes []fwk.NodeInfo
			for _, n := range tc.nodes {
				ni := framework.NewNodeInfo()
				ni.SetNode(n)
				nodes = append(nodes, ni)
			}
			state := framework.NewCycleState()
			_, st := pl.PreFilter(context.Background(), state, pod, nodes)
			if st.IsSkip() != tc.want || (!st.IsSkip() && !st.IsSuccess()) {
				t.Fatalf("PreFilter = %v, want skip %v", st, tc.want)
			}
			if tc.want {
				// Skipped: Filter (still callable) admits the pod on every node.
				for _, ni := range nodes {
					if fst := pl.Filter(context.Background(), state, pod, ni); !fst.IsSuccess() {
						t.Fatalf("skipped, but Filter refuses the pod on %s: %v", ni.Node().Name, fst)
					}
				}
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestSkipFollowsNodesAndRanges: the per-node memo of ipSafe follows a node whose object
// changes (a new condition), an IPRange change, and a node list that grows.
func TestSkipFollowsNodesAndRanges(t *testing.T) {
	c := staticipnode.NewEmpty()
	c.MarkSynced()
	c.OnIPRangeUpdate(nil, skipRange("r1", "10.1.1.0/24", "n1"))
	pl := NewWithCache(c, config.PodFitsResourcesWithStaticIPArgs{CheckIPs: true, NodesWithoutIPRange: config.NodesWithoutIPRangeAllow})
	pl.fitFiltersFirst = func() bool { return true }
	n1 := framework.NewNodeInfo()
	n1.SetNode(skipNode("n1", ""))
	pod := mkPod("ns", "new", "", rl("cpu", "1"))
	skips := func(step string, nodes ...fwk.NodeInfo) bool {
		t.Helper()
		_, st := pl.PreFilter(context.Background(), framework.NewCycleState(), pod, nodes)
		if !st.IsSkip() && !st.IsSuccess() {
			t.Fatalf("%s: PreFilter = %v", step, st)
		}
		return st.IsSkip()
	}
	if !skips("a /24 on n1", n1) {
		t.Fatal("a /24 on n1: not skipped")
	}
	// The agent reports n1 without a usable range: a new Node object.
	n1.SetNode(skipNode("n1", v1.ConditionTrue))
	if skips("n1 NetworkUnavailable", n1) {
		t.Fatal("n1 NetworkUnavailable: skipped")
	}
	n1.SetNode(skipNode("n1", v1.ConditionFalse))
	if !skips("n1 ready again", n1) {
		t.Fatal("n1 ready again: not skipped")
	}
	// The range shrinks to a /29 (5 IPs, 10 pod slots): same Node object, the cache changed.
	shrunk := skipRange("r1", "10.1.1.0/29", "n1")
	shrunk.Generation, shrunk.ResourceVersion = 2, "2"
	c.OnIPRangeUpdate(skipRange("r1", "10.1.1.0/24", "n1"), shrunk)
	if skips("n1's range a /29", n1) {
		t.Fatal("n1's range a /29: skipped")
	}
	c.OnIPRangeDelete(shrunk)
	if !skips("n1 without range (Allow)", n1) {
		t.Fatal("n1 without range: not skipped")
	}
	// A second node joins, a staticip node without a usable range.
	n2 := framework.NewNodeInfo()
	n2.SetNode(skipNode("n2", v1.ConditionTrue))
	if skips("n2 joins without a usable range", n1, n2) {
		t.Fatal("n2 joins without a usable range: skipped")
	}
}

type noActivator struct{}

func (noActivator) Activate(klog.Logger, map[string]*v1.Pod) {}

// TestPreFilterNeverSkipsAPodOfChosenPools: where the skip would hold for a pod naming no
// pool (no StaticIP, ranges with room for every pod slot), a pod whose address must come from
// an exhausted IPPool still goes through Filter, which refuses it: only Filter knows which
// nodes have an address or a block of its pools left.
func TestPreFilterNeverSkipsAPodOfChosenPools(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}
	pool := &jkev1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "blue"}, Spec: jkev1.IPPoolSpec{CIDRs: []string{"10.9.0.0/30"}}}
	kubeInformers := kubeinformers.NewSharedInformerFactory(kubefake.NewClientset(ns), 0)
	view, err := poolfit.ForScheduler(ctx, kubeInformers, jkefake.NewSimpleClientset(pool), noActivator{})
	if err != nil {
		t.Fatal(err)
	}
	kubeInformers.Start(ctx.Done())
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return view.Synced(), nil
	}); err != nil {
		t.Fatal("the pool view did not sync")
	}
	pl := NewWithCache(syncedCache(nil, []*jkev1.IPRange{skipRange("r1", "10.1.1.0/24", "n1")}),
		config.PodFitsResourcesWithStaticIPArgs{CheckIPs: true, NodesWithoutIPRange: config.NodesWithoutIPRangeAllow})
	pl.fitFiltersFirst = func() bool { return true }
	pl.pools = view
	ni := framework.NewNodeInfo()
	ni.SetNode(skipNode("n1", ""))
	nodes := []fwk.NodeInfo{ni}

	plain := mkPod("ns", "plain", "", rl("cpu", "1"))
	if _, st := pl.PreFilter(ctx, framework.NewCycleState(), plain, nodes); !st.IsSkip() {
		t.Fatalf("a pod naming no pool: PreFilter = %v, want Skip (the case this test leans on)", st)
	}
	blue := mkPod("ns", "blue-0", "", rl("cpu", "1"))
	blue.Annotations = map[string]string{jkev1.AnnotationIPPools: `["blue"]`}
	state := framework.NewCycleState()
	if _, st := pl.PreFilter(ctx, state, blue, nodes); !st.IsSuccess() {
		t.Fatalf("a pod of IPPool blue: PreFilter = %v, want Success (not Skip)", st)
	}
	if st := pl.Filter(ctx, state, blue, ni); st.IsSuccess() {
		t.Errorf("Filter admits the pod of the exhausted IPPool blue on n1, want it refused")
	}
}
