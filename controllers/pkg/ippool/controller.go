package ippool

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1informers "github.com/staticip/staticip/apis/generated/informers/externalversions/jke/v1"
	jkev1alpha1informers "github.com/staticip/staticip/apis/generated/informers/externalversions/jke/v1alpha1"
	jkev1listers "github.com/staticip/staticip/apis/generated/listers/jke/v1"
	jkev1alpha1listers "github.com/staticip/staticip/apis/generated/listers/jke/v1alpha1"
	"github.com/staticip/staticip/apis/iprangeaddr"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/apis/poolchoice"
	"github.com/staticip/staticip/apis/poolchoice/poolchoiceapi"
	"github.com/staticip/staticip/controllers/pkg/nodegone"
	"github.com/staticip/staticip/controllers/pkg/ownwrites"
	"github.com/staticip/staticip/controllers/pkg/podindex"
	"github.com/staticip/staticip/controllers/pkg/worker"
)

// Name is the controller's --controllers name.
const Name = "ippool"

// Event reasons.
const (
	ReasonBlockAssigned = "BlockAssigned"
	ReasonBlockReleased = "BlockReleased"
	ReasonAssignFailed  = "BlockAssignFailed"
	// ReasonReleaseWaits: a deleted node's block is not released yet (Normal Event on the
	// IPRange, once per reason): the node is not proven gone, or something holds an IP of it.
	ReasonReleaseWaits = "BlockReleaseWaits"
	// ReasonPoolChoiceInvalid: a pod bound to a node names pools it may not use (a pool deleted
	// or changed after admission let the pod in): Warning Event on the pod.
	ReasonPoolChoiceInvalid = "IPPoolChoiceInvalid"
	// ConditionPoolDeleted: an IPRange condition, True while the range's pool is deleted and
	// something on its node still holds an address of it (reason IPPoolDeletedBlockInUse): the
	// range stays served and routed until it is empty, then it is released and the condition
	// goes (so it does when the pool is created again).
	ConditionPoolDeleted = "IPPoolDeleted"
	// ReasonNamespaceSelectorOverlaps: the IPPool condition NamespaceSelectorOverlaps is True.
	ReasonNamespaceSelectorOverlaps = "NamespaceSelectorOverlaps"
)

// key is the one work-queue key: every pass plans all pools at once (the plan is cheap:
// see BenchmarkCompute), so assignments are serialized inside the process.
const key = "ippools"

// assumeFor is how long a range this process created or changed is laid over the informer's
// view while the watch has not shown it yet (controllers/pkg/ownwrites).
const assumeFor = time.Minute

// Controller is the range allocator.
type Controller struct {
	kube     kubernetes.Interface
	client   versioned.Interface
	recorder record.EventRecorder

	pools     jkev1listers.IPPoolLister
	ranges    jkev1listers.IPRangeLister
	nodes     corelisters.NodeLister
	staticIPs jkev1listers.StaticIPLister
	failovers jkev1alpha1listers.NodeFailoverLister
	pods      *podindex.Pods
	// bgpPeers: whether any exists decides every pool's ExportedWithNAT condition.
	bgpPeers jkev1listers.BGPPeerLister
	// namespaces: the pool choice of a pod (apis/poolchoice) reads its namespace's labels and
	// annotation; NamespaceSelectorOverlaps is decided over the namespaces that exist.
	namespaces corelisters.NamespaceLister

	synced []cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]

	// Now is the clock (tests).
	Now func() time.Time
	// NodeGoneAfter: how long a deleted node must show no sign of life before its blocks may
	// be released (nodegone.Evidence.GoneAfter; the manager's --node-gone-after).
	NodeGoneAfter time.Duration
	// NodeDeletionIsFence: a deleted Node means its machine is off (--node-deletion-is-fence).
	NodeDeletionIsFence bool

	mu sync.Mutex
	// written are this process's own writes (creates, re-assignments, releases) the informer
	// may not show yet, by range name.
	written *ownwrites.Overlay[*jkev1.IPRange]
	// told remembers the last warning given to a node, so an unchanged one is not repeated.
	told map[string]string
	// releasePending > 0 while some pool block waits for its node's pods or StaticIPs: only
	// then do pod and StaticIP events matter (and for pods choosing pools, see podMatters).
	releasePending atomic.Int32
	// refused and overlaps: what the last pass's pool choice found (choices), read by sync.
	refused  map[string]error
	overlaps map[string]poolchoice.Overlap
	// namespacePools: some IPPool has a non-empty namespaceSelector (set each pass), so a pod
	// that waits for its IP may need a block of one.
	namespacePools atomic.Bool
}

// NewController wires the allocator to its informers.
func NewController(kube kubernetes.Interface, client versioned.Interface, poolInformer jkev1informers.IPPoolInformer,
	rangeInformer jkev1informers.IPRangeInformer, nodeInformer coreinformers.NodeInformer, podInformer coreinformers.PodInformer,
	sipInformer jkev1informers.StaticIPInformer, failoverInformer jkev1alpha1informers.NodeFailoverInformer,
	bgpPeerInformer jkev1informers.BGPPeerInformer, namespaceInformer coreinformers.NamespaceInformer,
	recorder record.EventRecorder) (*Controller, error) {
	pods, err := podindex.New(podInformer.Informer(), podInformer.Lister())
	if err != nil {
		return nil, err
	}
	c := &Controller{
		kube: kube, client: client, recorder: recorder,
		pools: poolInformer.Lister(), ranges: rangeInformer.Lister(), nodes: nodeInformer.Lister(),
		staticIPs: sipInformer.Lister(), failovers: failoverInformer.Lister(), pods: pods,
		bgpPeers: bgpPeerInformer.Lister(), namespaces: namespaceInformer.Lister(),
		synced: []cache.InformerSynced{poolInformer.Informer().HasSynced, rangeInformer.Informer().HasSynced,
			nodeInformer.Informer().HasSynced, podInformer.Informer().HasSynced, sipInformer.Informer().HasSynced,
			failoverInformer.Informer().HasSynced, bgpPeerInformer.Informer().HasSynced, namespaceInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name}),
		Now: time.Now, NodeGoneAfter: nodegone.DefaultLeaseGoneAfter,
		told: map[string]string{},
	}
	c.written = ownwrites.New[*jkev1.IPRange](assumeFor, func() time.Time { return c.Now() })
	all := func(any) { c.queue.Add(key) }
	always := cache.ResourceEventHandlerFuncs{AddFunc: all, UpdateFunc: func(_, _ any) { c.queue.Add(key) }, DeleteFunc: all}
	for _, inf := range []cache.SharedIndexInformer{poolInformer.Informer(), rangeInformer.Informer(), failoverInformer.Informer(), bgpPeerInformer.Informer()} {
		if _, err := inf.AddEventHandler(always); err != nil {
			return nil, err
		}
	}
	// Nodes: joins, leaves, and changes of labels, podCIDRs or the fence (not the heartbeats).
	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: all, DeleteFunc: all,
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*corev1.Node)
			n, ok2 := cur.(*corev1.Node)
			if !ok1 || !ok2 || !apiequality.Semantic.DeepEqual(o.Labels, n.Labels) || !slices.Equal(o.Spec.PodCIDRs, n.Spec.PodCIDRs) ||
				jkev1alpha1.NodeOutOfService(o) != jkev1alpha1.NodeOutOfService(n) {
				c.queue.Add(key)
			}
		},
	}); err != nil {
		return nil, err
	}
	// Pods and StaticIPs matter while a block waits to be released, and a pod bound to a node
	// without an IP yet whenever it may need a block of its pool there.
	pending := func(obj any) {
		if c.releasePending.Load() > 0 || c.podMatters(obj) {
			c.queue.Add(key)
		}
	}
	for _, inf := range []cache.SharedIndexInformer{podInformer.Informer(), sipInformer.Informer()} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: pending, DeleteFunc: pending,
			UpdateFunc: func(_, cur any) { pending(cur) }}); err != nil {
			return nil, err
		}
	}
	// Namespaces: their labels and annotation decide pods' pools and the overlap condition.
	if _, err := namespaceInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: all, DeleteFunc: all,
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*corev1.Namespace)
			n, ok2 := cur.(*corev1.Namespace)
			if !ok1 || !ok2 || !apiequality.Semantic.DeepEqual(o.Labels, n.Labels) ||
				o.Annotations[jkev1.AnnotationIPPools] != n.Annotations[jkev1.AnnotationIPPools] {
				c.queue.Add(key)
			}
		},
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// podMatters: a pod bound to a node that waits for its IP and may choose a pool — some pool
// selects namespaces, or the pod or its namespace names pools. A cluster without either pays
// one map lookup per pod event.
func (c *Controller) podMatters(obj any) bool {
	p, ok := obj.(*corev1.Pod)
	if !ok || !podindex.Awaiting(p) {
		return false
	}
	if c.namespacePools.Load() || p.Annotations[jkev1.AnnotationIPPools] != "" {
		return true
	}
	ns, err := c.namespaces.Get(p.Namespace)
	return err == nil && ns.Annotations[jkev1.AnnotationIPPools] != ""
}

// Run runs the allocator until ctx is done. One worker: there is one key.
func (c *Controller) Run(ctx context.Context) {
	worker.Run(ctx, Name, "ippools", c.queue, c.synced, 1, c.sync)
}

// poolOf converts an IPPool for the planner.
func poolOf(p *jkev1.IPPool) Pool {
	out := Pool{Name: p.Name, Created: p.CreationTimestamp.Time, Mode: p.Spec.Mode,
		FirstHostGateway: p.Spec.GatewayPolicy == jkev1.GatewayFirstHost, ReleaseAfter: 5 * time.Minute,
		NATOutgoing:      p.Spec.NATOutgoing == nil || *p.Spec.NATOutgoing,
		DisableBGPExport: p.Spec.DisableBGPExport != nil && *p.Spec.DisableBGPExport,
		Deleting:         p.DeletionTimestamp != nil}
	if out.Mode == "" {
		out.Mode = jkev1.IPPoolBlocks
	}
	if p.Spec.ReleaseAfter != nil {
		out.ReleaseAfter = p.Spec.ReleaseAfter.Duration
	}
	for _, s := range p.Spec.CIDRs {
		if c, err := netip.ParsePrefix(s); err == nil {
			out.CIDRs = append(out.CIDRs, c.Masked())
		}
	}
	out.BlockBits = DefaultBlockBitsIPv4
	if len(out.CIDRs) > 0 && out.CIDRs[0].Addr().Is6() {
		out.BlockBits = DefaultBlockBitsIPv6
	}
	if p.Spec.BlockSize != nil {
		out.BlockBits = int(*p.Spec.BlockSize)
	}
	for _, s := range p.Spec.ExcludeIPs {
		if a, err := netip.ParseAddr(s); err == nil {
			out.Excludes = append(out.Excludes, a)
		}
	}
	out.ForNamespaces = poolchoiceapi.ForNamespaces(p)
	if p.Spec.NodeSelector == nil {
		out.Selector = labels.Everything()
	} else if sel, err := metav1.LabelSelectorAsSelector(p.Spec.NodeSelector); err != nil {
		out.SelectorErr = err.Error()
	} else {
		out.Selector = sel
	}
	return out
}

// rangeOf converts an IPRange for the planner; Pool is set only for a range labelled with a pool.
func rangeOf(r *jkev1.IPRange) (Range, bool) {
	c, err := netip.ParsePrefix(r.Spec.CIDR)
	if err != nil {
		return Range{}, false
	}
	out := Range{Name: r.Name, CIDR: c.Masked(), Node: r.Spec.Node, Pool: r.Labels[jkev1.LabelIPPool],
		OwnerGeneration: r.Spec.OwnerGeneration, Deleting: r.DeletionTimestamp != nil,
		Gateway: r.Spec.Gateway, Excludes: r.Spec.ExcludeIPs, NATOutgoing: r.Spec.NATOutgoing, DisableBGPExport: r.Spec.DisableBGPExport,
		Restricted: r.Labels[jkev1.LabelIPPoolRestricted] == "true"}
	if s := r.Annotations[jkev1.AnnotationNodeGoneSince]; s != "" {
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			out.GoneSince = t
		}
	}
	if s, ok := r.Annotations[jkev1.AnnotationReleasedGeneration]; ok {
		if g, err := strconv.ParseInt(s, 10, 64); err == nil {
			out.Released, out.ReleasedGeneration = true, g
		}
	}
	if s := r.Annotations[jkev1.AnnotationEmptySince]; s != "" {
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			out.EmptySince = t
		}
	}
	out.Free = rangeFree(r)
	return out, true
}

// rangeFree is how many more pods the range can give an address: the agent's count when it
// describes the spec as it is now, else every usable address (a block just given, or given
// again, has no count of its own node yet).
func rangeFree(r *jkev1.IPRange) int {
	if r.Status.ObservedGeneration == r.Generation && r.Status.Total > 0 {
		return int(r.Status.Free)
	}
	f, err := iprangeaddr.Parse(iprangeaddr.Fields{CIDR: r.Spec.CIDR, RangeStart: r.Spec.RangeStart, RangeEnd: r.Spec.RangeEnd,
		Gateway: r.Spec.Gateway, Exclude: r.Spec.ExcludeIPs})
	if err != nil {
		return 0
	}
	return int(min(f.Size(), 1<<20))
}

func (c *Controller) input(ctx context.Context, now time.Time) (Input, error) {
	in := Input{Now: now}
	pools, err := c.pools.List(labels.Everything())
	if err != nil {
		return in, err
	}
	for _, p := range pools {
		in.Pools = append(in.Pools, poolOf(p))
	}
	if in.Pending, c.refused, c.overlaps, err = c.choices(pools); err != nil {
		return in, err
	}
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return in, err
	}
	for _, n := range nodes {
		node := Node{Name: n.Name, Labels: n.Labels, OutOfService: jkev1alpha1.NodeOutOfService(n)}
		for _, s := range n.Spec.PodCIDRs {
			if p, err := netip.ParsePrefix(s); err == nil {
				node.PodCIDRs = append(node.PodCIDRs, p.Masked())
			}
		}
		in.Nodes = append(in.Nodes, node)
	}
	ranges, err := c.ranges.List(labels.Everything())
	if err != nil {
		return in, err
	}
	// Lay this process's own writes over the cache while it does not show them yet.
	seen := make(map[string]bool, len(ranges))
	for _, r := range ranges {
		seen[r.Name] = true
		if rr, ok := rangeOf(c.written.View(r.Name, r)); ok {
			in.Ranges = append(in.Ranges, rr)
		}
	}
	for _, r := range c.written.Unseen(func(name string) bool { return seen[name] }) {
		if rr, ok := rangeOf(r); ok {
			in.Ranges = append(in.Ranges, rr)
		}
	}
	in.Held = c.heldFunc()
	in.NodeGone = c.nodeGoneFunc(ctx, ranges, now)
	in.IPHeld = c.ipHeldFunc()
	return in, nil
}

// choices reads what the pool choice needs (apis/poolchoice): every pool, the namespaces; it
// returns the pods bound to a node and waiting for their IP whose pools were chosen (Input.Pending),
// the pods whose choice is refused (a pool deleted, or changed, after admission let them in),
// and the pools' NamespaceSelectorOverlaps.
func (c *Controller) choices(pools []*jkev1.IPPool) ([]PendingPod, map[string]error, map[string]poolchoice.Overlap, error) {
	byName := map[string]poolchoice.Pool{}
	for _, p := range pools {
		if cp, err := poolchoiceapi.FromIPPool(p); err == nil {
			byName[p.Name] = cp
		}
	}
	nsPools := poolchoice.NamespacePools(byName)
	c.namespacePools.Store(len(nsPools) > 0)
	namespaces, err := c.namespaces.List(labels.Everything())
	if err != nil {
		return nil, nil, nil, err
	}
	nsByName := make(map[string]poolchoice.Namespace, len(namespaces))
	var all []poolchoice.Namespace
	for _, n := range namespaces {
		ns := poolchoice.Namespace{Name: n.Name, Labels: n.Labels, Annotations: n.Annotations}
		nsByName[n.Name] = ns
		all = append(all, ns)
	}
	var overlaps map[string]poolchoice.Overlap
	if len(nsPools) > 1 {
		overlaps = poolchoice.Overlaps(byName, all)
	}
	awaiting, err := c.pods.AwaitingIP()
	if err != nil {
		return nil, nil, nil, err
	}
	var out []PendingPod
	refused := map[string]error{}
	for _, p := range awaiting {
		if len(nsPools) == 0 && p.Annotations[jkev1.AnnotationIPPools] == "" && nsByName[p.Namespace].Annotations[jkev1.AnnotationIPPools] == "" {
			continue
		}
		ch, err := poolchoice.Choose(p.Annotations, nsByName[p.Namespace], byName, nsPools)
		if err != nil {
			refused[p.Namespace+"/"+p.Name] = err
			continue
		}
		if len(ch.Pools) > 0 {
			out = append(out, PendingPod{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, Pools: ch.Pools})
		}
	}
	return out, refused, overlaps, nil
}

// nodeGoneFunc gathers, per deleted node, the evidence of controllers/pkg/nodegone — read live:
// the Node (the cache may lag), its Lease kube-node-lease/<node>, the operator's node-off
// statement (on one of its IPRanges or its NodeFailover, or --node-deletion-is-fence), the pod
// objects bound to it or holding an IP of its ranges — and applies the rule.
func (c *Controller) nodeGoneFunc(ctx context.Context, ranges []*jkev1.IPRange, now time.Time) func(string, time.Time) nodegone.Verdict {
	memo := map[string]nodegone.Verdict{}
	return func(node string, goneSince time.Time) nodegone.Verdict {
		if v, ok := memo[node]; ok {
			return v
		}
		v := c.nodeGone(ctx, node, goneSince, ranges, now)
		memo[node] = v
		return v
	}
}

func (c *Controller) nodeGone(ctx context.Context, node string, goneSince time.Time, ranges []*jkev1.IPRange, now time.Time) nodegone.Verdict {
	e := nodegone.Evidence{Node: node, GoneSince: goneSince, Now: now, GoneAfter: c.NodeGoneAfter, OperatorSaysOff: c.NodeDeletionIsFence}
	notProven := func(what string, err error) nodegone.Verdict {
		return nodegone.Verdict{Reason: nodegone.ReasonWaiting, Message: fmt.Sprintf("node %s: reading its %s failed: %v", node, what, err)}
	}
	if _, err := c.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
		e.NodeExists = true
		return nodegone.Decide(e)
	} else if !apierrors.IsNotFound(err) {
		return notProven("Node", err)
	}
	if err := nodegone.ReadLease(ctx, c.kube, &e); err != nil {
		return notProven("Lease", err)
	}
	var prefixes []netip.Prefix
	for _, r := range ranges {
		if r.Spec.Node != node {
			continue
		}
		if r.Annotations[jkev1alpha1.AnnotationNodeOff] == "true" {
			e.OperatorSaysOff = true
		}
		if p, err := netip.ParsePrefix(r.Spec.CIDR); err == nil {
			prefixes = append(prefixes, p.Masked())
		}
	}
	if f, err := c.failovers.Get(node); err == nil && f.Annotations[jkev1alpha1.AnnotationNodeOff] == "true" {
		e.OperatorSaysOff = true
	}
	pods, err := c.pods.Candidates(node, prefixes)
	if err != nil {
		return notProven("pods", err)
	}
	e.HoldingPods = nodegone.HoldingPods(pods, node, prefixes)
	return nodegone.Decide(e)
}

// ipHeldFunc answers, from the informers, why an address may not become excluded or a gateway:
// a pod object (not finished) holds it, or a StaticIP's spec.ip is it.
func (c *Controller) ipHeldFunc() func(netip.Addr) string {
	return func(ip netip.Addr) string {
		host := netip.PrefixFrom(ip, ip.BitLen())
		pods, err := c.pods.Candidates("", []netip.Prefix{host})
		if err != nil {
			return "pod index: " + err.Error()
		}
		for _, p := range pods {
			if podindex.HoldsIPIn(p, host) != "" {
				return fmt.Sprintf("pod %s/%s holds it", p.Namespace, p.Name)
			}
		}
		sips, _ := c.staticIPs.List(labels.Everything())
		for _, s := range sips {
			if s.DeletionTimestamp == nil && slices.Contains(s.Spec.AddressList(), ip) {
				return fmt.Sprintf("StaticIP %s/%s has it as spec.ip or spec.ips", s.Namespace, s.Name)
			}
		}
		return ""
	}
}

// heldFunc answers, from the informers, why a block may not go back to the pool yet.
func (c *Controller) heldFunc() func(r Range, pendingOn string) string {
	var sips []*jkev1.StaticIP
	var sipsLoaded bool
	return func(r Range, pendingOn string) string {
		pods, err := c.pods.Candidates(pendingOn, []netip.Prefix{r.CIDR})
		if err != nil {
			return "pod index: " + err.Error()
		}
		for _, p := range pods {
			if ip := podindex.HoldsIPIn(p, r.CIDR); ip != "" {
				return fmt.Sprintf("pod %s/%s holds %s", p.Namespace, p.Name, ip)
			}
			if pendingOn != "" && p.Spec.NodeName == pendingOn && !p.Spec.HostNetwork && len(p.Status.PodIPs) == 0 &&
				p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				return fmt.Sprintf("pod %s/%s on node %s has no IP yet", p.Namespace, p.Name, pendingOn)
			}
		}
		if !sipsLoaded {
			sips, _ = c.staticIPs.List(labels.Everything())
			sipsLoaded = true
		}
		for _, s := range sips {
			if s.DeletionTimestamp != nil {
				continue
			}
			// Every address of the record: a dual-stack record's IPv6 address holds an IPv6 block.
			addrs := s.Spec.AddressList()
			if i := slices.IndexFunc(addrs, r.CIDR.Contains); i >= 0 {
				return fmt.Sprintf("StaticIP %s/%s has %s", s.Namespace, s.Name, addrs[i])
			}
		}
		if recs, err := c.failovers.List(labels.Everything()); err == nil {
			for _, f := range recs {
				if f.Status.Phase == jkev1alpha1.FailoverCompleted {
					continue
				}
				if (r.Node != "" && (f.Spec.Node == r.Node || f.Status.Target == r.Node)) ||
					slices.ContainsFunc(f.Status.MovedRanges, func(m jkev1alpha1.MovedRange) bool { return m.Name == r.Name }) {
					return "NodeFailover " + f.Name + " is in progress"
				}
			}
		}
		if pendingOn != "" {
			if cur, err := c.ranges.Get(r.Name); err == nil && cur.Status.Used+cur.Status.Reserved > 0 {
				return fmt.Sprintf("the agent reports %d used and %d reserved addresses", cur.Status.Used, cur.Status.Reserved)
			}
		}
		return ""
	}
}

func (c *Controller) sync(ctx context.Context, _ string) (time.Duration, error) {
	logger := klog.FromContext(ctx).WithValues("controller", Name)
	now := c.Now()
	in, err := c.input(ctx, now)
	if err != nil {
		return 0, err
	}
	plan := Compute(in)
	var errs []error
	assignedNow := map[string]bool{}
	for _, a := range plan.Assign {
		if err := c.assign(ctx, a); err != nil {
			if errors.Is(err, errNodeGone) {
				logger.V(2).Info("Node gone before its block was given", "node", a.Node, "range", a.Name)
				c.queue.AddAfter(key, time.Second)
				continue
			}
			if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
				// Another allocator (or our last run) took this block: the node is planned
				// again from a fresh view.
				logger.V(2).Info("Block taken meanwhile", "range", a.Name, "node", a.Node)
				c.queue.AddAfter(key, 100*time.Millisecond)
				continue
			}
			errs = append(errs, fmt.Errorf("create IPRange %s for node %s: %w", a.Name, a.Node, err))
			c.nodeEvent(a.Node, corev1.EventTypeWarning, ReasonAssignFailed, "IPPool %s: creating IPRange %s failed: %v", a.Pool, a.Name, err)
			continue
		}
		assignedNow[a.Node] = true
		logger.Info("Block assigned", "pool", a.Pool, "node", a.Node, "range", a.Name, "cidr", a.CIDR)
		c.nodeEvent(a.Node, corev1.EventTypeNormal, ReasonBlockAssigned, "IPPool %s: IPRange %s (%s) assigned to this node", a.Pool, a.Name, a.CIDR)
		if p, err := c.pools.Get(a.Pool); err == nil {
			c.recorder.Eventf(p, corev1.EventTypeNormal, ReasonBlockAssigned, "IPRange %s (%s) assigned to node %s", a.Name, a.CIDR, a.Node)
		}
	}
	for _, u := range plan.Update {
		if err := c.update(ctx, u); err != nil {
			errs = append(errs, err)
			continue
		}
		logger.Info("Block follows its pool's spec", "pool", u.Pool, "range", u.Range, "gateway", u.Gateway, "excludeIPs", u.Excludes)
	}
	for _, r := range plan.Release {
		if err := c.release(ctx, r); err != nil {
			errs = append(errs, err)
			continue
		}
		logger.Info("Block released", "pool", r.Pool, "range", r.Range, "why", r.Why)
		if p, err := c.pools.Get(r.Pool); err == nil {
			c.recorder.Eventf(p, corev1.EventTypeNormal, ReasonBlockReleased, "IPRange %s returned to the pool: %s", r.Range, r.Why)
		} else if rg, err := c.ranges.Get(r.Range); err == nil { // the pool is deleted: tell it on the range
			c.recorder.Eventf(rg, corev1.EventTypeNormal, ReasonBlockReleased, "released from node %s: %s", r.Node, r.Why)
		}
	}
	for _, m := range plan.Mark {
		if err := c.mark(ctx, m); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	for _, s := range plan.Skips {
		c.nodeEvent(s.Node, corev1.EventTypeWarning, s.Reason, "%s", s.Message)
	}
	for _, w := range plan.Waits {
		c.rangeEvent(w)
	}
	if err := c.poolDeletedConditions(ctx, plan.Waits); err != nil {
		errs = append(errs, err)
	}
	waitingPods := map[string]bool{}
	for _, w := range plan.PodWaits {
		c.podEvent(w.Namespace, w.Name, w.Reason, w.Message)
		waitingPods[podKey(w.Namespace, w.Name)] = true
	}
	for pod, err := range c.refused {
		ns, name, _ := strings.Cut(pod, "/")
		c.podEvent(ns, name, ReasonPoolChoiceInvalid, err.Error())
		waitingPods[podKey(ns, name)] = true
	}
	c.forgetPodsExcept(waitingPods)
	pending := int32(len(plan.Waits))
	for _, m := range plan.Mark {
		if !m.Since.IsZero() {
			pending++
		}
	}
	if plan.Requeue > 0 {
		pending++
	}
	c.releasePending.Store(pending)
	for name, st := range plan.Pools {
		for _, n := range st.Waiting {
			if !assignedNow[n] {
				c.nodeEvent(n, corev1.EventTypeWarning, ReasonPoolExhausted, "IPPool %s has no free block for this node", name)
			}
		}
		if err := c.writeStatus(ctx, name, st); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return 0, fmt.Errorf("%d errors, first: %w", len(errs), errs[0])
	}
	return plan.Requeue, nil
}

// errNodeGone: a live GET found no Node for an assignment (the Node cache lags).
var errNodeGone = errors.New("node gone")

// assign gives a block to a node: it reads the Node live first — the Node cache can lag the
// IPRange cache, and a node just deleted must not get a fresh block (e2e flake of cae6342) —
// then creates the IPRange, or re-assigns the pool's released one (update with the cached
// resourceVersion: two allocators cannot both take it).
func (c *Controller) assign(ctx context.Context, a Assign) error {
	n, err := c.kube.CoreV1().Nodes().Get(ctx, a.Node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && n.DeletionTimestamp != nil) {
		return errNodeGone
	} else if err != nil {
		return err
	}
	var written *jkev1.IPRange
	if a.Reuse {
		cur, err := c.ranges.Get(a.Name)
		if err != nil {
			return err
		}
		if cur.Labels[jkev1.LabelIPPool] != a.Pool || cur.Spec.Node != "" || cur.Spec.OwnerGeneration != a.OwnerGeneration {
			return apierrors.NewConflict(jkev1.Resource("ipranges"), a.Name, fmt.Errorf("changed since it was released"))
		}
		r := cur.DeepCopy()
		r.Spec.Node, r.Spec.Gateway, r.Spec.ExcludeIPs, r.Spec.NATOutgoing = a.Node, a.Gateway, a.Excludes, ptr.To(a.NATOutgoing)
		r.Spec.DisableBGPExport = ptr.To(a.DisableBGPExport)
		setRestricted(r, a.Restricted)
		delete(r.Annotations, jkev1.AnnotationNodeGoneSince)
		delete(r.Annotations, jkev1.AnnotationEmptySince)
		if written, err = c.client.JkeV1().IPRanges().Update(ctx, r, metav1.UpdateOptions{}); err != nil {
			return err
		}
	} else {
		r := &jkev1.IPRange{
			ObjectMeta: metav1.ObjectMeta{Name: a.Name, Labels: map[string]string{jkev1.LabelIPPool: a.Pool}},
			Spec: jkev1.IPRangeSpec{CIDR: a.CIDR.String(), Node: a.Node, Gateway: a.Gateway, ExcludeIPs: a.Excludes,
				NATOutgoing: ptr.To(a.NATOutgoing), DisableBGPExport: ptr.To(a.DisableBGPExport)},
		}
		setRestricted(r, a.Restricted)
		if written, err = c.client.JkeV1().IPRanges().Create(ctx, r, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	c.remember(written)
	c.forget(a.Node)
	return nil
}

// update writes a pool block's gateway, excludes and natOutgoing (the cached resourceVersion: a
// range changed meanwhile is planned again).
func (c *Controller) update(ctx context.Context, u Update) error {
	cur, err := c.ranges.Get(u.Range)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if cur.Labels[jkev1.LabelIPPool] != u.Pool {
		return nil
	}
	r := cur.DeepCopy()
	r.Spec.Gateway, r.Spec.ExcludeIPs, r.Spec.NATOutgoing = u.Gateway, u.Excludes, ptr.To(u.NATOutgoing)
	r.Spec.DisableBGPExport = ptr.To(u.DisableBGPExport)
	setRestricted(r, u.Restricted)
	if len(u.Excludes) == 0 {
		r.Spec.ExcludeIPs = nil
	}
	written, err := c.client.JkeV1().IPRanges().Update(ctx, r, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		c.queue.AddAfter(key, time.Second)
		return nil
	}
	if err != nil {
		return fmt.Errorf("update IPRange %s to its pool's gateway, excludes and natOutgoing: %w", u.Range, err)
	}
	c.remember(written)
	return nil
}

// setRestricted labels a block of a namespace pool jke.jdcloud.com/ippool-restricted=true (and
// removes the label from any other): the node's CNI reads it from the range.
func setRestricted(r *jkev1.IPRange, restricted bool) {
	if !restricted {
		delete(r.Labels, jkev1.LabelIPPoolRestricted)
		return
	}
	if r.Labels == nil {
		r.Labels = map[string]string{}
	}
	r.Labels[jkev1.LabelIPPoolRestricted] = "true"
}

// remember lays a range this process wrote over the cache until the informer shows it.
func (c *Controller) remember(r *jkev1.IPRange) { c.written.Remember(r.Name, r) }

// release gives a pool range back to the pool: it unassigns it (spec.node "") and raises its
// ownerGeneration by one, marked with the generation of the release, instead of deleting it —
// the node it leaves revokes it should it come back (a range deleted and created again at
// generation 0 would only drain there, still serving its pods' addresses), and the next node
// that needs a block gets this IPRange. An update with the cached resourceVersion: a range
// changed meanwhile (moved by failover, re-marked) is not released.
func (c *Controller) release(ctx context.Context, rel Release) error {
	cur, err := c.ranges.Get(rel.Range)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if cur.Labels[jkev1.LabelIPPool] != rel.Pool || cur.Spec.Node != rel.Node || cur.Spec.OwnerGeneration+1 != rel.Generation {
		c.queue.AddAfter(key, time.Second)
		return nil
	}
	r := cur.DeepCopy()
	r.Spec.Node, r.Spec.OwnerGeneration = "", rel.Generation
	if r.Annotations == nil {
		r.Annotations = map[string]string{}
	}
	delete(r.Annotations, jkev1.AnnotationNodeGoneSince)
	delete(r.Annotations, jkev1.AnnotationEmptySince)
	r.Annotations[jkev1.AnnotationReleasedGeneration] = strconv.FormatInt(rel.Generation, 10)
	written, err := c.client.JkeV1().IPRanges().Update(ctx, r, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		c.queue.AddAfter(key, time.Second)
		return nil
	}
	if err != nil {
		return fmt.Errorf("release IPRange %s: %w", rel.Range, err)
	}
	c.remember(written)
	if rel.NodeGone {
		return c.pruneHolders(ctx, written, rel.Node)
	}
	return nil
}

// pruneHolders removes the claims of a node proven gone from a range's status.holders: no agent
// will ever remove them (its node is gone), and they would count toward the entries' limit of a
// block that cycles through deleted nodes. Only entries naming that node go; a conflict is
// retried on the range's next sync (entries at an older generation hold nothing meanwhile).
func (c *Controller) pruneHolders(ctx context.Context, r *jkev1.IPRange, node string) error {
	if node == "" || !slices.ContainsFunc(r.Status.Holders, func(h jkev1.IPRangeHolder) bool { return h.Node == node }) {
		return nil
	}
	r = r.DeepCopy()
	r.Status.Holders = slices.DeleteFunc(r.Status.Holders, func(h jkev1.IPRangeHolder) bool { return h.Node == node })
	written, err := c.client.JkeV1().IPRanges().UpdateStatus(ctx, r, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("IPRange %s: remove the claims of gone node %s: %w", r.Name, node, err)
	}
	c.remember(written)
	return nil
}

// rangeEvent tells, on the IPRange, why a deleted node's block is not released yet (once per
// reason and range).
func (c *Controller) rangeEvent(w Wait) {
	if !c.tellOnce("iprange/"+w.Range, w.Reason) {
		return
	}
	r, err := c.ranges.Get(w.Range)
	if err != nil {
		return
	}
	typ := corev1.EventTypeNormal
	if w.Warning {
		typ = corev1.EventTypeWarning
	}
	c.recorder.Eventf(r, typ, ReasonReleaseWaits, "not returned to the pool yet (%s): %s", w.Reason, w.Message)
}

// poolDeletedConditions sets the IPRange condition IPPoolDeleted on the blocks of deleted pools
// that stay in use (the plan's ReasonOrphanHeld waits) and removes it from every other range
// (released since, or its pool created again). The agents keep conditions they do not own
// (meta.SetStatusCondition on the range's status).
func (c *Controller) poolDeletedConditions(ctx context.Context, waits []Wait) error {
	want := map[string]Wait{}
	for _, w := range waits {
		if w.Reason == ReasonOrphanHeld {
			want[w.Range] = w
		}
	}
	ranges, err := c.ranges.List(labels.Everything())
	if err != nil {
		return err
	}
	var errs []error
	for _, cur := range ranges {
		w, held := want[cur.Name]
		old := meta.FindStatusCondition(cur.Status.Conditions, ConditionPoolDeleted)
		if !held && old == nil || held && old != nil && old.Reason == w.Reason && old.Message == w.Message {
			continue
		}
		r := cur.DeepCopy()
		if held {
			meta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{Type: ConditionPoolDeleted, Status: metav1.ConditionTrue,
				Reason: w.Reason, Message: w.Message, ObservedGeneration: r.Generation})
		} else {
			meta.RemoveStatusCondition(&r.Status.Conditions, ConditionPoolDeleted)
		}
		written, err := c.client.JkeV1().IPRanges().UpdateStatus(ctx, r, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			c.queue.AddAfter(key, time.Second)
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("IPRange %s: condition %s: %w", r.Name, ConditionPoolDeleted, err))
			continue
		}
		c.remember(written)
	}
	return errors.Join(errs...)
}

func (c *Controller) mark(ctx context.Context, m Mark) error {
	var val any // nil removes the annotation in a merge patch
	if !m.Since.IsZero() {
		val = m.Since.UTC().Format(time.RFC3339)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{cmp.Or(m.Annotation, jkev1.AnnotationNodeGoneSince): val}}})
	_, err := c.client.JkeV1().IPRanges().Patch(ctx, m.Range, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

func (c *Controller) writeStatus(ctx context.Context, name string, st *PoolStatus) error {
	cur, err := c.pools.Get(name)
	if err != nil {
		return err
	}
	p := cur.DeepCopy()
	p.Status.BlockSize = st.BlockBits
	p.Status.BlocksTotal, p.Status.BlocksAssigned, p.Status.BlocksFree = st.Total, st.Assigned, max(st.Free, 0)
	p.Status.ObservedGeneration = p.Generation
	ready := metav1.ConditionTrue
	if !st.Ready {
		ready = metav1.ConditionFalse
	}
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: jkev1.IPPoolReady, Status: ready,
		Reason: st.ReadyReason, Message: st.ReadyMessage, ObservedGeneration: p.Generation})
	ex := metav1.Condition{Type: jkev1.IPPoolExhausted, Status: metav1.ConditionFalse, Reason: "BlocksAvailable",
		Message: "every matching node has a block", ObservedGeneration: p.Generation}
	switch {
	case len(st.Waiting) > 0 && len(st.WaitingPods) > 0:
		ex.Status, ex.Reason = metav1.ConditionTrue, ReasonPoolExhausted
		ex.Message = fmt.Sprintf("no free block for %d node(s): %s; nor for %d pod(s) of the pool: %s", len(st.Waiting), shortList(st.Waiting),
			len(st.WaitingPods), shortList(st.WaitingPods))
	case len(st.Waiting) > 0:
		ex.Status, ex.Reason = metav1.ConditionTrue, ReasonPoolExhausted
		ex.Message = fmt.Sprintf("no free block for %d node(s): %s", len(st.Waiting), shortList(st.Waiting))
	case len(st.WaitingPods) > 0:
		ex.Status, ex.Reason = metav1.ConditionTrue, ReasonPoolExhausted
		ex.Message = fmt.Sprintf("no free block for %d pod(s) of the pool on their nodes: %s", len(st.WaitingPods), shortList(st.WaitingPods))
	}
	meta.SetStatusCondition(&p.Status.Conditions, ex)
	peers, err := c.bgpPeers.List(labels.Everything())
	if err != nil {
		return err
	}
	exportNAT := ExportedWithNAT(&p.Spec, len(peers))
	exportNAT.ObservedGeneration = p.Generation
	meta.SetStatusCondition(&p.Status.Conditions, exportNAT)
	if poolchoiceapi.ForNamespaces(cur) {
		ov := metav1.Condition{Type: jkev1.IPPoolNamespaceSelectorOverlaps, Status: metav1.ConditionFalse, Reason: "NoOverlap",
			Message: "no older pool of the family selects a namespace this one selects", ObservedGeneration: p.Generation}
		if o, ok := c.overlaps[name]; ok {
			ov.Status, ov.Reason, ov.Message = metav1.ConditionTrue, ReasonNamespaceSelectorOverlaps, o.Message(name)
		}
		meta.SetStatusCondition(&p.Status.Conditions, ov)
	} else {
		meta.RemoveStatusCondition(&p.Status.Conditions, jkev1.IPPoolNamespaceSelectorOverlaps)
	}
	if apiequality.Semantic.DeepEqual(p.Status, cur.Status) {
		return nil
	}
	if ex.Status == metav1.ConditionTrue && !meta.IsStatusConditionTrue(cur.Status.Conditions, jkev1.IPPoolExhausted) {
		c.recorder.Eventf(p, corev1.EventTypeWarning, ReasonPoolExhausted, "%s", ex.Message)
	}
	if exportNAT.Status == metav1.ConditionTrue && !meta.IsStatusConditionTrue(cur.Status.Conditions, jkev1.IPPoolExportedWithNAT) {
		c.recorder.Eventf(p, corev1.EventTypeWarning, ReasonExportedWithNAT, "%s", exportNAT.Message)
	}
	if meta.IsStatusConditionTrue(p.Status.Conditions, jkev1.IPPoolNamespaceSelectorOverlaps) &&
		!meta.IsStatusConditionTrue(cur.Status.Conditions, jkev1.IPPoolNamespaceSelectorOverlaps) {
		c.recorder.Eventf(p, corev1.EventTypeWarning, ReasonNamespaceSelectorOverlaps, "%s", c.overlaps[name].Message(name))
	}
	_, err = c.client.JkeV1().IPPools().UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		c.queue.AddAfter(key, time.Second)
		return nil
	}
	return err
}

// nodeEvent records an Event on a Node; a warning is given once until it changes.
func (c *Controller) nodeEvent(node, typ, reason, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if typ == corev1.EventTypeWarning && !c.tellOnce(node, reason+msg) {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: types.UID(node)}
	if n, err := c.nodes.Get(node); err == nil {
		ref.UID = n.UID
	}
	c.recorder.Event(ref, typ, reason, msg)
}

// podEvent records a Warning Event on a pod, once until its message changes: why its address
// of its pool cannot come (the pool is exhausted, no pool of it serves the node, the choice is
// refused).
func (c *Controller) podEvent(namespace, name, reason, msg string) {
	if !c.tellOnce(podKey(namespace, name), reason+msg) {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: namespace, Name: name}
	if p, err := c.pods.Get(namespace, name); err == nil {
		ref.UID, ref.ResourceVersion = p.UID, p.ResourceVersion
	}
	c.recorder.Event(ref, corev1.EventTypeWarning, reason, msg)
}

// tellOnce: what was not the last thing told about key; it is remembered as such.
func (c *Controller) tellOnce(key, what string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.told[key] == what {
		return false
	}
	c.told[key] = what
	return true
}

func podKey(namespace, name string) string { return "pod/" + namespace + "/" + name }

// forgetPodsExcept drops what was told to pods that no longer wait (they got an address, or are
// gone), so the memory follows the pods waiting now.
func (c *Controller) forgetPodsExcept(waiting map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.told {
		if strings.HasPrefix(k, "pod/") && !waiting[k] {
			delete(c.told, k)
		}
	}
}

func (c *Controller) forget(node string) {
	c.mu.Lock()
	delete(c.told, node)
	c.mu.Unlock()
}

func shortList(items []string) string {
	const max = 10
	if len(items) <= max {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:max], ", ") + fmt.Sprintf(" and %d more", len(items)-max)
}
