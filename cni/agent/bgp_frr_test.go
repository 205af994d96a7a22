package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/cni/nstest"
	"github.com/staticip/staticip/internal/testenv"
	"github.com/staticip/staticip/internal/testsupport"
)

// The BGP tests run the agent as its own process (this test binary, re-executed with
// childAgentEnv) inside the node's network namespace: every thread of it — GoBGP's sessions,
// its routes — is in the node's namespace, as the DaemonSet's agent is on its host network,
// and "the agent killed" is a real SIGKILL. It reaches the API server through a forwarder the
// test opens inside that namespace on the API server's own loopback address and port.
const childAgentEnv = "STATICIP_TEST_CHILD_AGENT"

// childAgent is what the child process runs: the agent with Config, as Kubeconfig says, and a
// dump of its speaker's RIB to RIBFile after every pass (what the peers sent, what it accepted).
type childAgent struct {
	Kubeconfig string
	Config     Config
	Interval   time.Duration
	RIBFile    string
}

type ribDump struct{ Received, Accepted []string }

// runChildAgent is the child process's main (TestMain calls it).
func runChildAgent(spec string) int {
	var c childAgent
	if err := json.Unmarshal([]byte(spec), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	a := New(c.Config, kubernetes.NewForConfigOrDie(cfg), versioned.NewForConfigOrDie(cfg), os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		for ctx.Err() == nil {
			time.Sleep(300 * time.Millisecond)
			sp := a.bgp.published.Load()
			if sp == nil {
				continue
			}
			rec, acc, _ := sp.RIB()
			d := ribDump{}
			for _, p := range rec {
				d.Received = append(d.Received, p.String())
			}
			for _, p := range acc {
				d.Accepted = append(d.Accepted, p.String())
			}
			b, _ := json.Marshal(d)
			_ = os.WriteFile(c.RIBFile+".tmp", b, 0o644)
			_ = os.Rename(c.RIBFile+".tmp", c.RIBFile)
		}
	}()
	a.Run(ctx, c.Interval, c.Interval/4)
	return 0
}

// frr is one FRR bgpd in its own network namespace and path space.
type frr struct {
	t      *testing.T
	ns     *nstest.NetNS
	dir    string
	procs  []*exec.Cmd
	logs   []*bytes.Buffer
	vtyDir string
}

func startFRR(t *testing.T, routerNS *nstest.NetNS, conf string) *frr {
	t.Helper()
	dir, err := os.MkdirTemp("", "staticip-frr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &frr{t: t, ns: routerNS, dir: dir, vtyDir: dir}
	if err := os.WriteFile(filepath.Join(dir, "bgpd.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	pathspace := "staticip-" + filepath.Base(dir)
	for _, d := range []string{"bgpd"} {
		// -S: no user switch (root in the test); -N: a path space of its own; every socket
		// and file in dir: nothing touches the machine's /etc/frr or /var/run/frr service.
		// -Z: no zebra — the router's kernel table plays no part (the test reads FRR's BGP
		// table), and without zebra bgpd takes every next hop as reachable.
		cmd := exec.Command("ip", "netns", "exec", routerNS.Name, "/usr/lib/frr/"+d, "-S", "-Z", "-N", pathspace,
			"-f", filepath.Join(dir, d+".conf"), "-i", filepath.Join(dir, d+".pid"),
			"--vty_socket", dir, "--log", "stdout", "--log-level", "info")
		buf := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = buf, buf
		if err := cmd.Start(); err != nil {
			t.Fatalf("start FRR %s: %v", d, err)
		}
		f.procs, f.logs = append(f.procs, cmd), append(f.logs, buf)
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	testsupport.Eventually(context.Background(), t, 20*time.Second, "FRR's bgpd answers vtysh", testsupport.True(func() bool {
		_, err := f.vtysh("show bgp summary")
		return err == nil
	}))
	return f
}

func (f *frr) vtysh(cmds ...string) (string, error) {
	args := []string{"--vty_socket", f.vtyDir}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	out, err := exec.Command("vtysh", args...).CombinedOutput()
	return string(out), err
}

// frrRoute is one path of FRR's `show bgp ipv4 unicast json`.
type frrRoute struct {
	Valid    bool `json:"valid"`
	Best     bool `json:"bestpath"`
	Stale    bool `json:"stale"`
	PeerID   string
	Nexthops []struct {
		IP string `json:"ip"`
	} `json:"nexthops"`
}

// table is FRR's BGP table (IPv4 unicast), prefix -> paths, and the raw JSON.
func (f *frr) table() (map[string][]frrRoute, string) {
	out, err := f.vtysh("show bgp ipv4 unicast json")
	if err != nil {
		f.t.Fatalf("vtysh: %v\n%s", err, out)
	}
	var v struct {
		Routes map[string][]frrRoute `json:"routes"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		f.t.Fatalf("FRR's table: %v\n%s", err, out)
	}
	return v.Routes, out
}

// via says whether FRR has a valid path to prefix with next hop nh, and whether it is stale.
func (f *frr) via(prefix, nh string) (found, stale bool) {
	routes, _ := f.table()
	for _, r := range routes[prefix] {
		for _, h := range r.Nexthops {
			if h.IP == nh && r.Valid {
				return true, r.Stale
			}
		}
	}
	return false, false
}

// apiForwarder accepts connections on the API server's loopback address and port inside host
// and forwards them to the API server in the test's namespace.
func apiForwarder(t *testing.T, host *nstest.NetNS, apiHost string) {
	t.Helper()
	var ln net.Listener
	if err := host.Do(func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", apiHost)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", apiHost)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c); up.Close() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
}

// bgpFixture: node A's host namespace linked to a router namespace running FRR (AS 65000,
// 192.168.93.254), node A's agent (as its own process, with the DaemonSet's service account
// and pod-bound token, RBAC and admission from manifests/cni) in A's namespace.
type bgpFixture struct {
	ctx               context.Context
	t                 *testing.T
	kube              kubernetes.Interface
	sip               versioned.Interface
	suffix            string
	nodeA, nodeB      string
	host, router      *nstest.NetNS
	frr               *frr
	dir               string
	child             *exec.Cmd
	childLog          *syncBuffer
	spec              childAgent
	peerName, cfgName string
}

const (
	bgpNodeAddr   = "192.168.93.1"
	bgpRouterAddr = "192.168.93.254"
	bgpClusterAS  = 64512
	bgpRouterAS   = 65000
)

func newBGPFixture(t *testing.T) *bgpFixture {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: needs root for network namespaces and FRR")
	}
	for _, bin := range []string{"/usr/lib/frr/bgpd"} {
		if _, err := os.Stat(bin); err != nil {
			t.Skipf("SKIP: FRR is not installed (%s: %v); tools/install-deps.sh installs it (tools/deps/cni.list)", bin, err)
		}
	}
	if _, err := exec.LookPath("vtysh"); err != nil {
		t.Skip("SKIP: vtysh not on PATH (FRR, tools/deps/cni.list)")
	}
	ctx, kube, sip, suffix := apiFixture(t, 12*time.Minute)
	env := testenv.Get(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.ApplyKustomization(ctx, env.Config, filepath.Join(root, "manifests", "cni"), "DaemonSet"); err != nil {
		t.Fatal(err)
	}
	f := &bgpFixture{ctx: ctx, t: t, kube: kube, sip: sip, suffix: suffix, nodeA: "bgp-a-" + suffix, nodeB: "bgp-b-" + suffix,
		dir: t.TempDir(), childLog: &syncBuffer{}, peerName: "bgp-router-" + suffix, cfgName: jkev1.BGPConfigurationName}
	createNode(ctx, t, kube, f.nodeA, bgpNodeAddr)
	createNode(ctx, t, kube, f.nodeB, "192.168.93.2")
	if _, err := kube.CoreV1().Nodes().Patch(ctx, f.nodeA, types.MergePatchType, []byte(`{"metadata":{"labels":{"rack":"r1-`+suffix+`"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	// The two namespaces and the link between them.
	f.host = nodeNetns(t, "bgp-node", bgpNodeAddr+"/24")
	router, err := nstest.New("bgp-router")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { router.Close() })
	f.router = router
	if err := f.host.Do(func(ns.NetNS) error {
		peer, err := netlink.LinkByName("cni-up1")
		if err != nil {
			return err
		}
		return netlink.LinkSetNsFd(peer, int(router.Fd()))
	}); err != nil {
		t.Fatal(err)
	}
	if err := router.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName("cni-up1")
		if err != nil {
			return err
		}
		addr, _ := netlink.ParseAddr(bgpRouterAddr + "/24")
		if err := netlink.AddrAdd(l, addr); err != nil {
			return err
		}
		return netlink.LinkSetUp(l)
	}); err != nil {
		t.Fatal(err)
	}
	f.frr = startFRR(t, router, fmt.Sprintf(`frr defaults datacenter
hostname router
!
router bgp %d
 bgp router-id %s
 no bgp ebgp-requires-policy
 no bgp network import-check
 neighbor %s remote-as %d
 neighbor %s soft-reconfiguration inbound
 address-family ipv4 unicast
  network 198.51.100.0/24
 exit-address-family
!
`, bgpRouterAS, bgpRouterAddr, bgpNodeAddr, bgpClusterAS, bgpNodeAddr))

	// The agent's identity as the DaemonSet gives it: service account staticip-agent, token
	// bound to its pod on node A.
	token := agentPodToken(ctx, t, kube, "staticip-agent-bgp-"+suffix, f.nodeA)
	kubeconfig := filepath.Join(f.dir, "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	kc.AuthInfos["agent"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "agent"}
	kc.CurrentContext = "c"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	apiForwarder(t, f.host, u.Host)

	pluginSrc := filepath.Join(f.dir, "staticip-src")
	if err := os.WriteFile(pluginSrc, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	f.spec = childAgent{Kubeconfig: kubeconfig, Interval: 2 * time.Second, RIBFile: filepath.Join(f.dir, "rib.json"),
		Config: Config{NodeName: f.nodeA, PluginBinary: pluginSrc, CNIBinDir: filepath.Join(f.dir, "bin"), CNIConfDir: filepath.Join(f.dir, "net.d"),
			DataDir: filepath.Join(f.dir, "data"), Routes: true, NAT: NATConfig{Enabled: true, Default: true},
			BGP: BGPConfig{Enabled: true, PasswordSecretNamespace: "kube-system", PasswordSecretName: "staticip-bgp-password", NodeFailoverWindow: 2 * time.Minute}}}
	t.Cleanup(f.kill)
	return f
}

// diagnose logs, when the test failed, the agent's log, FRR's view and node A's status (a
// defer of the test: it runs before the cleanups that delete the BGP objects).
func (f *bgpFixture) diagnose() {
	t := f.t
	if !t.Failed() {
		return
	}
	out, _ := f.frr.vtysh("show bgp ipv4 unicast", "show bgp summary", "show bgp ipv4 unicast neighbors "+bgpNodeAddr+" received-routes")
	t.Logf("FRR:\n%s", out)
	if st := f.nodeStatus(); st != nil {
		t.Logf("node A's BGPNodeStatus: %+v", st.Status)
	}
	if f.child != nil && os.Getenv("STATICIP_TEST_DUMP_AGENT") != "" {
		_ = f.child.Process.Signal(syscall.SIGQUIT) // its goroutines, into its log
		time.Sleep(time.Second)
		_ = os.WriteFile(os.Getenv("STATICIP_TEST_DUMP_AGENT"), []byte(f.childLog.String()), 0o644)
	}
	t.Logf("agent's log:\n%s", tail(f.childLog.String(), 6000))
	for i, l := range f.frr.logs {
		t.Logf("FRR daemon %d log:\n%s", i, tail(l.String(), 3000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// startAgent starts node A's agent process in A's namespace.
func (f *bgpFixture) startAgent() {
	f.t.Helper()
	spec, _ := json.Marshal(f.spec)
	cmd := exec.Command("ip", "netns", "exec", f.host.Name, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childAgentEnv+"="+string(spec))
	cmd.Stdout, cmd.Stderr = f.childLog, f.childLog
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.child = cmd
}

// kill kills the agent process (SIGKILL: no goodbye to the peers).
func (f *bgpFixture) kill() {
	if f.child == nil {
		return
	}
	_ = f.child.Process.Kill()
	_ = f.child.Wait()
	f.child = nil
}

func (f *bgpFixture) eventually(what string, timeout time.Duration, cond func() bool) {
	f.t.Helper()
	testsupport.Eventually(context.Background(), f.t, timeout, what, testsupport.True(cond))
}

// nodeStatus is node A's BGPNodeStatus (nil while none).
func (f *bgpFixture) nodeStatus() *jkev1.BGPNodeStatus {
	s, err := f.sip.JkeV1().BGPNodeStatuses().Get(f.ctx, f.nodeA, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

// peerCondition is node A's condition typ of its session to the BGPPeer.
func (f *bgpFixture) peerCondition(typ string) *metav1.Condition {
	s := f.nodeStatus()
	if s == nil {
		return nil
	}
	for _, p := range s.Status.Peers {
		if p.Name == f.peerName {
			for _, c := range p.Conditions {
				if c.Type == typ {
					return &c
				}
			}
		}
	}
	return nil
}

// peerEvent says whether the BGPPeer has an Event of reason from node A's agent.
func (f *bgpFixture) peerEvent(reason string) bool {
	evs, err := f.kube.CoreV1().Events("default").List(f.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + f.peerName})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == reason && e.InvolvedObject.Kind == "BGPPeer" && strings.Contains(e.Message, f.nodeA) {
			return true
		}
	}
	return false
}

func (f *bgpFixture) patchPeer(patch string) {
	f.t.Helper()
	if _, err := f.sip.JkeV1().BGPPeers().Patch(f.ctx, f.peerName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// route is the kernel's route to dst in node A's namespace (`ip route get`).
func (f *bgpFixture) routeGet(dst string) string {
	out, _ := exec.Command("ip", "-n", f.host.Name, "route", "get", dst).CombinedOutput()
	return strings.TrimSpace(string(out))
}

// natSources is the element list of node A's NAT set nat-sources-v4 (nft's own listing).
func (f *bgpFixture) natSources() string {
	out, _ := exec.Command("ip", "netns", "exec", f.host.Name, "nft", "list", "set", "inet", NATTable, natSourcesSet+natFamilySuffix4).CombinedOutput()
	return strings.Join(strings.Fields(string(out)), " ")
}

// routeShow is node A's route to exactly cidr (`ip route show exact`), "" when none.
func (f *bgpFixture) routeShow(cidr string) string {
	out, _ := exec.Command("ip", "-n", f.host.Name, "route", "show", "exact", cidr).CombinedOutput()
	return strings.TrimSpace(string(out))
}

func (f *bgpFixture) rib() ribDump {
	var d ribDump
	b, err := os.ReadFile(f.spec.RIBFile)
	if err == nil {
		_ = json.Unmarshal(b, &d)
	}
	return d
}

// TestBGPAdvertisementToFRR: node A's agent announces to a real FRR (bgpd in its own network
// namespace) exactly the ranges A holds, with A's address as next hop: the served range and a
// draining one, not a disableBGPExport range, not another node's; a range that moves away is
// withdrawn; the route FRR sends is rejected; a wrong AS, a password mismatch and a too long
// hold time each give a condition on A's BGPNodeStatus and an Event on the BGPPeer while the
// datapath (blackhole per announced range, the pods' /32 routes, the route to B's range) stays;
// the agent killed -9 with graceful restart off: FRR drops the routes; on: FRR keeps them
// (stale) until the agent is back.
func TestBGPAdvertisementToFRR(t *testing.T) {
	f := newBGPFixture(t)
	defer f.diagnose()
	ctx, sip, s := f.ctx, f.sip, f.suffix
	off := true
	served, private, moving, other := "bgp-served-"+s, "bgp-private-"+s, "bgp-moving-"+s, "bgp-other-"+s
	// released: the range allocator gives it back (its IPPool deleted, the block empty);
	// deleted: an IPRange deleted by hand. Both leave BGP, the blackholes and the NAT sources.
	released, deleted := "bgp-released-"+s, "bgp-deleted-"+s
	createIPRange(ctx, t, sip, served, jkev1.IPRangeSpec{CIDR: "10.180.0.0/24", Node: f.nodeA})
	createIPRange(ctx, t, sip, released, jkev1.IPRangeSpec{CIDR: "10.180.4.0/24", Node: f.nodeA})
	createIPRange(ctx, t, sip, deleted, jkev1.IPRangeSpec{CIDR: "10.180.5.0/24", Node: f.nodeA})
	createIPRange(ctx, t, sip, private, jkev1.IPRangeSpec{CIDR: "10.180.1.0/24", Node: f.nodeA, DisableBGPExport: &off})
	createIPRange(ctx, t, sip, moving, jkev1.IPRangeSpec{CIDR: "10.180.2.0/24", Node: f.nodeA})
	createIPRange(ctx, t, sip, other, jkev1.IPRangeSpec{CIDR: "10.180.3.0/24", Node: f.nodeB})
	claimAs(ctx, t, sip, other, f.nodeB, "192.168.93.2")
	// A pod of node A (its host side as the CNI plugin makes it: a veth with a /32 route).
	if err := f.host.Do(func(ns.NetNS) error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "bgppod0"}, PeerName: "bgppod1"}
		if err := netlink.LinkAdd(veth); err != nil {
			return err
		}
		l, _ := netlink.LinkByName("bgppod0")
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		_, dst, _ := net.ParseCIDR("10.180.0.5/32")
		return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: dst, Scope: netlink.SCOPE_LINK})
	}); err != nil {
		t.Fatal(err)
	}

	// Without a BGPConfiguration the agent speaks no BGP: FRR sees no session.
	f.startAgent()
	f.eventually("node A's agent claims its ranges (its first passes ran)", 60*time.Second, func() bool {
		return holderOn(ctx, t, sip, served, f.nodeA) != ""
	})
	if out, _ := f.frr.vtysh("show bgp summary"); !strings.Contains(out, "Active") && !strings.Contains(out, "Idle") && !strings.Contains(out, "Connect") {
		t.Errorf("without a BGPConfiguration the agent has a session to FRR:\n%s", out)
	}
	if f.nodeStatus() != nil {
		t.Error("without a BGPConfiguration node A has a BGPNodeStatus")
	}

	// BGP configured: graceful restart off (the default), a peer selecting node A.
	if _, err := sip.JkeV1().BGPConfigurations().Create(ctx, &jkev1.BGPConfiguration{ObjectMeta: metav1.ObjectMeta{Name: f.cfgName},
		Spec: jkev1.BGPConfigurationSpec{ASNumber: bgpClusterAS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sip.JkeV1().BGPConfigurations().Delete(context.Background(), f.cfgName, metav1.DeleteOptions{})
	})
	if _, err := sip.JkeV1().BGPPeers().Create(ctx, &jkev1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: f.peerName},
		Spec: jkev1.BGPPeerSpec{PeerIP: bgpRouterAddr, ASNumber: bgpRouterAS,
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "r1-" + s}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sip.JkeV1().BGPPeers().Delete(context.Background(), f.peerName, metav1.DeleteOptions{}) })

	f.eventually("FRR learns A's served and moving ranges via "+bgpNodeAddr, 60*time.Second, func() bool {
		for _, p := range []string{"10.180.0.0/24", "10.180.2.0/24", "10.180.4.0/24", "10.180.5.0/24"} {
			if found, _ := f.frr.via(p, bgpNodeAddr); !found {
				return false
			}
		}
		return true
	})
	routes, raw := f.frr.table()
	t.Logf("FRR's table (show bgp ipv4 unicast json) with node A's session up:\n%s", raw)
	if _, ok := routes["10.180.1.0/24"]; ok {
		t.Error("FRR learnt the disableBGPExport range 10.180.1.0/24")
	}
	if _, ok := routes["10.180.3.0/24"]; ok {
		t.Error("FRR learnt node B's range 10.180.3.0/24 from node A")
	}
	// The route FRR sends reaches the agent (adj-RIB-in) and is rejected: not in its RIB,
	// not in the node's kernel table.
	f.eventually("the agent received FRR's 198.51.100.0/24", 20*time.Second, func() bool {
		return strings.Contains(strings.Join(f.rib().Received, ","), "198.51.100.0/24")
	})
	if d := f.rib(); strings.Contains(strings.Join(d.Accepted, ","), "198.51.100.0/24") {
		t.Errorf("the agent's RIB accepted FRR's route: %+v", d)
	}
	if r := f.routeGet("198.51.100.1"); !strings.Contains(r, "unreachable") && !strings.Contains(r, "No route") && !strings.Contains(r, "Network is unreachable") {
		t.Errorf("node A routes FRR's prefix: %s", r)
	}
	// The datapath: a blackhole for each announced range, the pod's /32 wins over it, the
	// range of node B goes via B, the private range has no blackhole.
	f.checkDatapath(true)
	st := f.nodeStatus()
	if st == nil || len(st.Status.Peers) != 1 || st.Status.Peers[0].State != jkev1.BGPSessionEstablished ||
		strings.Join(st.Status.Advertised, ",") != "10.180.0.0/24,10.180.2.0/24,10.180.4.0/24,10.180.5.0/24" {
		t.Fatalf("node A's BGPNodeStatus: %+v", st)
	}
	t.Logf("node A's BGPNodeStatus: advertised %v, peers %+v", st.Status.Advertised, st.Status.Peers)

	// The moving range leaves node A (failover: the spare, generation + 1): A withdraws it.
	r, _ := sip.JkeV1().IPRanges().Get(ctx, moving, metav1.GetOptions{})
	r.Spec.Node, r.Spec.OwnerGeneration = f.nodeB, r.Spec.OwnerGeneration+1
	if _, err := sip.JkeV1().IPRanges().Update(ctx, r, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("FRR no longer has the moved range via A", 30*time.Second, func() bool {
		found, _ := f.frr.via("10.180.2.0/24", bgpNodeAddr)
		return !found
	})
	if found, _ := f.frr.via("10.180.0.0/24", bgpNodeAddr); !found {
		t.Error("withdrawing the moved range withdrew the served one too")
	}
	_, raw = f.frr.table()
	t.Logf("FRR's table after 10.180.2.0/24 moved to node B:\n%s", raw)
	f.eventually("the moved range's blackhole is gone", 10*time.Second, func() bool {
		return !strings.HasPrefix(f.routeShow("10.180.2.0/24"), "blackhole")
	})

	// A range released (unassigned at generation + 1, as the range allocator returns the empty
	// block of a deleted IPPool) and a range deleted: both withdrawn, their blackholes gone,
	// no longer NAT sources; the served range stays announced, blackholed and NATed.
	if srcs := f.natSources(); !strings.Contains(srcs, "10.180.4.0/24") || !strings.Contains(srcs, "10.180.5.0/24") {
		t.Fatalf("before: the NAT sources lack the ranges to release and delete: %s", srcs)
	}
	r, _ = sip.JkeV1().IPRanges().Get(ctx, released, metav1.GetOptions{})
	r.Spec.Node, r.Spec.OwnerGeneration = "", r.Spec.OwnerGeneration+1
	if _, err := sip.JkeV1().IPRanges().Update(ctx, r, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := sip.JkeV1().IPRanges().Delete(ctx, deleted, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"10.180.4.0/24", "10.180.5.0/24"} {
		f.eventually("FRR no longer has "+p+" via A, its blackhole is gone, it is no NAT source", 30*time.Second, func() bool {
			found, _ := f.frr.via(p, bgpNodeAddr)
			return !found && f.routeShow(p) == "" && !strings.Contains(f.natSources(), p)
		})
	}
	if found, _ := f.frr.via("10.180.0.0/24", bgpNodeAddr); !found || !strings.HasPrefix(f.routeShow("10.180.0.0/24"), "blackhole") || !strings.Contains(f.natSources(), "10.180.0.0/24") {
		t.Errorf("releasing and deleting two ranges touched the served one: FRR %v, route %q, NAT sources %s", found, f.routeShow("10.180.0.0/24"), f.natSources())
	}
	_, raw = f.frr.table()
	t.Logf("FRR's table after 10.180.4.0/24 was released and 10.180.5.0/24 deleted:\n%s", raw)

	// A second router, its own FRR in its own namespace on another link of node A, and a
	// second BGPPeer: while the first peer is broken (wrong AS, then a password mismatch) the
	// second session stays Established — never reset — and keeps every route.
	r2 := f.secondRouter()
	watchR2 := r2.watch(t)

	// A wrong AS number: the session fails with a reason, an Event, and nothing else changes.
	f.patchPeer(`{"spec":{"asNumber":65999}}`)
	f.eventually("condition Established=False BadPeerAS on node A's session", 60*time.Second, func() bool {
		c := f.peerCondition(jkev1.BGPNodePeerEstablished)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == ReasonBGPBadPeerAS
	})
	f.eventually("Event BadPeerAS on the BGPPeer", 20*time.Second, func() bool { return f.peerEvent(ReasonBGPBadPeerAS) })
	t.Logf("wrong AS: %+v", *f.peerCondition(jkev1.BGPNodePeerEstablished))
	f.checkDatapath(false)
	f.patchPeer(fmt.Sprintf(`{"spec":{"asNumber":%d}}`, bgpRouterAS))
	f.eventually("the session is back", 60*time.Second, func() bool { found, _ := f.frr.via("10.180.0.0/24", bgpNodeAddr); return found })

	// A password FRR does not have (TCP MD5 on one side only): no answer at all.
	if _, err := f.kube.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "staticip-bgp-password"},
		StringData: map[string]string{"router": "s3cret"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.kube.CoreV1().Secrets("kube-system").Delete(context.Background(), "staticip-bgp-password", metav1.DeleteOptions{})
	})
	f.patchPeer(`{"spec":{"password":{"secretKeyRef":{"name":"staticip-bgp-password","key":"router"}}}}`)
	f.eventually("condition Established=False PeerNotAnswering (password mismatch)", 90*time.Second, func() bool {
		c := f.peerCondition(jkev1.BGPNodePeerEstablished)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == ReasonBGPPeerNotAnswering
	})
	f.eventually("Event PeerNotAnswering on the BGPPeer", 20*time.Second, func() bool { return f.peerEvent(ReasonBGPPeerNotAnswering) })
	t.Logf("password mismatch: %+v", *f.peerCondition(jkev1.BGPNodePeerEstablished))
	f.checkDatapath(false)
	// FRR gets the same password: the session comes up, signed.
	if out, err := f.frr.vtysh("configure terminal", fmt.Sprintf("router bgp %d", bgpRouterAS), fmt.Sprintf("neighbor %s password s3cret", bgpNodeAddr)); err != nil {
		t.Fatalf("vtysh: %v\n%s", err, out)
	}
	f.eventually("the session is up with the password", 90*time.Second, func() bool { found, _ := f.frr.via("10.180.0.0/24", bgpNodeAddr); return found })
	if report := watchR2(); report != "" {
		t.Errorf("the second peer was touched while the first was broken: %s", report)
	}
	r2.remove()

	// A hold time not shorter than the failover window (2m): the warning.
	f.patchPeer(`{"spec":{"holdTime":"180s"}}`)
	f.eventually("condition HoldTimeSafe=False", 30*time.Second, func() bool {
		c := f.peerCondition(jkev1.BGPPeerHoldTimeSafe)
		return c != nil && c.Status == metav1.ConditionFalse
	})
	f.eventually("Event "+ReasonHoldTimeUnsafe+" on the BGPPeer", 20*time.Second, func() bool { return f.peerEvent(ReasonHoldTimeUnsafe) })
	f.patchPeer(`{"spec":{"holdTime":"9s"}}`)
	f.eventually("the session is up again", 60*time.Second, func() bool { found, _ := f.frr.via("10.180.0.0/24", bgpNodeAddr); return found })

	// The agent killed with graceful restart off: FRR drops the node's routes at once (the
	// kernel resets the session's TCP connection), and they return with the agent.
	f.kill()
	f.eventually("FRR drops A's route once its agent is killed (graceful restart off)", 15*time.Second, func() bool {
		found, _ := f.frr.via("10.180.0.0/24", bgpNodeAddr)
		return !found
	})
	_, raw = f.frr.table()
	t.Logf("FRR's table with node A's agent killed, graceful restart off:\n%s", raw)
	f.startAgent()
	f.eventually("A's route is back with its agent", 60*time.Second, func() bool { found, _ := f.frr.via("10.180.0.0/24", bgpNodeAddr); return found })

	// Graceful restart on: FRR keeps the routes as stale while the agent is gone.
	if _, err := sip.JkeV1().BGPConfigurations().Patch(ctx, f.cfgName, types.MergePatchType,
		[]byte(`{"spec":{"gracefulRestart":{"enabled":true,"restartTime":"60s"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("FRR sees graceful restart negotiated with A", 60*time.Second, func() bool {
		out, _ := f.frr.vtysh(fmt.Sprintf("show bgp neighbors %s json", bgpNodeAddr))
		found, _ := f.frr.via("10.180.0.0/24", bgpNodeAddr)
		m := regexp.MustCompile(`"remoteGrMode":\s*"(\w+)"`).FindStringSubmatch(out)
		return found && m != nil && (m[1] == "Restart" || m[1] == "Helper")
	})
	f.kill()
	time.Sleep(5 * time.Second)
	found, stale := f.frr.via("10.180.0.0/24", bgpNodeAddr)
	_, raw = f.frr.table()
	t.Logf("FRR's table 5s after node A's agent was killed, graceful restart on:\n%s", raw)
	if !found || !stale {
		out, _ := f.frr.vtysh(fmt.Sprintf("show bgp neighbors %s", bgpNodeAddr))
		t.Fatalf("graceful restart on: FRR's route via A after the kill: found %v, stale %v\n%s", found, stale, out)
	}
	f.startAgent()
	f.eventually("A's route is fresh again (not stale) with its agent back", 90*time.Second, func() bool {
		found, stale := f.frr.via("10.180.0.0/24", bgpNodeAddr)
		return found && !stale
	})
	// A rolling update (SIGTERM) with graceful restart on: the agent leaves without a Cease,
	// and FRR keeps the route (stale) as for a kill.
	_ = f.child.Process.Signal(syscall.SIGTERM)
	_ = f.child.Wait()
	f.child = nil
	time.Sleep(3 * time.Second)
	if found, stale := f.frr.via("10.180.0.0/24", bgpNodeAddr); !found || !stale {
		t.Errorf("graceful restart on, agent terminated: FRR's route via A found %v, stale %v (want kept, stale)", found, stale)
	}
	f.startAgent()
	f.eventually("A's route is fresh again after the agent's restart", 90*time.Second, func() bool {
		found, stale := f.frr.via("10.180.0.0/24", bgpNodeAddr)
		return found && !stale
	})
	f.checkDatapath(false)

	// A fenced node that comes back withdraws before anything else: node A's agent stops, a
	// range it announced moves to node B (failover), the agent starts again. FRR's table is
	// sampled every 50 ms from before the restart until A's session is Established and settled.
	// Graceful restart on (as now): FRR keeps A's paths from before the restart, stale; the
	// moved range's stale path must go at A's End-of-RIB and never come back fresh.
	f.fencedReturn("bgp-fenced-gr-"+s, "10.180.6.0/24", true)
	// Graceful restart off: FRR drops A's paths with the session; the moved range must never be
	// seen via A at all.
	if _, err := sip.JkeV1().BGPConfigurations().Patch(ctx, f.cfgName, types.MergePatchType,
		[]byte(`{"spec":{"gracefulRestart":{"enabled":false}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("FRR sees graceful restart off with A", 60*time.Second, func() bool {
		out, _ := f.frr.vtysh(fmt.Sprintf("show bgp neighbors %s json", bgpNodeAddr))
		found, stale := f.frr.via("10.180.0.0/24", bgpNodeAddr)
		m := regexp.MustCompile(`"remoteGrMode":\s*"(\w+)"`).FindStringSubmatch(out)
		return found && !stale && (m == nil || (m[1] != "Restart" && m[1] != "Helper"))
	})
	f.fencedReturn("bgp-fenced-"+s, "10.180.7.0/24", false)
	f.checkDatapath(false)
}

// router2 is a second router: FRR in its own namespace, linked to node A by its own veth
// (node 192.168.94.1, router 192.168.94.254, AS 65001), and the BGPPeer naming it.
type router2 struct {
	f    *bgpFixture
	frr  *frr
	peer string
}

const (
	bgpNode2Addr   = "192.168.94.1"
	bgpRouter2Addr = "192.168.94.254"
	bgpRouter2AS   = 65001
)

func (f *bgpFixture) secondRouter() *router2 {
	t := f.t
	t.Helper()
	ns2, err := nstest.New("bgp-router2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns2.Close() })
	if err := f.host.Do(func(ns.NetNS) error {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "cni-r2a"}, PeerName: "cni-r2b"}); err != nil {
			return err
		}
		a, _ := netlink.LinkByName("cni-r2a")
		addr, _ := netlink.ParseAddr(bgpNode2Addr + "/24")
		if err := netlink.AddrAdd(a, addr); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(a); err != nil {
			return err
		}
		b, _ := netlink.LinkByName("cni-r2b")
		return netlink.LinkSetNsFd(b, int(ns2.Fd()))
	}); err != nil {
		t.Fatal(err)
	}
	if err := ns2.Do(func(ns.NetNS) error {
		b, err := netlink.LinkByName("cni-r2b")
		if err != nil {
			return err
		}
		addr, _ := netlink.ParseAddr(bgpRouter2Addr + "/24")
		if err := netlink.AddrAdd(b, addr); err != nil {
			return err
		}
		return netlink.LinkSetUp(b)
	}); err != nil {
		t.Fatal(err)
	}
	r := &router2{f: f, peer: "bgp-router2-" + f.suffix, frr: startFRR(t, ns2, fmt.Sprintf(`frr defaults datacenter
hostname router2
!
router bgp %d
 bgp router-id %s
 no bgp ebgp-requires-policy
 no bgp network import-check
 neighbor %s remote-as %d
!
`, bgpRouter2AS, bgpRouter2Addr, bgpNode2Addr, bgpClusterAS))}
	if _, err := f.sip.JkeV1().BGPPeers().Create(f.ctx, &jkev1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: r.peer},
		Spec: jkev1.BGPPeerSpec{PeerIP: bgpRouter2Addr, ASNumber: bgpRouter2AS,
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "r1-" + f.suffix}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.sip.JkeV1().BGPPeers().Delete(context.Background(), r.peer, metav1.DeleteOptions{}) })
	f.eventually("the second router learns A's served range", 60*time.Second, func() bool { return r.has("10.180.0.0/24") })
	_, raw := r.frr.table()
	t.Logf("the second router's table:\n%s", raw)
	return r
}

// has says whether the second router has a valid path to prefix (from node A: its only peer).
func (r *router2) has(prefix string) bool {
	routes, _ := r.frr.table()
	for _, p := range routes[prefix] {
		if p.Valid {
			return true
		}
	}
	return false
}

// session is the second router's view of its session with node A: state and how many times
// it was Established (a reset counts one more).
func (r *router2) session() (state string, established int) {
	out, _ := r.frr.vtysh(fmt.Sprintf("show bgp neighbors %s json", bgpNode2Addr))
	var v map[string]struct {
		State       string `json:"bgpState"`
		Established int    `json:"connectionsEstablished"`
	}
	_ = json.Unmarshal([]byte(out), &v)
	n := v[bgpNode2Addr]
	return n.State, n.Established
}

// watch samples the second router every 200 ms until the returned func is called, which
// stops it and says what went wrong ("" when the session stayed Established, never reset,
// with every prefix).
func (r *router2) watch(t *testing.T) func() string {
	state, est := r.session()
	if state != "Established" {
		t.Fatalf("the second router's session is %q before the first peer is broken", state)
	}
	// Every route it has from node A now (the served range; not the private one, nor those
	// moved away, released or deleted above).
	routes, raw := r.frr.table()
	var prefixes []string
	for p := range routes {
		if p != "198.51.100.0/24" && r.has(p) {
			prefixes = append(prefixes, p)
		}
	}
	sort.Strings(prefixes)
	if !slices.Contains(prefixes, "10.180.0.0/24") {
		t.Fatalf("the second router lacks node A's served range before the first peer is broken:\n%s", raw)
	}
	t.Logf("the second router's routes from node A, watched while the first peer is broken: %v", prefixes)
	stop, done := make(chan struct{}), make(chan string, 1)
	go func() {
		var problems []string
		samples := 0
		for {
			select {
			case <-stop:
				problems = append(problems, fmt.Sprint(samples, " samples"))
				if len(problems) == 1 {
					done <- ""
					return
				}
				done <- strings.Join(problems, "; ")
				return
			case <-time.After(200 * time.Millisecond):
			}
			samples++
			if s, e := r.session(); s != "Established" || e != est {
				problems = append(problems, fmt.Sprintf("sample %d: session %s, established %d times (was %d)", samples, s, e, est))
			}
			for _, p := range prefixes {
				if !r.has(p) {
					problems = append(problems, fmt.Sprintf("sample %d: %s missing", samples, p))
				}
			}
			if len(problems) > 20 {
				problems = problems[:20]
			}
		}
	}()
	return func() string {
		close(stop)
		return <-done
	}
}

// remove deletes the second BGPPeer and waits until node A's status no longer lists it.
func (r *router2) remove() {
	f := r.f
	if err := f.sip.JkeV1().BGPPeers().Delete(f.ctx, r.peer, metav1.DeleteOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.eventually("node A drops the second peer", 30*time.Second, func() bool {
		st := f.nodeStatus()
		return st != nil && len(st.Status.Peers) == 1
	})
}

// frrSample is one look at FRR during a fenced node's return.
type frrSample struct {
	at                 time.Duration
	established        bool
	movedViaA, staleA  bool
	servedViaA, served bool // the served range via A, and fresh
}

func (s frrSample) String() string {
	return fmt.Sprintf("%6dms established=%v moved-via-A=%v(stale %v) served-fresh=%v", s.at.Milliseconds(), s.established, s.movedViaA, s.staleA, s.served)
}

// established says whether FRR's session with node A is Established.
func (f *bgpFixture) established() bool {
	out, _ := f.frr.vtysh(fmt.Sprintf("show bgp neighbors %s json", bgpNodeAddr))
	return strings.Contains(out, `"bgpState":"Established"`) || regexp.MustCompile(`"bgpState":\s*"Established"`).MatchString(out)
}

// fencedReturn: range name (cidr) is created on node A and announced; A's agent is killed,
// the range moves to node B (generation + 1, as failover moves it) and A's agent starts again.
// FRR is sampled every 50 ms from before the restart until A's session has been Established
// for 3 s with the served range fresh via A. With graceful restart the moved range may only
// be seen via A stale (FRR's copy from before the restart) and only until A's End-of-RIB;
// without, never.
func (f *bgpFixture) fencedReturn(name, cidr string, gracefulRestart bool) {
	t := f.t
	t.Helper()
	createIPRange(f.ctx, t, f.sip, name, jkev1.IPRangeSpec{CIDR: cidr, Node: f.nodeA})
	f.eventually("FRR learns "+cidr+" via A", 60*time.Second, func() bool { found, _ := f.frr.via(cidr, bgpNodeAddr); return found })
	f.kill()
	if gracefulRestart {
		f.eventually("FRR keeps A's paths stale once its agent is gone", 20*time.Second, func() bool {
			found, stale := f.frr.via(cidr, bgpNodeAddr)
			return found && stale
		})
	} else {
		f.eventually("FRR drops A's paths once its agent is gone", 20*time.Second, func() bool { found, _ := f.frr.via(cidr, bgpNodeAddr); return !found })
	}
	r, err := f.sip.JkeV1().IPRanges().Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.Spec.Node, r.Spec.OwnerGeneration = f.nodeB, r.Spec.OwnerGeneration+1
	if _, err := f.sip.JkeV1().IPRanges().Update(f.ctx, r, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var samples []frrSample
	sample := func() frrSample {
		routes, _ := f.frr.table()
		s := frrSample{at: time.Since(start), established: f.established()}
		for prefix, viaA := range map[string]*bool{cidr: &s.movedViaA, "10.180.0.0/24": &s.servedViaA} {
			for _, p := range routes[prefix] {
				for _, h := range p.Nexthops {
					if h.IP == bgpNodeAddr && p.Valid {
						*viaA = true
						if prefix == cidr {
							s.staleA = p.Stale
						} else {
							s.served = !p.Stale
						}
					}
				}
			}
		}
		return s
	}
	for range 4 { // 200 ms before the restart
		samples = append(samples, sample())
		time.Sleep(50 * time.Millisecond)
	}
	f.startAgent()
	var upAt, settledAt time.Duration = -1, -1
	for deadline := time.Now().Add(120 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		s := sample()
		samples = append(samples, s)
		if s.established && upAt < 0 {
			upAt = s.at
		}
		if !s.established {
			upAt = -1
		}
		if upAt >= 0 && s.served && s.at-upAt >= 3*time.Second {
			settledAt = s.at
			break
		}
	}
	var lines []string
	bad := 0
	lastMoved := time.Duration(-1)
	for _, s := range samples {
		lines = append(lines, s.String())
		if s.movedViaA {
			lastMoved = s.at
			if !gracefulRestart || !s.staleA {
				bad++ // seen via A fresh (announced again), or at all without graceful restart
			}
		}
	}
	if settledAt < 0 {
		t.Fatalf("graceful restart %v: A's session never settled in 120s:\n%s", gracefulRestart, strings.Join(lines, "\n"))
	}
	last := samples[len(samples)-1]
	if bad > 0 || last.movedViaA {
		t.Fatalf("graceful restart %v: the moved range %s was seen via the returning node A (%d samples; last: %v):\n%s", gracefulRestart, cidr, bad, last, strings.Join(lines, "\n"))
	}
	seen := "never seen via A"
	if lastMoved >= 0 {
		seen = fmt.Sprintf("via A last seen at %v, stale (FRR's copy from before the restart), never fresh", lastMoved.Round(time.Millisecond))
	}
	t.Logf("graceful restart %v: %d samples every 50ms over %v from before A's restart; session Established at %v (settled %v); the moved range %s %s",
		gracefulRestart, len(samples), last.at.Round(time.Millisecond), upAt.Round(time.Millisecond), settledAt.Round(time.Millisecond), cidr, seen)
	if _, err := f.sip.JkeV1().IPRanges().Get(f.ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkDatapath: blackholes for the announced ranges (the served one; the moving one while
// A holds it, first), the pod's /32 beats the blackhole, node B's range via B, no blackhole for
// the private range.
func (f *bgpFixture) checkDatapath(movingHeld bool) {
	f.t.Helper()
	f.eventually("the blackhole for the served range", 20*time.Second, func() bool {
		return strings.HasPrefix(f.routeShow("10.180.0.0/24"), "blackhole")
	})
	if movingHeld {
		if r := f.routeShow("10.180.2.0/24"); !strings.HasPrefix(r, "blackhole") {
			f.t.Errorf("no blackhole for the moving range while A holds it: %s", r)
		}
	}
	if r := f.routeGet("10.180.0.5"); !strings.Contains(r, "dev bgppod0") {
		f.t.Errorf("the pod's /32 route lost to the blackhole: %s", r)
	}
	if r := f.routeGet("10.180.3.9"); !strings.Contains(r, "via 192.168.93.2") {
		f.t.Errorf("node B's range is not routed via B: %s", r)
	}
	if r := f.routeShow("10.180.1.0/24"); r != "" {
		f.t.Errorf("a route for the private (not exported) range: %s", r)
	}
}
