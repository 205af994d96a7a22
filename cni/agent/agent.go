// Package agent is staticip-agent, the per-node companion of the staticip CNI plugin: it
// installs the plugin binary and its conflist (atomically, only when changed), syncs this
// node's IPRanges and StaticIP reservations into the plugin's bbolt database, garbage-collects
// IPs of pods that are gone (never one a StaticIP holds), writes IPRange status counts, and
// programs host routes to the other nodes' IPRanges.
package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/ipam"
)

// DefaultCNIVersion is the newest spec version that the runtimes of current Kubernetes
// releases (containerd 1.6 and 1.7, CRI-O) accept in a conflist.
const DefaultCNIVersion = "1.0.0"

// RouteProtocol marks the host routes the agent owns, so that it only ever removes its own.
const RouteProtocol netlink.RouteProtocol = 0x5a

// Config is what the agent needs to know about its node and paths.
type Config struct {
	NodeName string
	// PluginBinary is the staticip binary shipped with the agent; installed into CNIBinDir.
	PluginBinary string
	CNIBinDir    string
	CNIConfDir   string
	// ConfName is the conflist file name, e.g. 10-staticip.conflist.
	ConfName string
	// PluginKubeconfig is the kubeconfig path written into the conflist for the plugin.
	PluginKubeconfig string
	DataDir          string
	MTU              int
	Quarantine       string
	// Routes enables programming routes to other nodes' IPRanges.
	Routes bool
	// CNIVersion is the conflist's cniVersion: the runtime must understand it (containerd
	// 1.6/1.7 stop at 1.0.0; 1.1.0 lets a newer runtime call GC and STATUS).
	CNIVersion string
	// PluginCredentials, when set, are written as a kubeconfig to
	// CNIConfDir/filepath.Base(PluginKubeconfig) on every sync, so the plugin (which the
	// runtime execs on the host, outside any pod) can reach the API server with its own
	// node-bound token (credentials.go); the file follows the token as it is renewed.
	PluginCredentials *Credentials
}

// Agent runs the sync.
type Agent struct {
	cfg  Config
	kube kubernetes.Interface
	sip  versioned.Interface
	log  io.Writer
	// lastSync is the unix time of the last successful sync (health endpoint).
	lastSync atomic.Int64
	stats    atomic.Pointer[Stats]
	// syncs counts passes by result (metrics): event-driven syncs must stay few.
	syncsOK, syncsFailed atomic.Int64
	// view holds the informer caches a sync reads (Start); triggered carries "something
	// that matters changed" from their handlers to Run.
	view      *view
	triggered chan struct{}
	// unroutable names the IPRanges last found without a node address (logged on change).
	unroutable string
	// binaryStamps are the plugin source's and installed copy's stamps after the last
	// install or comparison; binaryCompares counts the comparisons that read the files.
	binaryStamps   atomic.Pointer[[2]fileStamp]
	binaryCompares atomic.Int64
}

// Stats are the figures of the last sync (metrics endpoint).
type Stats struct {
	Ranges, Reservations, Allocations, Freed, Routes int
	Usage                                            []ipam.RangeUsage
}

// New returns an agent.
func New(cfg Config, kube kubernetes.Interface, sip versioned.Interface, log io.Writer) *Agent {
	if cfg.ConfName == "" {
		cfg.ConfName = "10-staticip.conflist"
	}
	if cfg.CNIVersion == "" {
		cfg.CNIVersion = DefaultCNIVersion
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	return &Agent{cfg: cfg, kube: kube, sip: sip, log: log, triggered: make(chan struct{}, 1)}
}

// trigger asks Run for a sync; one pending request stands for any number of changes.
func (a *Agent) trigger() {
	select {
	case a.triggered <- struct{}{}:
	default:
	}
}

func (a *Agent) logf(format string, args ...any) {
	if a.log != nil {
		fmt.Fprintf(a.log, "staticip-agent: "+format+"\n", args...)
	}
}

// writeIfChanged writes data to path atomically (temp file + rename in the same directory),
// and only when the content differs, so the runtime never sees a half-written file and is not
// woken up for nothing.
func writeIfChanged(path string, data []byte, mode os.FileMode) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Close(); err != nil {
		return false, err
	}
	return true, os.Rename(tmp.Name(), path)
}

// InstallBinary copies the plugin into CNIBinDir/staticip when it differs. While neither the
// source nor the installed file has changed since the last call (same inode, size, mtime
// and ctime), it reads neither: every pass used to read and hash the whole binary twice,
// 3.4% of all busy CPU on a 3-node cluster replacing 50 pods (perf, controllers/README.md).
func (a *Agent) InstallBinary() (bool, error) {
	if a.cfg.PluginBinary == "" {
		return false, nil
	}
	dst := filepath.Join(a.cfg.CNIBinDir, "staticip")
	src, srcErr := stampOf(a.cfg.PluginBinary)
	installed, dstErr := stampOf(dst)
	if last := a.binaryStamps.Load(); srcErr == nil && dstErr == nil && last != nil && *last == [2]fileStamp{src, installed} {
		return false, nil
	}
	a.binaryCompares.Add(1)
	data, err := os.ReadFile(a.cfg.PluginBinary)
	if err != nil {
		return false, err
	}
	changed, err := writeIfChanged(dst, data, 0o755)
	if err != nil {
		return changed, err
	}
	// Stamps taken after the write: a copy that lands between the read and these stats is
	// caught by the next call only if it changes a stamp, which any write does (ctime).
	if src, srcErr = stampOf(a.cfg.PluginBinary); srcErr == nil {
		if installed, dstErr = stampOf(dst); dstErr == nil {
			a.binaryStamps.Store(&[2]fileStamp{src, installed})
		}
	}
	return changed, nil
}

// fileStamp identifies one version of a file without reading it.
type fileStamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
}

func stampOf(path string) (fileStamp, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileStamp{}, err
	}
	return fileStamp{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}, nil
}

// Conflist renders the conflist for this node's ranges.
func (a *Agent) Conflist(ranges []*jkev1.IPRange) ([]byte, error) {
	var rs []map[string]any
	for _, r := range ranges {
		m := map[string]any{"subnet": r.Spec.CIDR}
		if r.Spec.Gateway != "" {
			m["gateway"] = r.Spec.Gateway
		}
		if r.Spec.RangeStart != "" {
			m["rangeStart"] = r.Spec.RangeStart
		}
		if r.Spec.RangeEnd != "" {
			m["rangeEnd"] = r.Spec.RangeEnd
		}
		if len(r.Spec.ExcludeIPs) > 0 {
			m["exclude"] = r.Spec.ExcludeIPs
		}
		rs = append(rs, m)
	}
	p := map[string]any{"type": "staticip", "dataDir": a.cfg.DataDir, "mtu": a.cfg.MTU, "ranges": rs,
		"capabilities": map[string]bool{"io.kubernetes.cri.pod-annotations": true, "ips": true}}
	if a.cfg.PluginKubeconfig != "" {
		p["kubeconfig"] = a.cfg.PluginKubeconfig
	}
	if a.cfg.Quarantine != "" {
		p["quarantine"] = a.cfg.Quarantine
	}
	return json.MarshalIndent(map[string]any{"cniVersion": a.cfg.CNIVersion, "name": "staticip", "plugins": []any{p}}, "", "  ")
}

func toIPAMRange(r *jkev1.IPRange) (ipam.Range, error) {
	var out ipam.Range
	var err error
	if out.Subnet, err = netip.ParsePrefix(r.Spec.CIDR); err != nil {
		return out, err
	}
	for _, f := range []struct {
		s string
		a *netip.Addr
	}{{r.Spec.Gateway, &out.Gateway}, {r.Spec.RangeStart, &out.RangeStart}, {r.Spec.RangeEnd, &out.RangeEnd}} {
		if f.s != "" {
			if *f.a, err = netip.ParseAddr(f.s); err != nil {
				return out, err
			}
		}
	}
	for _, e := range r.Spec.ExcludeIPs {
		x, err := netip.ParseAddr(e)
		if err != nil {
			return out, err
		}
		out.Exclude = append(out.Exclude, x)
	}
	return out.Canonical()
}

// installFiles installs the plugin binary and its kubeconfig: all a node needs for pods to
// start, also while the API server cannot be reached.
func (a *Agent) installFiles() []error {
	var errs []error
	if changed, err := a.InstallBinary(); err != nil {
		errs = append(errs, fmt.Errorf("install binary: %w", err))
	} else if changed {
		a.logf("installed %s", filepath.Join(a.cfg.CNIBinDir, "staticip"))
	}
	if c := a.cfg.PluginCredentials; c != nil && a.cfg.PluginKubeconfig != "" {
		path := filepath.Join(a.cfg.CNIConfDir, filepath.Base(a.cfg.PluginKubeconfig))
		data, err := c.pluginKubeconfig()
		if err == nil {
			var changed bool
			if changed, err = writeIfChanged(path, data, 0o600); changed {
				a.logf("wrote the plugin's kubeconfig %s (server %s)", path, c.Server)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("plugin kubeconfig: %w", err))
		}
	}
	return errs
}

// errNotSynced: the caches have not delivered their initial lists (API server unreachable,
// or Start not called): nothing is judged from a partial picture.
var errNotSynced = errors.New("agent: the IPRange, StaticIP, pod and node caches are not synced yet")

// SyncOnce does one full pass over the informer caches (Start, then WaitForCaches). Each
// step is independent: a failing one is reported, the others still run. The plugin files are
// installed even when the caches are not synced.
func (a *Agent) SyncOnce(ctx context.Context) error {
	errs := a.installFiles()
	if !a.Synced() {
		a.syncsFailed.Add(1)
		return errors.Join(append(errs, errNotSynced)...)
	}
	snap, err := a.view.snapshot()
	if err != nil {
		a.syncsFailed.Add(1)
		return errors.Join(append(errs, err)...)
	}
	var mine, others []*jkev1.IPRange
	var ranges []ipam.Range
	for _, r := range snap.ranges {
		if r.Spec.Node != a.cfg.NodeName {
			others = append(others, r)
			continue
		}
		ir, err := toIPAMRange(r)
		if err != nil {
			errs = append(errs, fmt.Errorf("IPRange %s: %w", r.Name, err))
			continue
		}
		mine = append(mine, r)
		ranges = append(ranges, ir)
	}
	conf, err := a.Conflist(mine)
	confPath := filepath.Join(a.cfg.CNIConfDir, a.cfg.ConfName)
	if _, statErr := os.Stat(confPath); err == nil && len(mine) == 0 && statErr != nil {
		// Without a range no pod can get an IP here: leave the network unconfigured, so the
		// runtime reports NetworkReady=false and the node stays NotReady instead of
		// accepting pods that would all fail.
		a.logf("no IPRange names node %s; not writing %s until one does", a.cfg.NodeName, confPath)
	} else if err == nil {
		var changed bool
		changed, err = writeIfChanged(filepath.Join(a.cfg.CNIConfDir, a.cfg.ConfName), conf, 0o644)
		if changed {
			a.logf("wrote %s with %d range(s)", filepath.Join(a.cfg.CNIConfDir, a.cfg.ConfName), len(mine))
		}
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("conflist: %w", err))
	}

	stats, err := a.syncDB(ranges, snap.staticIPs, snap.pods)
	if err != nil {
		errs = append(errs, err)
	}
	if stats != nil {
		if err := a.writeStatus(ctx, mine, stats.Usage); err != nil {
			errs = append(errs, err)
		}
		if a.cfg.Routes {
			n, unroutable, err := a.syncRoutes(others, snap.nodeIP)
			stats.Routes = n
			if msg := strings.Join(unroutable, ", "); msg != a.unroutable {
				if msg != "" {
					a.logf("no route to IPRanges whose node has no InternalIP yet: %s", msg)
				}
				a.unroutable = msg
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
		a.stats.Store(stats)
	}
	if len(errs) == 0 {
		a.lastSync.Store(time.Now().Unix())
		a.syncsOK.Add(1)
	} else {
		a.syncsFailed.Add(1)
	}
	return errors.Join(errs...)
}

// syncDB brings the database in line with the API in three transactions: ranges,
// reservations, GC.
func (a *Agent) syncDB(ranges []ipam.Range, sips []*jkev1.StaticIP, pods []*corev1.Pod) (*Stats, error) {
	db, err := ipam.Open(ipam.Options{Path: filepath.Join(a.cfg.DataDir, "ipam.db")})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var errs []error
	if kept, err := db.SyncRanges(ranges); err != nil {
		errs = append(errs, fmt.Errorf("sync ranges: %w", err))
	} else if len(kept) > 0 {
		a.logf("ranges %v moved away but still hold allocations; kept until those pods are gone", kept)
	}
	var reservations []ipam.Reservation
	staticIPOf := map[string]string{}
	for _, s := range sips {
		podName := s.Spec.Pod
		if podName == "" {
			podName = s.Name
		}
		staticIPOf[s.Namespace+"/"+podName] = s.Spec.IP
		if s.Spec.Node != a.cfg.NodeName || s.Spec.IP == "" {
			continue
		}
		ip, err := netip.ParseAddr(s.Spec.IP)
		if err != nil {
			errs = append(errs, fmt.Errorf("StaticIP %s/%s: ip %q: %w", s.Namespace, s.Name, s.Spec.IP, err))
			continue
		}
		reservations = append(reservations, ipam.Reservation{IP: ip, Pod: ipam.PodRef{Namespace: s.Namespace, Name: podName}})
	}
	res, err := db.SyncReservations(reservations)
	if err != nil {
		errs = append(errs, fmt.Errorf("sync reservations: %w", err))
	}
	for _, c := range res.Conflicts {
		a.logf("StaticIP reserves %s, but pod %s holds it; it goes to its owner once released", c.IP, c.Pod)
	}

	// GC: an allocation is live while its pod (same UID) exists on this node. Allocations
	// made outside Kubernetes (no pod name) are not the agent's to judge.
	livePods := map[string]bool{}
	for _, p := range pods {
		livePods[string(p.UID)] = true
		livePods[p.Namespace+"/"+p.Name] = true
	}
	allocs, err := db.Allocations()
	if err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	var live []ipam.Attachment
	for _, al := range allocs {
		alive := al.Pod.Name == "" || (al.Pod.UID != "" && livePods[al.Pod.UID]) || (al.Pod.UID == "" && livePods[al.Pod.Key()])
		if alive {
			live = append(live, al.Attachment)
		}
	}
	freed, err := db.GC(ipam.GCOptions{Live: live, KeepReserved: func(al ipam.Allocation) bool {
		ip, ok := staticIPOf[al.Pod.Key()]
		return ok && (ip == "" || ip == al.IP.String())
	}})
	if err != nil {
		errs = append(errs, fmt.Errorf("GC: %w", err))
	}
	for _, f := range freed {
		a.logf("GC: released %s of gone pod %s", f.IP, f.Pod)
	}
	usage, err := db.Usage()
	if err != nil {
		errs = append(errs, err)
	}
	stats := &Stats{Ranges: len(ranges), Reservations: len(reservations), Allocations: len(allocs) - len(freed), Freed: len(freed), Usage: usage}
	return stats, errors.Join(errs...)
}

func (a *Agent) writeStatus(ctx context.Context, mine []*jkev1.IPRange, usage []ipam.RangeUsage) error {
	var errs []error
	for _, r := range mine {
		pfx, err := netip.ParsePrefix(r.Spec.CIDR)
		if err != nil {
			continue
		}
		for _, u := range usage {
			if u.Range.Subnet != pfx {
				continue
			}
			st := r.Status.DeepCopy()
			st.Total, st.Used, st.Reserved, st.Free = int32(u.Total), int32(u.Used), int32(u.Reserved), int32(u.Free)
			st.ObservedGeneration = r.Generation
			if st.Total == r.Status.Total && st.Used == r.Status.Used && st.Reserved == r.Status.Reserved &&
				st.Free == r.Status.Free && st.ObservedGeneration == r.Status.ObservedGeneration {
				continue
			}
			upd := r.DeepCopy() // never mutate the informer's object
			upd.Status = *st
			if _, err := a.sip.JkeV1().IPRanges().UpdateStatus(ctx, upd, metav1.UpdateOptions{}); err != nil {
				errs = append(errs, fmt.Errorf("IPRange %s status: %w", r.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// syncRoutes makes the routes with RouteProtocol exactly "other node's CIDR via its
// InternalIP", in the agent's network namespace. An IPRange whose node has no known InternalIP
// (created before its node joined, say) gets no route and is listed in unroutable: that is no
// failure of this agent, whose health must not depend on it.
func (a *Agent) syncRoutes(others []*jkev1.IPRange, nodeIP func(string) net.IP) (routes int, unroutable []string, err error) {
	want := map[string]*netlink.Route{}
	var errs []error
	for _, r := range others {
		if r.Spec.Node == "" {
			continue
		}
		gw := nodeIP(r.Spec.Node)
		if gw == nil {
			unroutable = append(unroutable, fmt.Sprintf("%s (node %s)", r.Name, r.Spec.Node))
			continue
		}
		_, dst, err := net.ParseCIDR(r.Spec.CIDR)
		if err != nil {
			continue
		}
		if (dst.IP.To4() == nil) != (gw.To4() == nil) {
			continue
		}
		want[dst.String()] = &netlink.Route{Dst: dst, Gw: gw, Protocol: RouteProtocol}
	}
	existing, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return 0, unroutable, errors.Join(append(errs, err)...)
	}
	for _, r := range existing {
		if w, ok := want[r.Dst.String()]; ok && w.Gw.Equal(r.Gw) {
			delete(want, r.Dst.String())
			continue
		}
		if err := netlink.RouteDel(&r); err != nil {
			errs = append(errs, fmt.Errorf("delete route %s: %w", r.Dst, err))
		}
	}
	for _, r := range want {
		if err := netlink.RouteReplace(r); err != nil {
			errs = append(errs, fmt.Errorf("route %s via %s: %w", r.Dst, r.Gw, err))
		}
	}
	all, _ := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: RouteProtocol}, netlink.RT_FILTER_PROTOCOL)
	return len(all), unroutable, errors.Join(errs...)
}

// Run installs the plugin files at once (pods can start with their reserved IPs while the API
// server is out of reach), starts the caches, and syncs as soon as they are synced; then on
// every change that matters (Start) and every interval, never more often than minGap, so a burst
// of pod deletions costs one sync, until ctx ends.
func (a *Agent) Run(ctx context.Context, interval, minGap time.Duration) {
	for _, err := range a.installFiles() {
		a.logf("%v", err)
	}
	if err := a.Start(ctx); err != nil {
		a.logf("caches: %v", err)
		return
	}
	if err := a.WaitForCaches(ctx); err != nil {
		return // ctx ended before the API server answered
	}
	for {
		if err := a.SyncOnce(ctx); err != nil {
			a.logf("sync: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(minGap):
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval - minGap):
		case <-a.triggered:
		}
	}
}
