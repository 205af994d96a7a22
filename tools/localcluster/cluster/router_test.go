package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestBGPDConfig(t *testing.T) {
	c := frrConfig{RouterID: "172.30.0.253", RouterASN: 64500, NodeASN: 64512, NodeSubnet: "172.30.0.0/24", PodSpace: "10.244.0.0/16",
		Keepalive: time.Second, HoldTime: 4 * time.Second, LogFile: "/state/router/bgpd.log", MaxNeighbor: 250}
	got := bgpdConfig(c)
	for _, want := range []string{
		"log file /state/router/bgpd.log informational\n",
		"ip prefix-list pod-space seq 5 permit 10.244.0.0/16 le 32\n",
		"router bgp 64500\n bgp router-id 172.30.0.253\n",
		" neighbor nodes remote-as 64512\n",
		" neighbor nodes timers 1 4\n",
		" bgp listen range 172.30.0.0/24 peer-group nodes\n",
		"  maximum-paths 1\n",
		"  neighbor nodes route-map from-nodes in\n",
		"  neighbor nodes route-map to-nodes out\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("bgpd.conf lacks %q:\n%s", want, got)
		}
	}
	// FRR itself must accept it: bgpd's dry run (-C) parses the file and prints what it rejects.
	bgpd := "/usr/lib/frr/bgpd"
	if _, err := os.Stat(bgpd); err != nil {
		t.Fatalf("%s: %v (Debian's frr, tools/deps/cni.list: tools/install-deps.sh)", bgpd, err)
	}
	f := filepath.Join(t.TempDir(), "bgpd.conf")
	if err := os.WriteFile(f, []byte(strings.ReplaceAll(got, c.LogFile, filepath.Join(filepath.Dir(f), "bgpd.log"))), 0o644); err != nil {
		t.Fatal(err)
	}
	// bgpd reads it and writes its log as the user frr, as on the cluster (setupRouter).
	if err := os.Chmod(filepath.Dir(filepath.Dir(f)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := chownTree(filepath.Dir(f), "frr"); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bgpd, "-C", "-u", "frr", "-g", "frr", "-Z", "-p", "0", "-f", f).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("bgpd -C rejects the configuration: %v: %s", err, out)
	}
	// The same check fails on a bad line (the check can fail).
	if err := os.WriteFile(f, []byte(got+" neighbor nodes no-such-knob\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command(bgpd, "-C", "-u", "frr", "-g", "frr", "-Z", "-p", "0", "-f", f).CombinedOutput(); !strings.Contains(string(out), "no-such-knob") {
		t.Errorf("bgpd -C accepted a bad line: %q", out)
	}
}

// testdata/frr-bgp-two-paths.json is FRR 8.4's `show bgp ipv4 unicast json` with two nodes
// announcing one prefix (captured from bgpd in network namespaces).
func TestParseBGPTable(t *testing.T) {
	b, err := os.ReadFile("testdata/frr-bgp-two-paths.json")
	if err != nil {
		t.Fatal(err)
	}
	table, err := ParseBGPTable(b)
	if err != nil {
		t.Fatal(err)
	}
	if table.LocalAS != 64500 || table.RouterID != "172.29.9.253" {
		t.Errorf("table header: AS %d, router id %s", table.LocalAS, table.RouterID)
	}
	for _, c := range []struct {
		prefix   string
		best     string
		nextHops []string
	}{
		{"10.244.1.0/24", "172.29.9.11", []string{"172.29.9.11", "172.29.9.12"}},
		{"10.244.9.0/24", "", nil},
	} {
		if got := table.BestNextHop(c.prefix); got != c.best {
			t.Errorf("BestNextHop(%s) = %q, want %q", c.prefix, got, c.best)
		}
		if got := table.NextHops(c.prefix); !reflect.DeepEqual(got, c.nextHops) {
			t.Errorf("NextHops(%s) = %v, want %v", c.prefix, got, c.nextHops)
		}
	}
	if got := table.Via("172.29.9.12"); !reflect.DeepEqual(got, []string{"10.244.1.0/24"}) {
		t.Errorf("Via(172.29.9.12) = %v", got)
	}
	if got := table.Via("172.29.9.13"); got != nil {
		t.Errorf("Via(172.29.9.13) = %v, want none", got)
	}
	if got, want := table.String(), "10.244.1.0/24 best via 172.29.9.11 (also 172.29.9.12)\n"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}

	empty, err := ParseBGPTable([]byte(`{"vrfId":0,"routerId":"172.30.0.253","localAS":64500,"routes":{}}`))
	if err != nil || len(empty.Routes) != 0 || empty.BestNextHop("10.244.1.0/24") != "" {
		t.Errorf("empty table: %+v, %v", empty, err)
	}
	// A path that is not valid (its next hop unreachable) is no best path.
	invalid, _ := ParseBGPTable([]byte(`{"routes":{"10.244.2.0/24":[{"valid":false,"bestpath":true,"nexthops":[{"ip":"172.30.0.12","used":true}]}]}}`))
	if got := invalid.BestNextHop("10.244.2.0/24"); got != "" {
		t.Errorf("invalid path's next hop = %q, want none", got)
	}
	if _, err := ParseBGPTable([]byte("% Unknown command")); err == nil {
		t.Error("ParseBGPTable accepted vtysh's error text")
	}
}

func TestRouterLayout(t *testing.T) {
	o := DefaultOptions()
	o.StateDir = "/state"
	l := newLayout(o)
	r := l.router
	if r.netns != "cluster-router" || r.outsideNetns != "cluster-outside" || r.hostVeth != "cluster-vrt" || r.ip != "172.30.0.253" ||
		r.outsideGateway != "198.18.0.1" || r.outsideIP != "198.18.0.2" || r.dir != "/state/router" {
		t.Errorf("router layout %+v", r)
	}
	// The router's host link is one of the cluster's links, its namespaces the cluster's (down removes them).
	if !strings.HasPrefix(r.hostVeth, o.Prefix+"-v") {
		t.Errorf("router veth %s is not found by ourLinks", r.hostVeth)
	}
	for _, bad := range []string{"198.18.0.0/30", "fd00::/64", "x"} {
		o.OutsideSubnet = bad
		if err := o.validate(); err == nil {
			t.Errorf("--outside-subnet=%s accepted", bad)
		}
	}
}
