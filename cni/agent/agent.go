// Package agent is staticip-agent, the per-node companion of the staticip CNI plugin: it
// installs the plugin binary and its conflist (atomically, only when changed), syncs this
// node's IPRanges and StaticIP reservations into the plugin's bbolt database, garbage-collects
// IPs of pods that are gone (never one a StaticIP holds), writes IPRange status counts, and
// programs host routes to the other nodes' IPRanges, and masquerades pod traffic that leaves the
// cluster (nat.go).
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/knftables"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
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
	// NAT is the outgoing NAT of pod traffic leaving the cluster (nat.go).
	NAT NATConfig
	// BGP is the advertisement of the node's ranges to the BGPPeers (bgp.go).
	BGP BGPConfig
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
	// gcReleased counts the IPs GC released, every pass.
	gcReleased atomic.Int64
	// recorder records Events on the objects the agent leaves out (Start); reported are the
	// problems of the last pass, so that a standing problem is one Event, not one per pass.
	recorder record.EventRecorder
	reported map[string]string
	// lastObserved is the ObservedAnnotation value this agent last wrote (fence.go).
	lastObserved string
	// labelled: this agent has put jkev1.LabelClaimsInStatus on its Node (fence.go).
	labelled bool
	// routeLease is this node's route-report Lease as last written or read (fence.go); nil:
	// read it again before the next write.
	routeLease *coordinationv1.Lease
	// lastNetwork is the NetworkUnavailable condition this agent last wrote (network.go).
	lastNetwork string
	// metrics is the agent's registry (metrics.go); allocations counts the allocations passes
	// found made after allocSeen (the newest seen so far, at first the agent's start).
	metrics     *prometheus.Registry
	allocations *prometheus.CounterVec
	allocSeen   time.Time
	// afterSnapshot, when set (tests), runs between a pass's reading of the caches and its
	// use of the database: where a CNI ADD can commit unseen.
	afterSnapshot func()
	// nft is the NAT table's nftables handle (nat.go), opened by the first pass that keeps it;
	// natErrors counts failed NAT syncs, natSources the source CIDRs last written, lastNAT the
	// plan last logged.
	nft        knftables.Interface
	natErrors  atomic.Int64
	natSources atomic.Int64
	lastNAT    string
	// natFailure is the NAT error last reported as an Event ("" while the table is in place).
	natFailure string
	// bgp is the BGP speaker and what the agent remembers of it between passes (bgp.go);
	// bgpReport its last pass's picture, read by the metrics at scrape time.
	bgp       bgpState
	bgpReport atomic.Pointer[bgpReport]
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
	// RangeOrigins name the IPRange (and its IPPool, if the range allocator made it) of each
	// subnet of Usage: the iprange and pool labels of the address metrics.
	RangeOrigins map[netip.Prefix]RangeOrigin
	// Calls are the CNI plugin's call counters in the database (ipam.CallStats).
	Calls ipam.CallStats
}

// RangeOrigin is where a subnet of this node's database comes from.
type RangeOrigin struct{ IPRange, Pool string }

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
	a := &Agent{cfg: cfg, kube: kube, sip: sip, log: log, triggered: make(chan struct{}, 1), allocSeen: time.Now()}
	a.metrics = a.newMetrics()
	return a
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
	snap, err := a.view.snapshot(a.cfg.NodeName)
	if errors.Is(err, errNotSynced) {
		a.syncsNotSynced.Add(1)
		return errors.Join(append(errs, err)...)
	}
	if err != nil {
		a.syncsFailed.Add(1)
		return errors.Join(append(errs, err)...)
	}
	if a.afterSnapshot != nil {
		a.afterSnapshot()
	}
	plan := planRanges(snap.ranges, a.cfg.NodeName)
	plan.namespacePools = snap.namespacePools
	held := claims(snap.ranges, snap.legacy, a.cfg.NodeName)
	plan.ownReport = ownClaims(snap.ranges, snap.ownReport, a.cfg.NodeName)
	stats, rp, err := a.syncDB(&plan, held, snap.staticIPs, snap.pods)
	if err != nil {
		errs = append(errs, err)
	}
	if !plan.waited {
		// The database could not say what this node holds: wait for every other claim.
		plan.waitForPreviousOwners(held, nil)
	}
	if stats != nil {
		// BGP first, before anything else of the pass: a range this node no longer holds (it
		// moved away; the node comes back from a fence) is withdrawn from the peers at once;
		// one it now holds is announced as soon as it serves it. Only from a pass whose
		// database said what the node drains: without it the announcements stay as they are.
		if err := a.syncBGP(ctx, snap, bgpHeld(plan.mine, plan.draining, plan.byName)); err != nil {
			errs = append(errs, err)
		}
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
	// The ranges this node holds of a family it has no InternalIP of: their claims carry no
	// address, so no node routes them here; said on the range (condition, Event).
	selfAddrs := addrsByFamily(snap.selfAddrs)
	missing := missingFamilies(selfAddrs, plan.mine, plan.draining, plan.byName)
	a.report(plan, rp, missing)
	if a.cfg.NAT.Enabled {
		// Every pass writes the whole table: a range moved, a natOutgoing flipped or a rule
		// deleted by hand is followed within a pass.
		nat := planNAT(a.cfg.NAT, snap.ranges, plan.accepted, snap.nodeAddrs)
		err := a.syncNAT(ctx, nat)
		a.reportNAT(err)
		if err != nil {
			errs = append(errs, err)
		} else {
			a.natSources.Store(int64(len(nat.sources[0]) + len(nat.sources[1])))
		}
	}

	if stats != nil {
		apiCtx, cancel := context.WithTimeout(ctx, apiTimeout)
		// The claims (this node's entries of status.holders) go out with the counts, whatever
		// else of the pass failed: a claim never waits for unrelated work.
		own := ownHolders(a.cfg.NodeName, selfAddrs, plan.mine, plan.draining, plan.byName)
		err := a.writeStatus(apiCtx, plan, stats.Usage, snap.ranges, own, missing)
		cancel()
		if err != nil {
			a.apiErrors.Add(1)
			errs = append(errs, err)
		}
		// Once this node's claims are in status.holders its Node may say so (the label takes
		// its annotation's claims out of the other agents' view): never before. Read from the
		// IPRanges as this pass saw them, not from this pass's write (a conflict leaves a claim
		// unwritten without an error): the label follows on the pass after the claims show.
		claimsWritten := claimsInStatus(snap.ranges, a.cfg.NodeName, own)
		// Routes go to the address of the node that holds addresses of each range (claims.go);
		// the report is written whatever else failed: a route that cannot be programmed leaves
		// only its own entry out.
		routes := planRoutes(plan.accepted, a.cfg.NodeName, plan.holdsItself, held)
		var programmed map[string]bool
		if a.cfg.Routes {
			n, unroutable, done, err := a.syncRoutes(routes, holderAddresses(snap.ranges, snap.legacyAddresses))
			stats.Routes, programmed = n, done
			if msg := strings.Join(unroutable, ", "); msg != a.unroutable {
				if msg != "" {
					a.logf("no new route to IPRanges whose holder's address is not known yet (a route they have stays): %s", msg)
				}
				a.unroutable = msg
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
		// The claims go on the Node (agents of the previous release read them there; they change
		// only with this node's own ranges), the routes to the ranges node failover waits for
		// into the node's route-report Lease (fence.go), which only the failover controller
		// watches: a failover costs no Node write on the nodes that only route to it.
		apiCtx, cancel = context.WithTimeout(ctx, apiTimeout)
		observed, claimsInStatus := a.view.ownReport(a.cfg.NodeName)
		err = a.reportObserved(apiCtx, observedRanges(a.cfg.NodeName, plan.mine, nil, plan.draining, nil), observed, claimsInStatus, claimsWritten)
		if err != nil {
			a.apiErrors.Add(1)
			errs = append(errs, err)
		}
		marked := MarkedRanges(plan.accepted)
		err = a.reportRoutes(apiCtx, snap.selfUID, routeReport(observedRanges(a.cfg.NodeName, plan.mine, reportedRoutes(routes), plan.draining, programmed), marked), marked)
		cancel()
		if err != nil {
			a.apiErrors.Add(1)
			errs = append(errs, err)
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
		a.gcReleased.Add(int64(stats.Freed))
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

// report records an Event for every problem of this pass that the last pass did not have:
// the IPRanges of this node left out, the StaticIPs that contest an IP, the StaticIPs whose IP
// does not parse. The same problem pass after pass is one Event.
func (a *Agent) report(plan rangePlan, rp reservationPlan, missing map[string]string) {
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
	for _, r := range plan.mine {
		if by := plan.contested[r.Name]; len(by) > 0 {
			emit(r, "IPRange "+r.Name, ReasonClaimContested, fmt.Sprintf(
				"node %s serves this range, yet node(s) %s report holding addresses of it at its generation (Node annotation %s); a claim never takes a served range away, so %s keeps serving it: check those nodes",
				a.cfg.NodeName, strings.Join(by, ", "), ObservedAnnotation, a.cfg.NodeName))
		}
	}
	for name, family := range missing {
		if r := plan.byName[name]; r != nil {
			emit(r, "IPRange "+name+" address", ReasonNoNodeAddressOfFamily, noAddressMessage(a.cfg.NodeName, family))
		}
	}
	for _, d := range rp.duplicates {
		emit(d.sip, "StaticIP "+d.sip.Namespace+"/"+d.sip.Name, ReasonDuplicateIP, d.message())
	}
	for _, s := range rp.invalid {
		emit(s, "StaticIP "+s.Namespace+"/"+s.Name, ReasonInvalidIP, fmt.Sprintf("spec.ip/spec.ips %q is not one IP address or one per IP family; nothing is reserved for this record", s.Spec.Addresses()))
	}
	a.reported = now
}

// writeStatus writes, each only when it changed, this node's claims — its entry of
// status.holders in every IPRange (own: the entries it should have, by range name; an entry it
// has where it holds nothing any more is removed) — and the counts and the Synced condition of
// the IPRanges it owns: True for the ranges it serves, False with the reason for those it
// leaves out. One status write per range, and none for a range where nothing changed.
func (a *Agent) writeStatus(ctx context.Context, plan rangePlan, usage []ipam.RangeUsage, ranges []*jkev1.IPRange, own map[string]jkev1.IPRangeHolder, missing map[string]string) error {
	var errs []error
	statuses := map[string]*jkev1.IPRangeStatus{}
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
		cond := ServingCondition(a.cfg.NodeName, r.Generation)
		if plan.reservationsFailed {
			cond.Status, cond.Reason = metav1.ConditionFalse, ReasonReservationsFailed
			cond.Message = fmt.Sprintf("node %s could not reserve the StaticIPs' addresses in this range yet; it retries", a.cfg.NodeName)
		}
		meta.SetStatusCondition(&st.Conditions, cond)
		routableCondition(st, a.cfg.NodeName, r.Generation, missing[r.Name])
		statuses[r.Name] = st
	}
	for _, r := range plan.refusedMine {
		why := plan.refused[r.Name]
		st := r.Status.DeepCopy()
		st.ObservedGeneration = r.Generation
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionSynced, Status: metav1.ConditionFalse,
			Reason: why.Reason, Message: why.Message, ObservedGeneration: r.Generation})
		statuses[r.Name] = st
	}
	for _, r := range ranges {
		st := statuses[r.Name]
		if st == nil {
			st = r.Status.DeepCopy()
		}
		st.Holders, _ = withHolder(st.Holders, a.cfg.NodeName, ownEntry(own, r.Name))
		if reflect.DeepEqual(*st, r.Status) {
			continue
		}
		upd := r.DeepCopy() // never mutate the informer's object
		upd.Status = *st
		_, err := a.sip.JkeV1().IPRanges().UpdateStatus(ctx, upd, metav1.UpdateOptions{})
		switch {
		case apierrors.IsConflict(err):
			// Our cache lags a newer version (often our own last write, or another holder's
			// claim): no API failure. The next pass, triggered now, writes from the newer
			// version once the watch delivers it.
			a.logf("IPRange %s status: a newer version exists than the one cached; writing it again on the next pass", r.Name)
			a.trigger()
		case apierrors.IsNotFound(err):
		case err != nil:
			errs = append(errs, fmt.Errorf("IPRange %s status: %w", r.Name, err))
		}
	}
	return errors.Join(errs...)
}

// routableCondition sets the Routable condition of a range the node serves: False while the node
// has no InternalIP of the range's family (missingFamily names it), absent otherwise (a range is
// routable unless said so; no write for every range that is).
func routableCondition(st *jkev1.IPRangeStatus, node string, generation int64, missingFamily string) {
	if missingFamily == "" {
		meta.RemoveStatusCondition(&st.Conditions, ConditionRoutable)
		return
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionRoutable, Status: metav1.ConditionFalse,
		Reason: ReasonNoNodeAddressOfFamily, Message: noAddressMessage(node, missingFamily), ObservedGeneration: generation})
}

// noAddressMessage says why a range of node is not routed to it: the node has no InternalIP of
// the range's family.
func noAddressMessage(node, family string) string {
	return fmt.Sprintf("node %s has no %s InternalIP: its claim on this %s range carries no address, so no other node and no "+
		"control plane routes the range to it (an %s route needs an %s next hop); pods on %s get its addresses but are reachable "+
		"only from that node. Give the node an %s address (kubelet --node-ip=<IPv4>,<IPv6>), or take the range's pool off it",
		node, family, family, family, family, node, family)
}

// ServingCondition is the Synced condition of a range that node allocates from, at generation.
func ServingCondition(node string, generation int64) metav1.Condition {
	return metav1.Condition{Type: ConditionSynced, Status: metav1.ConditionTrue,
		Reason: ReasonServing, Message: fmt.Sprintf("node %s allocates from this range", node), ObservedGeneration: generation}
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
	defer a.stopBGP()
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
