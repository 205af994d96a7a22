package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/cni/nstest"
	"github.com/staticip/staticip/cni/plugin"
	"github.com/staticip/staticip/ipam"
)

// sandboxVeth makes what the plugin's ADD leaves on the host for one pod: a host veth named
// after the container and a /32 route of the pod's IP to it.
func sandboxVeth(t *testing.T, host *nstest.NetNS, containerID, peer, ip string) {
	t.Helper()
	if err := host.Do(func(ns.NetNS) error {
		name := plugin.HostVethName(containerID, "eth0")
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer}); err != nil {
			return err
		}
		l, _ := netlink.LinkByName(name)
		p, _ := netlink.LinkByName(peer)
		if err := netlink.LinkSetUp(p); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		_, dst, _ := net.ParseCIDR(ip + "/32")
		return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: dst, Scope: netlink.SCOPE_LINK})
	}); err != nil {
		t.Fatal(err)
	}
}

// hostRouteTo reports the plugin veth the host routes ip to ("" when none).
func hostRouteTo(host *nstest.NetNS, ip string) string {
	found := ""
	host.Do(func(ns.NetNS) error {
		links, _ := pluginLinks()
		routes, _ := netlink.RouteList(nil, netlink.FAMILY_V4)
		for _, r := range routes {
			if name, ok := links[r.LinkIndex]; ok && r.Dst != nil && r.Dst.IP.String() == ip {
				found = name
			}
		}
		return nil
	})
	return found
}

// moveRange sets spec.node and spec.ownerGeneration as node failover does (one update) and waits
// until the agent's cache has it.
func moveRange(ctx context.Context, t *testing.T, a *Agent, name, node string, gen int64) {
	t.Helper()
	r, err := a.sip.JkeV1().IPRanges().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.Spec.Node, r.Spec.OwnerGeneration = node, gen
	if _, err := a.sip.JkeV1().IPRanges().Update(ctx, r, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		c, err := a.view.ranges.Get(name)
		return err == nil && c.Spec.Node == node && c.Spec.OwnerGeneration == gen, nil
	}); err != nil {
		t.Fatalf("the agent's cache never saw %s on %s at generation %d: %v", name, node, gen, err)
	}
}

// markReportRoutes marks the IPRange as node failover does while it waits for the routes to it
// (jkev1.AnnotationReportRoutes), and waits until the agent's cache shows the mark.
func markReportRoutes(ctx context.Context, t *testing.T, a *Agent, name string) {
	t.Helper()
	patch := []byte(`{"metadata":{"annotations":{"` + jkev1.AnnotationReportRoutes + `":"failover-test"}}}`)
	if _, err := a.sip.JkeV1().IPRanges().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		c, err := a.view.ranges.Get(name)
		return err == nil && c.Annotations[jkev1.AnnotationReportRoutes] != "", nil
	}); err != nil {
		t.Fatalf("the agent's cache never saw %s marked: %v", name, err)
	}
}

// observedOn is the node's ObservedAnnotation entry for the range (its claim; "" when none).
func observedOn(ctx context.Context, t *testing.T, a *Agent, node, rangeName string) string {
	t.Helper()
	n, err := a.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	if v := n.Annotations[ObservedAnnotation]; v != "" {
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			t.Fatalf("annotation %s=%q: %v", ObservedAnnotation, v, err)
		}
	}
	return m[rangeName]
}

// routeReportOn is the node's route-report entry for the range (its Lease in
// jkev1.NamespaceRouteReports; "" when none), after checking the Lease is as admission wants it.
func routeReportOn(ctx context.Context, t *testing.T, a *Agent, node, rangeName string) string {
	t.Helper()
	l, err := a.kube.CoordinationV1().Leases(jkev1.NamespaceRouteReports).Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node %s's route-report Lease: %v", node, err)
	}
	if ptr.Deref(l.Spec.HolderIdentity, "") != node || l.Labels[jkev1.LabelRouteReport] != "true" {
		t.Errorf("route-report Lease %s: holderIdentity %v, labels %v; want %s and %s=true", l.Name, ptr.Deref(l.Spec.HolderIdentity, ""), l.Labels, node, jkev1.LabelRouteReport)
	}
	m := map[string]string{}
	if err := json.Unmarshal([]byte(l.Annotations[jkev1.AnnotationRoutesObserved]), &m); err != nil {
		t.Fatalf("Lease %s annotation %s=%q: %v", l.Name, jkev1.AnnotationRoutesObserved, l.Annotations[jkev1.AnnotationRoutesObserved], err)
	}
	return m[rangeName]
}

// fenceFixture: a node "old" (192.168.<net>.1, its own netns named tag) owning IPRange cidr, a
// spare (192.168.<net>.2), and old's agent started with routes.
func fenceFixture(t *testing.T, tag string, net int, cidr string) (context.Context, kubernetes.Interface, string, string, string, *nstest.NetNS, *Agent, *syncBuffer) {
	t.Helper()
	ctx, kube, sip, suffix := apiFixture(t, 3*time.Minute)
	old, spare, rangeName := "cni-node-"+tag+"-old-"+suffix, "cni-node-"+tag+"-spare-"+suffix, "cni-"+tag+"-"+suffix
	createNode(ctx, t, kube, old, fmt.Sprintf("192.168.%d.1", net))
	createNode(ctx, t, kube, spare, fmt.Sprintf("192.168.%d.2", net))
	createIPRange(ctx, t, sip, rangeName, jkev1.IPRangeSpec{CIDR: cidr, Node: old})
	host := nodeNetns(t, tag, fmt.Sprintf("192.168.%d.1/24", net))
	dir := t.TempDir()
	cfg := Config{NodeName: old, CNIBinDir: filepath.Join(dir, "bin"), CNIConfDir: filepath.Join(dir, "net.d"), DataDir: dir, Routes: true}
	log := &syncBuffer{}
	a := startedAgent(ctx, t, cfg, kube, sip, log)
	return ctx, kube, old, spare, rangeName, host, a, log
}

// The old node coming back (node failover): its range was moved to a spare with a higher
// ownership generation while it was fenced. On its first pass its agent withdraws everything
// of that range — the leftover sandbox's host veth and /32 route, the allocation and the range
// in its IPAM (no draining) — routes the range to the spare instead, reports the new owner in
// its Node's annotation, and records an Event. The leftover sandbox's DEL then succeeds and
// finds nothing; the address is never handed out on this node again. A range that failover
// moves back to the same node at a still higher generation is served afresh, without any of
// the old allocations; a plain move (same generation) still drains.
func TestReturningNodeRevokesRangeMovedWhileFenced(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	ctx, kube, old, spare, rangeName, host, a, log := fenceFixture(t, "fence", 81, "10.158.0.0/24")
	sync := func() {
		t.Helper()
		if err := host.Do(func(ns.NetNS) error { return a.SyncOnce(ctx) }); err != nil {
			t.Fatalf("sync: %v\nlog:\n%s", err, log.String())
		}
	}
	sync()
	if got := observedOn(ctx, t, a, old, rangeName); got != old+"/0" {
		t.Fatalf("the node reports its own range as %q, want %q", got, old+"/0")
	}
	// A pod runs on the node with 10.158.0.5 (its ADD: allocation + host veth + /32 route).
	allocateAt(t, a.DBPath(), time.Now().Add(-time.Hour), "c-web0", ipam.PodRef{Namespace: "ns", Name: "web-0", UID: "u0"})
	sandboxVeth(t, host, "c-web0", "cni-fpeer0", "10.158.0.1")

	// Fenced and moved: the range names the spare at generation 1, marked for the route report
	// (node failover waits for it); the spare's agent serves and claims it.
	moveRange(ctx, t, a, rangeName, spare, 1)
	markReportRoutes(ctx, t, a, rangeName)
	claimAs(ctx, t, a.sip, rangeName, spare, "192.168.81.2")
	waitClaimsSynced(ctx, t, a)
	sync()
	allocs, _ := dbState(t, a.DBPath())
	if len(allocs) != 0 {
		t.Errorf("allocations after the forced move: %v; want none (a forced move must not drain)", allocs)
	}
	if v := hostRouteTo(host, "10.158.0.1"); v != "" {
		t.Errorf("the host still routes 10.158.0.1 to the leftover sandbox's veth %s", v)
	}
	if r := agentRoute(host, "10.158.0.0/24"); r == nil || r.Gw.String() != "192.168.81.2" {
		t.Errorf("route to the moved range: %+v, want via the spare 192.168.81.2", r)
	}
	db, err := ipam.Open(ipam.Options{Path: a.DBPath(), OpenTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ranges, _ := db.Ranges()
	if len(ranges) != 0 {
		t.Errorf("IPAM ranges after the forced move: %+v, want none", ranges)
	}
	// The leftover sandbox's DEL succeeds and finds nothing; the IP is not handed out here.
	if _, found, err := db.Release(ipam.Attachment{ContainerID: "c-web0", IfName: "eth0"}, true); err != nil || found {
		t.Errorf("DEL of the leftover sandbox: found=%v err=%v, want nothing found and no error", found, err)
	}
	if al, _, err := db.Allocate(ipam.AllocateRequest{Attachment: ipam.Attachment{ContainerID: "c-new", IfName: "eth0"},
		Pod: ipam.PodRef{Namespace: "ns", Name: "new"}, IP: netip.MustParseAddr("10.158.0.1")}); err == nil {
		t.Errorf("the revoked address was handed out again: %+v", al)
	}
	db.Close()
	if got := routeReportOn(ctx, t, a, old, rangeName); got != spare+"/1" {
		t.Errorf("the node's route report (its Lease) has the moved range as %q, want %q", got, spare+"/1")
	}
	if got := observedOn(ctx, t, a, old, rangeName); got != "" {
		t.Errorf("the node's Node annotation has the moved range as %q: routes are reported in the Lease, the annotation holds only claims", got)
	}
	if !strings.Contains(log.String(), "never serves those addresses again") {
		t.Errorf("no revocation in the log:\n%s", log.String())
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		evs, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + rangeName + ",reason=" + ReasonRangeRevoked})
		return err == nil && len(evs.Items) > 0, nil
	}); err != nil {
		t.Errorf("no %s Event on IPRange %s", ReasonRangeRevoked, rangeName)
	}

	// Failover moves it back here (generation 2): served afresh, nothing of before.
	moveRange(ctx, t, a, rangeName, old, 2)
	sync()
	allocateAt(t, a.DBPath(), time.Now().Add(-time.Hour), "c-web1", ipam.PodRef{Namespace: "ns", Name: "web-1", UID: "u1"})
	sandboxVeth(t, host, "c-web1", "cni-fpeer1", "10.158.0.1")
	// Fenced again, and failover re-grants the range to this very node at generation 3 (its
	// state was handed over to a new incarnation): the old allocations go all the same.
	moveRange(ctx, t, a, rangeName, old, 3)
	sync()
	allocs, _ = dbState(t, a.DBPath())
	if len(allocs) != 0 {
		t.Errorf("allocations after the re-grant at generation 3: %v; want none", allocs)
	}
	if v := hostRouteTo(host, "10.158.0.1"); v != "" {
		t.Errorf("after the re-grant the host still routes 10.158.0.1 to the old sandbox's veth %s", v)
	}
	if got := observedOn(ctx, t, a, old, rangeName); got != old+"/3" {
		t.Errorf("the node reports the re-granted range as %q, want %q", got, old+"/3")
	}

	// A plain move (same generation) drains as before: the allocation stays served.
	allocateAt(t, a.DBPath(), time.Now().Add(-time.Hour), "c-web2", ipam.PodRef{Namespace: "ns", Name: "web-2", UID: "u2"})
	sandboxVeth(t, host, "c-web2", "cni-fpeer2", "10.158.0.1")
	// (straight from one node to another at the same generation the API server refuses: the
	// range is unassigned, then assigned)
	moveRange(ctx, t, a, rangeName, "", 3)
	moveRange(ctx, t, a, rangeName, spare, 3)
	sync()
	allocs, _ = dbState(t, a.DBPath())
	if strings.Join(allocs, ",") != "c-web2" {
		t.Errorf("allocations after a plain move: %v; want c-web2 draining", allocs)
	}
	if v := hostRouteTo(host, "10.158.0.1"); v == "" {
		t.Error("a plain move withdrew the running pod's host route")
	}
	// It reports the range it drains as its own, so the spare waits for it.
	if got := observedOn(ctx, t, a, old, rangeName); got != old+"/3" {
		t.Errorf("the node reports the range it drains as %q, want %q", got, old+"/3")
	}
}

// Revocation withdraws first and forgets last: the served record of a revoked range stays
// until the host veths and /32 routes of its sandboxes are gone, so a withdrawal that fails
// (or a crash in it) is finished on the next pass. Meanwhile nothing of the range is handed
// out. The fault is injected into the withdrawal step (withdrawHook).
func TestRevocationRetriesAFailedWithdrawal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	ctx, _, _, spare, rangeName, host, a, log := fenceFixture(t, "wfence", 82, "10.159.0.0/24")
	sync := func() error { return host.Do(func(ns.NetNS) error { return a.SyncOnce(ctx) }) }
	if err := sync(); err != nil {
		t.Fatalf("sync: %v\nlog:\n%s", err, log.String())
	}
	// Two pods run with addresses of the range; the first one's route is gone already (its
	// veth stays): only the store knows it.
	allocateAt(t, a.DBPath(), time.Now().Add(-time.Hour), "c-w0", ipam.PodRef{Namespace: "ns", Name: "w-0", UID: "u0"})
	allocateAt(t, a.DBPath(), time.Now().Add(-time.Hour), "c-w1", ipam.PodRef{Namespace: "ns", Name: "w-1", UID: "u1"})
	sandboxVeth(t, host, "c-w0", "cni-wpeer0", "10.159.0.1")
	sandboxVeth(t, host, "c-w1", "cni-wpeer1", "10.159.0.2")
	if err := host.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName(plugin.HostVethName("c-w0", "eth0"))
		if err != nil {
			return err
		}
		_, dst, _ := net.ParseCIDR("10.159.0.1/32")
		return netlink.RouteDel(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: dst, Scope: netlink.SCOPE_LINK})
	}); err != nil {
		t.Fatal(err)
	}
	vethExists := func(container string) bool {
		found := false
		host.Do(func(ns.NetNS) error {
			_, err := netlink.LinkByName(plugin.HostVethName(container, "eth0"))
			found = err == nil
			return nil
		})
		return found
	}

	// The range is moved while the node was fenced; the first withdrawal fails after removing
	// nothing (as a crash in it would).
	failures := 1
	a.withdrawHook = func(subnet netip.Prefix, atts []ipam.Attachment) (int, error) {
		if failures > 0 {
			failures--
			return 0, errors.New("injected: withdrawal failed")
		}
		return withdrawHost(subnet, atts)
	}
	moveRange(ctx, t, a, rangeName, spare, 1)
	if err := sync(); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("the failed withdrawal is not reported: %v", err)
	}
	db, err := ipam.Open(ipam.Options{Path: a.DBPath(), OpenTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	served, _ := db.Served()
	if _, ok := served[rangeName]; !ok {
		t.Errorf("the served record of %s was forgotten before its sandboxes were withdrawn: %+v", rangeName, served)
	}
	// Nothing of the range is handed out meanwhile.
	if al, _, err := db.Allocate(ipam.AllocateRequest{Attachment: ipam.Attachment{ContainerID: "c-new", IfName: "eth0"},
		Pod: ipam.PodRef{Namespace: "ns", Name: "new"}, IP: netip.MustParseAddr("10.159.0.3")}); err == nil {
		t.Errorf("an address of the range being revoked was handed out: %+v", al)
	}
	db.Close()
	if !vethExists("c-w0") || !vethExists("c-w1") {
		t.Fatal("the injected failure removed a veth")
	}

	// The next pass finishes the withdrawal — also of the sandbox only the store knew of —
	// and only then forgets the record.
	if err := sync(); err != nil {
		t.Fatalf("second pass: %v\nlog:\n%s", err, log.String())
	}
	for _, c := range []string{"c-w0", "c-w1"} {
		if vethExists(c) {
			t.Errorf("the host veth of %s is still there after the retried withdrawal", c)
		}
	}
	if v := hostRouteTo(host, "10.159.0.2"); v != "" {
		t.Errorf("the host still routes 10.159.0.2 to %s", v)
	}
	db, err = ipam.Open(ipam.Options{Path: a.DBPath(), OpenTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	served, _ = db.Served()
	if _, ok := served[rangeName]; ok {
		t.Errorf("the served record of %s is kept after the withdrawal finished: %+v", rangeName, served[rangeName])
	}
	if allocs, _ := db.Allocations(); len(allocs) != 0 {
		t.Errorf("allocations left: %+v", allocs)
	}
}
