package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/cni/nstest"
	"github.com/staticip/staticip/internal/serving"
	"github.com/staticip/staticip/internal/testenv"
	"github.com/staticip/staticip/internal/testsupport"
	"github.com/staticip/staticip/ipam"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(childAgentEnv); spec != "" {
		os.Exit(runChildAgent(spec)) // bgp_frr_test.go: this binary as node A's agent process
	}
	testenv.Main(m)
}

// One sync against a real API server: conflist and binary installed once, ranges and
// StaticIP reservations in bbolt, GC of gone pods (keeping the StaticIP-held IP), IPRange
// status counts, and routes to another node's range inside a network namespace.
func TestSyncOnce(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	f := newSyncFixture(t)
	f.seedDatabase(t)
	f.startAgent(t)
	f.sync(t)

	f.checkConflist(t)
	installed := filepath.Join(f.cfg.CNIBinDir, "staticip")
	st1, err := os.Stat(installed)
	if err != nil {
		t.Fatal(err)
	}
	f.checkDatabase(t)
	f.checkStatusAndRoutes(t)

	// Second pass: nothing rewritten; node B loses its range: the route goes.
	rb, _ := f.sip.JkeV1().IPRanges().Get(f.ctx, "cni-b-"+f.suffix, metav1.GetOptions{})
	rb = rb.DeepCopy()
	rb.Spec.Node = ""
	if _, err := f.sip.JkeV1().IPRanges().Update(f.ctx, rb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// B's agent, which holds no address of it, drops its claim; until then the range stays
	// routed via B (TestDrainingRangeStaysRoutedViaItsHolder).
	dropClaim(f.ctx, t, f.sip, "cni-b-"+f.suffix, "cni-node-b-"+f.suffix)
	// The sync reads the informer cache, which follows the API within moments.
	testsupport.Eventually(context.Background(), t, 10*time.Second, "the route to the range node B lost is removed", testsupport.True(func() bool {
		f.sync(t)
		return agentRoute(f.host, "10.151.0.0/24") == nil
	}))
	if st2, _ := os.Stat(installed); !st2.ModTime().Equal(st1.ModTime()) {
		t.Fatal("the unchanged binary was rewritten")
	}
	f.checkEndpoints(t)
}

// syncFixture: two nodes, a range each, two StaticIPs and two pods of node A in the API; the
// agent of node A with a host network namespace whose uplink is in node B's subnet.
type syncFixture struct {
	ctx               context.Context
	kube              kubernetes.Interface
	sip               versioned.Interface
	suffix, nodeA, ns string
	uids              map[string]types.UID
	dataDir           string
	cfg               Config
	log               strings.Builder
	a                 *Agent
	host              *nstest.NetNS
}

func newSyncFixture(t *testing.T) *syncFixture {
	ctx, kube, sip, suffix := apiFixture(t, 2*time.Minute)
	f := &syncFixture{ctx: ctx, kube: kube, sip: sip, suffix: suffix, nodeA: "cni-node-a-" + suffix, ns: "cni-agent-" + suffix,
		uids: map[string]types.UID{}}
	nodeB := "cni-node-b-" + suffix
	createNode(ctx, t, kube, f.nodeA, "192.168.77.1")
	createNode(ctx, t, kube, nodeB, "192.168.77.2")
	ranges := map[string]jkev1.IPRangeSpec{
		"cni-a-" + suffix: {CIDR: "10.150.0.0/24", Node: f.nodeA, Gateway: "10.150.0.1"},
		"cni-b-" + suffix: {CIDR: "10.151.0.0/24", Node: nodeB},
	}
	for name, spec := range ranges {
		createIPRange(ctx, t, sip, name, spec)
	}
	// Node B's agent serves its range and claims it (status.holders), with its address: the
	// next hop of A's route to it.
	claimAs(ctx, t, sip, "cni-b-"+suffix, nodeB, "192.168.77.2")
	// Node A's range as the range allocator makes them, cut from IPPool "pods" (the pool
	// label of the address metrics).
	if _, err := sip.JkeV1().IPRanges().Patch(ctx, "cni-a-"+suffix, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"`+jkev1.LabelIPPool+`":"pods"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, ip := range map[string]string{"web-0": "10.150.0.10", "web-1": "10.150.0.11"} {
		if _, err := sip.JkeV1().StaticIPs(f.ns).Create(ctx, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: jkev1.StaticIPSpec{Pod: name, Node: f.nodeA, IP: ip}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"web-0", "plain"} {
		p, err := kube.CoreV1().Pods(f.ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: f.nodeA, Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f.uids[name] = p.UID
	}
	dir := t.TempDir()
	f.dataDir = filepath.Join(dir, "data")
	pluginSrc := filepath.Join(dir, "staticip-src")
	if err := os.WriteFile(pluginSrc, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	f.cfg = Config{NodeName: f.nodeA, PluginBinary: pluginSrc, CNIBinDir: filepath.Join(dir, "bin"), CNIConfDir: filepath.Join(dir, "net.d"),
		DataDir: f.dataDir, PluginKubeconfig: "/etc/cni/net.d/staticip-kubeconfig", Routes: true,
		NAT: NATConfig{Enabled: true, Default: true, ServiceCIDRs: prefixes("10.96.0.0/16")}}
	return f
}

// seedDatabase: what the CNI plugin would have done an hour ago (older than GC's grace
// period): web-0 and plain run, ghost and web-1 are gone.
func (f *syncFixture) seedDatabase(t *testing.T) {
	db, err := ipam.Open(ipam.Options{Path: ipam.NetworkPath(f.dataDir, NetworkName), Now: func() time.Time { return time.Now().Add(-time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.AddRange(ipam.Range{Subnet: netip.MustParsePrefix("10.150.0.0/24"), Gateway: netip.MustParseAddr("10.150.0.1")})
	for _, a := range []struct {
		id, pod, uid, ip string
	}{{"c0", "web-0", string(f.uids["web-0"]), "10.150.0.10"}, {"c1", "plain", string(f.uids["plain"]), ""},
		{"c2", "ghost", "gone-uid", ""}, {"c3", "web-1", "old-uid", "10.150.0.11"}} {
		req := ipam.AllocateRequest{Attachment: ipam.Attachment{ContainerID: a.id, IfName: "eth0"},
			Pod: ipam.PodRef{Namespace: f.ns, Name: a.pod, UID: a.uid}}
		if a.ip != "" {
			req.IP = netip.MustParseAddr(a.ip)
		}
		if _, _, err := db.Allocate(req); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *syncFixture) startAgent(t *testing.T) {
	f.a = New(f.cfg, f.kube, f.sip, &f.log)
	if err := f.a.Start(f.ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.a.WaitForCaches(f.ctx); err != nil {
		t.Fatal(err)
	}
	// The node's uplink is in the subnet of node B's InternalIP.
	f.host = nodeNetns(t, "agent", "192.168.77.1/24")
}

func (f *syncFixture) sync(t *testing.T) {
	t.Helper()
	if err := f.host.Do(func(ns.NetNS) error { return f.a.SyncOnce(f.ctx) }); err != nil {
		t.Fatalf("SyncOnce: %v\nlog: %s", err, f.log.String())
	}
}

func (f *syncFixture) checkConflist(t *testing.T) {
	conf, err := os.ReadFile(filepath.Join(f.cfg.CNIConfDir, "10-staticip.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(conf), `"subnet": "10.150.0.0/24"`) || !strings.Contains(string(conf), `"gateway": "10.150.0.1"`) ||
		strings.Contains(string(conf), "10.151.0.0") || !strings.Contains(string(conf), `"kubeconfig": "/etc/cni/net.d/staticip-kubeconfig"`) ||
		!strings.Contains(string(conf), `"cniVersion": "1.0.0"`) {
		t.Fatalf("conflist:\n%s", conf)
	}
}

// checkDatabase: GC freed ghost's and web-1's old allocation; both StaticIPs are reserved.
func (f *syncFixture) checkDatabase(t *testing.T) {
	db, err := ipam.Open(ipam.Options{Path: ipam.NetworkPath(f.dataDir, NetworkName)})
	if err != nil {
		t.Fatal(err)
	}
	allocs, _ := db.Allocations()
	rs, _ := db.Reservations()
	db.Close()
	var held []string
	for _, al := range allocs {
		held = append(held, al.Attachment.ContainerID)
	}
	if strings.Join(held, ",") != "c1,c0" && strings.Join(held, ",") != "c0,c1" {
		t.Fatalf("after GC the allocations are %v, want c0 and c1", held)
	}
	reserved := map[string]string{}
	for _, r := range rs {
		reserved[r.IP.String()] = r.Pod.Key()
	}
	if reserved["10.150.0.10"] != f.ns+"/web-0" || reserved["10.150.0.11"] != f.ns+"/web-1" || len(reserved) != 2 {
		t.Fatalf("reservations %v", reserved)
	}
}

func (f *syncFixture) checkStatusAndRoutes(t *testing.T) {
	r, err := f.sip.JkeV1().IPRanges().Get(f.ctx, "cni-a-"+f.suffix, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := r.Status; s.Total != 253 || s.Used != 2 || s.Reserved != 1 || s.Free != 250 {
		t.Fatalf("IPRange status %+v", s)
	}
	if rt := agentRoute(f.host, "10.151.0.0/24"); rt == nil || !rt.Gw.Equal(net.ParseIP("192.168.77.2")) {
		t.Fatalf("route to node B's range: %+v", rt)
	}
	if rt := agentRoute(f.host, "10.150.0.0/24"); rt != nil {
		t.Fatal("a route to this node's own range")
	} // The NAT table: both nodes' ranges are sources and in the cluster, with both nodes'
	// addresses and the Service CIDR (TestOutgoingNATByTraffic proves the rule by traffic).
	for set, want := range map[string]string{"nat-sources-v4": "elements = { 10.150.0.0/24, 10.151.0.0/24 }",
		"cluster-v4": "elements = { 10.96.0.0/16, 10.150.0.0/24, 10.151.0.0/24, 192.168.77.1, 192.168.77.2 }"} {
		out, err := exec.Command("ip", "netns", "exec", f.host.Name, "nft", "list", "set", "inet", NATTable, set).CombinedOutput()
		if err != nil || !strings.Contains(strings.Join(strings.Fields(string(out)), " "), want) {
			t.Errorf("NAT set %s: %v\n%s\nwant %q", set, err, out, want)
		}
	}
}

// checkEndpoints: health and metrics (internal/serving's handler of the agent's endpoints);
// allocations the plugin makes after the agent started are counted once; the plugin's call
// counters in the database are exported as they are, with the address metrics' IPRange and pool.
func (f *syncFixture) checkEndpoints(t *testing.T) {
	allocateAt(t, f.a.DBPath(), time.Now(), "c4", ipam.PodRef{Namespace: f.ns, Name: "new", UID: "new-uid"})
	// The plugin's call counters as it leaves them in the database: an ADD counted in its
	// allocation's commit (started 2 ms before; the commit adds its own time, which a loaded
	// machine stretches — CI saw 3.08 ms — so only the lower bound and the count are asserted),
	// and a refused one counted on its own.
	db, err := ipam.Open(ipam.Options{Path: f.a.DBPath()})
	if err != nil {
		t.Fatal(err)
	}
	db.RecordCallOnCommit("add", time.Now().Add(-2*time.Millisecond))
	_, _, err = db.Allocate(ipam.AllocateRequest{Attachment: ipam.Attachment{ContainerID: "c5", IfName: "eth0"}})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := ipam.RecordCallFailure(ipam.Options{Path: f.a.DBPath()}, time.Second, "add", "ip_in_use", 3*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	f.sync(t)
	f.sync(t)
	rec := serving.Handler(f.a.Endpoints(time.Minute))
	for _, c := range []struct{ path, want string }{{"/healthz", "ok"}, {"/readyz", "ok"},
		{"/metrics", `staticip_ipam_addresses{iprange="cni-a-` + f.suffix + `",pool="pods",range="10.150.0.0/24",state="used"} 4`},
		{"/metrics", `staticip_cni_operation_duration_seconds_bucket{operation="add",result="success",le="30"} 1`},
		{"/metrics", `staticip_cni_operation_duration_seconds_bucket{operation="add",result="success",le="0.001"} 0`},
		{"/metrics", `staticip_cni_operation_duration_seconds_count{operation="add",result="failure"} 1`},
		{"/metrics", `staticip_cni_failures_total{operation="add",reason="ip_in_use"} 1`},
		{"/metrics", `staticip_agent_syncs_total{result="error"} 0`},
		{"/metrics", `staticip_agent_allocations_total{range="10.150.0.0/24"} 2`}, // c4 and c5
		{"/metrics", `staticip_agent_gc_spared{reason="young"} 1`},
		{"/metrics", `staticip_build_info{component="staticip-agent"`}} {
		w := httptest.NewRecorder()
		rec.ServeHTTP(w, httptest.NewRequest(http.MethodGet, c.path, nil))
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), c.want) {
			t.Fatalf("%s: %d %q lacks %q", c.path, w.Code, w.Body.String(), c.want)
		}
	}
}

// A deleted pod's IP is freed by the watch-triggered sync, long before the (1h) timer.
func TestRunFreesTheIPOfADeletedPod(t *testing.T) {
	ctx, kube, sip, suffix := apiFixture(t, 2*time.Minute)
	node, nsName := "cni-node-c-"+suffix, "cni-run-"+suffix
	createIPRange(ctx, t, sip, "cni-c-"+suffix, jkev1.IPRangeSpec{CIDR: "10.152.0.0/24", Node: node})
	kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName}}, metav1.CreateOptions{})
	pod, err := kube.CoreV1().Pods(nsName).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	dbPath := ipam.NetworkPath(dir, NetworkName)
	// Allocated an hour ago: older than GC's grace period.
	db, err := ipam.Open(ipam.Options{Path: dbPath, Now: func() time.Time { return time.Now().Add(-time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	db.AddRange(ipam.Range{Subnet: netip.MustParsePrefix("10.152.0.0/24")})
	if _, _, err := db.Allocate(ipam.AllocateRequest{Attachment: ipam.Attachment{ContainerID: "c", IfName: "eth0"},
		Pod: ipam.PodRef{Namespace: nsName, Name: "p", UID: string(pod.UID)}}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	count := func() int {
		db, err := ipam.Open(ipam.Options{Path: dbPath})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		as, _ := db.Allocations()
		return len(as)
	}
	a := New(Config{NodeName: node, CNIBinDir: filepath.Join(dir, "bin"), CNIConfDir: filepath.Join(dir, "net.d"), DataDir: dir}, kube, sip, nil)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { a.Run(runCtx, time.Hour, 50*time.Millisecond); close(done) }()
	defer func() { stop(); <-done }()
	for a.lastSync.Load() == 0 {
		if ctx.Err() != nil {
			t.Fatal("no first sync")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := count(); n != 1 {
		t.Fatalf("the running pod's allocation was collected: %d left", n)
	}
	if err := kube.CoreV1().Pods(nsName).Delete(ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for count() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the deleted pod's IP was not freed by the watch-triggered GC")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// The plugin's kubeconfig carries the agent's service-account token and follows it when the
// kubelet rotates it; the API server accepts it as that service account; no IPRange for the
// node means no conflist (the node must stay NotReady rather than take pods it cannot serve).
func TestPluginKubeconfigFollowsTheToken(t *testing.T) {
	ctx, kube, sip, suffix := apiFixture(t, time.Minute)
	env := testenv.Get(t)
	nsName := "cni-kubeconfig-" + suffix
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ServiceAccounts(nsName).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile, tokenFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
	if err := os.WriteFile(caFile, env.Config.CAData, 0o644); err != nil {
		t.Fatal(err)
	}
	issue := func() string {
		tr, err := kube.CoreV1().ServiceAccounts(nsName).CreateToken(ctx, "agent", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(tokenFile, []byte(tr.Status.Token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	confDir := filepath.Join(dir, "net.d")
	a := New(Config{NodeName: "cni-no-range-" + suffix, CNIBinDir: filepath.Join(dir, "bin"), CNIConfDir: confDir, DataDir: dir,
		PluginKubeconfig:  "/etc/cni/net.d/staticip-kubeconfig",
		PluginCredentials: &Credentials{Server: env.Config.Host, CAFile: caFile, Tokens: TokenFile(tokenFile)}}, kube, sip, nil)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.WaitForCaches(ctx); err != nil {
		t.Fatal(err)
	}
	written := filepath.Join(confDir, "staticip-kubeconfig")
	for round, token := range []string{issue(), ""} {
		if round == 1 {
			token = issue() // the kubelet rotated the projected token
		}
		if err := a.SyncOnce(ctx); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		st, err := os.Stat(written)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("kubeconfig mode %v, want 0600 (it holds a token)", st.Mode().Perm())
		}
		b, _ := os.ReadFile(written)
		if !strings.Contains(string(b), token) {
			t.Fatalf("round %d: kubeconfig does not carry the current token", round)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", written)
		if err != nil {
			t.Fatal(err)
		}
		review, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("round %d: the API server rejects the plugin's kubeconfig: %v", round, err)
		}
		if want := "system:serviceaccount:" + nsName + ":agent"; review.Status.UserInfo.Username != want {
			t.Errorf("round %d: authenticated as %q, want %q", round, review.Status.UserInfo.Username, want)
		}
	}
	if _, err := os.Stat(filepath.Join(confDir, "10-staticip.conflist")); !os.IsNotExist(err) {
		t.Errorf("a conflist was written for a node without any IPRange (stat: %v)", err)
	}
}

// Run follows the API: another node's new IPRange becomes a route and a new StaticIP of this
// node a reservation in the database within moments, with the timer an hour away; status-only
// updates (every agent writes its IPRange's counts) start no sync.
func TestRunFollowsIPRangeAndStaticIPChanges(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	ctx, kube, sip, suffix := apiFixture(t, 2*time.Minute)
	nodeX, nodeY, nsName := "cni-node-x-"+suffix, "cni-node-y-"+suffix, "cni-follow-"+suffix
	createNode(ctx, t, kube, nodeX, "192.168.78.1")
	createNode(ctx, t, kube, nodeY, "192.168.78.2")
	createIPRange(ctx, t, sip, "cni-x-"+suffix, jkev1.IPRangeSpec{CIDR: "10.153.0.0/24", Node: nodeX})
	// A range of a node that has not joined yet: no route to it, and no failed sync either (a
	// failing sync would fail every agent's health check).
	createIPRange(ctx, t, sip, "cni-z-"+suffix, jkev1.IPRangeSpec{CIDR: "10.155.0.0/24", Node: "cni-node-z-" + suffix})
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	host := nodeNetns(t, "follow", "192.168.78.1/24")
	dir := t.TempDir()
	var log syncBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", log.String())
		}
	})
	a := New(Config{NodeName: nodeX, CNIBinDir: filepath.Join(dir, "bin"), CNIConfDir: filepath.Join(dir, "net.d"), DataDir: dir, Routes: true}, kube, sip, &log)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	// Run inside the namespace: its routes are programmed on the goroutine's locked thread.
	go func() {
		_ = host.Do(func(ns.NetNS) error { a.Run(runCtx, time.Hour, 50*time.Millisecond); return nil })
		close(done)
	}()
	defer func() { stop(); <-done }()
	testsupport.Eventually(context.Background(), t, 30*time.Second, "the first sync", testsupport.True(func() bool { return a.lastSync.Load() != 0 }))

	routeVia := func(cidr string) string {
		if r := agentRoute(host, cidr); r != nil {
			return r.Gw.String()
		}
		return ""
	}
	createIPRange(ctx, t, sip, "cni-y-"+suffix, jkev1.IPRangeSpec{CIDR: "10.154.0.0/24", Node: nodeY})
	// Node Y's agent serves it and claims it with its address: the claim alone triggers a pass.
	claimAs(ctx, t, sip, "cni-y-"+suffix, nodeY, "192.168.78.2")
	testsupport.Eventually(context.Background(), t, 10*time.Second, "a route to node Y's new range via the address of its claim", testsupport.True(func() bool { return routeVia("10.154.0.0/24") == "192.168.78.2" }))

	if _, err := sip.JkeV1().StaticIPs(nsName).Create(ctx, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: "db-0"},
		Spec: jkev1.StaticIPSpec{Pod: "db-0", Node: nodeX, IP: "10.153.0.20"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reserved := func() string {
		for {
			db, err := ipam.Open(ipam.Options{Path: ipam.NetworkPath(dir, NetworkName), OpenTimeout: time.Second})
			if err != nil {
				time.Sleep(20 * time.Millisecond) // the agent holds it for a moment
				continue
			}
			rs, _ := db.Reservations()
			db.Close()
			for _, r := range rs {
				if r.IP.String() == "10.153.0.20" {
					return r.Pod.Key()
				}
			}
			return ""
		}
	}
	testsupport.Eventually(context.Background(), t, 10*time.Second, "the new StaticIP reserved in the database", testsupport.True(func() bool { return reserved() == nsName+"/db-0" }))

	// Quiet now: status-only writes must not cost a sync each.
	time.Sleep(500 * time.Millisecond)
	before := a.syncsOK.Load() + a.syncsFailed.Load()
	for i := range 5 {
		r, err := sip.JkeV1().IPRanges().Get(ctx, "cni-y-"+suffix, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r = r.DeepCopy()
		r.Status.Used = int32(i + 1)
		if _, err := sip.JkeV1().IPRanges().UpdateStatus(ctx, r, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second)
	if after := a.syncsOK.Load() + a.syncsFailed.Load(); after != before {
		t.Fatalf("status-only IPRange updates started %d syncs\nlog: %s", after-before, log.String())
	}
	if n := a.syncsFailed.Load(); n != 0 {
		t.Fatalf("%d syncs failed\nlog: %s", n, log.String())
	}
	if want := "no new route to IPRanges whose holder's address is not known yet (a route they have stays): cni-z-" + suffix; !strings.Contains(log.String(), want) {
		t.Fatalf("the log does not say %q", want)
	}
}

// A node cut off from the API server still gets the plugin installed; the sync says why it
// went no further, and judges nothing (no GC) from caches that never synced.
func TestSyncOnceWithoutTheAPIServerInstallsThePlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	unreachable := &rest.Config{Host: "https://127.0.0.1:1", Timeout: time.Second}
	dir := t.TempDir()
	pluginSrc := filepath.Join(dir, "staticip-src")
	if err := os.WriteFile(pluginSrc, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	a := New(Config{NodeName: "offline", PluginBinary: pluginSrc, CNIBinDir: filepath.Join(dir, "bin"), CNIConfDir: filepath.Join(dir, "net.d"), DataDir: dir},
		kubernetes.NewForConfigOrDie(unreachable), versioned.NewForConfigOrDie(unreachable), nil)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	err := a.SyncOnce(ctx)
	if !errors.Is(err, errNotSynced) {
		t.Fatalf("SyncOnce without the API: %v, want errNotSynced", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "bin", "staticip")); err != nil {
		t.Fatalf("the plugin was not installed offline: %v", err)
	}
	if _, err := os.Stat(ipam.NetworkPath(dir, NetworkName)); !os.IsNotExist(err) {
		t.Fatalf("the database was touched from unsynced caches (stat: %v)", err)
	}
}

// syncBuffer is a log writer safe for the agent's goroutine and the test's.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// nodeNetns makes a network namespace standing for a node, with an uplink veth holding
// uplink (an address/prefix): the subnet through which routes to other nodes go. It is
// deleted when the test ends.
func nodeNetns(t *testing.T, tag, uplink string) *nstest.NetNS {
	t.Helper()
	host, err := nstest.New(tag)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	err = host.Do(func(ns.NetNS) error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "cni-up0"}, PeerName: "cni-up1"}
		if err := netlink.LinkAdd(veth); err != nil {
			return err
		}
		up, _ := netlink.LinkByName("cni-up0")
		peer, _ := netlink.LinkByName("cni-up1")
		addr, err := netlink.ParseAddr(uplink)
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(up, addr); err != nil {
			return err
		}
		netlink.LinkSetUp(peer)
		return netlink.LinkSetUp(up)
	})
	if err != nil {
		t.Fatal(err)
	}
	return host
}

// agentRoute is the agent's route (RouteProtocol) to cidr in host, or nil.
func agentRoute(host *nstest.NetNS, cidr string) *netlink.Route {
	var found *netlink.Route
	host.Do(func(ns.NetNS) error {
		routes, _ := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
		for _, r := range routes {
			if r.Dst != nil && r.Dst.String() == cidr {
				found = &r
			}
		}
		return nil
	})
	return found
}

// apiFixture gives a test the shared API server's clients, a context bounded by timeout and a
// suffix that keeps its object names apart from other tests'.
func apiFixture(t *testing.T, timeout time.Duration) (context.Context, kubernetes.Interface, versioned.Interface, string) {
	t.Helper()
	env := testenv.Get(t)
	ctx, kube := testenv.Context(t, timeout), kubernetes.NewForConfigOrDie(env.Config)
	// The namespace of the route-report Leases, as the install creates it (manifests/cni).
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: jkev1.NamespaceRouteReports}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return ctx, kube, versioned.NewForConfigOrDie(env.Config), fmt.Sprint(time.Now().UnixNano() % 1000000)
}

// createNode creates a Node whose InternalIPs are internalIPs (one per family), deleted when the
// test ends (the tests of this package share one API server, and every agent reads every node).
func createNode(ctx context.Context, t *testing.T, kube kubernetes.Interface, name string, internalIPs ...string) {
	t.Helper()
	node, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	for _, ip := range internalIPs {
		node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createIPRange creates an IPRange, deleted when the test ends: every agent routes to every
// other node's range, so one left behind would reach into the next test.
func createIPRange(ctx context.Context, t *testing.T, sip versioned.Interface, name string, spec jkev1.IPRangeSpec) {
	t.Helper()
	if _, err := sip.JkeV1().IPRanges().Create(ctx, &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sip.JkeV1().IPRanges().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// The plugin binary is compared with its installed copy only when one of the two changed:
// passes in between read neither. A copy overwritten on the node, a new source binary (an
// upgraded agent image) and a deleted copy are each installed again on the next pass.
func TestInstallBinaryRereadsOnlyChangedFiles(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "staticip-src")
	if err := os.WriteFile(src, []byte("plugin v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	a := New(Config{NodeName: "n", PluginBinary: src, CNIBinDir: filepath.Join(dir, "bin")}, nil, nil, io.Discard)
	dst := filepath.Join(dir, "bin", "staticip")
	install := func(wantChanged bool, wantContent string, wantCompares int64) {
		t.Helper()
		changed, err := a.InstallBinary()
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(dst)
		if err != nil {
			t.Fatal(err)
		}
		if changed != wantChanged || string(got) != wantContent || a.binaryCompares.Load() != wantCompares {
			t.Fatalf("InstallBinary: changed=%v content=%q compares=%d, want %v %q %d",
				changed, got, a.binaryCompares.Load(), wantChanged, wantContent, wantCompares)
		}
	}
	install(true, "plugin v1", 1)
	install(false, "plugin v1", 1) // nothing changed: no read
	install(false, "plugin v1", 1)

	if err := os.WriteFile(dst, []byte("plugin v0"), 0o755); err != nil { // same inode and size, new mtime and ctime
		t.Fatal(err)
	}
	install(true, "plugin v1", 2)
	install(false, "plugin v1", 2)

	if err := os.WriteFile(src, []byte("plugin v2!"), 0o755); err != nil {
		t.Fatal(err)
	}
	install(true, "plugin v2!", 3)

	if err := os.Remove(dst); err != nil {
		t.Fatal(err)
	}
	install(true, "plugin v2!", 4)
	install(false, "plugin v2!", 4)

	// A touch that changes no byte is read and compared, and changes nothing.
	now := time.Now().Add(time.Minute)
	if err := os.Chtimes(src, now, now); err != nil {
		t.Fatal(err)
	}
	install(false, "plugin v2!", 5)
	install(false, "plugin v2!", 5)
}

// claimAs writes node's claim on the IPRange — its entry of status.holders, Serving at the
// range's generation, with its address — as that node's agent would (the tests run no agent
// for it).
func claimAs(ctx context.Context, t *testing.T, sip versioned.Interface, name, node, address string) {
	t.Helper()
	setClaim(ctx, t, sip, name, node, func(r *jkev1.IPRange) *jkev1.IPRangeHolder {
		return &jkev1.IPRangeHolder{Node: node, Address: address, Generation: r.Spec.OwnerGeneration, State: jkev1.HolderServing}
	})
}

// dropClaim removes node's entry from the IPRange's status.holders, as that node's agent does
// once it holds no address of the range.
func dropClaim(ctx context.Context, t *testing.T, sip versioned.Interface, name, node string) {
	t.Helper()
	setClaim(ctx, t, sip, name, node, func(*jkev1.IPRange) *jkev1.IPRangeHolder { return nil })
}

// setClaim sets node's entry of the IPRange's status.holders to want(range) (nil: removed),
// again after a conflict with an agent's write.
func setClaim(ctx context.Context, t *testing.T, sip versioned.Interface, name, node string, want func(*jkev1.IPRange) *jkev1.IPRangeHolder) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		r, err := sip.JkeV1().IPRanges().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		r.Status.Holders, _ = withHolder(r.Status.Holders, node, want(r))
		_, err = sip.JkeV1().IPRanges().UpdateStatus(ctx, r, metav1.UpdateOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("setting node %s's claim on IPRange %s: %v", node, name, err)
	}
}

// holderOn is node's entry of the IPRange's status.holders as "<node>/<generation>" ("" when
// it has none).
func holderOn(ctx context.Context, t *testing.T, sip versioned.Interface, name, node string) string {
	t.Helper()
	r, err := sip.JkeV1().IPRanges().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range r.Status.Holders {
		if h.Node == node {
			return fmt.Sprintf("%s/%d", h.Node, h.Generation)
		}
	}
	return ""
}
