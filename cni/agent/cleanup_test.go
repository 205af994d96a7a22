package agent

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/staticip/staticip/cni/nstest"
)

func TestCleanupPaths(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{
			name: "the shipped DaemonSet's flags",
			cfg: Config{CNIBinDir: "/host/opt/cni/bin", CNIConfDir: "/host/etc/cni/net.d",
				PluginKubeconfig: "/etc/cni/net.d/staticip-kubeconfig", DataDir: "/var/lib/staticip"},
			want: []string{"/host/opt/cni/bin/staticip", "/host/etc/cni/net.d/10-staticip.conflist",
				"/host/etc/cni/net.d/staticip-kubeconfig", "/var/lib/staticip"},
		},
		{
			name: "no plugin kubeconfig, another conflist name",
			cfg:  Config{CNIBinDir: "/b", CNIConfDir: "/c", ConfName: "20-x.conflist", DataDir: "/d"},
			want: []string{"/b/staticip", "/c/20-x.conflist", "/d"},
		},
		{
			name: "no data dir: nothing of the host's is named by an empty flag",
			cfg:  Config{CNIBinDir: "/b", CNIConfDir: "/c"},
			want: []string{"/b/staticip", "/c/10-staticip.conflist"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := CleanupPaths(c.cfg); !slices.Equal(got, c.want) {
				t.Errorf("CleanupPaths = %q, want %q", got, c.want)
			}
		})
	}
}

// TestCleanupRemovesWhatTheAgentInstalled: after Cleanup the node has none of the agent's
// files (the data dir keeps no entry; it may be a mount point) and none of its routes, and
// everything else is left alone.
func TestCleanupRemovesWhatTheAgentInstalled(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	root := t.TempDir()
	cfg := Config{CNIBinDir: filepath.Join(root, "bin"), CNIConfDir: filepath.Join(root, "net.d"),
		PluginKubeconfig: "/etc/cni/net.d/staticip-kubeconfig", DataDir: filepath.Join(root, "staticip")}
	write := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ours := []string{filepath.Join(cfg.CNIBinDir, "staticip"), filepath.Join(cfg.CNIConfDir, "10-staticip.conflist"),
		filepath.Join(cfg.CNIConfDir, "staticip-kubeconfig"), filepath.Join(cfg.DataDir, "ipam.db"), filepath.Join(cfg.DataDir, "sub", "f")}
	others := []string{filepath.Join(cfg.CNIBinDir, "loopback"), filepath.Join(cfg.CNIConfDir, "99-loopback.conf")}
	for _, p := range append(append([]string{}, ours...), others...) {
		write(p)
	}
	host, err := nstest.New("cleanup")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	var removed []string
	err = host.Do(func(ns.NetNS) error {
		// A veth pair (dummy links need a kernel module this machine may lack).
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "cl0"}, PeerName: "cl1"}); err != nil {
			return err
		}
		l, _ := netlink.LinkByName("cl0")
		p, _ := netlink.LinkByName("cl1")
		if err := netlink.LinkSetUp(p); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("192.168.90.1"), Mask: net.CIDRMask(24, 32)}}); err != nil {
			return err
		}
		for i, proto := range []netlink.RouteProtocol{RouteProtocol, RouteProtocol, 4 /* static: not ours */} {
			_, dst, _ := net.ParseCIDR([]string{"10.60.0.0/24", "10.61.0.0/24", "10.62.0.0/24"}[i])
			if err := netlink.RouteAdd(&netlink.Route{Dst: dst, Gw: net.ParseIP("192.168.90.2"), Protocol: proto}); err != nil {
				return err
			}
		}
		// The BGP blackholes (protocol 0x5b, one per announced block; IPv4 and IPv6) and a
		// blackhole that is not the agent's.
		for i, proto := range []netlink.RouteProtocol{BlackholeProtocol, BlackholeProtocol, 4} {
			_, dst, _ := net.ParseCIDR([]string{"10.63.0.0/24", "fd00:63::/120", "10.64.0.0/24"}[i])
			if err := netlink.RouteAdd(&netlink.Route{Dst: dst, Type: unix.RTN_BLACKHOLE, Protocol: proto}); err != nil {
				return fmt.Errorf("blackhole %s: %w", dst, err)
			}
		}
		if bh, _ := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: BlackholeProtocol}, netlink.RT_FILTER_PROTOCOL); len(bh) != 2 {
			return fmt.Errorf("want the two agent blackholes installed, have %v", bh)
		}
		var err error
		removed, err = Cleanup(cfg)
		if err != nil {
			return err
		}
		left, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			return err
		}
		if len(left) != 0 {
			t.Errorf("routes of the agent left: %v", left)
		}
		if bh, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: BlackholeProtocol}, netlink.RT_FILTER_PROTOCOL); err != nil || len(bh) != 0 {
			t.Errorf("blackholes of the agent left: %v (%v)", bh, err)
		}
		all, _ := netlink.RouteList(nil, netlink.FAMILY_V4)
		for _, other := range []string{"10.62.0.0/24", "10.64.0.0/24"} {
			if !slices.ContainsFunc(all, func(r netlink.Route) bool { return r.Dst != nil && r.Dst.String() == other }) {
				t.Errorf("Cleanup removed %s, a route that is not the agent's: %v", other, all)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ours {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s still exists after Cleanup (%v)", p, err)
		}
	}
	if entries, _ := os.ReadDir(cfg.DataDir); len(entries) != 0 {
		t.Errorf("the data dir keeps %d entries", len(entries))
	}
	for _, p := range others {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("Cleanup removed %s, which is not the agent's: %v", p, err)
		}
	}
	t.Logf("removed: %q", removed)
}
