package checkpodannotation

import (
	"context"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/scheduler-plugins/apis/config"
	"github.com/staticip/staticip/scheduler-plugins/pkg/staticipnode"
)

// snapshotHandle is a framework handle whose only working part is the node snapshot.
type snapshotHandle struct {
	fwk.Handle
	snapshot *cache.Snapshot
}

func (h snapshotHandle) SnapshotSharedLister() fwk.SharedLister { return h.snapshot }

func node(name string, unschedulable bool) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{Unschedulable: unschedulable}}
}

func annotated(name, ip string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: "u-" + "x"}}
	if ip != "" {
		p.Annotations = map[string]string{podip.AnnotationIPAddress: ip}
	}
	return p
}

func defaultArgs() config.CheckPodAnnotationWithStaticIPArgs {
	return config.CheckPodAnnotationWithStaticIPArgs{UnknownIP: config.UnknownIPReject}
}

func TestPreFilterAndFilter(t *testing.T) {
	ranges := []*jkev1.IPRange{
		{ObjectMeta: metav1.ObjectMeta{Name: "r1"}, Spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/26", Node: "n1"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "r2"}, Spec: jkev1.IPRangeSpec{CIDR: "10.1.3.0/26", Node: "gone"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "r3"}, Spec: jkev1.IPRangeSpec{CIDR: "10.1.4.0/26"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "r4"}, Spec: jkev1.IPRangeSpec{CIDR: "10.1.5.0/26", Node: "cordoned"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "r1-v6"}, Spec: jkev1.IPRangeSpec{CIDR: "fd00:1:2::/120", Node: "n1"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "r5-v6"}, Spec: jkev1.IPRangeSpec{CIDR: "fd00:1:5::/120", Node: "n2"}},
	}
	staticIPs := []*jkev1.StaticIP{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-0"}, Spec: jkev1.StaticIPSpec{Node: "n2", IP: "10.1.2.9"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-1"}, Spec: jkev1.StaticIPSpec{Node: "n1", IP: "10.1.2.10"}, Status: jkev1.StaticIPStatus{Phase: jkev1.StaticIPReleased}},
	}
	nodes := []*v1.Node{node("n1", false), node("n2", false), node("cordoned", true)}
	for _, tc := range []struct {
		name     string
		pod      *v1.Pod
		args     *config.CheckPodAnnotationWithStaticIPArgs
		wantNode string // "" with wantCode Skip: not pinned
		wantCode fwk.Code
		wantMsg  string
	}{
		{name: "no annotation, no StaticIP: skipped", pod: annotated("free", ""), wantCode: fwk.Skip},
		{name: "annotated IP pins to the range's node", pod: annotated("a", "10.1.2.7"), wantNode: "n1"},
		{name: "annotation with spaces", pod: annotated("a", " 10.1.2.7 "), wantNode: "n1"},
		{name: "StaticIP's node wins over the annotation", pod: annotated("web-0", "10.1.2.9"), wantNode: "n2"},
		{name: "released StaticIP does not pin; annotation does", pod: annotated("web-1", "10.1.2.10"), wantNode: "n1"},
		{name: "malformed annotation", pod: annotated("bad", "10.1.2.300"), wantCode: fwk.UnschedulableAndUnresolvable,
			wantMsg: `invalid annotation staticip.jke.jdcloud.com/ip-address="10.1.2.300": not an IP address`},
		{name: "dual-stack annotation pins to the node of both ranges", pod: annotated("a", "10.1.2.7,fd00:1:2::7"), wantNode: "n1"},
		{name: "dual-stack annotation, IPv6 first", pod: annotated("a", "fd00:1:2::7,10.1.2.7"), wantNode: "n1"},
		{name: "dual-stack annotation over two nodes", pod: annotated("a", "10.1.2.7,fd00:1:5::7"), wantCode: fwk.UnschedulableAndUnresolvable,
			wantMsg: `the pod's IPs 10.1.2.7 (IPRange r1 of node n1) and fd00:1:5::7 cannot be given by one node: fd00:1:5::7 lies in IPRange r5-v6 (fd00:1:5::/120) of node "n2"`},
		{name: "dual-stack annotation with an IPv6 address in no range", pod: annotated("a", "10.1.2.7,fd00:9::7"), wantCode: fwk.UnschedulableAndUnresolvable,
			wantMsg: `the pod's IPs 10.1.2.7 (IPRange r1 of node n1) and fd00:9::7 cannot be given by one node: fd00:9::7 lies in no IPRange`},
		{name: "two addresses of one family", pod: annotated("a", "10.1.2.7,10.1.2.8"), wantCode: fwk.UnschedulableAndUnresolvable,
			wantMsg: `invalid annotation staticip.jke.jdcloud.com/ip-address="10.1.2.7,10.1.2.8": holds two IPv4 addresses; it takes one address per IP family (e.g. 10.0.0.5,fd00::5)`},
		{name: "IP in no range", pod: annotated("a", "192.168.0.1"), wantCode: fwk.UnschedulableAndUnresolvable,
			wantMsg: "the pod's IP 192.168.0.1 (annotation staticip.jke.jdcloud.com/ip-address) lies in no IPRange, so no node can give it"},
		{name: "IP in no range, Ignore", pod: annotated("a", "192.168.0.1"), wantCode: fwk.Skip,
			args: &config.CheckPodAnnotationWithStaticIPArgs{UnknownIP: config.UnknownIPIgnore}},
		{name: "range owned by nobody", pod: annotated("a", "10.1.4.1"), wantCode: fwk.UnschedulableAndUnresolvable,
			wantMsg: "the pod's IP 10.1.4.1 lies in IPRange r3 (10.1.4.0/26), which no node owns"},
		{name: "node missing", pod: annotated("a", "10.1.3.1"), wantCode: fwk.UnschedulableAndUnresolvable,
			wantMsg: "the pod's IP 10.1.3.1 (IPRange r2 10.1.3.0/26) is held by node gone, which does not exist"},
		{name: "node unschedulable", pod: annotated("a", "10.1.5.1"), wantCode: fwk.UnschedulableAndUnresolvable,
			wantMsg: "the pod's IP 10.1.5.1 (IPRange r4 10.1.5.0/26) is held by node cordoned, which is unschedulable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := staticipnode.NewEmpty()
			c.MarkSynced()
			for _, r := range ranges {
				c.OnIPRangeUpdate(nil, r)
			}
			for _, s := range staticIPs {
				c.OnStaticIPUpdate(nil, s)
			}
			args := defaultArgs()
			if tc.args != nil {
				args = *tc.args
			}
			pl := NewWithCache(snapshotHandle{snapshot: cache.NewSnapshot(nil, nodes)}, c, args)
			state := framework.NewCycleState()
			res, st := pl.PreFilter(context.Background(), state, tc.pod, nil)
			if tc.wantNode == "" {
				if st.Code() != tc.wantCode || (tc.wantMsg != "" && st.Message() != tc.wantMsg) {
					t.Fatalf("PreFilter = %v %q, want %v %q", st.Code(), st.Message(), tc.wantCode, tc.wantMsg)
				}
				return
			}
			if !st.IsSuccess() || res == nil || !reflect.DeepEqual(res.NodeNames, sets.New(tc.wantNode)) {
				t.Fatalf("PreFilter = %+v, %v; want only node %s", res, st, tc.wantNode)
			}
			for _, n := range nodes {
				ni := framework.NewNodeInfo()
				ni.SetNode(n)
				st := pl.Filter(context.Background(), state, tc.pod, ni)
				if (n.Name == tc.wantNode) != st.IsSuccess() {
					t.Fatalf("Filter(%s) = %v", n.Name, st)
				}
				if !st.IsSuccess() && st.Code() != fwk.UnschedulableAndUnresolvable {
					t.Fatalf("Filter(%s) code = %v", n.Name, st.Code())
				}
			}
		})
	}
}

// hintAfter delivers a StaticIP or IPRange change (old nil: an add; new nil: a deletion) to
// the cache's informer handlers, as its informers do, and returns what the plugin's hint says
// for pod about the change the cache notified (QueueSkip when it notified none).
func hintAfter(t *testing.T, c *staticipnode.Cache, pl *CheckPodAnnotation, pod *v1.Pod, oldObj, newObj interface{}) fwk.QueueingHint {
	t.Helper()
	var notified []staticipnode.Change
	listening := true
	c.Listen(func(ch staticipnode.Change) {
		if listening {
			notified = append(notified, ch)
		}
	})
	defer func() { listening = false }()
	switch obj := newObj; {
	case newObj == nil:
		if _, ok := oldObj.(*jkev1.StaticIP); ok {
			c.OnStaticIPDelete(oldObj)
		} else {
			c.OnIPRangeDelete(oldObj)
		}
	default:
		if _, ok := obj.(*jkev1.StaticIP); ok {
			c.OnStaticIPUpdate(oldObj, newObj)
		} else {
			c.OnIPRangeUpdate(oldObj, newObj)
		}
	}
	if len(notified) == 0 || !pl.hint(klog.Background(), pod, notified[0]) {
		return fwk.QueueSkip
	}
	return fwk.Queue
}

func TestQueueingHints(t *testing.T) {
	c := staticipnode.NewEmpty()
	c.MarkSynced()
	pl := NewWithCache(snapshotHandle{}, c, defaultArgs())
	pod := annotated("web-0", "10.1.2.7")

	mine := &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-0"}, Spec: jkev1.StaticIPSpec{Node: "n1"}}
	mineMoved := mine.DeepCopy()
	mineMoved.Spec.Node = "n2"
	mineRelabeled := mine.DeepCopy()
	mineRelabeled.Labels = map[string]string{"x": "y"}
	other := &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-9"}, Spec: jkev1.StaticIPSpec{Node: "n1"}}
	for _, tc := range []struct {
		name     string
		old, new interface{}
		want     fwk.QueueingHint
	}{
		{"own StaticIP moved", mine, mineMoved, fwk.Queue},
		{"own StaticIP created", nil, mine, fwk.Queue},
		{"own StaticIP relabeled", mine, mineRelabeled, fwk.QueueSkip},
		{"other StaticIP", nil, other, fwk.QueueSkip},
	} {
		if got := hintAfter(t, c, pl, pod, tc.old, tc.new); got != tc.want {
			t.Errorf("StaticIP %s: %v, want %v", tc.name, got, tc.want)
		}
	}

	r := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "r1"}, Spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/26", Node: "n1"}}
	rMoved := r.DeepCopy()
	rMoved.Spec.Node = "n2"
	rStatus := r.DeepCopy()
	rStatus.Status.Used = 3
	unrelated := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "r9"}, Spec: jkev1.IPRangeSpec{CIDR: "10.9.0.0/24", Node: "n1"}}
	for _, tc := range []struct {
		name     string
		old, new interface{}
		want     fwk.QueueingHint
	}{
		{"range with the IP appears", nil, r, fwk.Queue},
		{"range with the IP moves", r, rMoved, fwk.Queue},
		{"status-only update", r, rStatus, fwk.QueueSkip},
		{"unrelated range", nil, unrelated, fwk.QueueSkip},
	} {
		if got := hintAfter(t, c, pl, pod, tc.old, tc.new); got != tc.want {
			t.Errorf("IPRange %s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// SignPod: an unpinned pod is signable with no fragment; a pod with the IP annotation (even
// a malformed one) or a StaticIP is refused.
func TestSignPod(t *testing.T) {
	c := staticipnode.NewEmpty()
	c.MarkSynced()
	c.OnStaticIPUpdate(nil, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-0"}, Spec: jkev1.StaticIPSpec{Node: "n1"}})
	pl := NewWithCache(snapshotHandle{}, c, defaultArgs())
	ctx := context.Background()
	plain := annotated("plain", "")
	if frags, st := pl.SignPod(ctx, plain); !st.IsSuccess() || len(frags) != 0 {
		t.Errorf("unpinned pod: fragments %v, status %v; want signable with none", frags, st)
	}
	// web-0 carries no annotation: its StaticIP alone pins it.
	for _, p := range []*v1.Pod{annotated("pinned", "10.1.2.7"), annotated("bad", "10.1.2"), annotated("web-0", "")} {
		if _, st := pl.SignPod(ctx, p); st.Code() != fwk.Unschedulable {
			t.Errorf("pod %s was signed (%v); a pinned pod must not be batched", p.Name, st)
		}
	}
}

// TestRecordOfAnotherWorkloadDoesNotPin: StaticIP web-0 kept for EnhancedStatefulSet web pins
// that set's pod web-0 to its node, but not StatefulSet web's pod web-0 (the record is not
// its: the StaticIP controller refuses it the annotation and the CNI the IP).
func TestRecordOfAnotherWorkloadDoesNotPin(t *testing.T) {
	c := staticipnode.NewEmpty()
	c.MarkSynced()
	c.OnStaticIPUpdate(nil, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-0"},
		Spec: jkev1.StaticIPSpec{Node: "n1", IP: "10.1.2.3", Kind: "EnhancedStatefulSet", Ref: "web"}})
	pl := NewWithCache(snapshotHandle{}, c, defaultArgs())
	podOf := func(apiVersion, kind string) *v1.Pod {
		p := annotated("web-0", "")
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "web", UID: "w", Controller: new(true)}}
		return p
	}
	if tgt, st := pl.Target(podOf("apps/v1", "StatefulSet")); tgt != nil || st != nil {
		t.Errorf("StatefulSet web's pod web-0 pinned by EnhancedStatefulSet web's record: %+v %v", tgt, st)
	}
	if tgt, st := pl.Target(podOf("jke.jdcloud.com/v1alpha1", "EnhancedStatefulSet")); tgt == nil || tgt.node != "n1" || st != nil {
		t.Errorf("EnhancedStatefulSet web's pod web-0: target %+v %v, want n1", tgt, st)
	}

	// The same kind and name in another API group is another workload: StatefulSet web-1's
	// record (no spec.apiGroup: written before it existed, its kind implies apps) pins apps'
	// StatefulSet web's pod, not OpenKruise's StatefulSet web's.
	c.OnStaticIPUpdate(nil, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-1"},
		Spec: jkev1.StaticIPSpec{Node: "n2", IP: "10.1.2.4", Kind: "StatefulSet", Ref: "web"}})
	podOf = func(apiVersion, kind string) *v1.Pod {
		p := annotated("web-1", "")
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "web", UID: "w", Controller: new(true)}}
		return p
	}
	if tgt, st := pl.Target(podOf("apps.kruise.io/v1beta1", "StatefulSet")); tgt != nil || st != nil {
		t.Errorf("OpenKruise StatefulSet web's pod web-1 pinned by apps StatefulSet web's record: %+v %v", tgt, st)
	}
	if tgt, st := pl.Target(podOf("apps/v1", "StatefulSet")); tgt == nil || tgt.node != "n2" || st != nil {
		t.Errorf("apps StatefulSet web's pod web-1: target %+v %v, want n2", tgt, st)
	}
}

// TestStaleAnnotationLosesToTheStaticIP: the pod's StaticIP was re-created with another IP on
// another node while the pod kept the old annotation. The scheduler resolves it as podip.Choose
// does — and as the CNI does (cni/plugin TestStaleAnnotationLosesToTheReservation): the
// record's IP, on the record's node, not the annotated IP's range owner.
func TestStaleAnnotationLosesToTheStaticIP(t *testing.T) {
	c := staticipnode.NewEmpty()
	c.MarkSynced()
	c.OnIPRangeUpdate(nil, &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "r1"}, Spec: jkev1.IPRangeSpec{CIDR: "10.1.2.0/26", Node: "n1"}})
	c.OnIPRangeUpdate(nil, &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "r6"}, Spec: jkev1.IPRangeSpec{CIDR: "10.1.6.0/26", Node: "n2"}})
	c.OnStaticIPUpdate(nil, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-2"}, Spec: jkev1.StaticIPSpec{Node: "n2", IP: "10.1.6.9"}})
	pod := annotated("web-2", "10.1.2.7")
	want, err := podip.Choose("10.1.6.9", "10.1.2.7")
	if err != nil || want.IP.String() != "10.1.6.9" || want.Source != podip.StaticIP {
		t.Fatalf("podip.Choose = %+v, %v", want, err)
	}
	pl := NewWithCache(snapshotHandle{snapshot: cache.NewSnapshot(nil, []*v1.Node{node("n1", false), node("n2", false)})}, c, defaultArgs())
	tgt, st := pl.Target(pod)
	if st != nil || tgt == nil || tgt.node != "n2" || tgt.ip != want.IP.String() {
		t.Fatalf("Target = %+v, %v; want node n2, IP %s (the StaticIP's)", tgt, st, want.IP)
	}
	res, st := pl.PreFilter(context.Background(), framework.NewCycleState(), pod, nil)
	if !st.IsSuccess() || !reflect.DeepEqual(res.NodeNames, sets.New("n2")) {
		t.Fatalf("PreFilter = %+v, %v; want only n2", res, st)
	}
}
