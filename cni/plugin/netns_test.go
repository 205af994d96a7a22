package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"

	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/cni/nstest"
	"github.com/staticip/staticip/ipam"
)

// These tests run the plugin in-process against real network namespaces: a "host" namespace
// standing in for the node (so nothing touches the machine's own network) and one namespace
// per pod.

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
}

func newNS(t *testing.T, tag string) *nstest.NetNS {
	t.Helper()
	return nstest.ForTest(t, tag)
}

type harness struct {
	t       *testing.T
	host    *nstest.NetNS
	dataDir string
	plugin  *Plugin
	log     *strings.Builder
}

func newHarness(t *testing.T) *harness {
	requireRoot(t)
	var log strings.Builder
	return &harness{t: t, host: newNS(t, "host"), dataDir: t.TempDir(), plugin: &Plugin{Log: &log}, log: &log}
}

func (h *harness) conf(extra map[string]any) []byte {
	c := map[string]any{
		"cniVersion": "1.1.0", "name": "staticip-test", "type": "staticip",
		"dataDir": h.dataDir, "mtu": 1400, "quarantine": "0s", "dbTimeout": "2s",
		"ranges": []map[string]any{{"subnet": "10.123.0.0/28", "gateway": "10.123.0.1", "exclude": []string{"10.123.0.2"}}},
	}
	for k, v := range extra {
		c[k] = v
	}
	b, err := json.Marshal(c)
	if err != nil {
		h.t.Fatal(err)
	}
	return b
}

func podArgs(pod *nstest.NetNS, id, cniArgs string, conf []byte) *skel.CmdArgs {
	return &skel.CmdArgs{ContainerID: id, Netns: pod.Path(), IfName: "eth0", Args: cniArgs, StdinData: conf}
}

func (h *harness) add(args *skel.CmdArgs) (*current.Result, error) {
	var res types.Result
	err := h.host.Do(func(ns.NetNS) error {
		var err error
		res, _, err = testutils.CmdAddWithArgs(args, func() error { return h.plugin.Funcs().Add(args) })
		return err
	})
	if err != nil {
		return nil, err
	}
	return current.NewResultFromResult(res)
}

func (h *harness) mustAdd(args *skel.CmdArgs) *current.Result {
	h.t.Helper()
	r, err := h.add(args)
	if err != nil {
		h.t.Fatalf("ADD %s: %v\nplugin log: %s", args.ContainerID, err, h.log)
	}
	return r
}

func (h *harness) del(args *skel.CmdArgs) error {
	return h.host.Do(func(ns.NetNS) error {
		return testutils.CmdDelWithArgs(args, func() error { return h.plugin.Funcs().Del(args) })
	})
}

func (h *harness) check(args *skel.CmdArgs, prev *current.Result) error {
	conf := map[string]any{}
	json.Unmarshal(args.StdinData, &conf)
	conf["prevResult"] = prev
	data, _ := json.Marshal(conf)
	a := *args
	a.StdinData = data
	return h.host.Do(func(ns.NetNS) error {
		return testutils.CmdCheckWithArgs(&a, func() error { return h.plugin.Funcs().Check(&a) })
	})
}

func (h *harness) allocations() []ipam.Allocation {
	h.t.Helper()
	db := h.openStore()
	defer db.Close()
	as, err := db.Allocations()
	if err != nil {
		h.t.Fatal(err)
	}
	return as
}

// hostLinks lists the plugin's veths in the host namespace.
func (h *harness) hostLinks() []string {
	var names []string
	h.host.Do(func(ns.NetNS) error {
		links, _ := netlink.LinkList()
		for _, l := range links {
			if strings.HasPrefix(l.Attrs().Name, HostVethPrefix) {
				names = append(names, l.Attrs().Name)
			}
		}
		return nil
	})
	return names
}

func linkIn(n ns.NetNS, name string) (netlink.Link, error) {
	var l netlink.Link
	err := n.Do(func(ns.NetNS) error {
		var err error
		l, err = netlink.LinkByName(name)
		return err
	})
	return l, err
}

func TestAddConfiguresPodAndHost(t *testing.T) {
	h := newHarness(t)
	pod := newNS(t, "pod")
	args := podArgs(pod, "ctr-add", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0;K8S_POD_UID=u1", h.conf(nil))
	res := h.mustAdd(args)

	want := netip.MustParseAddr("10.123.0.3") // .1 gateway, .2 excluded
	if len(res.IPs) != 1 || res.IPs[0].Address.String() != want.String()+"/32" || res.IPs[0].Gateway.String() != "10.123.0.1" {
		t.Fatalf("result IPs %+v", res.IPs)
	}
	if len(res.Interfaces) != 2 || res.Interfaces[1].Sandbox != pod.Path() || res.Interfaces[0].Name != HostVethName("ctr-add", "eth0") {
		t.Fatalf("result interfaces %+v", res.Interfaces)
	}

	err := pod.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if link.Attrs().MTU != 1400 || link.Attrs().OperState != netlink.OperUp && link.Attrs().Flags&net.FlagUp == 0 {
			return fmt.Errorf("eth0 mtu %d flags %v", link.Attrs().MTU, link.Attrs().Flags)
		}
		addrs, _ := netlink.AddrList(link, netlink.FAMILY_V4)
		if len(addrs) != 1 || addrs[0].IPNet.String() != "10.123.0.3/32" {
			return fmt.Errorf("addresses %v", addrs)
		}
		routes, _ := netlink.RouteList(link, netlink.FAMILY_V4)
		var got []string
		for _, r := range routes {
			got = append(got, fmt.Sprintf("%v via %v scope %v", r.Dst, r.Gw, r.Scope))
		}
		joined := strings.Join(got, "; ")
		if !strings.Contains(joined, "10.123.0.1/32 via <nil> scope link") || !strings.Contains(joined, "0.0.0.0/0 via 10.123.0.1 scope universe") {
			return fmt.Errorf("routes %s", joined)
		}
		neighs, _ := netlink.NeighList(link.Attrs().Index, netlink.FAMILY_V4)
		for _, n := range neighs {
			if n.IP.String() == "10.123.0.1" && n.State == netlink.NUD_PERMANENT && n.HardwareAddr.String() == res.Interfaces[0].Mac {
				return nil
			}
		}
		return fmt.Errorf("no permanent neighbour for the gateway: %+v", neighs)
	})
	if err != nil {
		t.Fatal(err)
	}

	err = h.host.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName(HostVethName("ctr-add", "eth0"))
		if err != nil {
			return err
		}
		if link.Attrs().MTU != 1400 {
			return fmt.Errorf("host veth mtu %d", link.Attrs().MTU)
		}
		routes, _ := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: hostPrefix(want)}, netlink.RT_FILTER_DST)
		if len(routes) != 1 || routes[0].LinkIndex != link.Attrs().Index || routes[0].Scope != netlink.SCOPE_LINK {
			return fmt.Errorf("host routes to %s: %+v", want, routes)
		}
		fwd, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
		if strings.TrimSpace(string(fwd)) != "1" {
			return fmt.Errorf("ip_forward=%s", fwd)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	allocs := h.allocations()
	if len(allocs) != 1 || allocs[0].IP != want || allocs[0].Pod.Key() != "ns/web-0" {
		t.Fatalf("allocations %+v", allocs)
	}

	// A repeated ADD returns the same IP and leaves a working attachment.
	again := h.mustAdd(args)
	if again.IPs[0].Address.String() != res.IPs[0].Address.String() {
		t.Fatalf("repeated ADD gave %v, first %v", again.IPs[0].Address, res.IPs[0].Address)
	}
	if err := h.check(args, again); err != nil {
		t.Fatalf("CHECK after repeated ADD: %v", err)
	}
}

func TestTwoPodsTalk(t *testing.T) {
	h := newHarness(t)
	a, b := newNS(t, "pa"), newNS(t, "pb")
	ra := h.mustAdd(podArgs(a, "ctr-a", "", h.conf(nil)))
	rb := h.mustAdd(podArgs(b, "ctr-b", "", h.conf(nil)))
	ipB := rb.IPs[0].Address.IP.String()

	var ln net.Listener
	if err := b.Do(func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(ipB, "7777"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- err.Error()
			return
		}
		defer c.Close()
		buf := make([]byte, 5)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _ := c.Read(buf)
		accepted <- c.RemoteAddr().(*net.TCPAddr).IP.String() + " " + string(buf[:n])
	}()
	err := a.Do(func(ns.NetNS) error {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(ipB, "7777"), 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("hello"))
		return err
	})
	if err != nil {
		t.Fatalf("pod A -> pod B %s: %v", ipB, err)
	}
	if got, want := <-accepted, ra.IPs[0].Address.IP.String()+" hello"; got != want {
		t.Fatalf("B received %q, want %q", got, want)
	}
}

func TestCheckDetectsRemovedAddress(t *testing.T) {
	h := newHarness(t)
	pod := newNS(t, "pod")
	args := podArgs(pod, "ctr-check", "", h.conf(nil))
	res := h.mustAdd(args)
	if err := h.check(args, res); err != nil {
		t.Fatalf("CHECK of a healthy attachment: %v", err)
	}
	pod.Do(func(ns.NetNS) error {
		link, _ := netlink.LinkByName("eth0")
		return netlink.AddrDel(link, &netlink.Addr{IPNet: &res.IPs[0].Address})
	})
	err := h.check(args, res)
	var te *types.Error
	if !errors.As(err, &te) || te.Code != ErrCodeCheckFailed || !strings.Contains(te.Msg, "lacks address "+res.IPs[0].Address.IP.String()) {
		t.Fatalf("CHECK after removing the address: %v", err)
	}
}

func TestDelIsIdempotent(t *testing.T) {
	h := newHarness(t)
	pod := newNS(t, "pod")
	args := podArgs(pod, "ctr-del", "", h.conf(nil))
	h.mustAdd(args)
	for i := range 2 {
		if err := h.del(args); err != nil {
			t.Fatalf("DEL #%d: %v", i+1, err)
		}
	}
	if links := h.hostLinks(); len(links) != 0 {
		t.Fatalf("host veths left: %v", links)
	}
	if _, err := linkIn(pod, "eth0"); err == nil {
		t.Fatal("eth0 left in the pod")
	}
	if as := h.allocations(); len(as) != 0 {
		t.Fatalf("allocations left: %+v", as)
	}
	// DEL of a container that never existed, and with the netns already gone.
	gone := podArgs(pod, "never-added", "", h.conf(nil))
	gone.Netns = "/var/run/netns/cni-does-not-exist"
	if err := h.del(gone); err != nil {
		t.Fatalf("DEL with a missing netns: %v", err)
	}
}

func TestGCFreesExactlyTheDeadAttachments(t *testing.T) {
	h := newHarness(t)
	var pods []*nstest.NetNS
	var results []*current.Result
	for i := range 3 {
		p := newNS(t, fmt.Sprintf("gc%d", i))
		pods = append(pods, p)
		results = append(results, h.mustAdd(podArgs(p, fmt.Sprintf("ctr-gc-%d", i), "", h.conf(nil))))
	}
	conf := h.conf(map[string]any{"cni.dev/valid-attachments": []map[string]string{{"containerID": "ctr-gc-1", "ifname": "eth0"}}})
	err := h.host.Do(func(ns.NetNS) error {
		return h.plugin.GC(&skel.CmdArgs{StdinData: conf})
	})
	if err != nil {
		t.Fatal(err)
	}
	as := h.allocations()
	if len(as) != 1 || as[0].Attachment.ContainerID != "ctr-gc-1" || as[0].IP.String() != results[1].IPs[0].Address.IP.String() {
		t.Fatalf("after GC: %+v", as)
	}
	if links := h.hostLinks(); len(links) != 1 || links[0] != HostVethName("ctr-gc-1", "eth0") {
		t.Fatalf("host veths after GC: %v", links)
	}
	if err := h.check(podArgs(pods[1], "ctr-gc-1", "", h.conf(nil)), results[1]); err != nil {
		t.Fatalf("the live attachment broke: %v", err)
	}
}

func TestRequestedIPFromArgsAndRuntimeConfig(t *testing.T) {
	h := newHarness(t)
	p1, p2, p3 := newNS(t, "r1"), newNS(t, "r2"), newNS(t, "r3")
	r := h.mustAdd(podArgs(p1, "ctr-r1", "IgnoreUnknown=1;IP=10.123.0.9", h.conf(nil)))
	if got := r.IPs[0].Address.IP.String(); got != "10.123.0.9" {
		t.Fatalf("CNI_ARGS IP=: got %s", got)
	}
	r = h.mustAdd(podArgs(p2, "ctr-r2", "", h.conf(map[string]any{"runtimeConfig": map[string]any{"ips": []string{"10.123.0.10/28"}}})))
	if got := r.IPs[0].Address.IP.String(); got != "10.123.0.10" {
		t.Fatalf("runtimeConfig ips: got %s", got)
	}
	annotated := h.conf(map[string]any{"runtimeConfig": map[string]any{PodAnnotationsCapability: map[string]string{podip.AnnotationIPAddress: "10.123.0.11"}}})
	r = h.mustAdd(podArgs(p3, "ctr-r3", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-3", annotated))
	if got := r.IPs[0].Address.IP.String(); got != "10.123.0.11" {
		t.Fatalf("pod-annotations capability: got %s", got)
	}
}

// Every bad input gets a clear CNI error with its code, and nothing stays configured.
func TestBadInputLeavesNothingBehind(t *testing.T) {
	h := newHarness(t)
	holderNS := newNS(t, "holder")
	h.mustAdd(podArgs(holderNS, "ctr-holder", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=holder", h.conf(nil)))
	holderIP := h.allocations()[0].IP.String()

	corruptDir := filepath.Join(t.TempDir(), "bad")
	withAnnotation := func(v string) []byte {
		return h.conf(map[string]any{"runtimeConfig": map[string]any{PodAnnotationsCapability: map[string]string{podip.AnnotationIPAddress: v}}})
	}
	cases := []struct {
		name  string
		conf  []byte
		args  string
		code  uint
		msg   string
		setup func(t *testing.T, pod *nstest.NetNS) func()
		// reason is the failure counted in the store (staticip_cni_failures_total); empty
		// where no store can take it (locked, corrupt, a conflist that names none).
		reason string
	}{
		{name: "malformed annotation", reason: "invalid_annotation", conf: withAnnotation("10.123.0.300"), code: ErrCodeBadAnnotation,
			msg: `pod ns/victim: annotation staticip.jke.jdcloud.com/ip-address="10.123.0.300" is not an IP address`},
		{name: "IP outside every range", reason: "out_of_range", conf: withAnnotation("10.99.0.5"), code: ErrCodeOutOfRange,
			msg: "10.99.0.5 is outside every range of this node (10.123.0.0/28)"},
		{name: "IP held by another live pod", reason: "ip_in_use", conf: withAnnotation(holderIP), code: ErrCodeInUse,
			msg: "IP " + holderIP + " is in use by pod ns/holder (container ctr-holder, interface eth0)"},
		{name: "gateway requested", reason: "not_allocatable", args: "IP=10.123.0.1", code: ErrCodeNotAllocatable, msg: "10.123.0.1 is the gateway"},
		{name: "malformed CNI_ARGS IP", reason: "invalid_request", args: "IP=banana", code: ErrCodeBadRequestedIP, msg: `requested IP "banana"`},
		{name: "exhausted range", reason: "range_exhausted", conf: h.confRanges([]map[string]any{{"subnet": "10.124.0.0/30", "exclude": []string{"10.124.0.1", "10.124.0.2"}}}),
			code: ErrCodeExhausted, msg: "no free IP address in range(s) 10.124.0.0/30"},
		{name: "invalid conflist: bad subnet", reason: "invalid_config", conf: h.confRanges([]map[string]any{{"subnet": "10.125.0.1/24"}}),
			code: types.ErrInvalidNetworkConfig, msg: "ranges[0]: invalid input: subnet 10.125.0.1/24 has host bits set"},
		{name: "invalid conflist: not JSON", conf: []byte(`{"cniVersion":"1.1.0","name":"x","type":"staticip","mtu":"big"}`),
			code: types.ErrInvalidNetworkConfig, msg: "cannot parse the network configuration"},
		{name: "requested IP released moments ago (quarantine)", reason: "ip_quarantined", code: types.ErrTryAgainLater,
			args: "IP=10.123.0.9", conf: h.conf(map[string]any{"quarantine": "1h"}),
			msg: "IP 10.123.0.9 was released moments ago and is quarantined until",
			setup: func(t *testing.T, _ *nstest.NetNS) func() {
				prev := newNS(t, "prev")
				a := podArgs(prev, "ctr-prev", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=prev;IP=10.123.0.9", h.conf(map[string]any{"quarantine": "1h"}))
				h.mustAdd(a)
				if err := h.del(a); err != nil {
					t.Fatal(err)
				}
				return nil
			}},
		{name: "database locked", code: types.ErrTryAgainLater, msg: "is locked by another process (waited 300ms)",
			conf: h.conf(map[string]any{"dbTimeout": "300ms"}),
			setup: func(t *testing.T, _ *nstest.NetNS) func() {
				db, err := ipam.Open(ipam.ForNetwork(h.dataDir, testNetwork))
				if err != nil {
					t.Fatal(err)
				}
				return func() { db.Close() }
			}},
		{name: "database corrupt", code: ErrCodeDBCorrupt, conf: h.confDataDir(corruptDir),
			msg: "/bad/" + testNetwork + "/ipam.db is corrupt",
			setup: func(t *testing.T, _ *nstest.NetNS) func() {
				os.MkdirAll(filepath.Join(corruptDir, testNetwork), 0o700)
				os.WriteFile(ipam.NetworkPath(corruptDir, testNetwork), []byte(strings.Repeat("garbage!", 4096)), 0o600)
				return nil
			}},
		{name: "interface name taken in the pod", reason: "netlink", code: ErrCodeNetwork, msg: `container veth name ("eth0") peer provided`,
			setup: func(t *testing.T, pod *nstest.NetNS) func() {
				err := pod.Do(func(ns.NetNS) error {
					return netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}})
				})
				if err != nil {
					t.Fatalf("pre-creating eth0: %v", err)
				}
				return nil
			}},
		{name: "failure after the pod side is configured (rollback)", reason: "netlink", code: ErrCodeNetwork, msg: "rolled back): injected failure",
			setup: func(t *testing.T, pod *nstest.NetNS) func() {
				testHookHostSetup = func() error { return errors.New("injected failure") }
				return func() { testHookHostSetup = nil }
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := newNS(t, "bad")
			conf := tc.conf
			if conf == nil {
				conf = h.conf(nil)
			}
			if tc.setup != nil {
				if undo := tc.setup(t, pod); undo != nil {
					defer undo()
				}
			}
			args := "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=victim;K8S_POD_UID=v1"
			if tc.args != "" {
				args += ";" + tc.args
			}
			before := h.hostLinks()
			// The test itself holds the store in the locked case, and a corrupt one cannot be read.
			readStats := func() storeCalls {
				if strings.Contains(tc.name, "locked") || strings.Contains(tc.name, "corrupt") {
					return storeCalls{}
				}
				return h.callStatsOf(conf)
			}
			statsBefore := readStats()
			_, err := h.add(podArgs(pod, "ctr-victim", args, conf))
			var te *types.Error
			if !errors.As(err, &te) || te.Code != tc.code || !strings.Contains(te.Msg, tc.msg) {
				t.Fatalf("got %v, want code %d with %q", err, tc.code, tc.msg)
			}
			if after := h.hostLinks(); len(after) != len(before) {
				t.Fatalf("host veths %v -> %v", before, after)
			}
			statsAfter := readStats()
			if tc.reason != "" {
				if got := statsAfter.failures["add/"+tc.reason] - statsBefore.failures["add/"+tc.reason]; got != 1 {
					t.Errorf("failures{add,%s} rose by %d, want 1 (all: %v)", tc.reason, got, statsAfter.failures)
				}
				if got := statsAfter.calls["add/failure"] - statsBefore.calls["add/failure"]; got != 1 {
					t.Errorf("the add/failure histogram counted %d calls, want 1", got)
				}
			}
			if statsAfter.calls["add/success"] != statsBefore.calls["add/success"] {
				t.Errorf("a failed ADD left a success counted (%d -> %d)", statsBefore.calls["add/success"], statsAfter.calls["add/success"])
			}
			if l, err := linkIn(pod, "eth0"); err == nil && l.Type() == "veth" {
				t.Fatal("a veth was left in the pod")
			}
			if !strings.Contains(tc.name, "locked") && !strings.Contains(tc.name, "corrupt") && !strings.Contains(tc.name, "invalid") {
				for _, a := range h.allocations() {
					if a.Attachment.ContainerID == "ctr-victim" {
						t.Fatalf("allocation left behind: %+v", a)
					}
				}
			}
		})
	}
}

// storeCalls are the call counters of the harness' store: "op/result" → calls,
// "op/reason" → failures.
type storeCalls struct{ calls, failures map[string]uint64 }

func (h *harness) callStats() storeCalls { return h.callStatsOf(h.conf(nil)) }

// callStatsOf reads the counters of the store conf names (none for a conflist that does not
// parse).
func (h *harness) callStatsOf(conf []byte) storeCalls {
	h.t.Helper()
	out := storeCalls{calls: map[string]uint64{}, failures: map[string]uint64{}}
	nc, err := LoadConf(conf)
	if err != nil {
		return out
	}
	db, err := ipam.Open(ipam.ForNetwork(nc.DataDir, nc.Name))
	if err != nil {
		h.t.Fatal(err)
	}
	defer db.Close()
	s, err := db.CallStats()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, c := range s.Histograms {
		out.calls[c.Op+"/"+c.Result] = c.Count
	}
	for _, f := range s.Failures {
		out.failures[f.Op+"/"+f.Reason] = f.Count
	}
	return out
}

func (h *harness) confRanges(ranges []map[string]any) []byte {
	return h.conf(map[string]any{"ranges": ranges, "dataDir": filepath.Join(h.t.TempDir(), "other")})
}

func (h *harness) confDataDir(dir string) []byte {
	if dir == "" {
		dir = h.dataDir
	}
	return h.conf(map[string]any{"dataDir": dir})
}

func TestStatus(t *testing.T) {
	h := newHarness(t)
	if err := h.plugin.Status(&skel.CmdArgs{StdinData: h.conf(nil)}); err != nil {
		t.Fatalf("STATUS: %v", err)
	}
	var te *types.Error
	err := h.plugin.Status(&skel.CmdArgs{StdinData: h.conf(map[string]any{"ranges": []any{}})})
	if !errors.As(err, &te) || te.Code != types.ErrPluginNotAvailable {
		t.Fatalf("STATUS without ranges: %v", err)
	}
}

// Edge nodes lose the API server: a pod whose IP is reserved on this node still gets it, and
// DEL keeps the IP reserved because it cannot learn whether the StaticIP still exists.
func TestOfflineReservedPodKeepsItsIP(t *testing.T) {
	h := newHarness(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	// Port 1 on loopback: connection refused at once, like an API server that is down.
	os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n"+
		"contexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\nusers:\n- name: u\n  user: {token: x}\n"), 0o600)
	conf := h.conf(map[string]any{"kubeconfig": kubeconfig, "apiTimeout": "1s"})
	pod := newNS(t, "off")
	first := h.mustAdd(podArgs(pod, "ctr-off-1", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0;K8S_POD_UID=a", conf))
	ip := first.IPs[0].Address.IP.String()
	if err := h.del(podArgs(pod, "ctr-off-1", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0;K8S_POD_UID=a", conf)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(h.log.String(), "keeping "+ip+" reserved") {
		t.Fatalf("DEL did not say it kept the IP: %s", h.log)
	}
	other := newNS(t, "off")
	_, err := h.add(podArgs(other, "ctr-other", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=intruder;IP="+ip, conf))
	var te *types.Error
	if !errors.As(err, &te) || te.Code != ErrCodeInUse || !strings.Contains(te.Msg, "reserved for pod ns/web-0") {
		t.Fatalf("another pod asking for the reserved IP: %v", err)
	}
	again := h.mustAdd(podArgs(pod, "ctr-off-2", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0;K8S_POD_UID=b", conf))
	if got := again.IPs[0].Address.IP.String(); got != ip {
		t.Fatalf("recreated pod got %s offline, want its reserved %s", got, ip)
	}
}

func TestIPv6PodsTalk(t *testing.T) {
	h := newHarness(t)
	conf := h.conf(map[string]any{"ranges": []map[string]any{{"subnet": "fd00:cafe::/120"}}})
	a, b := newNS(t, "v6a"), newNS(t, "v6b")
	ra := h.mustAdd(podArgs(a, "ctr-v6a", "", conf))
	rb := h.mustAdd(podArgs(b, "ctr-v6b", "", conf))
	if got := rb.IPs[0].Address.String(); got != "fd00:cafe::2/128" {
		t.Fatalf("second pod got %s", got)
	}
	if err := h.check(podArgs(a, "ctr-v6a", "", conf), ra); err != nil {
		t.Fatalf("CHECK: %v", err)
	}
	ipB := rb.IPs[0].Address.IP.String()
	var ln net.Listener
	if err := b.Do(func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(ipB, "7777"))
		if err != nil {
			out, _ := exec.Command("ip", "-6", "addr").CombinedOutput()
			d, _ := os.ReadFile("/proc/sys/net/ipv6/conf/eth0/accept_dad")
			err = fmt.Errorf("%w\n%s accept_dad=%s", err, out, d)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	err := a.Do(func(ns.NetNS) error {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(ipB, "7777"), 5*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	if err != nil {
		t.Fatalf("pod A -> pod B over IPv6: %v", err)
	}
}

// Each successful ADD, CHECK and DEL is counted once in the store (ADD and DEL in the
// transaction that commits their work), and nothing is counted as a failure.
func TestCallsAreCountedInTheStore(t *testing.T) {
	h := newHarness(t)
	pod := newNS(t, "counted")
	args := podArgs(pod, "ctr-counted", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=counted", h.conf(nil))
	res := h.mustAdd(args)
	if err := h.check(args, res); err != nil {
		t.Fatalf("CHECK: %v", err)
	}
	if err := h.del(args); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	s := h.callStats()
	for _, k := range []string{"add/success", "check/success", "del/success"} {
		if s.calls[k] != 1 {
			t.Errorf("%s counted %d times, want 1 (all: %v)", k, s.calls[k], s.calls)
		}
	}
	if len(s.failures) != 0 || s.calls["add/failure"]+s.calls["del/failure"]+s.calls["check/failure"] != 0 {
		t.Errorf("failures counted for successful calls: %v %v", s.failures, s.calls)
	}
}

// TestStaleAnnotationLosesToTheReservation: the pod's StaticIP was re-created with another IP
// while the pod kept the old annotation. The node's IPAM holds the record's IP reserved for the
// pod (the agent's sync of StaticIPs); the plugin resolves the disagreement as podip.Choose does
// — and as the scheduler does (checkpodannotation TestStaleAnnotationLosesToTheStaticIP): the
// record's IP, not the stale annotated one.
func TestStaleAnnotationLosesToTheReservation(t *testing.T) {
	h := newHarness(t)
	h.mustAdd(podArgs(newNS(t, "first"), "ctr-first", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=first", h.conf(nil))) // the store gets its ranges
	const record, stale = "10.123.0.9", "10.123.0.11"
	db := h.openStore()
	err := db.Reserve(ipam.Reservation{IP: netip.MustParseAddr(record), Pod: ipam.PodRef{Namespace: "ns", Name: "web-2"}, Source: ipam.SourceStaticIP})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	want, err := podip.Choose(record, stale)
	if err != nil || want.IP.String() != record {
		t.Fatalf("podip.Choose = %+v, %v", want, err)
	}
	conf := h.conf(map[string]any{"runtimeConfig": map[string]any{PodAnnotationsCapability: map[string]string{podip.AnnotationIPAddress: stale}}})
	r := h.mustAdd(podArgs(newNS(t, "web2"), "ctr-web-2", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-2;K8S_POD_UID=u2", conf))
	if got := r.IPs[0].Address.IP.String(); got != want.IP.String() {
		t.Fatalf("pod with a stale annotation %s got %s, want its StaticIP's %s (reserved for it on this node)", stale, got, want.IP)
	}
	for _, a := range h.allocations() {
		if a.IP.String() == stale {
			t.Fatalf("the stale annotated IP %s was allocated too: %+v", stale, a)
		}
	}
}
