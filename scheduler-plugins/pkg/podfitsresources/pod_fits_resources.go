// Package podfitsresources is the PodFitsResourcesWithStaticIP scheduler plugin: a node
// only fits a pod when what is left after the reservations of absent static-IP pods fits
// it, and when the node has a pod IP left for it. See README.md.
package podfitsresources

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/scheduler-plugins/apis/config"
	_ "github.com/staticip/staticip/scheduler-plugins/apis/config/scheme" // registers the args
	"github.com/staticip/staticip/scheduler-plugins/apis/config/validation"
	"github.com/staticip/staticip/scheduler-plugins/pkg/poolfit"
	"github.com/staticip/staticip/scheduler-plugins/pkg/staticipnode"
)

// Name is the plugin's name in the registry and in KubeSchedulerConfiguration.
const Name = "PodFitsResourcesWithStaticIP"

const stateKey = "PreFilter" + Name

var (
	_ fwk.PreFilterPlugin   = &PodFitsResources{}
	_ fwk.FilterPlugin      = &PodFitsResources{}
	_ fwk.ReservePlugin     = &PodFitsResources{}
	_ fwk.EnqueueExtensions = &PodFitsResources{}
	_ fwk.SignPlugin        = &PodFitsResources{}
)

// Signature fragment keys of this plugin (KEP-5598).
const (
	requestsSignerName    = "staticip.jke.jdcloud.com/PodFitsResourcesWithStaticIP.requests"
	hostNetworkSignerName = "v1.Pod.Spec.HostNetwork"
	poolsSignerName       = "staticip.jke.jdcloud.com/PodFitsResourcesWithStaticIP.pools"
)

var errCacheNotSynced = errors.New("the staticIPNode cache has not synced yet")

// PodFitsResources checks node resources and pod IPs net of static-IP reservations.
type PodFitsResources struct {
	cache *staticipnode.Cache
	args  config.PodFitsResourcesWithStaticIPArgs
	// requeue brings back the pods this plugin rejected when a StaticIP or IPRange change
	// may let them fit (nil in unit tests built without a framework handle).
	requeue *staticipnode.Requeue
	// pools: the IPPools, namespace pools' blocks and namespaces, for pods whose address must
	// come from chosen pools (nil in unit tests built without a framework handle).
	pools *poolfit.View
	// fitFiltersFirst says whether NodeResourcesFit filters before this plugin in the profile
	// (its pod-count check then rejects first wherever an IP check against a capacity of at
	// least the node's pod slots could). Asked once, at the first PreFilter: the profile's
	// plugins are known only after every plugin is built. nil: unknown (unit tests without a
	// framework), taken as no.
	fitFiltersFirst func() bool
	// views finds each node's view (and its staticip network state) by its Node object.
	views *staticipnode.ViewIndex
	// ipSafe remembers which nodes of the scheduler's node list cannot refuse a pod an IP
	// where NodeResourcesFit admits it (canSkipFilter).
	safeNodes ipSafety
}

// New builds the plugin from its (internal, defaulted) args.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, ok := obj.(*config.PodFitsResourcesWithStaticIPArgs)
	if !ok {
		return nil, fmt.Errorf("%s: want args of type PodFitsResourcesWithStaticIPArgs, got %T", Name, obj)
	}
	if err := validation.ValidatePodFitsResourcesWithStaticIPArgs(nil, args); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	c, err := staticipnode.ForHandle(ctx, h)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	pl := NewWithCache(c, *args)
	pl.requeue = c.NewRequeue(klog.FromContext(ctx).WithName(Name), h, pl.hint)
	if args.CheckIPs {
		client, err := versioned.NewForConfig(h.KubeConfig())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", Name, err)
		}
		if pl.pools, err = poolfit.ForScheduler(ctx, h.SharedInformerFactory(), client, h); err != nil {
			return nil, fmt.Errorf("%s: %w", Name, err)
		}
	}
	pl.fitFiltersFirst = sync.OnceValue(func() bool { return fitFiltersBefore(h, Name) })
	return pl, nil
}

// fitFiltersBefore reports whether the profile of h runs NodeResourcesFit's Filter before
// plugin's. kube-scheduler's framework lists its plugins (ListPlugins); any other handle is
// taken as no.
func fitFiltersBefore(h fwk.Handle, plugin string) bool {
	lister, ok := h.(interface{ ListPlugins() *schedconfig.Plugins })
	if !ok {
		return false
	}
	plugins := lister.ListPlugins()
	if plugins == nil {
		return false
	}
	return filtersBefore(plugins.Filter.Enabled, names.NodeResourcesFit, plugin)
}

// filtersBefore reports whether first comes before second among the enabled plugins.
func filtersBefore(enabled []schedconfig.Plugin, first, second string) bool {
	for _, p := range enabled {
		switch p.Name {
		case first:
			return true
		case second:
			return false
		}
	}
	return false
}

// NewWithCache builds the plugin on a given cache (unit tests).
func NewWithCache(c *staticipnode.Cache, args config.PodFitsResourcesWithStaticIPArgs) *PodFitsResources {
	return &PodFitsResources{cache: c, args: args,
		views: c.NewViewIndex(func(n *v1.Node) uint8 { return uint8(staticIPNetwork(n)) })}
}

// Name returns the plugin's name.
func (pl *PodFitsResources) Name() string { return Name }

// preFilterState is computed once per scheduling cycle.
type preFilterState struct {
	request staticipnode.Resources
	// names are the resources the pod requests, in the order reasons list them.
	names []v1.ResourceName
	// needsIP: the pod is on the pod network (not hostNetwork).
	needsIP bool
	// own is the pod's StaticIP, when it holds the pod's place (and IP) on ownNode.
	hasOwn  bool
	ownNode string
	// holdingNodes are the nodes where an active record names the pod: elsewhere no absent
	// record can be the pod's own, and Filter skips looking for it.
	holdingNodes []string
	// rejected: Filter rejected the pod on some node this cycle (recorded for requeueing once).
	rejected atomic.Bool
	// pools: the pod's address must come from these IPPools (apis/poolchoice), judged on
	// poolSnap; empty for pods naming none, with an IP of their own, or off the pod network.
	pools    []string
	poolSnap *poolfit.Snapshot
	// poolRejected: some node was refused for the pools (the pod waits for a pool change).
	poolRejected atomic.Bool
}

func (s *preFilterState) Clone() fwk.StateData { return s }

// PreFilter computes the pod's requests and finds its own reservation. It returns Skip (the
// framework then runs no Filter of this plugin for the pod, canSkipFilter) when no node can
// reject the pod for a reason of this plugin's where NodeResourcesFit admits it.
func (pl *PodFitsResources) PreFilter(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if !pl.cache.Synced() {
		return nil, fwk.AsStatus(errCacheNotSynced)
	}
	// The views Filter found by Node object in earlier cycles become readable without a lock.
	pl.views.Publish(len(nodes))
	s := &preFilterState{
		request: staticipnode.ResourcesFromList(resource.PodRequests(pod, resource.PodResourcesOptions{})),
		needsIP: !pod.Spec.HostNetwork,
	}
	s.names = s.request.Names()
	if sip, ok := pl.cache.StaticIPOfPod(pod); ok && sip.Active {
		s.hasOwn, s.ownNode = true, sip.Node
	}
	s.holdingNodes = pl.cache.NodesHoldingPod(pod.Namespace, pod.Name)
	if status := pl.preFilterPools(s, pod); status != nil {
		return nil, status
	}
	// Written when skipping too: a caller that runs Filter anyway gets the same answer.
	state.Write(stateKey, s)
	// A pod whose address must come from chosen pools is never skipped (only Filter knows
	// which nodes have an address of them left), unless one of them can give any node a block
	// (preFilterPools leaves s.pools empty then).
	if len(s.pools) == 0 && pl.canSkipFilter(s.needsIP && pl.args.CheckIPs, nodes) {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	return nil, nil
}

// preFilterPools finds the pools the pod's address must come from. Nothing for a pod off the
// pod network, one whose StaticIP or ip-address annotation fixes its IP (a static IP keeps its
// pool; CheckPodAnnotationWithStaticIP places it), and — one atomic load — every pod while no
// pool selects namespaces and no pod or namespace names pools. A choice the pod may not make
// (a named pool gone, or no longer selecting its namespace) keeps it Pending with the reason.
// Nothing either when the pools serve every node on the snapshot (poolfit.ServesEveryNode):
// Filter's pool check could refuse no node.
func (pl *PodFitsResources) preFilterPools(s *preFilterState, pod *v1.Pod) *fwk.Status {
	if pl.pools == nil || !s.needsIP || !pl.args.CheckIPs || s.hasOwn || !pl.pools.Relevant(pod) ||
		pod.Annotations[podip.AnnotationIPAddress] != "" {
		return nil
	}
	if !pl.pools.Synced() {
		return fwk.AsStatus(errPoolsNotSynced)
	}
	snap := pl.pools.Snapshot()
	ch, err := pl.pools.Choose(snap, pod)
	if err != nil {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	if snap.ServesEveryNode(ch.Pools) {
		// Every node passes the pool check on this snapshot (a pool of each of the pod's
		// families can give any node a block): the pod is decided as one naming no pool, and
		// may skip Filter like one.
		return nil
	}
	s.pools, s.poolSnap = ch.Pools, snap
	return nil
}

var errPoolsNotSynced = errors.New("the IPPool view has not synced yet")

// canSkipFilter reports whether Filter would admit the pod on every node of nodes (the
// scheduler's node list) where NodeResourcesFit admits it, so the framework need not call it
// at all (per node it costs about as much as NodeResourcesFit's own Filter). That holds when
// no StaticIP is active anywhere (no node's view holds a reservation: the resource and
// pod-slot checks have nothing to subtract) and, for a pod that needs an IP (checkIP), every
// node is ipSafe: no staticip agent reports it without a usable range, it has no IPRange only
// under nodesWithoutIPRange: Allow, and its ranges give at least as many IPs as it has pod
// slots — an IP check that fails there (pods on the pod network + 1 > IPs) means more pods
// than slots, which NodeResourcesFit rejects, before this plugin when it filters first
// (fitFiltersFirst; the shipped profiles enable it by multiPoint, so it does).
//
// Preemption (which removes pods) and nominated pods (which add them) run Filter on changed
// NodeInfos: removing pods only lowers the count, and added pods raise NodeResourcesFit's pod
// count as much as this plugin's IP count, so the answers stay equal there too. What the
// cache holds is read at PreFilter: a StaticIP applied between PreFilter and Filter is seen by
// the next cycle, as one applied just after this cycle would be.
func (pl *PodFitsResources) canSkipFilter(checkIP bool, nodes []fwk.NodeInfo) bool {
	if pl.cache.ActiveRecords() != 0 {
		return false
	}
	if !checkIP {
		return true
	}
	if pl.fitFiltersFirst == nil || !pl.fitFiltersFirst() {
		return false
	}
	return pl.safeNodes.all(nodes, pl.cache.RangesVersion(), func(node *v1.Node, nodeInfo fwk.NodeInfo) bool {
		view := pl.cache.Node(node.Name)
		return ipSafe(staticIPNetwork(node), view.HasRanges, view.IPCapacity, int64(nodeInfo.GetAllocatable().GetAllowedPodNumber()), pl.args.NodesWithoutIPRange)
	})
}

// ipSafe reports whether a node's IP check can refuse a pod without reservations only where
// NodeResourcesFit's pod-slot check refuses it too: the node is not a staticip node without a
// usable range (refused whatever its pods), has IPRanges giving at least as many IPs as it has
// pod slots, or has none under nodesWithoutIPRange: Allow (no IP check there).
func ipSafe(network nodeNetwork, hasRanges bool, ipCapacity, podSlots int64, withoutRange config.NodesWithoutIPRangePolicy) bool {
	switch {
	case network == networkUnavailable:
		return false
	case !hasRanges:
		return withoutRange == config.NodesWithoutIPRangeAllow
	}
	return ipCapacity >= podSlots
}

// ipSafety remembers ipSafe per position of the scheduler's node list, for the Node object
// and the cache's ranges it was computed from: per pod it compares one pointer per node, and
// recomputes only the nodes whose object changed (a new *v1.Node: the informer's objects are
// never modified) — all of them when an IPRange changed (RangesVersion) or the list's length.
type ipSafety struct {
	mu            sync.Mutex
	rangesVersion uint64
	nodes         []ipSafeNode
	unsafe        int
}

type ipSafeNode struct {
	node        *v1.Node
	known, safe bool
}

// all reports whether safe holds for every node of nodes (nodes without a Node object, which
// the scheduler never filters, count as safe).
func (m *ipSafety) all(nodes []fwk.NodeInfo, rangesVersion uint64, safe func(*v1.Node, fwk.NodeInfo) bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rangesVersion != m.rangesVersion || len(nodes) != len(m.nodes) {
		m.rangesVersion = rangesVersion
		m.nodes = make([]ipSafeNode, len(nodes))
		m.unsafe = 0
	}
	for i, ni := range nodes {
		node, e := ni.Node(), &m.nodes[i]
		if e.known && e.node == node {
			continue
		}
		if e.known && !e.safe {
			m.unsafe--
		}
		*e = ipSafeNode{node: node, known: true, safe: node == nil || safe(node, ni)}
		if !e.safe {
			m.unsafe++
		}
	}
	return m.unsafe == 0
}

// Reserve: the pod has a node; it no longer waits for a change of StaticIPs or IPRanges.
func (pl *PodFitsResources) Reserve(_ context.Context, _ fwk.CycleState, pod *v1.Pod, _ string) *fwk.Status {
	if pl.requeue != nil {
		pl.requeue.Placed(pod)
	}
	if pl.pools != nil {
		pl.pools.Placed(pod)
	}
	return nil
}

// Unreserve: nothing was reserved.
func (pl *PodFitsResources) Unreserve(context.Context, fwk.CycleState, *v1.Pod, string) {}

// SignPod takes part in opportunistic batching (KEP-5598, on by default since 1.35; a plugin
// that does not sign turns it off for the whole profile). Without a StaticIP of its own, a
// pod's Filter result depends only on its requests and on whether it needs a pod IP
// (hostNetwork); a pod with a StaticIP is refused, since its own reservation changes what
// it competes with. The batch only hints a node, which Filter checks again.
func (pl *PodFitsResources) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	if _, ok := pl.cache.StaticIPOfPod(pod); ok {
		return nil, fwk.NewStatus(fwk.Unschedulable, "pods with a StaticIP are not signable")
	}
	fragments := []fwk.SignFragment{
		{Key: requestsSignerName, Value: staticipnode.ResourcesFromList(resource.PodRequests(pod, resource.PodResourcesOptions{}))},
		{Key: hostNetworkSignerName, Value: pod.Spec.HostNetwork},
	}
	if pl.pools != nil && pl.pools.Relevant(pod) {
		// The pod's pools follow from its namespace and its ippools annotation (poolchoice).
		fragments = append(fragments, fwk.SignFragment{Key: poolsSignerName,
			Value: pod.Namespace + "\x00" + pod.Annotations[jkev1.AnnotationIPPools] + "\x00" + pod.Annotations[podip.AnnotationIPAddress]})
	}
	return fragments, nil
}

// PreFilterExtensions: reservations do not depend on which other pods are nominated.
func (pl *PodFitsResources) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter checks what the reservations of absent static-IP pods change, and only that: for
// every resource the pod requests that such reservations (other than the pod's own) hold on
// the node, and for pod slots, that what NodeResourcesFit would admit still fits once the
// reservations are held back; and that the node has a pod IP for it. The plain fit
// (allocatable - requested >= request) is NodeResourcesFit's alone, with everything it
// ignores (ignoredResources, ignoredResourceGroups, extended resources served by DRA).
func (pl *PodFitsResources) Filter(_ context.Context, state fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	data, err := state.Read(stateKey)
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("reading %q from cycle state: %w", stateKey, err))
	}
	s := data.(*preFilterState)
	node := nodeInfo.Node()
	nodeName := node.Name
	ref, network := pl.views.View(node)
	checkIP := s.needsIP && pl.args.CheckIPs
	if checkIP && nodeNetwork(network) == networkUnavailable {
		// A staticip node with no range to allocate from: every pod that needs an IP would
		// hang in ContainerCreating there, including those that tolerate the
		// network-unavailable taint (DaemonSet pods tolerating every taint). The node's
		// condition, not a StaticIP or IPRange, changes this: a Node event requeues the pod.
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, noUsableRangeReason)
	}
	if len(s.pools) > 0 {
		if ok, why := pl.pools.Verdict(s.poolSnap, pod, s.pools, nodeInfo); !ok {
			if s.poolRejected.CompareAndSwap(false, true) {
				pl.pools.Wait(pod) // a pool or block change may let it fit
			}
			return fwk.NewStatus(fwk.Unschedulable, "no address of the pod's IPPools on the node: "+why)
		}
	}
	sum := pl.summary(ref, nodeInfo)
	if sum.held == 0 && (!checkIP || !sum.hasRanges) {
		if checkIP && pl.args.NodesWithoutIPRange == config.NodesWithoutIPRangeReject {
			if pl.requeue != nil && s.rejected.CompareAndSwap(false, true) {
				pl.requeue.Wait(pod) // an IPRange for the node lets it fit
			}
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, noRangeReason)
		}
		return nil // nothing reserved here, no IP limit: nothing for this plugin to judge
	}
	others := reserving{held: sum.absent, reserved: sum.reserved}
	if slices.Contains(s.holdingNodes, nodeName) {
		others = sum.othersThan(pod)
	}
	v := Insufficient(s.names, s.request, nodeInfo, others)
	if checkIP {
		v.merge(pl.ipVerdict(s, nodeName, sum, others))
	}
	status := v.status()
	if status != nil && pl.requeue != nil && s.rejected.CompareAndSwap(false, true) {
		pl.requeue.Wait(pod)
	}
	return status
}

const noRangeReason = "node owns no IPRange to give the pod an IP from"

// noUsableRangeReason is one text for every such node, so that FailedScheduling counts them
// ("3 node(s) ...").
const noUsableRangeReason = "staticip node has no usable IP range for pod IPs (its agent reports NetworkUnavailable=True, reason StaticIPNoRange: no IPRange names it, or its ranges drain or wait for their previous node)"

// The staticip network of a node, as its agent reports it (cni/agent, network.go): the Node
// condition NetworkUnavailable with a reason the agent sets (StaticIP...). A node without
// such a condition has no staticip agent (another CNI, or none yet): nodesWithoutIPRange
// decides there.
type nodeNetwork int

const (
	notStaticIP nodeNetwork = iota
	networkReady
	networkUnavailable
)

// agentReasonPrefix starts every reason the staticip agent gives NetworkUnavailable.
const agentReasonPrefix = "StaticIP"

func staticIPNetwork(node *v1.Node) nodeNetwork {
	if node == nil {
		return notStaticIP
	}
	for i := range node.Status.Conditions {
		c := &node.Status.Conditions[i]
		if c.Type != v1.NodeNetworkUnavailable || !strings.HasPrefix(c.Reason, agentReasonPrefix) {
			continue
		}
		if c.Status == v1.ConditionTrue {
			return networkUnavailable
		}
		return networkReady
	}
	return notStaticIP
}

// nodeSummary is what Filter needs of one node for any pod: it depends only on the node's
// pods (NodeInfo generation) and on the cache's view of the node, so it is computed once per
// pair instead of once per pod and node (Filter cost stays flat in the pods per node). It
// carries what Filter reads of the view, so a Filter that finds it valid reads the node's slot
// and the summary, two cache lines, and nothing else of the cache.
type nodeSummary struct {
	generation int64
	view       *staticipnode.NodeInfo
	// held: how many active records name the node (view.Held), present or absent.
	held int
	// hasRanges and ipCapacity are the view's.
	hasRanges  bool
	ipCapacity int64
	// podNetwork counts the node's pods that hold a pod IP (not hostNetwork).
	podNetwork int64
	// absent are the held records whose pod is absent from the node, reserved their sum.
	absent   []staticipnode.Held
	reserved staticipnode.Resources
}

// unknownNode is the summary of a node the cache knows nothing of: no record, no range.
var unknownNode = &nodeSummary{}

// The summary is kept in the node's slot (NodeRef.Memo), valid while the node's view is the
// one it was computed from and the NodeInfo has its generation: a new view or another
// generation (the scheduler's NodeInfo changed, or a copy with nominated pods) computes anew.
func (pl *PodFitsResources) summary(ref staticipnode.NodeRef, nodeInfo fwk.NodeInfo) *nodeSummary {
	view := ref.View()
	gen := nodeInfo.GetGeneration()
	if sum, ok := ref.Memo().(*nodeSummary); ok && sum.view == view && sum.generation == gen {
		return sum
	}
	if len(view.Held) == 0 && !view.HasRanges {
		return unknownNode // nothing to count: no pod scan, nothing stored
	}
	sum := &nodeSummary{generation: gen, view: view, held: len(view.Held), hasRanges: view.HasRanges, ipCapacity: view.IPCapacity}
	pods := nodeInfo.GetPods()
	for _, p := range pods {
		if !p.GetPod().Spec.HostNetwork {
			sum.podNetwork++
		}
	}
	for _, h := range view.Held {
		// A pod of the record's name but of another workload does not make the record's pod
		// present: the record still holds its place. A node holds a few records: a scan of
		// its pods per record costs less than a map of them.
		if !presentOn(pods, h) {
			sum.absent = append(sum.absent, h)
			sum.reserved.Add(h.Request)
		}
	}
	// Filter runs on many goroutines; a summary another one stores meanwhile (of another
	// generation: a NodeInfo with nominated pods) only costs the next Filter a recomputation.
	ref.SetMemo(sum)
	return sum
}

// presentOn reports whether the pod a held record is for is on the node (one of pods, of the
// record's workload).
func presentOn(pods []fwk.PodInfo, h staticipnode.Held) bool {
	for _, p := range pods {
		if pod := p.GetPod(); pod.Name == h.PodName && pod.Namespace == h.PodNamespace && staticipnode.BelongsTo(h.Workload, pod) {
			return true
		}
	}
	return false
}

// reserving is what the absent records other than the pod's own hold against a pod.
type reserving struct {
	held     []staticipnode.Held
	reserved staticipnode.Resources
}

// othersThan leaves out pod's own record: a pod never competes with its own reservation.
func (sum *nodeSummary) othersThan(pod *v1.Pod) reserving {
	for i, h := range sum.absent {
		if h.PodNamespace == pod.Namespace && h.PodName == pod.Name && staticipnode.BelongsTo(h.Workload, pod) {
			held := make([]staticipnode.Held, 0, len(sum.absent)-1)
			held = append(append(held, sum.absent[:i]...), sum.absent[i+1:]...)
			reserved := sum.reserved.Clone()
			reserved.Sub(h.Request)
			return reserving{held: held, reserved: reserved}
		}
	}
	return reserving{held: sum.absent, reserved: sum.reserved}
}

// verdict collects the reasons a node does not fit.
type verdict struct {
	reasons []string
	// unresolvable: even with every pod removed from the node, the reservations leave no
	// room; preemption cannot help.
	unresolvable bool
}

func (v *verdict) add(reason string, unresolvable bool) {
	v.reasons = append(v.reasons, reason)
	v.unresolvable = v.unresolvable || unresolvable
}

func (v *verdict) merge(o verdict) {
	v.reasons = append(v.reasons, o.reasons...)
	v.unresolvable = v.unresolvable || o.unresolvable
}

func (v verdict) status() *fwk.Status {
	switch {
	case len(v.reasons) == 0:
		return nil
	case v.unresolvable:
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, v.reasons...)
	}
	return fwk.NewStatus(fwk.Unschedulable, v.reasons...)
}

type podName struct{ namespace, name string }

// maxNamed is how many StaticIPs a reason names before it says "and N more".
const maxNamed = 3

// nameStaticIPs renders "StaticIP ns/a" or "StaticIPs ns/a, ns/b and 3 more" for the
// records in held that hold some of resource name ("" for all of them).
func nameStaticIPs(held []staticipnode.Held, name v1.ResourceName) string {
	var names []string
	total := 0
	for _, h := range held {
		if name != "" && h.Request.Get(name) <= 0 {
			continue
		}
		total++
		if len(names) < maxNamed {
			names = append(names, h.StaticIP)
		}
	}
	if total == 0 {
		return ""
	}
	out := "StaticIP "
	if total > 1 {
		out = "StaticIPs "
	}
	out += strings.Join(names, ", ")
	if total > len(names) {
		out += fmt.Sprintf(" and %d more", total-len(names))
	}
	return out
}

// Insufficient says which of the pod's requests (names, request), and whether its pod slot,
// no longer fit nodeInfo once what others reserve is held back. A resource that is short
// even without reservations is left to NodeResourcesFit (which reports it, or ignores it by
// configuration); one that no absent other holds is not looked at.
func Insufficient(names []v1.ResourceName, request staticipnode.Resources, nodeInfo fwk.NodeInfo, others reserving) verdict {
	var v verdict
	if len(others.held) == 0 {
		return v
	}
	slots := int64(len(others.held))
	alloc, used := nodeInfo.GetAllocatable(), nodeInfo.GetRequested()
	pods, allowed := int64(len(nodeInfo.GetPods())), int64(alloc.GetAllowedPodNumber())
	if pods+1 <= allowed && pods+1+slots > allowed {
		v.add(fmt.Sprintf("Too many pods: %d of %d pod slots reserved for absent static-IP pods (%s)", slots, allowed, nameStaticIPs(others.held, "")),
			1+slots > allowed)
	}
	for _, name := range names {
		want, held := request.Get(name), others.reserved.Get(name)
		if want <= 0 || held <= 0 {
			continue
		}
		var capacity, requested int64
		switch name {
		case v1.ResourceCPU:
			capacity, requested = alloc.GetMilliCPU(), used.GetMilliCPU()
		case v1.ResourceMemory:
			capacity, requested = alloc.GetMemory(), used.GetMemory()
		case v1.ResourceEphemeralStorage:
			capacity, requested = alloc.GetEphemeralStorage(), used.GetEphemeralStorage()
		default:
			capacity, requested = alloc.GetScalarResources()[name], used.GetScalarResources()[name]
		}
		if want > capacity-requested || want <= capacity-requested-held {
			continue // NodeResourcesFit's verdict, or the reservations leave room
		}
		v.add(fmt.Sprintf("Insufficient %s: %s of %s%s reserved for absent static-IP pods (%s)",
			name, staticipnode.FormatAmount(name, held), staticipnode.FormatAmount(name, capacity), staticipnode.Unit(name),
			nameStaticIPs(others.held, name)), want > capacity-held)
	}
	return v
}

// ipVerdict says why the node has no IP for the pod.
func (pl *PodFitsResources) ipVerdict(s *preFilterState, nodeName string, sum *nodeSummary, others reserving) verdict {
	var v verdict
	used := sum.podNetwork
	if !sum.hasRanges {
		if pl.args.NodesWithoutIPRange == config.NodesWithoutIPRangeReject {
			v.add(noRangeReason, true)
		}
		return v
	}
	if s.hasOwn && s.ownNode == nodeName {
		return v // the pod's own StaticIP holds its address on this node
	}
	reservedIPs := int64(len(others.held))
	if used+reservedIPs+1 > sum.ipCapacity {
		names := ""
		if reservedIPs > 0 {
			names = ": " + nameStaticIPs(others.held, "")
		}
		v.add(fmt.Sprintf("no free IP in node's ranges %s (%d usable: %d used by pods, %d reserved for absent static-IP pods%s)",
			strings.Join(sum.view.CIDRs, ","), sum.ipCapacity, used, reservedIPs, names),
			reservedIPs+1 > sum.ipCapacity)
	}
	return v
}

// EventsToRegister: a rejected pod may fit once a pod leaves a node (bound or nominated
// there) or is scaled down, a node grows, or a staticip node's agent reports that it has a
// usable range again (NetworkUnavailable no longer True). The other changes that may let it
// fit — a reservation shrinks or disappears (StaticIP released, deleted or moved), the pod's
// own StaticIP changes, an IPRange is added, changed or deleted (a node without ranges takes
// pods under nodesWithoutIPRange: Allow) — come from the staticIPNode cache's informers
// (hint, through staticipnode.Requeue), not from cluster events.
func (pl *PodFitsResources) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}, QueueingHintFn: pl.isSchedulableAfterPodDelete},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.UpdatePodScaleDown}, QueueingHintFn: pl.isSchedulableAfterPodScaleDown},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeAllocatable}, QueueingHintFn: pl.isSchedulableAfterNodeChange},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.UpdateNodeCondition}, QueueingHintFn: pl.isSchedulableAfterNodeNetworkChange},
	}, nil
}

// hint decides, for a pod this plugin rejected, whether a change the cache applied may let
// it fit (staticipnode.Requeue asks it; StaticIPs and IPRanges are not registered as cluster
// events, see there).
func (pl *PodFitsResources) hint(logger klog.Logger, pod *v1.Pod, ch staticipnode.Change) bool {
	if ch.StaticIP != nil {
		return pl.staticIPHint(logger, pod, ch.StaticIP) == fwk.Queue
	}
	return ch.IPRange != nil && pl.ipRangeHint(logger, pod, ch.IPRange) == fwk.Queue
}

func (pl *PodFitsResources) isSchedulableAfterPodDelete(logger klog.Logger, pod *v1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	deleted, _, err := schedutil.As[*v1.Pod](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if deleted.Spec.NodeName == "" && deleted.Status.NominatedNodeName == "" {
		return fwk.QueueSkip, nil // it held nothing on any node
	}
	logger.V(5).Info("a pod left its node (or its nomination) and freed its requests and IP", "pod", klog.KObj(pod), "deletedPod", klog.KObj(deleted))
	return fwk.Queue, nil
}

// isSchedulableAfterPodScaleDown: the pod itself, or a bound pod whose requests of a
// resource this pod asks for went down (as NodeResourcesFit decides it).
func (pl *PodFitsResources) isSchedulableAfterPodScaleDown(logger klog.Logger, pod *v1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	before, after, err := schedutil.As[*v1.Pod](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if after.UID == pod.UID {
		return fwk.Queue, nil
	}
	if after.Spec.NodeName == "" {
		return fwk.QueueSkip, nil
	}
	was := staticipnode.ResourcesFromList(resource.PodRequests(before, resource.PodResourcesOptions{UseStatusResources: true}))
	now := staticipnode.ResourcesFromList(resource.PodRequests(after, resource.PodResourcesOptions{UseStatusResources: true}))
	for _, name := range staticipnode.ResourcesFromList(resource.PodRequests(pod, resource.PodResourcesOptions{})).Names() {
		if now.Get(name) < was.Get(name) {
			logger.V(5).Info("a bound pod was scaled down", "pod", klog.KObj(pod), "scaledPod", klog.KObj(after), "resource", name)
			return fwk.Queue, nil
		}
	}
	return fwk.QueueSkip, nil
}

func (pl *PodFitsResources) isSchedulableAfterNodeChange(_ klog.Logger, _ *v1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	_, _, err := schedutil.As[*v1.Node](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	return fwk.Queue, nil // a new node, or one whose allocatable changed
}

// isSchedulableAfterNodeNetworkChange: a node whose staticip agent reported no usable range
// reports one now.
func (pl *PodFitsResources) isSchedulableAfterNodeNetworkChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	before, after, err := schedutil.As[*v1.Node](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if pod.Spec.HostNetwork || !pl.args.CheckIPs || staticIPNetwork(before) != networkUnavailable || staticIPNetwork(after) == networkUnavailable {
		return fwk.QueueSkip, nil
	}
	logger.V(5).Info("a staticip node has a usable IP range again", "pod", klog.KObj(pod), "node", klog.KObj(after))
	return fwk.Queue, nil
}

// staticIPHint reads only the fields the cache decoded.
func (pl *PodFitsResources) staticIPHint(logger klog.Logger, pod *v1.Pod, ev *staticipnode.StaticIPEvent) fwk.QueueingHint {
	oldSIP, newSIP := ev.Old, ev.New
	for _, s := range [...]*staticipnode.StaticIPFields{oldSIP, newSIP} {
		if s != nil && s.Namespace == pod.Namespace && s.Pod == pod.Name {
			return fwk.Queue // the pod's own reservation changed
		}
	}
	if !oldSIP.Active() {
		return fwk.QueueSkip // it held nothing before, so it frees nothing now
	}
	switch {
	case !newSIP.Active():
		logger.V(5).Info("a StaticIP was released or deleted; its reservation is freed", "pod", klog.KObj(pod), "staticIP", klog.KRef(oldSIP.Namespace, oldSIP.Name))
		return fwk.Queue
	case newSIP.Node != oldSIP.Node:
		logger.V(5).Info("a StaticIP moved; its old node's reservation is freed", "pod", klog.KObj(pod), "staticIP", klog.KRef(oldSIP.Namespace, oldSIP.Name))
		return fwk.Queue
	}
	for _, name := range oldSIP.Request.Names() {
		if newSIP.Request.Get(name) < oldSIP.Request.Get(name) {
			return fwk.Queue
		}
	}
	return fwk.QueueSkip
}

func (pl *PodFitsResources) ipRangeHint(logger klog.Logger, pod *v1.Pod, ev *staticipnode.IPRangeEvent) fwk.QueueingHint {
	oldR, newR := ev.Old, ev.New
	if oldR != nil && newR != nil && equalRangeSpec(oldR.Spec, newR.Spec) {
		return fwk.QueueSkip // nothing the plugin reads changed (labels, annotations)
	}
	if newR != nil && newR.Spec.Node != "" {
		return fwk.Queue // a node gained a range, or its range changed
	}
	// Deleted or left unowned: its node lost it. Under Allow a node without any range takes
	// pods on IPs staticip does not manage.
	if oldR != nil && oldR.Spec.Node != "" && pl.args.NodesWithoutIPRange == config.NodesWithoutIPRangeAllow &&
		!pl.cache.Node(oldR.Spec.Node).HasRanges {
		logger.V(5).Info("a node lost its last IPRange", "pod", klog.KObj(pod), "node", oldR.Spec.Node)
		return fwk.Queue
	}
	return fwk.QueueSkip
}

func equalRangeSpec(a, b jkev1.IPRangeSpec) bool {
	if a.CIDR != b.CIDR || a.Node != b.Node || a.Gateway != b.Gateway || a.RangeStart != b.RangeStart ||
		a.RangeEnd != b.RangeEnd || len(a.ExcludeIPs) != len(b.ExcludeIPs) {
		return false
	}
	for i := range a.ExcludeIPs {
		if a.ExcludeIPs[i] != b.ExcludeIPs[i] {
			return false
		}
	}
	return true
}
