package plugin

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/ipam"
)

// Issue 18: the scenarios in which an IP could reach two live pods, or a reservation could be
// lost, each reproduced with the plugin's CNI verbs against real network namespaces.

const testNetwork = "staticip-test" // the harness conflist's "name"

// openStore opens the harness network's database.
func (h *harness) openStore() *ipam.DB {
	h.t.Helper()
	db, err := ipam.Open(ipam.ForNetwork(h.dataDir, testNetwork))
	if err != nil {
		h.t.Fatal(err)
	}
	return db
}

func (h *harness) reservations() map[string]string {
	h.t.Helper()
	db := h.openStore()
	defer db.Close()
	rs, err := db.Reservations()
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range rs {
		out[r.Pod.Key()] = r.IP.String()
	}
	return out
}

func withAnnotationConf(h *harness, ip string, extra map[string]any) []byte {
	m := map[string]any{"runtimeConfig": map[string]any{PodAnnotationsCapability: map[string]string{podip.AnnotationIPAddress: ip}}}
	for k, v := range extra {
		m[k] = v
	}
	return h.conf(m)
}

func cniCode(err error) (uint, string) {
	var te *types.Error
	if errors.As(err, &te) {
		return te.Code, te.Msg
	}
	return 0, fmt.Sprint(err)
}

// agentSetsRanges is what staticip-agent does when the node's IPRanges change.
func (h *harness) agentSetsRanges(rs ...ipam.Range) ipam.RangeSync {
	h.t.Helper()
	db := h.openStore()
	defer db.Close()
	res, err := db.SetNodeRanges(rs)
	if err != nil {
		h.t.Fatal(err)
	}
	return res
}

var (
	rangeA = map[string]any{"subnet": "10.123.0.0/28", "gateway": "10.123.0.1", "exclude": []string{"10.123.0.2"}}
	rangeB = map[string]any{"subnet": "10.126.0.0/29"}
)

// Item 2: a range that moved away from the node while one of its pods still runs there only
// drains: 100 ADDs never get one of its IPs, whether the runtime still holds a stale conflist
// listing it (agent-managed node) or the conflist no longer lists it (standalone).
func TestMovedRangeOnlyDrains(t *testing.T) {
	for _, managed := range []bool{false, true} {
		t.Run(fmt.Sprintf("agent-managed=%v", managed), func(t *testing.T) {
			h := newHarness(t)
			both := h.conf(map[string]any{"ranges": []map[string]any{rangeA, rangeB}})
			stay := newNS(t, "stay")
			stayArgs := podArgs(stay, "ctr-stay", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=stay;IP=10.126.0.3", both)
			h.mustAdd(stayArgs)
			// A pod whose IP stays reserved in the moving range (its StaticIP names it).
			db := h.openStore()
			if err := db.Reserve(ipam.Reservation{IP: netip.MustParseAddr("10.126.0.5"), Pod: ipam.PodRef{Namespace: "ns", Name: "reserved"}}); err != nil {
				t.Fatal(err)
			}
			db.Close()

			conf := h.conf(map[string]any{"ranges": []map[string]any{rangeA}})
			if managed {
				// The agent moves range B away; the runtime still holds the old conflist.
				a, _ := parseRange(RangeConf{Subnet: "10.123.0.0/28", Gateway: "10.123.0.1", Exclude: []string{"10.123.0.2"}})
				res := h.agentSetsRanges(a)
				if len(res.Draining) != 1 || res.Draining[0].String() != "10.126.0.0/29" {
					t.Fatalf("SetNodeRanges: %+v, want 10.126.0.0/29 draining", res)
				}
				conf = both
			}
			pod := newNS(t, "many")
			moved := netip.MustParsePrefix("10.126.0.0/29")
			got, refused := 0, 0
			for i := range 100 {
				args := podArgs(pod, fmt.Sprintf("ctr-%d", i), fmt.Sprintf("K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p%d", i), conf)
				args.IfName = fmt.Sprintf("e%d", i)
				switch i {
				case 50: // a requested IP of the moved range
					args.Args += ";IP=10.126.0.4"
				case 51: // the pod whose IP is reserved there
					args.Args = "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=reserved"
				}
				r, err := h.add(args)
				if err != nil {
					refused++
					if code, msg := cniCode(err); i >= 50 && i <= 51 && (code != ErrCodeOutOfRange || !strings.Contains(msg, "moved away")) {
						t.Errorf("ADD #%d (%s): %v, want code %d saying the range moved away", i, args.Args, err, ErrCodeOutOfRange)
					}
					continue
				}
				got++
				if a, _ := netip.AddrFromSlice(r.IPs[0].Address.IP); moved.Contains(a.Unmap()) {
					t.Fatalf("ADD #%d (%s) got %s of the range that moved away", i, args.Args, a)
				}
			}
			if got != 12 {
				t.Errorf("%d ADDs succeeded, want 12 (all of range A); %d refused", got, refused)
			}
			// The pod still running on the moved range keeps working: CHECK and DEL.
			if err := h.del(stayArgs); err != nil {
				t.Fatalf("DEL of the pod on the draining range: %v", err)
			}
			if managed {
				a, _ := parseRange(RangeConf{Subnet: "10.123.0.0/28", Gateway: "10.123.0.1", Exclude: []string{"10.123.0.2"}})
				if res := h.agentSetsRanges(a); len(res.Draining) != 0 {
					t.Fatalf("range B still draining after its last pod left: %+v", res)
				}
			}
		})
	}
}

// offlineKubeconfig points at a port nothing listens on: an API server that is down.
func offlineKubeconfig(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	os.WriteFile(path, []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n"+
		"contexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\nusers:\n- name: u\n  user: {token: x}\n"), 0o600)
	return path
}

// Item 3: an ADD that fails after allocating undoes only what it did: the pod's reservation
// from before stays, and an IP it took over from the pod's earlier sandbox is not freed.
func TestRollbackUndoesOnlyThisAdd(t *testing.T) {
	h := newHarness(t)
	conf := h.conf(map[string]any{"kubeconfig": offlineKubeconfig(t), "apiTimeout": "1s"})
	pod := newNS(t, "rb")
	first := h.mustAdd(podArgs(pod, "ctr-rb-1", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0", conf))
	ip := first.IPs[0].Address.IP.String()
	if err := h.del(podArgs(pod, "ctr-rb-1", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0", conf)); err != nil {
		t.Fatal(err)
	}
	if got := h.reservations()["ns/web-0"]; got != ip {
		t.Fatalf("offline DEL left reservations %v, want ns/web-0 -> %s", h.reservations(), ip)
	}

	testHookHostSetup = func() error { return errors.New("injected failure") }
	_, err := h.add(podArgs(pod, "ctr-rb-2", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0", conf))
	testHookHostSetup = nil
	if code, _ := cniCode(err); code != ErrCodeNetwork {
		t.Fatalf("ADD with injected failure: %v", err)
	}
	if got := h.reservations()["ns/web-0"]; got != ip {
		t.Fatalf("the failed ADD's rollback lost the pod's reservation: reservations %v, want ns/web-0 -> %s", h.reservations(), ip)
	}
	other := newNS(t, "rb")
	if _, err := h.add(podArgs(other, "ctr-intruder", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=intruder;IP="+ip, conf)); err == nil {
		t.Fatalf("another pod got %s after the rollback", ip)
	}

	// Takeover: web-1's earlier sandbox is gone (its veth too) but its allocation is still
	// in the database; the recreated pod takes the IP over, then fails half-way.
	old := newNS(t, "rb")
	prev := h.mustAdd(podArgs(old, "ctr-w1-old", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-1", conf))
	ip1 := prev.IPs[0].Address.IP.String()
	old.Do(func(ns.NetNS) error {
		return netlink.LinkDel(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}})
	})
	testHookHostSetup = func() error { return errors.New("injected failure") }
	_, err = h.add(podArgs(pod, "ctr-w1-new", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-1;IP="+ip1, conf))
	testHookHostSetup = nil
	if code, _ := cniCode(err); code != ErrCodeNetwork {
		t.Fatalf("ADD with injected failure: %v", err)
	}
	if _, err := h.add(podArgs(other, "ctr-intruder-2", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=intruder;IP="+ip1, conf)); err == nil {
		t.Fatalf("another pod got %s, which the failed ADD had taken over from web-1's earlier sandbox", ip1)
	}
	again := h.mustAdd(podArgs(pod, "ctr-w1-new", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-1;IP="+ip1, conf))
	if got := again.IPs[0].Address.IP.String(); got != ip1 {
		t.Fatalf("web-1 got %s, want %s", got, ip1)
	}
}

// Item 3: DEL and GC that cannot ask the API server, because the kubeconfig is missing or
// unusable, keep the pod's IP reserved.
func TestNoUsableKubeClientKeepsTheIPReserved(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage")
	os.WriteFile(garbage, []byte("{{{ not yaml"), 0o600)
	noServer := filepath.Join(dir, "noserver")
	os.WriteFile(noServer, []byte("apiVersion: v1\nkind: Config\nclusters: []\n"), 0o600)
	for name, kubeconfig := range map[string]string{"missing file": filepath.Join(dir, "missing"), "not yaml": garbage, "no server": noServer} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			conf := h.conf(map[string]any{"kubeconfig": kubeconfig})
			pod := newNS(t, "nk")
			args := podArgs(pod, "ctr-nk", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0", conf)
			ip := h.mustAdd(args).IPs[0].Address.IP.String()
			if err := h.del(args); err != nil {
				t.Fatal(err)
			}
			if got := h.reservations()["ns/web-0"]; got != ip {
				t.Fatalf("DEL without a usable kube client: reservations %v, want ns/web-0 -> %s (plugin log: %s)", h.reservations(), ip, h.log)
			}
			// GC of a gone pod: the same.
			gcArgs := podArgs(pod, "ctr-nk-2", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0", conf)
			h.mustAdd(gcArgs)
			gcConf := h.conf(map[string]any{"kubeconfig": kubeconfig, "cni.dev/valid-attachments": []map[string]string{}})
			if err := h.host.Do(func(ns.NetNS) error { return h.plugin.GC(&skel.CmdArgs{StdinData: gcConf}) }); err != nil {
				t.Fatal(err)
			}
			if got := h.reservations()["ns/web-0"]; got != ip {
				t.Fatalf("GC without a usable kube client: reservations %v, want ns/web-0 -> %s", h.reservations(), ip)
			}
		})
	}
}

// Item 5: a recreated pod does not take its IP from the earlier attachment while that
// sandbox's host veth still exists (a force-deleted pod whose sandbox still runs); once the
// old sandbox is gone, it does.
func TestTakeoverWaitsForTheOldSandbox(t *testing.T) {
	h := newHarness(t)
	conf := withAnnotationConf(h, "10.123.0.7", nil)
	oldNS, newPodNS := newNS(t, "old"), newNS(t, "new")
	h.mustAdd(podArgs(oldNS, "ctr-old", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0;K8S_POD_UID=u1", conf))
	newArgs := podArgs(newPodNS, "ctr-new", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0;K8S_POD_UID=u2", conf)
	_, err := h.add(newArgs)
	code, msg := cniCode(err)
	if code != ErrCodeInUse || !strings.Contains(msg, "earlier sandbox") || !strings.Contains(msg, HostVethName("ctr-old", "eth0")) {
		t.Fatalf("recreated pod while the old sandbox runs: %v; want code %d naming the earlier sandbox and its veth", err, ErrCodeInUse)
	}
	if _, err := linkIn(newPodNS, "eth0"); err == nil {
		t.Fatal("the refused ADD left eth0 in the new sandbox")
	}
	// The old sandbox goes away (its netns is destroyed with the veth pair in it).
	oldNS.Do(func(ns.NetNS) error {
		return netlink.LinkDel(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}})
	})
	r := h.mustAdd(newArgs)
	if got := r.IPs[0].Address.IP.String(); got != "10.123.0.7" {
		t.Fatalf("after the old sandbox is gone the pod got %s", got)
	}
	as := h.allocations()
	if len(as) != 1 || as[0].Attachment.ContainerID != "ctr-new" {
		t.Fatalf("allocations %+v, want only ctr-new", as)
	}
}

// Item 6: two networks using staticip with the same dataDir (Multus) each have their own
// database: GC of one never frees the other's IPs.
func TestNetworksHaveTheirOwnDatabase(t *testing.T) {
	h := newHarness(t)
	confA := h.conf(map[string]any{"name": "net-a"})
	confB := h.conf(map[string]any{"name": "net-b", "ranges": []map[string]any{{"subnet": "10.127.0.0/28"}}})
	pod := newNS(t, "multus")
	argsA := podArgs(pod, "ctr-m", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0", confA)
	resA := h.mustAdd(argsA)
	argsB := podArgs(pod, "ctr-m", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0", confB)
	argsB.IfName = "net1"
	h.mustAdd(argsB)
	gcB := h.conf(map[string]any{"name": "net-b", "ranges": []map[string]any{{"subnet": "10.127.0.0/28"}},
		"cni.dev/valid-attachments": []map[string]string{{"containerID": "ctr-m", "ifname": "net1"}}})
	if err := h.host.Do(func(ns.NetNS) error { return h.plugin.GC(&skel.CmdArgs{StdinData: gcB}) }); err != nil {
		t.Fatal(err)
	}
	if err := h.check(argsA, resA); err != nil {
		t.Fatalf("network A's attachment after network B's GC: %v", err)
	}
}

// Item 6: the single database of earlier versions (dataDir/ipam.db) is taken over by the
// network: its allocations are neither lost nor reissued, and old plugin binaries no longer
// write to it.
func TestLegacyDatabaseIsMigrated(t *testing.T) {
	h := newHarness(t)
	legacy, err := ipam.Open(ipam.Options{Path: filepath.Join(h.dataDir, "ipam.db")})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := parseRange(RangeConf{Subnet: "10.123.0.0/28", Gateway: "10.123.0.1", Exclude: []string{"10.123.0.2"}})
	if err := legacy.AddRange(r); err != nil {
		t.Fatal(err)
	}
	old, _, err := legacy.Allocate(ipam.AllocateRequest{Attachment: ipam.Attachment{ContainerID: "ctr-legacy", IfName: "eth0"},
		Pod: ipam.PodRef{Namespace: "ns", Name: "legacy"}})
	if err != nil {
		t.Fatal(err)
	}
	legacy.Close()

	pod := newNS(t, "mig")
	res := h.mustAdd(podArgs(pod, "ctr-after", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=new", h.conf(nil)))
	if got := res.IPs[0].Address.IP.String(); got == old.IP.String() {
		t.Fatalf("the migrated database reissued %s, held by the legacy allocation", got)
	}
	as := h.allocations()
	if len(as) != 2 {
		t.Fatalf("allocations after migration: %+v, want the legacy one and the new one", as)
	}
	// An old plugin binary opening the legacy file is refused instead of writing to it.
	if db, err := ipam.Open(ipam.Options{Path: filepath.Join(h.dataDir, "ipam.db")}); err == nil {
		db.Close()
		t.Fatal("the legacy database still opens as a live database after the migration")
	}
	if err := h.del(podArgs(pod, "ctr-legacy", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=legacy", h.conf(nil))); err != nil {
		t.Fatal(err)
	}
	if as := h.allocations(); len(as) != 1 {
		t.Fatalf("DEL of the legacy attachment: allocations %+v", as)
	}
}

// Item 7: a corrupt database is never replaced silently, and the message says what is safe.
func TestCorruptDatabaseSaysWhatIsSafe(t *testing.T) {
	h := newHarness(t)
	path := ipam.NetworkPath(h.dataDir, testNetwork)
	os.MkdirAll(filepath.Dir(path), 0o700)
	os.WriteFile(path, []byte(strings.Repeat("garbage!", 4096)), 0o600)
	pod := newNS(t, "corrupt")
	_, err := h.add(podArgs(pod, "ctr-c", "", h.conf(nil)))
	code, msg := cniCode(err)
	if code != ErrCodeDBCorrupt || strings.Contains(msg, "start afresh") || !strings.Contains(msg, "do not delete it") ||
		!strings.Contains(msg, "running pods") {
		t.Fatalf("ADD on a corrupt database: %v", err)
	}
	if data, _ := os.ReadFile(path); string(data) != strings.Repeat("garbage!", 4096) {
		t.Fatal("the corrupt database was changed")
	}
}

// Item 8: STATUS is not-ready only when no range is configured or the database is unusable:
// never because every IP is taken, nor because another process holds the lock.
func TestStatusReadiness(t *testing.T) {
	h := newHarness(t)
	small := h.conf(map[string]any{"ranges": []map[string]any{{"subnet": "10.124.0.0/30"}}, "dbTimeout": "300ms"})
	pod := newNS(t, "st")
	for i := range 2 {
		args := podArgs(pod, fmt.Sprintf("ctr-st-%d", i), "", small)
		args.IfName = fmt.Sprintf("e%d", i)
		h.mustAdd(args)
	}
	status := func(conf []byte) error {
		return h.host.Do(func(ns.NetNS) error { return h.plugin.Status(&skel.CmdArgs{StdinData: conf}) })
	}
	if err := status(small); err != nil {
		t.Fatalf("STATUS with every IP in use: %v", err)
	}
	db := h.openStore()
	err := status(small)
	db.Close()
	if err != nil {
		t.Fatalf("STATUS while another process holds the database: %v", err)
	}
	if code, _ := cniCode(status(h.conf(map[string]any{"ranges": []any{}}))); code != types.ErrPluginNotAvailable {
		t.Fatalf("STATUS without ranges: code %d, want %d", code, types.ErrPluginNotAvailable)
	}
	bad := t.TempDir()
	os.MkdirAll(filepath.Join(bad, testNetwork), 0o700)
	os.WriteFile(filepath.Join(bad, testNetwork, "ipam.db"), []byte(strings.Repeat("garbage!", 4096)), 0o600)
	if code, msg := cniCode(status(h.conf(map[string]any{"dataDir": bad}))); code != types.ErrPluginNotAvailable || !strings.Contains(msg, "corrupt") {
		t.Fatalf("STATUS with a corrupt database: code %d %q, want %d", code, msg, types.ErrPluginNotAvailable)
	}
}

// Item 9: DEL, CHECK and GC work with a conflist whose ranges are invalid; only ADD refuses.
func TestOnlyAddNeedsValidRanges(t *testing.T) {
	broken := map[string][]map[string]any{
		"overlapping": {rangeA, {"subnet": "10.123.0.0/24"}},
		"host bits":   {{"subnet": "10.123.0.1/28"}},
		"resized":     {{"subnet": "10.123.0.0/27"}},
	}
	for name, ranges := range broken {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			pod := newNS(t, "br")
			args := podArgs(pod, "ctr-br", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0", h.conf(nil))
			res := h.mustAdd(args)
			bad := h.conf(map[string]any{"ranges": ranges})
			badArgs := *args
			badArgs.StdinData = bad
			if err := h.check(&badArgs, res); err != nil {
				t.Fatalf("CHECK with %s ranges: %v", name, err)
			}
			gc := h.conf(map[string]any{"ranges": ranges, "cni.dev/valid-attachments": []map[string]string{{"containerID": "ctr-br", "ifname": "eth0"}}})
			if err := h.host.Do(func(ns.NetNS) error { return h.plugin.GC(&skel.CmdArgs{StdinData: gc}) }); err != nil {
				t.Fatalf("GC with %s ranges: %v", name, err)
			}
			if len(h.allocations()) != 1 {
				t.Fatalf("GC with %s ranges freed a live attachment", name)
			}
			if err := h.del(&badArgs); err != nil {
				t.Fatalf("DEL with %s ranges: %v", name, err)
			}
			if as := h.allocations(); len(as) != 0 {
				t.Fatalf("DEL with %s ranges left %+v", name, as)
			}
			if name != "resized" {
				other := newNS(t, "br")
				if _, err := h.add(podArgs(other, "ctr-br-2", "", bad)); err == nil {
					t.Fatalf("ADD with %s ranges succeeded", name)
				} else if code, _ := cniCode(err); code != types.ErrInvalidNetworkConfig {
					t.Fatalf("ADD with %s ranges: %v, want code %d", name, err, types.ErrInvalidNetworkConfig)
				}
			}
		})
	}
}

// Item 7, the plugin's side of a rebuild: while the store is recovering ADD fails with "try
// again later" and STATUS is not ready; afterwards an imported IP is never reissued, GC keeps
// it while its veth exists, and the runtime's DEL of that container finds and releases it.
func TestRebuiltDatabaseKeepsImportedIPs(t *testing.T) {
	h := newHarness(t)
	path := ipam.NetworkPath(h.dataDir, testNetwork)
	os.MkdirAll(filepath.Dir(path), 0o700)
	os.WriteFile(path, []byte(strings.Repeat("garbage!", 4096)), 0o600)
	veth := HostVethName("ctr-live", "eth0")
	if err := h.host.Do(func(ns.NetNS) error {
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: veth}, PeerName: "live-peer"})
	}); err != nil {
		t.Fatal(err)
	}
	db, err := ipam.Recover(ipam.ForNetwork(h.dataDir, testNetwork))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Import([]ipam.Allocation{{IP: netip.MustParseAddr("10.123.0.3"), Attachment: ipam.RecoveredAttachment(veth),
		Pod: ipam.PodRef{Namespace: "ns", Name: "live"}}}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	pod := newNS(t, "rebuild")
	args := podArgs(pod, "ctr-new", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=new", h.conf(nil))
	if _, err := h.add(args); err == nil {
		t.Fatal("ADD allocated while the database is being rebuilt")
	} else if code, msg := cniCode(err); code != types.ErrTryAgainLater || !strings.Contains(msg, "being rebuilt") {
		t.Fatalf("ADD while rebuilding: %v", err)
	}
	if code, msg := cniCode(h.plugin.Status(&skel.CmdArgs{StdinData: h.conf(nil)})); code != types.ErrPluginNotAvailable || !strings.Contains(msg, "being rebuilt") {
		t.Fatalf("STATUS while rebuilding: code %d %q", code, msg)
	}
	db = h.openStore()
	if err := db.FinishRecovery(); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if got := h.mustAdd(args).IPs[0].Address.IP.String(); got == "10.123.0.3" {
		t.Fatal("the rebuilt database reissued the imported 10.123.0.3")
	}
	gc := h.conf(map[string]any{"cni.dev/valid-attachments": []map[string]string{{"containerID": "ctr-new", "ifname": "eth0"}}})
	if err := h.host.Do(func(ns.NetNS) error { return h.plugin.GC(&skel.CmdArgs{StdinData: gc}) }); err != nil {
		t.Fatal(err)
	}
	if as := h.allocations(); len(as) != 2 {
		t.Fatalf("GC freed the imported allocation whose veth exists: %+v", as)
	}
	gone := podArgs(pod, "ctr-live", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=live", h.conf(nil))
	gone.Netns = "/var/run/netns/cni-does-not-exist"
	if err := h.del(gone); err != nil {
		t.Fatal(err)
	}
	if as := h.allocations(); len(as) != 1 || as[0].Attachment.ContainerID != "ctr-new" {
		t.Fatalf("DEL of the recovered container: allocations %+v", as)
	}
	if links := h.hostLinks(); len(links) != 1 {
		t.Fatalf("host veths after DEL: %v", links)
	}
}
