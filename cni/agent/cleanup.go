package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// CleanupPaths lists what the agent (and the plugin it installs) leaves on a node, for an
// uninstall (staticip-agent --cleanup): the plugin binary, the conflist, the plugin's
// kubeconfig and the plugin's database directory. Only paths the flags name: an empty flag
// names nothing.
func CleanupPaths(cfg Config) []string {
	conf := cfg.ConfName
	if conf == "" {
		conf = "10-staticip.conflist"
	}
	var out []string
	if cfg.CNIBinDir != "" {
		out = append(out, filepath.Join(cfg.CNIBinDir, "staticip"))
	}
	if cfg.CNIConfDir != "" {
		out = append(out, filepath.Join(cfg.CNIConfDir, conf))
		if cfg.PluginKubeconfig != "" {
			out = append(out, filepath.Join(cfg.CNIConfDir, filepath.Base(cfg.PluginKubeconfig)))
		}
	}
	if cfg.DataDir != "" {
		out = append(out, cfg.DataDir)
	}
	return out
}

// Cleanup removes from this node everything CleanupPaths lists, every route the agent owns
// (RouteProtocol, BlackholeProtocol) and its NAT table (nftables inet staticip) in the current network namespace.
// Without nft on PATH the table is left alone unless cfg.NAT is enabled (then it is an error:
// the agent that made the table ran this image). The data directory is emptied
// and then removed when it can be (a hostPath mount point cannot: it stays, empty). It
// returns what it removed; a path already gone is no error, so it can run again.
func Cleanup(cfg Config) (removed []string, err error) {
	var errs []error
	for _, p := range CleanupPaths(cfg) {
		if p == cfg.DataDir {
			entries, err := os.ReadDir(p)
			if err != nil && !os.IsNotExist(err) {
				errs = append(errs, err)
			}
			for _, e := range entries {
				q := filepath.Join(p, e.Name())
				if err := os.RemoveAll(q); err != nil {
					errs = append(errs, err)
				} else {
					removed = append(removed, q)
				}
			}
			if len(entries) > 0 || err == nil {
				_ = os.Remove(p) // a mount point stays (EBUSY): it is empty now
			}
			continue
		}
		switch err := os.Remove(p); {
		case err == nil:
			removed = append(removed, p)
		case !os.IsNotExist(err):
			errs = append(errs, err)
		}
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		errs = append(errs, fmt.Errorf("list routes: %w", err))
	}
	blackholes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: BlackholeProtocol}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		errs = append(errs, fmt.Errorf("list blackhole routes: %w", err))
	}
	routes = append(routes, blackholes...)
	for _, r := range routes {
		if err := netlink.RouteDel(&r); err != nil {
			errs = append(errs, fmt.Errorf("delete route %s: %w", r.Dst, err))
		} else {
			if r.Type == unix.RTN_BLACKHOLE {
				removed = append(removed, "blackhole route "+r.Dst.String())
			} else {
				removed = append(removed, "route "+r.Dst.String()+" via "+r.Gw.String())
			}
		}
	}
	if _, err := exec.LookPath("nft"); err == nil || cfg.NAT.Enabled {
		switch deleted, err := DeleteNATTable(context.Background()); {
		case err != nil:
			errs = append(errs, fmt.Errorf("outgoing NAT: %w", err))
		case deleted:
			removed = append(removed, "nftables table inet "+NATTable)
		}
	}
	return removed, errors.Join(errs...)
}
