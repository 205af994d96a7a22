package agent

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/cni/plugin"
	"github.com/staticip/staticip/internal/testsupport"
	"github.com/staticip/staticip/ipam"
)

// Who holds a range (issue 37, defects 1-4). Each test drives real agents (SyncOnce) against the
// shared API server in network namespaces of their own, and checks what a node's pods would see:
// routes, the addresses an ADD can get, the claims other nodes read.

// syncIgnoringErrors runs one pass of ag in host and returns its error (a route that cannot be
// programmed is an error of the pass, not of the test).
func syncIgnoringErrors(ctx context.Context, ag *Agent, m *moveFixture, onA bool) error {
	host := m.hostB
	if onA {
		host = m.hostA
	}
	return host.Do(func(ns.NetNS) error { return ag.SyncOnce(ctx) })
}

// Defect 1: a range that moved away stays routed via the node that still holds addresses of it,
// for as long as it holds any — while it is unassigned, and while the node it is assigned to
// waits for the old node to drain it. Then, once drained, via its new owner.
func TestDrainingRangeStaysRoutedViaItsHolder(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	m := newMoveFixture(t, "10.163.0.0/29", 86)
	ipA, ipB := "192.168.86.1", "192.168.86.2"
	routeOnB := func() string {
		if r := agentRoute(m.hostB, "10.163.0.0/29"); r != nil {
			return r.Gw.String()
		}
		return "none"
	}
	if got := routeOnB(); got != ipA {
		t.Fatalf("before the move %s routes %s via %s, want %s", m.nodeB, m.rangeName, got, ipA)
	}

	moveRange(m.ctx, t, m.a, m.rangeName, "", 0)
	m.syncA()
	waitClaimsSynced(m.ctx, t, m.b)
	m.syncB()
	if got := routeOnB(); got != ipA {
		t.Errorf("unassigned while %s still holds %s of it: %s routes %s via %s, want via the holder %s", m.nodeA, m.x, m.nodeB, m.rangeName, got, ipA)
	}

	moveRange(m.ctx, t, m.b, m.rangeName, m.nodeB, 0)
	m.syncA()
	waitClaimsSynced(m.ctx, t, m.b)
	m.syncB()
	if got := routeOnB(); got != ipA {
		t.Errorf("assigned to %s, which waits for %s to drain it: %s routes %s via %s, want via the holder %s", m.nodeB, m.nodeA, m.nodeB, m.rangeName, got, ipA)
	}
	if r := agentRoute(m.hostA, "10.163.0.0/29"); r != nil {
		t.Errorf("%s, which holds addresses of %s, routes it away via %s", m.nodeA, m.rangeName, r.Gw)
	}

	// Drained: the holder lets go, the new owner serves the range, and the old node routes it
	// there.
	deleteLink(t, m.hostA, plugin.HostVethName("c-holder", "eth0"))
	releaseOn(t, m.a.DBPath(), "c-holder")
	m.syncA()
	waitClaimsSynced(m.ctx, t, m.b)
	m.syncB()
	waitClaimsSynced(m.ctx, t, m.a)
	m.syncA()
	if got := routeOnB(); got != "none" {
		t.Errorf("%s serves %s now, yet routes it via %s", m.nodeB, m.rangeName, got)
	}
	if r := agentRoute(m.hostA, "10.163.0.0/29"); r == nil || r.Gw.String() != ipB {
		t.Errorf("after draining %s, %s routes it via %v, want via its new owner %s", m.rangeName, m.nodeA, r, ipB)
	}
}

// Defect 2: a node's claim on a range it serves must not depend on unrelated work. With one route
// that can never be programmed (another node whose address is on no subnet of this node), the
// node still reports the range it serves and the addresses it holds, so a later move of that
// range waits for it.
func TestClaimIsWrittenDespiteARouteError(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	m := newMoveFixture(t, "10.164.0.0/29", 87)
	// Node C: an InternalIP on no subnet of A or B, and a range of its own: A's route to it fails
	// on every pass from now on.
	nodeC := "cni-move-c-" + strings.TrimPrefix(m.rangeName, "cni-move-")
	createNode(m.ctx, t, m.kube, nodeC, "10.250.0.1")
	createIPRange(m.ctx, t, m.sip, m.rangeName+"-c", jkev1.IPRangeSpec{CIDR: "10.164.1.0/29", Node: nodeC})
	claimAs(m.ctx, t, m.sip, m.rangeName+"-c", nodeC, "10.250.0.1")
	// R2: a new range of A, first served while that route fails.
	r2 := m.rangeName + "-2"
	createIPRange(m.ctx, t, m.sip, r2, jkev1.IPRangeSpec{CIDR: "10.164.2.0/29", Node: m.nodeA})
	waitRangeCached(m.ctx, t, m.a, r2)
	waitRangeCached(m.ctx, t, m.a, m.rangeName+"-c")
	if err := syncIgnoringErrors(m.ctx, m.a, m, true); err == nil || !strings.Contains(err.Error(), "10.164.1.0/29") {
		t.Fatalf("the pass on %s should fail to route %s via 10.250.0.1 (no subnet of the node): %v", m.nodeA, "10.164.1.0/29", err)
	}
	y := allocateIP(t, m.a.DBPath(), "c-y", "10.164.2.3")
	sandboxVeth(t, m.hostA, "c-y", "cni-mpeer1", y.String())
	_ = syncIgnoringErrors(m.ctx, m.a, m, true)
	if got := holderOn(m.ctx, t, m.sip, r2, m.nodeA); got != m.nodeA+"/0" {
		t.Fatalf("%s serves %s and holds %s of it, but its claim is %q (want %q): a route error elsewhere kept the claim from being written", m.nodeA, r2, y, got, m.nodeA+"/0")
	}
	// The operator's move of R2 to B must wait for A.
	moveRange(m.ctx, t, m.a, r2, "", 0)
	_ = syncIgnoringErrors(m.ctx, m.a, m, true)
	moveRange(m.ctx, t, m.b, r2, m.nodeB, 0)
	waitClaimsSynced(m.ctx, t, m.b)
	_ = syncIgnoringErrors(m.ctx, m.b, m, false)
	if got := addsNeverReturn(t, m.b.DBPath(), 100, y); got != 0 {
		t.Errorf("%d ADDs on %s got an address of %s while %s's pod holds %s", got, m.nodeB, r2, m.nodeA, y)
	}
	// Nor does the route error keep A from reporting the routes a failover waits for: a range of B marked
	// report-routes (as a failover marks a moved range) is routed and reported by A while its
	// route to C still fails, so one such node does not stall every failover at RoutesConverged.
	rb := m.rangeName + "-b"
	createIPRange(m.ctx, t, m.sip, rb, jkev1.IPRangeSpec{CIDR: "10.164.3.0/29", Node: m.nodeB})
	claimAs(m.ctx, t, m.sip, rb, m.nodeB, "192.168.87.2")
	if _, err := m.sip.JkeV1().IPRanges().Patch(m.ctx, rb, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+jkev1.AnnotationReportRoutes+`":"some-failover"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRangeCached(m.ctx, t, m.a, rb)
	var report string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_ = syncIgnoringErrors(m.ctx, m.a, m, true)
		l, err := m.kube.CoordinationV1().Leases(jkev1.NamespaceRouteReports).Get(m.ctx, m.nodeA, metav1.GetOptions{})
		if err == nil {
			report = l.Annotations[jkev1.AnnotationRoutesObserved]
			var routes map[string]string
			if json.Unmarshal([]byte(report), &routes) == nil && routes[rb] == m.nodeB+"/0" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's route report %q does not report its route to the marked range %s via %s while its route to %s fails (%v)",
				m.nodeA, report, rb, m.nodeB, m.rangeName+"-c", err)
		}
	}
}

// Defect 3: a claim is a node's word about itself, and it never takes a range away from the node
// that serves it. A report from another node naming itself as the holder of a range this node
// serves (a compromised or buggy node) leaves the range served here.
func TestAnotherNodesClaimDoesNotTakeAServedRange(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	m := newMoveFixture(t, "10.165.0.0/29", 88)
	nodeZ := "cni-move-z-" + strings.TrimPrefix(m.rangeName, "cni-move-")
	createNode(m.ctx, t, m.kube, nodeZ, "192.168.88.9")
	// Z's agent claims the range A serves: its own entry of status.holders, which admission
	// lets it write.
	claimAs(m.ctx, t, m.sip, m.rangeName, nodeZ, "192.168.88.9")
	waitClaimsSynced(m.ctx, t, m.a)
	m.syncA()
	if got := addsNeverReturn(t, m.a.DBPath(), 1, m.x); got != 1 {
		t.Errorf("after node %s claimed %s, an ADD on %s, which serves it, got no address", nodeZ, m.rangeName, m.nodeA)
	}
	r, err := m.sip.JkeV1().IPRanges().Get(m.ctx, m.rangeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range r.Status.Conditions {
		if c.Type == ConditionSynced && (c.Status != metav1.ConditionTrue || c.Reason != ReasonServing) {
			t.Errorf("after node %s claimed %s, its Synced condition is %s/%s: %s", nodeZ, m.rangeName, c.Status, c.Reason, c.Message)
		}
	}
	if got := holderOn(m.ctx, t, m.sip, m.rangeName, m.nodeA); got != m.nodeA+"/0" {
		t.Errorf("%s claims %q for the range it serves, want %q", m.nodeA, got, m.nodeA+"/0")
	}
	if r := agentRoute(m.hostB, "10.165.0.0/29"); r == nil || r.Gw.String() != "192.168.88.1" {
		m.syncB()
		if r := agentRoute(m.hostB, "10.165.0.0/29"); r == nil || r.Gw.String() != "192.168.88.1" {
			t.Errorf("after node %s claimed %s, %s routes it via %v, want via its owner %s, which serves it", nodeZ, m.rangeName, m.nodeB, r, "192.168.88.1")
		}
	}
}

// Defect 4: a database rebuilt after corruption remembers what the node held. A range it drains
// stays claimed (the new owner keeps waiting), and a range moved away at a higher ownership
// generation while the node was fenced is still revoked (the leftover sandbox is withdrawn).
func TestRebuiltDatabaseRemembersWhatTheNodeHeld(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	corrupt := func(t *testing.T, path string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(strings.Repeat("not a bbolt file ", 512)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("a draining range stays claimed", func(t *testing.T) {
		m := newMoveFixture(t, "10.166.0.0/29", 89)
		moveRange(m.ctx, t, m.a, m.rangeName, "", 0)
		m.syncA()
		corrupt(t, m.a.DBPath())
		m.syncA()
		if got := holderOn(m.ctx, t, m.sip, m.rangeName, m.nodeA); got != m.nodeA+"/0" {
			t.Errorf("after the rebuild %s claims %q for the range its pod still holds %s of, want %q", m.nodeA, got, m.x, m.nodeA+"/0")
		}
		moveRange(m.ctx, t, m.b, m.rangeName, m.nodeB, 0)
		waitClaimsSynced(m.ctx, t, m.b)
		m.syncB()
		if got := addsNeverReturn(t, m.b.DBPath(), 100, m.x); got != 0 {
			t.Errorf("%d ADDs on %s got an address of %s while %s's pod, rebuilt into a fresh database, holds %s", got, m.nodeB, m.rangeName, m.nodeA, m.x)
		}
	})
	t.Run("a range moved while fenced is still revoked", func(t *testing.T) {
		m := newMoveFixture(t, "10.167.0.0/29", 90)
		// A is fenced (its agent does not run); failover moves R to B at generation 1.
		moveRange(m.ctx, t, m.b, m.rangeName, m.nodeB, 1)
		m.syncB()
		// A comes back with a corrupt database.
		corrupt(t, m.a.DBPath())
		waitRangeAt(m.ctx, t, m.a, m.rangeName, m.nodeB, 1)
		_ = syncIgnoringErrors(m.ctx, m.a, m, true)
		_ = syncIgnoringErrors(m.ctx, m.a, m, true)
		if veth := hostRouteTo(m.hostA, m.x.String()); veth != "" {
			t.Errorf("%s was handed out by %s (generation 1); after rebuilding its database %s still routes it to its leftover sandbox %s", m.x, m.nodeB, m.nodeA, veth)
		}
	})
}

// allocateIP makes the plugin's allocation of ip for a pod named after the container, an hour
// ago (past GC's grace).
func allocateIP(t *testing.T, path, containerID, ip string) netip.Addr {
	t.Helper()
	db, err := ipam.Open(ipam.Options{Path: path, OpenTimeout: 30 * time.Second, Now: func() time.Time { return time.Now().Add(-time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	al, _, err := db.Allocate(ipam.AllocateRequest{Attachment: ipam.Attachment{ContainerID: containerID, IfName: "eth0"},
		Pod: ipam.PodRef{Namespace: "ns", Name: containerID, UID: "u-" + containerID}, IP: netip.MustParseAddr(ip)})
	if err != nil {
		t.Fatal(err)
	}
	return al.IP
}

// waitRangeCached waits until the agent's cache holds the IPRange.
func waitRangeCached(ctx context.Context, t *testing.T, a *Agent, name string) {
	t.Helper()
	r, err := a.sip.JkeV1().IPRanges().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitRangeAt(ctx, t, a, name, r.Spec.Node, r.Spec.OwnerGeneration)
}

// waitRangeAt waits until the agent's cache shows the IPRange on node at generation gen.
func waitRangeAt(ctx context.Context, t *testing.T, a *Agent, name, node string, gen int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := a.view.ranges.Get(name); err == nil && c.Spec.Node == node && c.Spec.OwnerGeneration == gen {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s's cache never saw IPRange %s on %q at generation %d", a.cfg.NodeName, name, node, gen)
}

// During an upgrade, a node whose agent predates status.holders claims in its Node annotation.
// The agents read the claims of every Node that does not carry jkev1.LabelClaimsInStatus — from
// the old agent's first report on, with no controller in between — and honour them as any claim:
// the range stays routed via that node's InternalIP, and a node it is assigned to waits for it.
// Once that node's agent claims in status.holders (the label), it leaves the other agents' view.
func TestLegacyNodeClaimsAreReadFromUnlabelledNodes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	m := newMoveFixture(t, "10.168.0.0/29", 91)
	nodeL := "cni-move-l-" + strings.TrimPrefix(m.rangeName, "cni-move-")
	createNode(m.ctx, t, m.kube, nodeL, "192.168.91.3")
	r2 := m.rangeName + "-2"
	createIPRange(m.ctx, t, m.sip, r2, jkev1.IPRangeSpec{CIDR: "10.168.1.0/29"})
	// L's old agent drains R2: its report, in the format of agents before status.holders.
	report := `{"` + r2 + `":"` + nodeL + `/0","` + m.rangeName + `":"` + m.nodeA + `/0"}`
	patch := func(p string) {
		t.Helper()
		if _, err := m.kube.CoreV1().Nodes().Patch(m.ctx, nodeL, types.MergePatchType, []byte(p), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	inLegacyView := func() bool {
		for _, n := range m.b.view.legacyNodes() {
			if n.Name == nodeL {
				return true
			}
		}
		return false
	}
	patch(`{"metadata":{"annotations":{"` + ObservedAnnotation + `":` + strconv.Quote(report) + `}}}`)
	waitRangeCached(m.ctx, t, m.b, r2)
	testsupport.Eventually(m.ctx, t, 30*time.Second, "the unlabelled node's report in the agent's cache", testsupport.True(func() bool {
		for _, n := range m.b.view.legacyNodes() {
			if n.Name == nodeL && n.Annotations[ObservedAnnotation] == report {
				return true
			}
		}
		return false
	}))
	m.syncB()
	if r := agentRoute(m.hostB, "10.168.1.0/29"); r == nil || r.Gw.String() != "192.168.91.3" {
		t.Errorf("%s routes %s, which unlabelled node %s drains, via %v, want via %s's InternalIP 192.168.91.3", m.nodeB, r2, nodeL, r, nodeL)
	}
	moveRange(m.ctx, t, m.b, r2, m.nodeB, 0)
	m.syncB()
	if got := addsNeverReturn(t, m.b.DBPath(), 8, netip.Addr{}); got != 0 {
		t.Errorf("%d ADDs on %s got an address of %s while unlabelled node %s still claims it", got, m.nodeB, r2, nodeL)
	}
	if got := holderOn(m.ctx, t, m.sip, r2, m.nodeB); got != "" {
		t.Errorf("%s claims %s (%q) while it waits for %s", m.nodeB, r2, got, nodeL)
	}
	// The agents of the fixture claim in status.holders: they labelled their own Nodes, which
	// left the view (nothing read of them but status.holders).
	for _, node := range []string{m.nodeA, m.nodeB} {
		if n, err := m.kube.CoreV1().Nodes().Get(m.ctx, node, metav1.GetOptions{}); err != nil || n.Labels[jkev1.LabelClaimsInStatus] != "true" {
			t.Errorf("Node %s: labels %v (%v), want %s=true from its agent", node, n.GetLabels(), err, jkev1.LabelClaimsInStatus)
		}
	}
	testsupport.Eventually(m.ctx, t, 30*time.Second, "the fixture's labelled Nodes gone from the agent's view", testsupport.True(func() bool {
		for _, n := range m.b.view.legacyNodes() {
			if n.Name == m.nodeA || n.Name == m.nodeB {
				return false
			}
		}
		return true
	}))

	// L's agent is upgraded: it labels its Node; the others stop reading it.
	patch(`{"metadata":{"labels":{"` + jkev1.LabelClaimsInStatus + `":"true"}}}`)
	testsupport.Eventually(m.ctx, t, 30*time.Second, "the labelled node gone from the agent's view", testsupport.True(func() bool { return !inLegacyView() }))
}
