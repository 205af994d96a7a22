package podfitsresources

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/scheduler-plugins/apis/config"
	"github.com/staticip/staticip/scheduler-plugins/pkg/staticipnode"
)

func filterOnce(t *testing.T, c *staticipnode.Cache, pod *v1.Pod, onNode ...*v1.Pod) *fwk.Status {
	t.Helper()
	pl := NewWithCache(c, config.PodFitsResourcesWithStaticIPArgs{CheckIPs: true, NodesWithoutIPRange: config.NodesWithoutIPRangeAllow})
	nodeInfo := framework.NewNodeInfo(onNode...)
	nodeInfo.SetNode(mkNode("n1"))
	state := framework.NewCycleState()
	if _, st := pl.PreFilter(context.Background(), state, pod, []fwk.NodeInfo{nodeInfo}); !st.IsSuccess() && !st.IsSkip() {
		t.Fatalf("PreFilter: %v", st)
	}
	return pl.Filter(context.Background(), state, pod, nodeInfo)
}

// The plain fit is NodeResourcesFit's: what it ignores (ignoredResources, extended
// resources served by DRA, which no node advertises) or already rejects is not this
// plugin's to judge. Only a verdict that reservations change is.
func TestFilterLeavesThePlainFitToNodeResourcesFit(t *testing.T) {
	c := staticipnode.NewEmpty()
	c.MarkSynced()
	c.OnStaticIPUpdate(nil, mkSIP("ns", "web-0", "n1", rl("cpu", "1")))
	for _, tc := range []struct {
		name   string
		pod    *v1.Pod
		onNode []*v1.Pod
	}{
		{"extended resource the node does not advertise (DRA-served or ignored)", mkPod("ns", "new", "", rl("example.com/dra-gpu", "1")), nil},
		{"cpu short even without reservations", mkPod("ns", "new", "", rl("cpu", "3")), []*v1.Pod{mkPod("ns", "big", "n1", rl("cpu", "6"))}},
	} {
		if st := filterOnce(t, c, tc.pod, tc.onNode...); !st.IsSuccess() {
			t.Errorf("%s: Filter = %v %q, want success (NodeResourcesFit decides)", tc.name, st.Code(), st.Reasons())
		}
	}
}

// A request that cannot fit even on an emptied node because of reservations is
// UnschedulableAndUnresolvable (preemption cannot free a reservation), and the message
// names the StaticIPs that hold the room.
func TestFilterUnresolvableNamesTheReservingStaticIPs(t *testing.T) {
	c := staticipnode.NewEmpty()
	c.MarkSynced()
	c.OnStaticIPUpdate(nil, mkSIP("ns", "web-0", "n1", rl("cpu", "4")))
	c.OnStaticIPUpdate(nil, mkSIP("ns", "web-1", "n1", rl("cpu", "3")))
	st := filterOnce(t, c, mkPod("ns", "new", "", rl("cpu", "2")))
	want := "Insufficient cpu: 7 of 8 cores reserved for absent static-IP pods (StaticIPs ns/web-0, ns/web-1)"
	if st.Code() != fwk.UnschedulableAndUnresolvable || len(st.Reasons()) != 1 || st.Reasons()[0] != want {
		t.Fatalf("Filter = %v %q, want UnschedulableAndUnresolvable %q", st.Code(), st.Reasons(), want)
	}
	// Preemption can make room when the reservations alone leave enough.
	st = filterOnce(t, c, mkPod("ns", "new", "", rl("cpu", "1")), mkPod("ns", "big", "n1", rl("cpu", "1")))
	if st.Code() != fwk.Unschedulable || !strings.Contains(st.Message(), "StaticIPs ns/web-0, ns/web-1") {
		t.Fatalf("Filter = %v %q, want Unschedulable naming the StaticIPs", st.Code(), st.Reasons())
	}
}

// A deletion the informer missed comes as a tombstone after its relist: the cache applies
// it and the hint requeues.
func TestTombstonesRequeue(t *testing.T) {
	c := staticipnode.NewEmpty()
	c.MarkSynced()
	pl := NewWithCache(c, config.PodFitsResourcesWithStaticIPArgs{CheckIPs: true, NodesWithoutIPRange: config.NodesWithoutIPRangeAllow})
	held := mkSIP("ns", "web-0", "n1", rl("cpu", "2"))
	held.ResourceVersion = "10"
	c.OnStaticIPUpdate(nil, held)
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/web-0", Obj: held}
	if got := hintAfter(t, c, pl.hint, mkPod("ns", "waiting", "", rl("cpu", "1")), tomb, nil); got != fwk.Queue {
		t.Fatalf("StaticIP tombstone: %v, want Queue", got)
	}
	if len(c.Node("n1").Held) != 0 {
		t.Fatalf("the tombstone was not applied: n1 holds %+v", c.Node("n1").Held)
	}
	r := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "r", ResourceVersion: "11"}, Spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/29", Node: "n1"}}
	c.OnIPRangeUpdate(nil, r)
	rtomb := cache.DeletedFinalStateUnknown{Key: "r", Obj: r}
	if got := hintAfter(t, c, pl.hint, mkPod("ns", "waiting", "", nil), rtomb, nil); got != fwk.Queue {
		t.Fatalf("IPRange tombstone: %v, want Queue (n1 lost its last range)", got)
	}
	if c.Node("n1").HasRanges {
		t.Fatal("the IPRange tombstone was not applied")
	}
}

// Queueing-hint gaps: each of these events can make a pod this plugin rejected fit.
func TestHintGaps(t *testing.T) {
	c := staticipnode.NewEmpty()
	c.MarkSynced()
	pl := NewWithCache(c, config.PodFitsResourcesWithStaticIPArgs{CheckIPs: true, NodesWithoutIPRange: config.NodesWithoutIPRangeAllow})
	logger := klog.Background()
	waiting := mkPod("ns", "waiting", "", rl("cpu", "1"))

	events, err := pl.EventsToRegister(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	registered := func(r fwk.EventResource, a fwk.ActionType) fwk.QueueingHintFn {
		for _, e := range events {
			if e.Event.Resource == r && e.Event.ActionType&a == a {
				return e.QueueingHintFn
			}
		}
		return nil
	}

	// A pod nominated to a node and then deleted held room there (upstream requeues).
	nominated := mkPod("ns", "preemptor", "", rl("cpu", "2"))
	nominated.Status.NominatedNodeName = "n1"
	if got, err := pl.isSchedulableAfterPodDelete(logger, waiting, nominated, nil); err != nil || got != fwk.Queue {
		t.Errorf("nominated pod deleted: %v %v, want Queue", got, err)
	}

	// A bound pod scaled down frees requests.
	if hint := registered(fwk.Pod, fwk.UpdatePodScaleDown); hint == nil {
		t.Error("Pod/UpdatePodScaleDown is not registered")
	} else {
		before := mkPod("ns", "other", "n1", rl("cpu", "2"))
		after := mkPod("ns", "other", "n1", rl("cpu", "1"))
		if got, err := hint(logger, waiting, before, after); err != nil || got != fwk.Queue {
			t.Errorf("bound pod scaled down: %v %v, want Queue", got, err)
		}
	}

	// IPRange deletion: a node losing its last range has no IP limit left (Allow). It reaches
	// the plugin through the cache (TestRequeueOnCacheChanges), not as a cluster event.
	r := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/29", Node: "n1"}}
	c.OnIPRangeUpdate(nil, r)
	unowned := r.DeepCopy()
	unowned.Spec.Node = ""
	if got := hintAfter(t, c, pl.hint, waiting, r, unowned); got != fwk.Queue {
		t.Errorf("node lost its last range: %v, want Queue", got)
	}
}
