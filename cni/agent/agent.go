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
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/cni/plugin"
	"github.com/staticip/staticip/ipam"
)

// DefaultCNIVersion is the newest spec version that the runtimes of current Kubernetes
// releases (containerd 1.6 and 1.7, CRI-O) accept in a conflist.
const DefaultCNIVersion = "1.0.0"

// DefaultGCGrace is the default of Config.GCGrace: far beyond any informer lag.
const DefaultGCGrace = 2 * time.Minute

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
	// GCGrace is how old an allocation must be before GC may free it (DefaultGCGrace when
	// zero): a pod whose ADD committed after the pass read the cache, or that the informer has
	// not delivered yet, must not be judged dead.
	GCGrace time.Duration
	// PortMap chains the standard portmap plugin after staticip in the conflist, so that a
	// container port's hostPort works (the runtime hands portMappings only to a plugin that
	// declares the capability). The portmap binary must be in CNIBinDir (kubeadm's and kind's
	// nodes have it); staticip-agent --portmap, on by default.
	PortMap bool
	// PluginCredentials, when set, are written as a kubeconfig to
	// CNIConfDir/filepath.Base(PluginKubeconfig) on every sync, so the plugin (which the
	// runtime execs on the host, outside any pod) can reach the API server with its own
	// node-bound token (credentials.go); the file follows the token as it is renewed.
	PluginCredentials *Credentials
}

// Agent runs the sync.
type Agent struct {
	// withdrawHook replaces withdrawHost (fault-injection tests); nil: withdrawHost.
	withdrawHook func(subnet netip.Prefix, attachments []ipam.Attachment) (int, error)
	cfg          Config
	kube         kubernetes.Interface
	sip          versioned.Interface
	log          io.Writer
	// lastSync is the unix time of the last successful sync (health endpoint).
	lastSync atomic.Int64
	stats    atomic.Pointer[Stats]
	// syncs counts passes by result (metrics): event-driven syncs must stay few.
	syncsOK, syncsFailed atomic.Int64
	// syncsNotSynced counts passes that found the caches not synced yet (waiting for the API
	// server): the plugin files only.
	syncsNotSynced atomic.Int64
	// view holds the informer caches a sync reads (Start); triggered carries "something
	// that matters changed" from their handlers to Run.
	view      *view
	triggered chan struct{}
	// draining names the ranges last found draining (logged on change).
	draining string
	// unroutable names the IPRanges last found without a node address (logged on change).
	unroutable string
	// binaryStamps are the plugin source's and installed copy's stamps after the last
	// install or comparison; binaryCompares counts the comparisons that read the files.
	binaryStamps   atomic.Pointer[[2]fileStamp]
	binaryCompares atomic.Int64
	// lastPass is the unix nanos at which the loop last finished a pass, whatever its result
	// (liveness); apiErrors counts passes whose API writes failed.
	lastPass  atomic.Int64
	apiErrors atomic.Int64
	// rebuilds counts databases rebuilt after corruption.
	rebuilds atomic.Int64
	// recorder records Events on the objects the agent leaves out (Start); reported are the
	// problems of the last pass, so that a standing problem is one Event, not one per pass.
	recorder record.EventRecorder
	reported map[string]string
	// lastObserved is the ObservedAnnotation value this agent last wrote (fence.go).
	lastObserved string
	// lastNetwork is the NetworkUnavailable condition this agent last wrote (network.go).
	lastNetwork string
	// afterSnapshot, when set (tests), runs between a pass's reading of the caches and its
	// use of the database: where a CNI ADD can commit unseen.
	afterSnapshot func()
}

// ConditionSynced is the IPRange condition that says whether the owning node's IPAM serves it.
const ConditionSynced = "Synced"

// DBPath is the plugin's database file of the network the agent writes.
func (a *Agent) DBPath() string { return ipam.NetworkPath(a.cfg.DataDir, NetworkName) }

// Stats are the figures of the last sync (metrics endpoint).
type Stats struct {
	Ranges, Reservations, Allocations, Freed, Routes int
	// SparedYoung and SparedSandbox count the allocations GC left alone although no pod in
	// the cache holds them: younger than the grace period, or their host veth still exists.
	SparedYoung, SparedSandbox int
	// RefusedRanges are the IPRanges no node serves (overlapping, invalid, resized while in
	// use); Duplicates the StaticIPs that contest an IP or a pod.
	RefusedRanges, Duplicates int
	Usage                     []ipam.RangeUsage
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
	if cfg.GCGrace == 0 {
		cfg.GCGrace = DefaultGCGrace
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

// NetworkName is the name of the conflist the agent writes; it also keys the plugin's
// database (<data-dir>/<name>/ipam.db, ipam.ForNetwork).
const NetworkName = "staticip"

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
	plugins := []any{p}
	if a.cfg.PortMap {
		plugins = append(plugins, map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}})
	}
	return json.MarshalIndent(map[string]any{"cniVersion": a.cfg.CNIVersion, "name": NetworkName, "plugins": plugins}, "", "  ")
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

// apiTimeout bounds the API writes of one pass (IPRange status): a pass must never hang on an
// API server that does not answer, or the loop (and the liveness it reports) would stop.
const apiTimeout = 10 * time.Second

// SyncOnce does one full pass over the informer caches (Start, then WaitForCaches). Each
// step is independent: a failing one is reported, the others still run. The plugin files are
// installed even when the caches are not synced. Bad objects (an IPRange overlapping another, a
// StaticIP contesting another's IP) are left out and reported on the objects, not returned:
// they are not the agent's failure.
func (a *Agent) SyncOnce(ctx context.Context) error {
	defer func() { a.lastPass.Store(time.Now().UnixNano()) }()
	errs := a.installFiles()
	if !a.Synced() {
		a.syncsNotSynced.Add(1)
		return errors.Join(append(errs, errNotSynced)...)
	}
	snap, err := a.view.snapshot()
	if err != nil {
		a.syncsFailed.Add(1)
		return errors.Join(append(errs, err)...)
	}
	if a.afterSnapshot != nil {
		a.afterSnapshot()
	}
	plan := planRanges(snap.ranges, a.cfg.NodeName)
	plan.waitForPreviousOwners(holders(snap.observed, a.cfg.NodeName))
	stats, rp, err := a.syncDB(&plan, snap.staticIPs, snap.pods)
	if err != nil {
		errs = append(errs, err)
	}

	conf, err := a.Conflist(plan.mine)
	confPath := filepath.Join(a.cfg.CNIConfDir, a.cfg.ConfName)
	if _, statErr := os.Stat(confPath); err == nil && len(plan.mine) == 0 && statErr != nil {
		// Without a range no pod can get an IP here: leave the network unconfigured, so the
		// runtime reports NetworkReady=false and the node stays NotReady instead of
		// accepting pods that would all fail. An existing conflist is never removed: offline,
		// the node keeps serving its pods from the database.
		a.logf("no IPRange names node %s; not writing %s until one does", a.cfg.NodeName, confPath)
	} else if err == nil {
		var changed bool
		changed, err = writeIfChanged(confPath, conf, 0o644)
		if changed {
			a.logf("wrote %s with %d range(s)", confPath, len(plan.mine))
		}
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("conflist: %w", err))
	}
	a.report(plan, rp)

	if stats != nil {
		apiCtx, cancel := context.WithTimeout(ctx, apiTimeout)
		err := a.writeStatus(apiCtx, plan, stats.Usage)
		cancel()
		if err != nil {
			a.apiErrors.Add(1)
			errs = append(errs, err)
		}
		routesOK := true
		if a.cfg.Routes {
			n, unroutable, err := a.syncRoutes(plan.others, snap.nodeIP)
			routesOK = err == nil
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
		if routesOK && !plan.reservationsFailed {
			apiCtx, cancel := context.WithTimeout(ctx, apiTimeout)
			err := a.reportObserved(apiCtx, observedRanges(a.cfg.NodeName, plan.mine, plan.others, plan.draining, a.cfg.Routes, snap.nodeIP), a.view.observedAnnotation(a.cfg.NodeName))
			cancel()
			if err != nil {
				a.apiErrors.Add(1)
				errs = append(errs, err)
			}
		}
		apiCtx, cancel = context.WithTimeout(ctx, apiTimeout)
		err = a.reportNetwork(apiCtx, plan, a.view.networkCondition(a.cfg.NodeName))
		cancel()
		if err != nil {
			a.apiErrors.Add(1)
			errs = append(errs, err)
		}
		stats.RefusedRanges = len(plan.refused)
		stats.Duplicates = len(rp.duplicates)
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

// syncDB brings the database in line with the API: ranges, reservations, GC, each one
// transaction, all under the database lock (no CNI call commits in between). The agent is the
// only one that changes the node's ranges (SetNodeRanges): ranges that left the node drain. It
// drops from plan the ranges the database cannot take yet (dropSkipped).
func (a *Agent) syncDB(plan *rangePlan, sips []*jkev1.StaticIP, pods []*corev1.Pod) (*Stats, reservationPlan, error) {
	var rp reservationPlan
	db, err := ipam.Open(ipam.ForNetwork(a.cfg.DataDir, NetworkName))
	if errors.Is(err, ipam.ErrCorrupt) {
		db, err = a.rebuild(plan, sips, pods)
	}
	if err != nil {
		return nil, rp, err
	}
	defer db.Close()
	if _, recovering, err := db.Recovering(); err != nil {
		return nil, rp, err
	} else if recovering { // an agent died half-way through a rebuild: do it again
		if err := a.finishRebuild(db, plan, sips, pods); err != nil {
			return nil, rp, err
		}
	}
	// Forced moves first (fence.go): a range this node served at an older ownership generation
	// goes before anything else reads or applies the node's ranges. Should that fail, nothing
	// of this pass is applied: a revoked range must never be served, nor its generation
	// recorded as newly served.
	served, err := db.Served()
	if err != nil {
		return nil, rp, err
	}
	if err := a.revoke(db, planRevocations(served, plan.byName)); err != nil {
		return nil, rp, err
	}
	// Recorded before the ranges are applied, so that no range is ever served unrecorded.
	if err := db.RecordServed(servedRecords(plan.mine, plan.ipam)); err != nil {
		return nil, rp, fmt.Errorf("recording served ranges: %w", err)
	}
	allocs, err := db.Allocations()
	if err != nil {
		return nil, rp, err
	}
	existing, err := db.Reservations()
	if err != nil {
		return nil, rp, err
	}
	var errs []error
	if rs, err := db.SetNodeRanges(plan.ipam); err != nil {
		errs = append(errs, fmt.Errorf("sync ranges: %w", err))
	} else {
		if d := fmt.Sprint(rs.Draining); len(rs.Draining) > 0 && d != a.draining {
			a.logf("ranges %v moved away but still hold allocations; they drain (nothing new is allocated from them)", rs.Draining)
			a.draining = d
		}
		plan.dropSkipped(rs.Skipped)
		if stored, err := db.Ranges(); err == nil {
			plan.draining = drainingHeld(served, plan.mine, stored, plan.byName)
			if stale := staleServed(served, plan.mine, stored); len(stale) > 0 {
				if err := db.ForgetServed(stale...); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}

	holder := make(map[netip.Addr]string, len(allocs))
	for _, al := range allocs {
		holder[al.IP] = al.Pod.Key()
	}
	reservedFor := make(map[netip.Addr]string, len(existing))
	for _, r := range existing {
		reservedFor[r.IP] = r.Pod.Key()
	}
	rp = planReservations(sips, plan.ipam, holder, reservedFor)
	res, err := db.SyncReservations(rp.reservations)
	if err != nil {
		// A range is reported Synced only once every StaticIP IP in it is reserved (a range
		// that failover just moved here must not look ready before its addresses are held).
		plan.reservationsFailed = true
		errs = append(errs, fmt.Errorf("sync reservations: %w", err))
	}
	for _, c := range res.Conflicts {
		a.logf("StaticIP reserves %s, but pod %s holds it; it goes to its owner once released", c.IP, c.Pod)
	}

	stats := &Stats{Ranges: len(plan.ipam), Reservations: len(rp.reservations)}
	freed, err := a.gc(db, allocs, sips, pods, stats)
	if err != nil {
		errs = append(errs, fmt.Errorf("GC: %w", err))
	}
	stats.Allocations, stats.Freed = len(allocs)-len(freed), len(freed)
	if stats.Usage, err = db.Usage(); err != nil {
		errs = append(errs, err)
	}
	return stats, rp, errors.Join(errs...)
}

// rebuild replaces a corrupt database: ipam.Recover moves the file aside (never deleting it)
// and opens a fresh store that refuses every allocation; finishRebuild fills it from the API
// and the host and only then lets ADD allocate again. All of it under the database lock.
func (a *Agent) rebuild(plan *rangePlan, sips []*jkev1.StaticIP, pods []*corev1.Pod) (*ipam.DB, error) {
	db, err := ipam.Recover(ipam.ForNetwork(a.cfg.DataDir, NetworkName))
	if err != nil {
		return nil, fmt.Errorf("rebuilding the corrupt IPAM database: %w", err)
	}
	if err := a.finishRebuild(db, plan, sips, pods); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// finishRebuild sets the node's ranges and reservations, imports an allocation for every IP
// the host routes to one of the plugin's veths (named after the pod the cache shows with that
// IP), and ends the recovery. An IP in use on the host is never handed out again: the running
// pods keep theirs, and nothing allocates before the import is complete.
func (a *Agent) finishRebuild(db *ipam.DB, plan *rangePlan, sips []*jkev1.StaticIP, pods []*corev1.Pod) error {
	st, _, err := db.Recovering()
	if err != nil {
		return err
	}
	if rs, err := db.SetNodeRanges(plan.ipam); err != nil {
		return fmt.Errorf("rebuild: ranges: %w", err)
	} else {
		plan.dropSkipped(rs.Skipped)
	}
	rp := planReservations(sips, plan.ipam, nil, nil)
	if _, err := db.SyncReservations(rp.reservations); err != nil {
		return fmt.Errorf("rebuild: reservations: %w", err)
	}
	found, err := hostAttachments(pods)
	if err != nil {
		return fmt.Errorf("rebuild: reading the host's veths and routes: %w", err)
	}
	res, err := db.Import(found)
	if err != nil {
		return fmt.Errorf("rebuild: import: %w", err)
	}
	for _, c := range res.Conflicts {
		a.logf("rebuild: %s on %s (pod %s) conflicts with an imported allocation; not imported", c.IP, c.Attachment.ContainerID, c.Pod)
	}
	if err := db.FinishRecovery(); err != nil {
		return err
	}
	a.logf("the IPAM database was corrupt: moved aside to %s; rebuilt from the API (%d range(s), %d reservation(s)) and the host (%d allocation(s) imported, %d already there)",
		st.MovedAside, len(plan.ipam), len(rp.reservations), res.Imported, res.Unchanged)
	a.rebuilds.Add(1)
	return nil
}

// hostAttachments are the allocations the host shows: every /32 (/128) route to one of the
// plugin's veths, with the pod the cache holds with that IP, if any.
func hostAttachments(pods []*corev1.Pod) ([]ipam.Allocation, error) {
	names, err := pluginLinks()
	if err != nil {
		return nil, err
	}
	routes, err := netlink.RouteList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, err
	}
	podOf := map[netip.Addr]ipam.PodRef{}
	for _, p := range pods {
		for _, pip := range p.Status.PodIPs {
			if ip, err := netip.ParseAddr(pip.IP); err == nil {
				podOf[ip.Unmap()] = ipam.PodRef{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}
			}
		}
	}
	var out []ipam.Allocation
	for _, r := range routes {
		link, ok := names[r.LinkIndex]
		if !ok || r.Dst == nil {
			continue
		}
		if ones, bits := r.Dst.Mask.Size(); ones != bits {
			continue
		}
		ip, ok := netip.AddrFromSlice(r.Dst.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		out = append(out, ipam.Allocation{IP: ip, Attachment: ipam.RecoveredAttachment(link), Pod: podOf[ip]})
	}
	return out, nil
}

// gc frees the allocations judge finds dead. Without the list of host veths it frees nothing:
// it cannot tell a running sandbox from a gone one.
func (a *Agent) gc(db *ipam.DB, allocs []ipam.Allocation, sips []*jkev1.StaticIP, pods []*corev1.Pod, stats *Stats) ([]ipam.Allocation, error) {
	veths, err := hostVeths()
	if err != nil {
		return nil, fmt.Errorf("listing host veths (nothing freed): %w", err)
	}
	ix := indexPods(pods)
	now := time.Now()
	var live []ipam.Attachment
	for _, al := range allocs {
		free, spared := judge(al, ix, veths, now, a.cfg.GCGrace)
		switch spared {
		case spareYoung:
			stats.SparedYoung++
		case spareSandbox:
			stats.SparedSandbox++
		}
		if !free {
			live = append(live, al.Attachment)
		}
	}
	// A freed IP whose pod still has a StaticIP (recording this IP, or none yet) stays
	// reserved for it.
	staticIPsOf := map[string][]string{}
	for _, s := range sips {
		k := sipPod(s).Key()
		staticIPsOf[k] = append(staticIPsOf[k], s.Spec.IP)
	}
	freed, err := db.GC(ipam.GCOptions{Live: live, KeepReserved: func(al ipam.Allocation) bool {
		for _, ip := range staticIPsOf[al.Pod.Key()] {
			if ip == "" || ip == al.IP.String() {
				return true
			}
		}
		return false
	}})
	for _, f := range freed {
		a.logf("GC: released %s of gone pod %s (container %s, allocated %s)", f.IP, f.Pod, f.Attachment.ContainerID, f.AllocatedAt.Format(time.RFC3339))
	}
	return freed, err
}

// pluginLinks are the plugin's host-side veths in this network namespace, by link index.
func pluginLinks() (map[int]string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, err
	}
	names := map[int]string{}
	for _, l := range links {
		if n := l.Attrs().Name; strings.HasPrefix(n, plugin.HostVethPrefix) {
			names[l.Attrs().Index] = n
		}
	}
	return names, nil
}

// hostVeths are the names of the plugin's host-side veths in this network namespace.
func hostVeths() (map[string]bool, error) {
	links, err := pluginLinks()
	names := make(map[string]bool, len(links))
	for _, n := range links {
		names[n] = true
	}
	return names, err
}

// report records an Event for every problem of this pass that the last pass did not have:
// the IPRanges of this node left out, the StaticIPs that contest an IP, the StaticIPs whose IP
// does not parse. The same problem pass after pass is one Event.
func (a *Agent) report(plan rangePlan, rp reservationPlan) {
	now := map[string]string{}
	emit := func(obj runtime.Object, key, reason, msg string) {
		now[key] = reason + msg
		if a.reported[key] == reason+msg {
			return
		}
		a.logf("%s: %s", key, msg)
		if a.recorder != nil {
			a.recorder.Event(obj, corev1.EventTypeWarning, reason, msg)
		}
	}
	for _, r := range plan.refusedMine {
		why := plan.refused[r.Name]
		emit(r, "IPRange "+r.Name, why.Reason, why.Message)
	}
	for _, d := range rp.duplicates {
		emit(d.sip, "StaticIP "+d.sip.Namespace+"/"+d.sip.Name, ReasonDuplicateIP, d.message())
	}
	for _, s := range rp.invalid {
		emit(s, "StaticIP "+s.Namespace+"/"+s.Name, ReasonInvalidIP, fmt.Sprintf("spec.ip %q is not an IP address; nothing is reserved for this record", s.Spec.IP))
	}
	a.reported = now
}

// writeStatus writes the counts and the Synced condition of this node's IPRanges, each only
// when it changed: True for the ranges the node serves, False with the reason for those it
// leaves out.
func (a *Agent) writeStatus(ctx context.Context, plan rangePlan, usage []ipam.RangeUsage) error {
	var errs []error
	update := func(r *jkev1.IPRange, st *jkev1.IPRangeStatus) {
		if reflect.DeepEqual(*st, r.Status) {
			return
		}
		upd := r.DeepCopy() // never mutate the informer's object
		upd.Status = *st
		_, err := a.sip.JkeV1().IPRanges().UpdateStatus(ctx, upd, metav1.UpdateOptions{})
		switch {
		case apierrors.IsConflict(err):
			// Our cache lags a newer version (often our own last write): no API failure. The
			// next pass, triggered now, writes from the newer version once the watch delivers it.
			a.logf("IPRange %s status: a newer version exists than the one cached; writing it again on the next pass", r.Name)
			a.trigger()
		case err != nil:
			errs = append(errs, fmt.Errorf("IPRange %s status: %w", r.Name, err))
		}
	}
	for _, r := range plan.mine {
		pfx, err := netip.ParsePrefix(r.Spec.CIDR)
		if err != nil {
			continue
		}
		st := r.Status.DeepCopy()
		for _, u := range usage {
			if u.Range.Subnet == pfx {
				st.Total, st.Used, st.Reserved, st.Free = int32(u.Total), int32(u.Used), int32(u.Reserved), int32(u.Free)
			}
		}
		st.ObservedGeneration = r.Generation
		cond := metav1.Condition{Type: ConditionSynced, Status: metav1.ConditionTrue,
			Reason: ReasonServing, Message: fmt.Sprintf("node %s allocates from this range", a.cfg.NodeName), ObservedGeneration: r.Generation}
		if plan.reservationsFailed {
			cond.Status, cond.Reason = metav1.ConditionFalse, ReasonReservationsFailed
			cond.Message = fmt.Sprintf("node %s could not reserve the StaticIPs' addresses in this range yet; it retries", a.cfg.NodeName)
		}
		meta.SetStatusCondition(&st.Conditions, cond)
		update(r, st)
	}
	for _, r := range plan.refusedMine {
		why := plan.refused[r.Name]
		st := r.Status.DeepCopy()
		st.ObservedGeneration = r.Generation
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionSynced, Status: metav1.ConditionFalse,
			Reason: why.Reason, Message: why.Message, ObservedGeneration: r.Generation})
		update(r, st)
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
// server is out of reach), starts the caches, and runs a pass at once, as soon as the caches
// have synced, on every change that matters (Start) and every interval, never more often than
// minGap (a burst of pod deletions costs one pass), until ctx ends. It never waits for the API
// server: every turn of the loop counts for liveness (/healthz), whatever the API server does;
// only full passes count for readiness (/readyz).
func (a *Agent) Run(ctx context.Context, interval, minGap time.Duration) {
	for _, err := range a.installFiles() {
		a.logf("%v", err)
	}
	if err := a.Start(ctx); err != nil {
		a.logf("caches: %v", err)
		return
	}
	go func() {
		if a.WaitForCaches(ctx) == nil {
			a.trigger()
		}
	}()
	waiting := false
	for {
		err := a.SyncOnce(ctx)
		switch {
		case errors.Is(err, errNotSynced) && len(errorsOf(err)) == 1:
			if !waiting {
				a.logf("caches not synced yet (waiting for the API server); the plugin is installed and serves pods from its database meanwhile")
			}
			waiting = true
		case err != nil:
			a.logf("sync: %v", err)
		default:
			waiting = false
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

// errorsOf unwraps a joined error.
func errorsOf(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
