package poolfit

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	"github.com/staticip/staticip/apis/generated/informers/externalversions"
	"github.com/staticip/staticip/apis/iprangeaddr"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/poolchoice"
	"github.com/staticip/staticip/apis/poolchoice/poolchoiceapi"
	"github.com/staticip/staticip/scheduler-plugins/pkg/staticipnode"
)

// View is what the scheduler knows of pools: the IPPools, the blocks of namespace pools
// (IPRanges labelled jke.jdcloud.com/ippool-restricted=true, with their agents' free counts)
// and the namespaces' labels and ippools annotations (the scheduler's own namespace informer).
// A cluster where no IPPool has a namespaceSelector and no namespace carries the annotation
// costs a pod naming no pool one atomic load (Relevant).
type View struct {
	namespaces corelisters.NamespaceLister
	synced     []cache.InformerSynced

	mu     sync.Mutex
	pools  map[string]*jkev1.IPPool
	blocks map[string]*jkev1.IPRange
	// annotated are the namespaces carrying the ippools annotation.
	annotated map[string]bool
	// nsLabels are the namespaces' labels as last seen (a change drops the snapshot).
	nsLabels map[string]map[string]string
	// nsPools counts the pools with a non-empty namespaceSelector.
	nsPools int
	snap    *Snapshot // nil: rebuild on the next read

	// active: some pool has a namespaceSelector or some namespace the annotation.
	active atomic.Bool
	// ready latches once every informer has delivered its initial list.
	ready atomic.Bool

	// waiting are the pods rejected for their pools, activated on the next pool or block change.
	waitMu    sync.Mutex
	waiting   map[types.UID]*v1.Pod
	activator staticipnode.Activator
	logger    klog.Logger
}

// Snapshot is the view at one instant, read by one scheduling cycle.
type Snapshot struct {
	choice  map[string]poolchoice.Pool
	nsPools []poolchoice.Pool
	fit     map[string]Pool
	// blocks: node -> pool -> the pool's blocks the node holds.
	blocks map[string]map[string][]Block
	// free: node name -> *nodeFree, the node's free addresses per pool on this snapshot,
	// memoised per version of the node's pods (Filter asks for every node in every cycle;
	// between two cycles only the node that took the last pod changed).
	free sync.Map
}

// nodeFree is one node's free addresses per pool of the blocks it holds, counted from the
// node's pods at one NodeInfo generation.
type nodeFree struct {
	generation int64
	free       map[string]int64
}

var (
	sharedMu sync.Mutex
	shared   = map[informers.SharedInformerFactory]*View{}
)

// ForScheduler returns the view of one scheduler instance (shared by its profiles), creating it
// on first use; its IPPool and block informers are started here and stopped with ctx.
func ForScheduler(ctx context.Context, schedulerInformers informers.SharedInformerFactory, client versioned.Interface, activator staticipnode.Activator) (*View, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if v, ok := shared[schedulerInformers]; ok {
		return v, nil
	}
	v := &View{pools: map[string]*jkev1.IPPool{}, blocks: map[string]*jkev1.IPRange{}, annotated: map[string]bool{}, nsLabels: map[string]map[string]string{},
		waiting: map[types.UID]*v1.Pod{}, activator: activator, logger: klog.FromContext(ctx).WithName("poolfit")}
	poolFactory := externalversions.NewSharedInformerFactoryWithOptions(client, 0, externalversions.WithTransform(trim))
	blockFactory := externalversions.NewSharedInformerFactoryWithOptions(client, 0, externalversions.WithTransform(trim),
		externalversions.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = jkev1.LabelIPPoolRestricted + "=true" }))
	poolReg, err := poolFactory.Jke().V1().IPPools().Informer().AddEventHandler(handler(v.setPool))
	if err != nil {
		return nil, fmt.Errorf("poolfit: watching IPPools: %w", err)
	}
	blockReg, err := blockFactory.Jke().V1().IPRanges().Informer().AddEventHandler(handler(v.setBlock))
	if err != nil {
		return nil, fmt.Errorf("poolfit: watching namespace pools' blocks: %w", err)
	}
	nsInformer := schedulerInformers.Core().V1().Namespaces()
	nsReg, err := nsInformer.Informer().AddEventHandler(handler(v.setNamespace))
	if err != nil {
		return nil, fmt.Errorf("poolfit: watching namespaces: %w", err)
	}
	v.namespaces = nsInformer.Lister()
	v.synced = []cache.InformerSynced{poolReg.HasSynced, blockReg.HasSynced, nsReg.HasSynced}
	poolFactory.Start(ctx.Done())
	blockFactory.Start(ctx.Done())
	shared[schedulerInformers] = v
	go func() {
		<-ctx.Done()
		poolFactory.Shutdown()
		blockFactory.Shutdown()
		sharedMu.Lock()
		delete(shared, schedulerInformers)
		sharedMu.Unlock()
	}()
	return v, nil
}

// handler calls set(name, obj) for adds and updates and set(name, nil) for deletions.
func handler[T metav1.Object](set func(name string, obj T, present bool)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { apply(set, obj, true) },
		UpdateFunc: func(_, obj interface{}) { apply(set, obj, true) },
		DeleteFunc: func(obj interface{}) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			apply(set, obj, false)
		},
	}
}

func apply[T metav1.Object](set func(string, T, bool), obj interface{}, present bool) {
	if o, ok := obj.(T); ok {
		set(o.GetName(), o, present)
	}
}

// trim keeps of IPPools and IPRanges what the view reads.
func trim(obj interface{}) (interface{}, error) {
	switch o := obj.(type) {
	case *jkev1.IPPool:
		return &jkev1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: o.Name, UID: o.UID, ResourceVersion: o.ResourceVersion,
			CreationTimestamp: o.CreationTimestamp, DeletionTimestamp: o.DeletionTimestamp},
			Spec:   jkev1.IPPoolSpec{CIDRs: o.Spec.CIDRs, Mode: o.Spec.Mode, NodeSelector: o.Spec.NodeSelector, NamespaceSelector: o.Spec.NamespaceSelector},
			Status: jkev1.IPPoolStatus{BlocksFree: o.Status.BlocksFree}}, nil
	case *jkev1.IPRange:
		return &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: o.Name, UID: o.UID, ResourceVersion: o.ResourceVersion,
			Labels: map[string]string{jkev1.LabelIPPool: o.Labels[jkev1.LabelIPPool]}},
			Spec: jkev1.IPRangeSpec{CIDR: o.Spec.CIDR, Node: o.Spec.Node, RangeStart: o.Spec.RangeStart, RangeEnd: o.Spec.RangeEnd,
				Gateway: o.Spec.Gateway, ExcludeIPs: o.Spec.ExcludeIPs},
			Status: jkev1.IPRangeStatus{Reserved: o.Status.Reserved}}, nil
	}
	return obj, nil
}

// put sets or (present false) deletes m[name].
func put[T any](m map[string]T, name string, obj T, present bool) {
	if present {
		m[name] = obj
	} else {
		delete(m, name)
	}
}

func (v *View) setPool(name string, p *jkev1.IPPool, present bool) {
	v.mu.Lock()
	put(v.pools, name, p, present)
	v.nsPools = 0
	for _, p := range v.pools {
		if poolchoiceapi.ForNamespaces(p) {
			v.nsPools++
		}
	}
	v.changedLocked()
}

func (v *View) setBlock(name string, r *jkev1.IPRange, present bool) {
	v.mu.Lock()
	put(v.blocks, name, r, present)
	v.changedLocked()
}

// setNamespace records whether the namespace names pools and its labels (which namespace pools
// select it). A change of either drops the snapshot: the free counts memoised in it count the
// pods still waiting for an address by their pools, which follow from both.
func (v *View) setNamespace(name string, n *v1.Namespace, present bool) {
	has := present && n.Annotations[jkev1.AnnotationIPPools] != ""
	var lbls map[string]string
	if present {
		lbls = n.Labels
	}
	v.mu.Lock()
	if has == v.annotated[name] && maps.Equal(v.nsLabels[name], lbls) {
		v.mu.Unlock()
		return // a status or other update: nothing the view reads changed
	}
	put(v.annotated, name, true, has)
	put(v.nsLabels, name, lbls, present)
	v.changedLocked()
}

// changedLocked drops the snapshot, recomputes active, unlocks, and brings back the pods
// rejected for their pools: a pool or block change may let them fit.
func (v *View) changedLocked() {
	v.snap = nil
	v.active.Store(v.nsPools > 0 || len(v.annotated) > 0)
	v.mu.Unlock()
	// The set is taken whole under its lock (and never read after it unless taken): Filter's
	// goroutines add to it concurrently (Wait).
	var pods map[types.UID]*v1.Pod
	v.waitMu.Lock()
	if len(v.waiting) > 0 {
		pods, v.waiting = v.waiting, map[types.UID]*v1.Pod{}
	}
	v.waitMu.Unlock()
	if len(pods) > 0 && v.activator != nil {
		m := make(map[string]*v1.Pod, len(pods))
		for _, p := range pods {
			m[p.Namespace+"/"+p.Name] = p
		}
		v.activator.Activate(v.logger, m)
	}
}

// Synced: every informer delivered its initial list (latched).
func (v *View) Synced() bool {
	if v.ready.Load() {
		return true
	}
	for _, s := range v.synced {
		if !s() {
			return false
		}
	}
	v.ready.Store(true)
	return true
}

// Relevant: the pod's address may have to come from chosen pools — it names pools itself, or
// some pool selects namespaces, or some namespace names pools, or the view has not synced yet
// (it cannot tell: the plugin then refuses to decide, as for the staticIPNode cache, and the pod
// is retried — never placed on a view that missed its pool). Otherwise the pod is decided
// exactly as before pools had a namespaceSelector, at the cost of this check.
func (v *View) Relevant(pod *v1.Pod) bool {
	return v.active.Load() || !v.ready.Load() || pod.Annotations[jkev1.AnnotationIPPools] != ""
}

// Wait records a pod rejected for its pools (activated on the next pool or block change).
func (v *View) Wait(pod *v1.Pod) {
	v.waitMu.Lock()
	v.waiting[pod.UID] = pod
	v.waitMu.Unlock()
}

// Placed forgets pod.
func (v *View) Placed(pod *v1.Pod) {
	v.waitMu.Lock()
	delete(v.waiting, pod.UID)
	v.waitMu.Unlock()
}

// Snapshot is the view now (rebuilt after a change, shared until the next).
func (v *View) Snapshot() *Snapshot {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.snap != nil {
		return v.snap
	}
	s := &Snapshot{choice: map[string]poolchoice.Pool{}, fit: map[string]Pool{}, blocks: map[string]map[string][]Block{}}
	released := map[string]int64{}
	for _, r := range v.blocks {
		pool := r.Labels[jkev1.LabelIPPool]
		if pool == "" {
			continue
		}
		if r.Spec.Node == "" {
			released[pool]++
			continue
		}
		parsed, err := iprangeaddr.Parse(iprangeaddr.Fields{CIDR: r.Spec.CIDR, RangeStart: r.Spec.RangeStart, RangeEnd: r.Spec.RangeEnd,
			Gateway: r.Spec.Gateway, Exclude: r.Spec.ExcludeIPs})
		if err != nil {
			continue // every agent refuses it: it gives no address
		}
		if s.blocks[r.Spec.Node] == nil {
			s.blocks[r.Spec.Node] = map[string][]Block{}
		}
		s.blocks[r.Spec.Node][pool] = append(s.blocks[r.Spec.Node][pool],
			Block{Prefix: parsed.Subnet, Capacity: parsed.Size(), Reserved: int64(r.Status.Reserved)})
	}
	for name, p := range v.pools {
		if cp, err := poolchoiceapi.FromIPPool(p); err == nil {
			s.choice[name] = cp
		}
		fp := Pool{Name: name, Deleting: p.DeletionTimestamp != nil, NodePodCIDR: p.Spec.Mode == jkev1.IPPoolNodePodCIDR,
			FreeBlocks: p.Status.BlocksFree + released[name]}
		if len(p.Spec.CIDRs) > 0 {
			if c, err := netip.ParsePrefix(p.Spec.CIDRs[0]); err == nil {
				fp.V6 = c.Addr().Is6()
			}
		}
		if p.Spec.NodeSelector != nil {
			if sel, err := metav1.LabelSelectorAsSelector(p.Spec.NodeSelector); err == nil {
				fp.NodeSelector = sel
			}
		}
		s.fit[name] = fp
	}
	s.nsPools = poolchoice.NamespacePools(s.choice)
	v.snap = s
	return s
}

// ServesEveryNode is ServesEveryNode on this snapshot's pools (their blocks left and
// selectors as the snapshot was built).
func (s *Snapshot) ServesEveryNode(pools []string) bool { return ServesEveryNode(pools, s.fit) }

// Choose is the pod's pools (apis/poolchoice.Choose: the rule admission, the allocator and the
// CNI apply), from the namespace as the scheduler's informer has it.
func (v *View) Choose(s *Snapshot, pod *v1.Pod) (poolchoice.Choice, error) {
	ns := poolchoice.Namespace{Name: pod.Namespace}
	if n, err := v.namespaces.Get(pod.Namespace); err == nil {
		ns.Labels, ns.Annotations = n.Labels, n.Annotations
	}
	return poolchoice.Choose(pod.Annotations, ns, s.choice, s.nsPools)
}

// Verdict is Verdict for the node on this snapshot, pod's pools being pools.
func (v *View) Verdict(s *Snapshot, pod *v1.Pod, pools []string, nodeInfo fwk.NodeInfo) (bool, string) {
	node := nodeInfo.Node()
	return Verdict(pools, Node{Name: node.Name, Labels: node.Labels, Free: v.nodeFree(s, pod, nodeInfo)}, s.fit)
}

// nodeFree is the free addresses of each pool of the blocks the node holds, counted from the
// node's pods (Free): those holding an address of a block, and those bound there without an
// address yet whose first pool with a block on the node is that pool (their choice is looked up
// only then: a pod naming no pool costs nothing here). It is memoised in the snapshot per node
// and NodeInfo generation: the scheduler bumps a NodeInfo's generation, from one global
// counter, whenever it adds or removes a pod (a clone with nominated pods gets a new one), so an
// equal generation means the same pods. The pod being scheduled is never among them (it is
// assumed only after its cycle, and nominated-pod clones leave it out); should it be, it is
// skipped and that count is not memoised. A snapshot lives until a pool, block or namespace
// change drops it.
func (v *View) nodeFree(s *Snapshot, pod *v1.Pod, nodeInfo fwk.NodeInfo) map[string]int64 {
	node := nodeInfo.Node()
	held := s.blocks[node.Name]
	if len(held) == 0 {
		return nil
	}
	gen := nodeInfo.GetGeneration()
	if e, ok := s.free.Load(node.Name); ok && e.(*nodeFree).generation == gen {
		return e.(*nodeFree).free
	}
	var ips []netip.Addr
	waiting := map[string]int64{}
	self := false
	for _, pi := range nodeInfo.GetPods() {
		p := pi.GetPod()
		if p.UID == pod.UID {
			self = true
			continue
		}
		if p.Spec.HostNetwork {
			continue
		}
		if len(p.Status.PodIPs) > 0 || p.Status.PodIP != "" {
			// Every address of the pod (both of a dual-stack one: its IPv6 address uses up an
			// address of the node's IPv6 block too).
			podIPs := p.Status.PodIPs
			if len(podIPs) == 0 {
				podIPs = []v1.PodIP{{IP: p.Status.PodIP}}
			}
			for _, pip := range podIPs {
				if a, err := netip.ParseAddr(pip.IP); err == nil {
					ips = append(ips, a)
				}
			}
			continue
		}
		if p.Status.Phase != v1.PodPending || !v.Relevant(p) {
			continue
		}
		if ch, err := v.Choose(s, p); err == nil {
			for _, name := range ch.Pools {
				if len(held[name]) > 0 {
					waiting[name]++
					break
				}
			}
		}
	}
	free := make(map[string]int64, len(held))
	for name, bs := range held {
		free[name] = Free(bs, ips, waiting[name])
	}
	if !self {
		// Filter runs on many goroutines: one storing another generation meanwhile (a clone
		// with nominated pods) only costs the next Filter a recount.
		s.free.Store(node.Name, &nodeFree{generation: gen, free: free})
	}
	return free
}
