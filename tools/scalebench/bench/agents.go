package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	sipclient "github.com/staticip/staticip/apis/generated/clientset/versioned"
	sipinformers "github.com/staticip/staticip/apis/generated/informers/externalversions"
	"github.com/staticip/staticip/apis/iprangelabel"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/cni/agent"
	"github.com/staticip/staticip/controllers/pkg/nodefailover"
	"github.com/staticip/staticip/internal/kubeclient"
)

// Agents plays the staticip-agent of every Ready kwok node in one goroutine (kwok nodes run
// no agent): what a real agent reports once it has served its ranges and programmed its
// routes, with the agent's own functions (cni/agent: ObservedReports, RouteReports, RouteLease,
// ServingCondition):
//   - on every Ready node, the ObservedAnnotation: its own ranges' claims, nothing else;
//   - for every Ready node, its route-report Lease (jkev1.NamespaceRouteReports/<node>): its
//     routes to the ranges node failover waits for (marked jkev1.AnnotationReportRoutes);
//   - on every range whose node is Ready, status Synced=True at its generation and the node's
//     claim (its entry of status.holders, Serving, with its InternalIP).
//
// A NotReady node reports nothing (its agent is off with it). The reports are written as soon
// as the harness's informers show a change (a real agent: its next pass). Its API requests go
// through their own counting proxy.
type Agents struct {
	Proxy *CountingProxy
	// AnnotationBytes counts the bytes of annotation values written (the Nodes' claims and the
	// Leases' route reports).
	AnnotationBytes atomic.Int64
	// traffic, while set (Record), accounts each agent's request bodies and what its watches
	// would deliver to it (the harness sees every event; Recipients says whose it is).
	traffic atomic.Pointer[Traffic]

	kube   kubernetes.Interface
	sip    sipclient.Interface
	nodes  cache.Indexer
	ranges cache.Indexer
	dirty  chan struct{}
	// written is the last report written per node: a node whose cache still shows the older
	// one is not patched again (the real agent's lastObserved).
	written map[string]string
	// leases is each node's route-report Lease as last written (nil: not known; read again).
	leases map[string]*coordinationv1.Lease
	mu     sync.Mutex
	// inflight names the writes under way ("sync/<range>", "node/<node>", "lease/<node>"): a
	// pass does not start one of a kind twice, and is not clean while any runs.
	inflight map[string]bool
	// syncSlots and reportSlots bound the writes under way. A pass does not wait for its writes:
	// real agents act side by side, so one node's Synced never waits behind other nodes' reports
	// (it did when a pass wrote 16 at a time and waited for all of them); the API server is the
	// bound, as in a real cluster. The range owners' writes have slots of their own.
	syncSlots, reportSlots chan struct{}
	// seq counts the changes seen; clean is the seq a pass found nothing to write at.
	seq, clean atomic.Int64
	stop       context.CancelFunc
	done       sync.WaitGroup
}

// How many of the simulated agents' writes may be under way at once: the range owners' status
// writes, and the claims and route reports of every node.
const (
	agentSyncWriters   = 64
	agentReportWriters = 512
)

// StartAgents starts the simulated agents; Stop ends them.
func (c *Cluster) StartAgents(ctx context.Context) (*Agents, error) {
	p, err := NewCountingProxy(c.Config)
	if err != nil {
		return nil, err
	}
	c.proxies = append(c.proxies, p)
	cfg := p.ClientConfig()
	// No client-side limit: each real agent has a client of its own (the API server's priority
	// and fairness is the limit they meet, and this one meets it too).
	cfg.QPS, cfg.Burst = -1, 0
	a := &Agents{Proxy: p, dirty: make(chan struct{}, 1), written: map[string]string{}, leases: map[string]*coordinationv1.Lease{},
		inflight: map[string]bool{}, syncSlots: make(chan struct{}, agentSyncWriters), reportSlots: make(chan struct{}, agentReportWriters)}
	if a.kube, err = kubeclient.Kubernetes(cfg); err != nil { // protobuf, as the agent's own client
		return nil, err
	}
	// The route reports' namespace, as the install creates it (manifests/cni/node-routes.yaml).
	if err := c.EnsureNamespace(ctx, jkev1.NamespaceRouteReports); err != nil {
		return nil, err
	}
	if a.sip, err = sipclient.NewForConfig(cfg); err != nil {
		return nil, err
	}
	ctx, a.stop = context.WithCancel(ctx)
	kf := informers.NewSharedInformerFactory(a.kube, 0)
	sf := sipinformers.NewSharedInformerFactory(a.sip, 0)
	nodeInf, rangeInf := kf.Core().V1().Nodes().Informer(), sf.Jke().V1().IPRanges().Informer()
	// Only for the accounting: each agent watches the StaticIPs of its ranges and the unlabelled
	// ones (cni/agent.StaticIPScopes); the harness sees them all and accounts each to its watchers.
	sipInf := sf.Jke().V1().StaticIPs().Informer()
	for _, h := range []struct {
		inf  cache.SharedIndexInformer
		poke bool
	}{{nodeInf, true}, {rangeInf, true}, {sipInf, false}} {
		if _, err := h.inf.AddEventHandler(a.handler(h.poke)); err != nil {
			a.stop()
			return nil, err
		}
	}
	a.nodes, a.ranges = nodeInf.GetIndexer(), rangeInf.GetIndexer()
	kf.Start(ctx.Done())
	sf.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), nodeInf.HasSynced, rangeInf.HasSynced, sipInf.HasSynced) {
		a.stop()
		return nil, fmt.Errorf("simulated agents: caches not synced")
	}
	a.clean.Store(-1) // no pass yet
	a.done.Add(1)
	go a.run(ctx)
	return a, nil
}

// handler pokes the loop (when poke) and accounts the event while recording.
func (a *Agents) handler(poke bool) cache.ResourceEventHandlerFuncs {
	seen := func(old, o any) {
		if poke && passInputChanged(old, o) {
			a.poke()
		}
		if t := a.traffic.Load(); t != nil {
			if ev, ok := watchEventOf(o); ok {
				if sip, ok := o.(*jkev1.StaticIP); ok {
					if v, labelled := sip.Labels[iprangelabel.Key]; labelled {
						ev.Scoped, ev.Watchers = true, agent.StaticIPWatchers(a.rangeList(), v)
					}
				}
				t.Watched(ev)
			}
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: func(o any) { seen(nil, o) }, UpdateFunc: seen, DeleteFunc: func(o any) { seen(nil, o) }}
}

// passInputChanged says whether an update changes what a pass reads: for a Node its readiness,
// addresses, claims annotation and label — not a status heartbeat, which 5,000 kwok nodes send
// all the time and which made the harness recompute every node's reports for each (CPU taken from
// the API server on the same machine; a real agent's informer of its own Node costs its own node's
// CPU). Anything else (an add, a delete, an IPRange) always does.
func passInputChanged(old, cur any) bool {
	o, ok1 := old.(*corev1.Node)
	n, ok2 := cur.(*corev1.Node)
	if !ok1 || !ok2 {
		return true
	}
	return nodefailover.NodeReady(o) != nodefailover.NodeReady(n) ||
		o.Annotations[agent.ObservedAnnotation] != n.Annotations[agent.ObservedAnnotation] ||
		o.Labels[jkev1.LabelClaimsInStatus] != n.Labels[jkev1.LabelClaimsInStatus] ||
		!equality.Semantic.DeepEqual(o.Status.Addresses, n.Status.Addresses)
}

// watchEventOf is what a watcher receives for o: its kind and encoded size.
func watchEventOf(o any) (WatchEvent, bool) {
	var ev WatchEvent
	switch o := o.(type) {
	case *corev1.Node:
		ev = WatchEvent{Kind: WatchNode, Node: o.Name, Legacy: o.Labels[jkev1.LabelClaimsInStatus] != "true"}
	case *jkev1.IPRange:
		ev = WatchEvent{Kind: WatchIPRange}
	case *jkev1.StaticIP:
		ev = WatchEvent{Kind: WatchStaticIP}
	default: // a tombstone: its last state is unknown
		return ev, false
	}
	b, err := json.Marshal(o)
	if err != nil {
		return ev, false
	}
	ev.Bytes = len(b)
	return ev, true
}

// rangeList is the harness's IPRanges as its informer has them.
func (a *Agents) rangeList() []*jkev1.IPRange {
	var out []*jkev1.IPRange
	for _, o := range a.ranges.List() {
		out = append(out, o.(*jkev1.IPRange))
	}
	return out
}

// Record starts accounting into a new ledger (replacing any running one) and returns it.
func (a *Agents) Record() *Traffic {
	t := NewTraffic()
	a.traffic.Store(t)
	return t
}

// ReadyNodes names the nodes whose agents run (a NotReady node's agent is off with it).
func (a *Agents) ReadyNodes() []string {
	var out []string
	for _, o := range a.nodes.List() {
		if n := o.(*corev1.Node); nodefailover.NodeReady(n) {
			out = append(out, n.Name)
		}
	}
	return out
}

// StopRecording ends the accounting.
func (a *Agents) StopRecording() { a.traffic.Store(nil) }

func (a *Agents) wrote(node string, bytes int, start time.Time) {
	if t := a.traffic.Load(); t != nil {
		now := time.Now()
		t.Wrote(node, bytes, now, now.Sub(start))
	}
}

func (a *Agents) poke() {
	a.seq.Add(1)
	select {
	case a.dirty <- struct{}{}:
	default:
	}
}

// Stop ends the loop (and its informers).
func (a *Agents) Stop() {
	a.stop()
	a.done.Wait()
}

func (a *Agents) run(ctx context.Context) {
	defer a.done.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		seq := a.seq.Load()
		if ok, _ := a.pass(ctx); ok {
			a.clean.Store(seq)
		}
		select {
		case <-ctx.Done():
			return
		case <-a.dirty:
		case <-tick.C:
		}
	}
}

// pass writes every report that differs from what the objects show; it reports whether
// nothing was left to write.
func (a *Agents) pass(ctx context.Context) (bool, error) {
	var ranges []*jkev1.IPRange
	for _, o := range a.ranges.List() {
		ranges = append(ranges, o.(*jkev1.IPRange))
	}
	reportOf, routesOf, marked := agent.ObservedReports(ranges), agent.RouteReports(ranges), agent.MarkedRanges(ranges)
	ready := map[string]bool{}
	address := map[string]string{}
	reports, routes, uids := map[string]string{}, map[string]string{}, map[string]types.UID{}
	var annotate, reportRoutes []string
	for _, o := range a.nodes.List() {
		n := o.(*corev1.Node)
		if !nodefailover.NodeReady(n) {
			continue
		}
		ready[n.Name] = true
		uids[n.Name] = n.UID
		for _, ad := range n.Status.Addresses {
			if ad.Type == corev1.NodeInternalIP {
				address[n.Name] = ad.Address
			}
		}
		report, err := reportOf(n.Name)
		if err != nil {
			return false, err
		}
		reports[n.Name] = report
		a.mu.Lock()
		last := a.written[n.Name]
		a.mu.Unlock()
		if n.Annotations[agent.ObservedAnnotation] != report && last != report {
			annotate = append(annotate, n.Name)
		}
		r, err := routesOf(n.Name)
		if err != nil {
			return false, err
		}
		routes[n.Name] = r
		a.mu.Lock()
		_, changed := agent.RouteLease(a.leases[n.Name], n.Name, n.UID, r, marked, time.Now())
		a.mu.Unlock()
		if changed {
			reportRoutes = append(reportRoutes, n.Name)
		}
	}
	var sync []*jkev1.IPRange
	for _, r := range ranges {
		if ready[r.Spec.Node] && (!nodefailover.RangeSynced(r) || !claimed(r, address[r.Spec.Node])) {
			sync = append(sync, r)
		}
	}
	if len(annotate) == 0 && len(sync) == 0 && len(reportRoutes) == 0 {
		a.mu.Lock()
		idle := len(a.inflight) == 0
		a.mu.Unlock()
		return idle, nil // the last write's end pokes another pass
	}
	// The range owners' agents first: the failover controller waits for the target's Synced
	// before it looks at the routes.
	for _, r := range sync {
		r := r.DeepCopy() // never mutate the informer's object
		a.start(ctx, "sync/"+r.Name, a.syncSlots, func(ctx context.Context) bool {
			r.Status.ObservedGeneration = r.Generation
			meta.SetStatusCondition(&r.Status.Conditions, agent.ServingCondition(r.Spec.Node, r.Generation))
			r.Status.Holders = agent.WithHolder(r.Status.Holders, r.Spec.Node, &jkev1.IPRangeHolder{Node: r.Spec.Node, Address: address[r.Spec.Node],
				Generation: r.Spec.OwnerGeneration, State: jkev1.HolderServing})
			start := time.Now()
			if _, err := a.sip.JkeV1().IPRanges().UpdateStatus(ctx, r, metav1.UpdateOptions{}); err != nil {
				return false // a conflict: the next pass
			}
			if b, err := json.Marshal(r); err == nil {
				a.wrote(r.Spec.Node, len(b), start)
			}
			return true
		})
	}
	for _, node := range annotate {
		report := reports[node]
		a.start(ctx, "node/"+node, a.reportSlots, func(ctx context.Context) bool {
			patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
				"annotations": map[string]string{agent.ObservedAnnotation: report},
				"labels":      map[string]string{jkev1.LabelClaimsInStatus: "true"}}})
			if err != nil {
				return false
			}
			start := time.Now()
			if _, err := a.kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return false
			}
			a.AnnotationBytes.Add(int64(len(report)))
			a.wrote(node, len(patch), start)
			a.mu.Lock()
			a.written[node] = report
			a.mu.Unlock()
			return true
		})
	}
	// The route reports: each node's own Lease, created or updated as the agent does
	// (cni/agent reportRoutes), only when it changed.
	for _, node := range reportRoutes {
		routes, uid := routes[node], uids[node]
		a.start(ctx, "lease/"+node, a.reportSlots, func(ctx context.Context) bool { return a.reportRoutes(ctx, node, uid, routes) })
	}
	return false, nil
}

// start runs write in its own goroutine once one of slots is free, unless a write of the same
// key is under way. A failed write (a conflict) pokes another pass to retry it, and so does the
// last write's end (to find all written); a successful one does not: its node is done (the
// owners' and claims' writes come back through the informers anyway), and a pass per write
// would spend the harness's CPU — on the API server's machine — where real agents spend their
// own nodes'.
func (a *Agents) start(ctx context.Context, key string, slots chan struct{}, write func(context.Context) bool) {
	a.mu.Lock()
	if a.inflight[key] {
		a.mu.Unlock()
		return
	}
	a.inflight[key] = true
	a.mu.Unlock()
	a.done.Add(1)
	go func() {
		defer a.done.Done()
		ok := false
		defer func() {
			a.mu.Lock()
			delete(a.inflight, key)
			idle := len(a.inflight) == 0
			a.mu.Unlock()
			if !ok || idle {
				a.poke()
			}
		}()
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		defer func() { <-slots }()
		ok = write(ctx)
	}()
}

// reportRoutes writes node's route report into its Lease; false: to be tried again.
func (a *Agents) reportRoutes(ctx context.Context, node string, uid types.UID, routes string) bool {
	leases := a.kube.CoordinationV1().Leases(jkev1.NamespaceRouteReports)
	a.mu.Lock()
	current := a.leases[node]
	a.mu.Unlock()
	want, _ := agent.RouteLease(current, node, uid, routes, nil, time.Now())
	start := time.Now()
	var written *coordinationv1.Lease
	var err error
	if current == nil {
		written, err = leases.Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) { // left by an earlier run: read it, write on the next pass
			written, err = leases.Get(ctx, node, metav1.GetOptions{})
			if err == nil {
				a.mu.Lock()
				a.leases[node] = written
				a.mu.Unlock()
			}
			return false
		}
	} else {
		written, err = leases.Update(ctx, want, metav1.UpdateOptions{})
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil { // a conflict: read it again on the next pass (create, then get)
		delete(a.leases, node)
		return false
	}
	a.leases[node] = written
	a.AnnotationBytes.Add(int64(len(routes)))
	if b, err := json.Marshal(want); err == nil {
		a.wrote(node, len(b), start)
	}
	return true
}

// claimed says whether the range's owner claims it as a converged agent does: Serving at the
// current generation, with its address.
func claimed(r *jkev1.IPRange, address string) bool {
	for _, h := range r.Status.Holders {
		if h.Node == r.Spec.Node {
			return h.State == jkev1.HolderServing && h.Generation == r.Spec.OwnerGeneration && h.Address == address
		}
	}
	return false
}

// WaitConverged waits until a pass found nothing to write: every Ready node reports every
// range, every range of a Ready node is Synced.
func (a *Agents) WaitConverged(ctx context.Context, timeout time.Duration) error {
	return poll(ctx, timeout, func(ctx context.Context) (bool, error) {
		return a.clean.Load() == a.seq.Load(), nil
	})
}
