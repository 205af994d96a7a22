package agent

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/cni/nstest"
	"github.com/staticip/staticip/cni/plugin"
	"github.com/staticip/staticip/ipam"
)

// addsNeverReturn runs n ADDs (allocate, then release, as a pod start and stop does) on the
// node's database and fails the test when one of them is given ip. It returns how many ADDs
// got an address.
func addsNeverReturn(t *testing.T, path string, n int, ip netip.Addr) int {
	t.Helper()
	db, err := ipam.Open(ipam.Options{Path: path, OpenTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got := 0
	for i := 0; i < n; i++ {
		att := ipam.Attachment{ContainerID: "c-b" + strings.Repeat("x", i%7) + string(rune('a'+i%26)), IfName: "eth0"}
		al, _, err := db.Allocate(ipam.AllocateRequest{Attachment: att, Pod: ipam.PodRef{Namespace: "ns", Name: "b"}})
		if err != nil {
			continue
		}
		got++
		if al.IP == ip {
			t.Fatalf("ADD %d on the new owner returned %s, which a running pod on the old owner still holds", i, ip)
		}
		if _, _, err := db.Release(att, false); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

// No edit moves a live range (issue 24, item 5). A pod on node A holds x in IPRange R; an
// operator moves R to node B by hand. A move from one node straight to another at the same
// ownership generation is refused by the API server (it would leave both nodes allocating);
// the two-step move (unassign, then assign) is taken, but B does not allocate from R while A
// still reports R as held by itself (draining): R says Synced=False/WaitingForPreviousOwner,
// naming A, with an Event, and 100 ADDs on B never return x. Once A has drained R, B serves it.
func TestMovedRangeWaitsForThePreviousOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	t.Run("straight to another node", func(t *testing.T) {
		m := newMoveFixture(t, "10.161.0.0/29", 84)
		// Straight from A to B at the same generation: refused, and the message says how to move.
		r, err := m.sip.JkeV1().IPRanges().Get(m.ctx, m.rangeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r.Spec.Node = m.nodeB
		_, err = m.sip.JkeV1().IPRanges().Update(m.ctx, r, metav1.UpdateOptions{})
		if err != nil {
			if !strings.Contains(err.Error(), "unassign") {
				t.Errorf("the refusal does not tell the operator how to move a range: %v", err)
			}
			return
		}
		t.Errorf("moving IPRange %s from %s to %s at the same ownerGeneration was accepted; want it refused", m.rangeName, m.nodeA, m.nodeB)
		moveRange(m.ctx, t, m.b, m.rangeName, m.nodeB, 0)
		m.syncB()
		if got := addsNeverReturn(t, m.b.DBPath(), 100, m.x); got != 0 {
			t.Errorf("%d ADDs on %s got an address from %s while %s still holds addresses of it", got, m.nodeB, m.rangeName, m.nodeA)
		}
	})
	t.Run("unassigned, then assigned", func(t *testing.T) {
		m := newMoveFixture(t, "10.162.0.0/29", 85)
		moveRange(m.ctx, t, m.a, m.rangeName, "", 0)
		m.syncA()
		moveRange(m.ctx, t, m.b, m.rangeName, m.nodeB, 0)
		waitClaimsSynced(m.ctx, t, m.b)
		m.syncB()
		if got := addsNeverReturn(t, m.b.DBPath(), 100, m.x); got != 0 {
			t.Errorf("%d ADDs on %s got an address from %s while %s still holds addresses of it", got, m.nodeB, m.rangeName, m.nodeA)
		}
		if got := observedOn(m.ctx, t, m.a, m.nodeA, m.rangeName); got != m.nodeA+"/0" {
			t.Errorf("%s reports the range it drains as %q, want %q", m.nodeA, got, m.nodeA+"/0")
		}
		cond := waitCondition(m.ctx, t, m.b, m.rangeName, func(c *metav1.Condition) bool {
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == ReasonWaitingForPreviousOwner
		})
		if !strings.Contains(cond.Message, m.nodeA) {
			t.Errorf("the Synced condition does not name the node that still holds the range: %q", cond.Message)
		}
		if err := wait.PollUntilContextTimeout(m.ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			evs, err := m.kube.CoreV1().Events("").List(m.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + m.rangeName + ",reason=" + ReasonWaitingForPreviousOwner})
			return err == nil && len(evs.Items) > 0, nil
		}); err != nil {
			t.Errorf("no %s Event on IPRange %s", ReasonWaitingForPreviousOwner, m.rangeName)
		}

		// The pod on A ends (its DEL: veth and allocation gone); A drains R and stops reporting
		// it; B then serves R.
		deleteLink(t, m.hostA, plugin.HostVethName("c-holder", "eth0"))
		releaseOn(t, m.a.DBPath(), "c-holder")
		m.syncA()
		if got := holderOn(m.ctx, t, m.sip, m.rangeName, m.nodeA); got != "" {
			t.Errorf("%s drained the range but still claims it (%q)", m.nodeA, got)
		}
		if got := observedOn(m.ctx, t, m.a, m.nodeA, m.rangeName); got == m.nodeA+"/0" {
			t.Errorf("%s drained the range but its report still claims it (%q)", m.nodeA, got)
		}
		waitClaimsSynced(m.ctx, t, m.b)
		m.syncB()
		waitCondition(m.ctx, t, m.b, m.rangeName, func(c *metav1.Condition) bool {
			return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ReasonServing
		})
		if got := addsNeverReturn(t, m.b.DBPath(), 1, netip.Addr{}); got != 1 {
			t.Errorf("after %s drained %s, an ADD on %s got no address", m.nodeA, m.rangeName, m.nodeB)
		}
	})
}

// moveFixture: two nodes with their agents and network namespaces, an IPRange on node A, and a
// pod on A that holds x in it.
type moveFixture struct {
	ctx                     context.Context
	kube                    kubernetes.Interface
	sip                     versioned.Interface
	nodeA, nodeB, rangeName string
	hostA, hostB            *nstest.NetNS
	a, b                    *Agent
	logA, logB              *syncBuffer
	x                       netip.Addr
	syncA, syncB            func()
}

func newMoveFixture(t *testing.T, cidr string, subnet int) *moveFixture {
	ctx, kube, sip, suffix := apiFixture(t, 3*time.Minute)
	m := &moveFixture{ctx: ctx, kube: kube, sip: sip, logA: &syncBuffer{}, logB: &syncBuffer{},
		nodeA: "cni-move-a-" + suffix, nodeB: "cni-move-b-" + suffix, rangeName: "cni-move-" + suffix}
	ipA, ipB := fmt.Sprintf("192.168.%d.1", subnet), fmt.Sprintf("192.168.%d.2", subnet)
	createNode(ctx, t, kube, m.nodeA, ipA)
	createNode(ctx, t, kube, m.nodeB, ipB)
	createIPRange(ctx, t, sip, m.rangeName, jkev1.IPRangeSpec{CIDR: cidr, Node: m.nodeA})
	m.hostA = nodeNetns(t, "mova", ipA+"/24")
	m.hostB = nodeNetns(t, "movb", ipB+"/24")
	dirA, dirB := t.TempDir(), t.TempDir()
	m.a = startedAgent(ctx, t, Config{NodeName: m.nodeA, CNIBinDir: filepath.Join(dirA, "bin"), CNIConfDir: filepath.Join(dirA, "net.d"), DataDir: dirA, Routes: true}, kube, sip, m.logA)
	m.b = startedAgent(ctx, t, Config{NodeName: m.nodeB, CNIBinDir: filepath.Join(dirB, "bin"), CNIConfDir: filepath.Join(dirB, "net.d"), DataDir: dirB, Routes: true}, kube, sip, m.logB)
	syncOn := func(ag *Agent, host *nstest.NetNS, log *syncBuffer) {
		t.Helper()
		if err := host.Do(func(ns.NetNS) error { return ag.SyncOnce(ctx) }); err != nil {
			t.Fatalf("sync of %s: %v\nlog:\n%s", ag.cfg.NodeName, err, log.String())
		}
	}
	m.syncA = func() { syncOn(m.a, m.hostA, m.logA) }
	m.syncB = func() { syncOn(m.b, m.hostB, m.logB) }
	m.syncA()
	m.syncB()
	// A pod on A holds x (its ADD: allocation + host veth + /32 route).
	m.x = allocateAt(t, m.a.DBPath(), time.Now().Add(-time.Hour), "c-holder", ipam.PodRef{Namespace: "ns", Name: "holder", UID: "u-holder"}).IP
	sandboxVeth(t, m.hostA, "c-holder", "cni-mpeer0", m.x.String())
	m.syncA()
	return m
}

// deleteLink deletes a link of the host namespace (a sandbox's DEL).
func deleteLink(t *testing.T, host *nstest.NetNS, name string) {
	t.Helper()
	if err := host.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		return netlink.LinkDel(l)
	}); err != nil {
		t.Fatal(err)
	}
}

// releaseOn releases the container's allocation (a CNI DEL without a StaticIP).
func releaseOn(t *testing.T, path, containerID string) {
	t.Helper()
	db, err := ipam.Open(ipam.Options{Path: path, OpenTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, found, err := db.Release(ipam.Attachment{ContainerID: containerID, IfName: "eth0"}, false); err != nil || !found {
		t.Fatalf("release %s: found=%v err=%v", containerID, found, err)
	}
}

// waitClaimsSynced waits until ag's cache holds every IPRange's claims (status.holders) as the
// API has them.
func waitClaimsSynced(ctx context.Context, t *testing.T, ag *Agent) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		list, err := ag.sip.JkeV1().IPRanges().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, r := range list.Items {
			c, err := ag.view.ranges.Get(r.Name)
			if err != nil || !reflect.DeepEqual(c.Status.Holders, r.Status.Holders) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("%s's cache never caught up with the IPRanges' status.holders", ag.cfg.NodeName)
	}
}

// waitCondition waits until the IPRange's Synced condition satisfies ok and returns it.
func waitCondition(ctx context.Context, t *testing.T, ag *Agent, rangeName string, ok func(*metav1.Condition) bool) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		r, err := ag.sip.JkeV1().IPRanges().Get(ctx, rangeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		c = meta.FindStatusCondition(r.Status.Conditions, ConditionSynced)
		return ok(c), nil
	}); err != nil {
		t.Fatalf("IPRange %s condition %s: %+v", rangeName, ConditionSynced, c)
	}
	return c
}

// A node without a usable range says so on its Node (issue 24, item 4): NetworkUnavailable is
// True (StaticIPNoRange) while no IPRange names it, False (StaticIPRangeReady) once one does,
// and True again once its only range moved away and only drains (a pod still holds an address
// of it), the message naming the draining range.
func TestNetworkUnavailableFollowsTheNodesRanges(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	ctx, kube, sip, suffix := apiFixture(t, 3*time.Minute)
	node, rangeName := "cni-netu-"+suffix, "cni-netu-"+suffix
	createNode(ctx, t, kube, node, "192.168.86.1")
	host := nodeNetns(t, "netu", "192.168.86.1/24")
	dir := t.TempDir()
	var log syncBuffer
	a := startedAgent(ctx, t, Config{NodeName: node, CNIBinDir: filepath.Join(dir, "bin"), CNIConfDir: filepath.Join(dir, "net.d"), DataDir: dir, Routes: true}, kube, sip, &log)
	sync := func() {
		t.Helper()
		if err := host.Do(func(ns.NetNS) error { return a.SyncOnce(ctx) }); err != nil {
			t.Fatalf("sync: %v\nlog:\n%s", err, log.String())
		}
	}
	want := func(status corev1.ConditionStatus, reason, inMessage string) {
		t.Helper()
		var c *corev1.NodeCondition
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			c = networkConditionOf(n)
			return c != nil && c.Status == status && c.Reason == reason && strings.Contains(c.Message, inMessage), nil
		}); err != nil {
			t.Fatalf("node %s condition %s: %+v, want %s/%s with %q in its message", node, corev1.NodeNetworkUnavailable, c, status, reason, inMessage)
		}
	}
	sync()
	want(corev1.ConditionTrue, ReasonNoRange, "no IPRange names this node")

	createIPRange(ctx, t, sip, rangeName, jkev1.IPRangeSpec{CIDR: "10.163.0.0/29", Node: node})
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, err := a.view.ranges.Get(rangeName)
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	sync()
	want(corev1.ConditionFalse, ReasonRangeReady, rangeName)
	before, _ := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	sync() // unchanged: nothing written
	after, _ := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if before.ResourceVersion != after.ResourceVersion {
		t.Errorf("a pass with nothing changed wrote the Node (resourceVersion %s -> %s)", before.ResourceVersion, after.ResourceVersion)
	}

	x := allocateAt(t, a.DBPath(), time.Now().Add(-time.Hour), "c-netu", ipam.PodRef{Namespace: "ns", Name: "p", UID: "u-netu"}).IP
	sandboxVeth(t, host, "c-netu", "cni-npeer0", x.String())
	moveRange(ctx, t, a, rangeName, "", 0)
	sync()
	want(corev1.ConditionTrue, ReasonNoRange, rangeName+" moved away and only drain")
}
