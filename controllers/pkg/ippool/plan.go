// Package ippool is the range allocator: it gives every node that an IPPool selects, and that
// owns no IPRange of the pool's IP family, a block of the pool as an IPRange, and returns the
// block of a deleted node to the pool once nothing holds an IP of it. plan.go decides (pure,
// table-tested); controller.go reads the informers and carries the plan out.
package ippool

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/staticip/staticip/apis/iprangeaddr"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/controllers/pkg/nodegone"
)

// Default block prefix lengths when spec.blockSize is unset.
const (
	DefaultBlockBitsIPv4 = 24
	DefaultBlockBitsIPv6 = 120
)

// Pool is an IPPool as the planner needs it.
type Pool struct {
	Name    string
	Created time.Time
	CIDRs   []netip.Prefix
	// BlockBits is the block prefix length in effect.
	BlockBits int
	Mode      jkev1.IPPoolMode
	// Selector chooses the nodes (labels.Everything() for an empty one); nil when the
	// selector does not parse (the pool is then not Ready).
	Selector    labels.Selector
	SelectorErr string
	Excludes    []netip.Addr
	// FirstHostGateway: each block's network+1 is its gateway.
	FirstHostGateway bool
	ReleaseAfter     time.Duration
	// NATOutgoing: spec.natOutgoing in effect (unset is true), copied into every block.
	NATOutgoing bool
	// DisableBGPExport: spec.disableBGPExport (unset is false), copied into every block: the
	// agents announce a block over BGP unless it says so.
	DisableBGPExport bool
	// Deleting pools hand out nothing (their blocks stay: see controllers/README.md).
	Deleting bool
	// ForNamespaces: spec.namespaceSelector is non-empty, so the pool is address space of the
	// namespaces it selects (apis/poolchoice), never a node's pool: poolFor skips it.
	ForNamespaces bool
}

func (p *Pool) is4() bool { return len(p.CIDRs) > 0 && p.CIDRs[0].Addr().Is4() }

// Node is a Node as the planner needs it.
type Node struct {
	Name     string
	Labels   map[string]string
	PodCIDRs []netip.Prefix
	// OutOfService: the node is fenced (node.kubernetes.io/out-of-service): it gets no block
	// until the operator removes the taint. Node failover moves a fenced node's ranges away; a
	// block given to it then would only be moved after them, again and again.
	OutOfService bool
}

// Range is an IPRange as the planner needs it.
type Range struct {
	Name string
	CIDR netip.Prefix
	Node string
	// Pool is the value of the jke.jdcloud.com/ippool label ("" for hand-written ranges, which
	// the planner only ever avoids).
	Pool            string
	OwnerGeneration int64
	// GoneSince is when the allocator first saw the range's node gone (zero: not marked).
	GoneSince time.Time
	Deleting  bool
	// Released: the allocator released the block at ReleasedGeneration (annotation
	// jke.jdcloud.com/released-generation). With no node and that generation still, it is a
	// free block of its pool; assigned again at that generation, a block the allocator gave.
	Released           bool
	ReleasedGeneration int64
	// Gateway and Excludes: the range's spec.gateway and spec.excludeIPs.
	Gateway  string
	Excludes []string
	// NATOutgoing is the range's spec.natOutgoing (nil: unset).
	NATOutgoing *bool
	// DisableBGPExport is the range's spec.disableBGPExport (nil: unset).
	DisableBGPExport *bool
	// Restricted: the range carries the label jke.jdcloud.com/ippool-restricted=true.
	Restricted bool
	// Free is how many more pods the range can give an address: the agent's status.free when
	// it describes the current spec (status.observedGeneration), else every usable address
	// (a block just given has no status yet).
	Free int
	// EmptySince is when the allocator first saw this block of a namespace pool empty on its
	// live node (annotation jke.jdcloud.com/empty-since; zero: not marked).
	EmptySince time.Time
}

// free: a block the allocator released and nobody took since: no node, the generation of the
// release. It is handed out again (the same IPRange, at that generation).
func (r Range) free() bool {
	return r.Released && r.Node == "" && r.ReleasedGeneration == r.OwnerGeneration && !r.Deleting
}

// givenByAllocator: the range is at the generation the allocator gave it at (0, or that of its
// release), not moved since by node failover.
func (r Range) givenByAllocator() bool {
	return r.OwnerGeneration == 0 || (r.Released && r.ReleasedGeneration == r.OwnerGeneration)
}

// Input is everything one pass looks at.
type Input struct {
	Pools  []Pool
	Nodes  []Node
	Ranges []Range
	Now    time.Time
	// Held says why a pool range may not be deleted yet ("" when nothing holds it): a pod
	// object with an IP in it, a StaticIP whose spec.ip lies in it, a node failover moving it.
	// For an extra block of a live node (pendingOn = the node) it also counts the node's pods
	// that have no IP yet: one of them may be getting an address of this very block.
	Held func(r Range, pendingOn string) string
	// NodeGone applies the one rule for a deleted node (controllers/pkg/nodegone) to the node of
	// a pool range whose Node object is gone; goneSince is the range's node-gone-since mark. A
	// block leaves such a node only once it says Gone. Nil: never proven (nothing is released).
	NodeGone func(node string, goneSince time.Time) nodegone.Verdict
	// IPHeld says why an address may not become excluded or the gateway of a block ("" when it
	// may): a pod object holds it, or a StaticIP's spec.ip is it.
	IPHeld func(ip netip.Addr) string
	// Pending are the pods bound to a node that have no address yet and whose pools were
	// chosen (apis/poolchoice: the pod's or its namespace's annotation, or a pool whose
	// namespaceSelector selects the namespace). A node gets a block of such a pool when a pod
	// of it is there and no free address of it is left on the node.
	Pending []PendingPod
}

// PendingPod is a pod bound to Node, without an address yet, whose address must come from one
// of Pools (in order of preference).
type PendingPod struct {
	Namespace, Name, Node string
	Pools                 []string
}

func (p PendingPod) key() string { return p.Namespace + "/" + p.Name }

// Update is a pool block whose gateway, excludes, natOutgoing, disableBGPExport or restriction
// follow an edit of its pool.
type Update struct {
	Range, Pool, Gateway string
	Excludes             []string
	NATOutgoing          bool
	DisableBGPExport     bool
	// Restricted: the block's pool has a namespaceSelector (label jke.jdcloud.com/ippool-restricted).
	Restricted bool
}

// Assign is an IPRange to create, or (Reuse) a released one of the pool to give to Node.
type Assign struct {
	Pool, Node, Name string
	CIDR             netip.Prefix
	Gateway          string
	Excludes         []string
	NATOutgoing      bool
	DisableBGPExport bool
	// Restricted: the pool has a namespaceSelector; the IPRange is labelled
	// jke.jdcloud.com/ippool-restricted=true so that the node's CNI gives its addresses only to
	// pods choosing the pool.
	Restricted bool
	// Reuse: Name is a free block of the pool (released earlier) at OwnerGeneration: it is
	// assigned to Node as it is, generation kept, instead of being created.
	Reuse           bool
	OwnerGeneration int64
}

// Release is a pool range to give back to the pool: unassigned (node "") at Generation, one
// above the generation it was held at, so the node it leaves revokes it should it come back.
type Release struct {
	Range, Pool, Node, Why string
	Generation             int64
	// NodeGone: the node is proven gone (controllers/pkg/nodegone): its claims in the range's
	// status.holders go with the block.
	NodeGone bool
}

// Wait is a pool range of a deleted node that is not released yet, and why (the rule's
// verdict, or what holds it).
type Wait struct {
	Range, Node, Reason, Message string
	// Warning: the wait is something an operator should see (a Warning Event): the block of a
	// deleted pool still in use.
	Warning bool
}

// Mark sets (Since non-zero) or clears an annotation of a range: jke.jdcloud.com/node-gone-since
// (a deleted node's block) or jke.jdcloud.com/empty-since (an empty block of a namespace pool).
type Mark struct {
	Range      string
	Annotation string
	Since      time.Time
}

// PodWait is a pending pod the allocator cannot give an address of its pools on its node, and
// why (a Warning Event on the pod).
type PodWait struct {
	Namespace, Name, Node, Pool, Reason, Message string
}

// Skip is a node the plan could not serve, and why (an Event on the Node).
type Skip struct {
	Node, Pool, Reason, Message string
}

// PoolStatus is what a pool's status should say.
type PoolStatus struct {
	BlockBits                 int32
	Total, Assigned, Free     int64
	Ready                     bool
	ReadyReason, ReadyMessage string
	Waiting                   []string // nodes left without a block: Exhausted
	// WaitingPods are the pods ("namespace/name on node") left without an address of the pool
	// because it has no free block for their node: Exhausted too.
	WaitingPods []string
	AssignedNow int
}

// Plan is what to do now.
type Plan struct {
	Assign  []Assign
	Update  []Update
	Release []Release
	Mark    []Mark
	Skips   []Skip
	Waits   []Wait
	// PodWaits: pending pods left without an address of their pools (exhausted, or no pool of
	// theirs can serve their node).
	PodWaits []PodWait
	Pools    map[string]*PoolStatus
	// Requeue: look again this soon (a quarantine ends, a held block may be freed); 0: only on events.
	Requeue time.Duration
}

// Skip reasons and pool condition reasons.
const (
	ReasonPoolExhausted   = "IPPoolExhausted"
	ReasonPodCIDROverlaps = "PodCIDROverlapsIPRange"
	ReasonNoPodCIDR       = "NoPodCIDRInPool"
	ReasonOverlap         = "CIDROverlapsOlderPool"
	ReasonBadSelector     = "InvalidNodeSelector"
	ReasonDeleting        = "Deleting"
	ReasonOutOfService    = "NodeOutOfService"
	ReasonValid           = "Valid"
	// ReasonHeld: a deleted node's block waits for what holds an IP of it.
	ReasonHeld = "BlockHeld"
	// ReasonExcludeHeld: an exclude or a gateway the pool's spec adds is held back on a block
	// because a pod object or a StaticIP holds that address.
	ReasonExcludeHeld = "ExcludeHeld"
	// ReasonOrphanHeld: the block's pool is deleted, and something on its node still holds an
	// address of it: it stays served and routed until it is empty.
	ReasonOrphanHeld = "IPPoolDeletedBlockInUse"
	// orphanQuarantine is how long a deleted node's block of a deleted pool waits after the
	// mark before the node-gone rule may release it (the pool's releaseAfter is gone with it;
	// this is the field's default).
	orphanQuarantine = 5 * time.Minute
	// ReasonNoPoolForNode: none of a pending pod's pools can give its node a block (not Ready,
	// NodePodCIDR, or its nodeSelector does not select the node).
	ReasonNoPoolForNode = "NoIPPoolForNode"
	// heldRecheck is how soon a block whose release is held by something not watched
	// (e.g. a failover record) is looked at again.
	heldRecheck = 30 * time.Second
)

// RangeName is the plain IPRange name of a block: <pool>-<cidr with '.', ':' and '/' as '-'>,
// so two allocators that pick the same block for two nodes collide on Create. It is unique
// for IPv4 (the last five '-'-separated parts are always the CIDR) but not for IPv6 (p +
// 1:2::/120 and p-1 + 2::/120 are both p-1-2---120), and a hand-written IPRange may hold any
// name: a block whose plain name is taken by another range is named UniqueRangeName.
func RangeName(pool string, p netip.Prefix) string {
	r := strings.NewReplacer(".", "-", ":", "-", "/", "-")
	return pool + "-" + r.Replace(p.String())
}

// UniqueRangeName is <pool>-<the address as 8 (IPv4) or 32 (IPv6) hex digits>-<prefix length>:
// the last two parts always are the CIDR, so it names one block only, and it never equals a
// plain name (whose next-to-last part is at most 4 characters).
func UniqueRangeName(pool string, p netip.Prefix) string {
	return fmt.Sprintf("%s-%x-%d", pool, p.Addr().AsSlice(), p.Bits())
}

// Compute is the allocator's decision for one pass. Its phases, in order, over one planner:
// which pools are valid, what each node owns, which nodes a pool serves (NodePodCIDR pools
// mirror the podCIDRs at once, the others queue them), first-fit blocks for the queues, and the
// returns (blocks of nodes gone past the quarantine, extra blocks a race gave one node, empty
// blocks of namespace pools, and the empty blocks of deleted pools).
func Compute(in Input) Plan {
	p := newPlanner(in)
	p.validatePools()
	p.indexRanges()
	p.serveNodes()
	p.servePods()
	p.assignBlocks()
	p.updateBlocks()
	p.releaseGone()
	p.releaseExtra()
	p.releaseEmpty()
	p.releaseOrphans()
	return p.plan
}

// updateBlocks brings the gateway and excludes of every block a valid pool gave out to what the
// pool says now (excludeIPs, gatewayPolicy). What it removes goes at once (the address becomes
// allocatable); what it adds over an address a pod object or a StaticIP holds is held back on
// that block, with a Wait saying so, until the address is free: the pod would keep it (the agent
// does not take allocations away), but a static pod recreated could never get it back (the CNI
// refuses an excluded or gateway address).
func (pl *planner) updateBlocks() {
	for _, p := range pl.valid {
		for _, r := range pl.poolRanges[p.Name] {
			if r.Deleting || r.free() || r.Node == "" {
				continue
			}
			want := pl.blockSpec(p, r.CIDR)
			gw, ex := want.Gateway, []string{}
			var held []string
			if gw != "" && gw != r.Gateway {
				if why := pl.ipHeld(gw); why != "" {
					held = append(held, "gateway "+gw+": "+why)
					gw = r.Gateway // the new gateway waits
				}
			}
			for _, e := range want.Excludes {
				if !slices.Contains(r.Excludes, e) && e != r.Gateway {
					if why := pl.ipHeld(e); why != "" {
						held = append(held, "exclude "+e+": "+why)
						continue
					}
				}
				ex = append(ex, e)
			}
			if len(held) > 0 {
				pl.plan.Waits = append(pl.plan.Waits, Wait{Range: r.Name, Node: r.Node, Reason: ReasonExcludeHeld, Message: fmt.Sprintf(
					"IPPool %s: held back on this block while the address is in use (%s)", p.Name, strings.Join(held, "; "))})
				pl.plan.requeue(heldRecheck)
			}
			// natOutgoing follows at once: it changes no address a pod holds, only how its
			// traffic leaves the cluster.
			// So does disableBGPExport: the agents announce or withdraw the block.
			natDiffers := r.NATOutgoing == nil || *r.NATOutgoing != want.NATOutgoing
			// (unset is false: a block from before the field is not rewritten for it).
			exportDiffers := (r.DisableBGPExport != nil && *r.DisableBGPExport) != want.DisableBGPExport
			if gw != r.Gateway || !slices.Equal(ex, orEmpty(r.Excludes)) || natDiffers || exportDiffers || r.Restricted != p.ForNamespaces {
				pl.plan.Update = append(pl.plan.Update, Update{Range: r.Name, Pool: p.Name, Gateway: gw, Excludes: ex,
					NATOutgoing: want.NATOutgoing, DisableBGPExport: want.DisableBGPExport, Restricted: p.ForNamespaces})
			}
		}
	}
}

func (pl *planner) ipHeld(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil || pl.in.IPHeld == nil {
		return ""
	}
	return pl.in.IPHeld(a)
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// famKey is a node and an address family.
type famKey struct {
	node string
	v4   bool
}

// planner carries one pass of Compute through its phases; each phase reads what the earlier
// ones left in it.
type planner struct {
	in   Input
	plan Plan
	// pools by age, then name; valid: those that hand out blocks, in that order.
	pools      []Pool
	valid      []*Pool
	poolByName map[string]*Pool
	// owns: the node has a range of the family; occupied: every CIDR in use, including what
	// this pass assigns; poolRanges: the ranges of each pool.
	owns       map[famKey]bool
	occupied   []netip.Prefix
	poolRanges map[string][]Range
	// live: the nodes that exist; waiting: per pool, the nodes waiting for a block, by name,
	// then those whose pending pods need one.
	live    map[string]bool
	nodes   map[string]Node
	waiting map[string][]waiter
	// freeOn: addresses of a pool a node can still give (its blocks' Free); promised: those of
	// the blocks this pass queued for it, by the index of their waiter in waiting.
	freeOn   map[poolNode]int
	promised map[poolNode]promise
	// free: the released blocks of valid pools, by CIDR, handed out before a new one is cut.
	free map[netip.Prefix]Range
	// names: every IPRange name in use, with the range (or assignment of this pass) holding it.
	names map[string]Range
}

// poolNode is a pool and a node.
type poolNode struct{ pool, node string }

// waiter is a node waiting for a block: for itself (its node pool, pods empty) or for the
// pending pods that need an address of the pool there.
type waiter struct {
	node string
	pods []string
}

// promise: the addresses left of a block queued for a node's pods, and the waiter in the
// pool's queue that holds those pods.
type promise struct{ left, waiter int }

func newPlanner(in Input) *planner {
	pools := slices.Clone(in.Pools)
	slices.SortFunc(pools, func(a, b Pool) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	p := &planner{in: in, plan: Plan{Pools: map[string]*PoolStatus{}}, pools: pools, poolByName: map[string]*Pool{},
		owns: map[famKey]bool{}, poolRanges: map[string][]Range{}, live: map[string]bool{}, nodes: map[string]Node{},
		waiting: map[string][]waiter{}, freeOn: map[poolNode]int{}, promised: map[poolNode]promise{},
		free: map[netip.Prefix]Range{}, names: map[string]Range{}}
	for i := range pools {
		p.poolByName[pools[i].Name] = &pools[i]
	}
	return p
}

// validatePools: a pool whose CIDRs overlap each other or an older valid pool hands out nothing.
func (pl *planner) validatePools() {
	for i := range pl.pools {
		p := &pl.pools[i]
		st := &PoolStatus{BlockBits: int32(p.BlockBits), Ready: true, ReadyReason: ReasonValid, ReadyMessage: "blocks are handed out"}
		pl.plan.Pools[p.Name] = st
		switch {
		case p.Selector == nil:
			st.Ready, st.ReadyReason, st.ReadyMessage = false, ReasonBadSelector, "nodeSelector: "+p.SelectorErr
		case p.Deleting:
			st.Ready, st.ReadyReason, st.ReadyMessage = false, ReasonDeleting, "the pool is being deleted: it hands out no block; its blocks go back as they empty"
		default:
			if msg := overlapMessage(p, pl.valid); msg != "" {
				st.Ready, st.ReadyReason, st.ReadyMessage = false, ReasonOverlap, msg
			}
		}
		if st.Ready {
			pl.valid = append(pl.valid, p)
		}
	}
}

// indexRanges records what each node owns, by family, every CIDR in use, and the free
// (released) blocks of the valid pools. A free block of a Blocks pool at the pool's block size
// is not in use: first fit hands it out again; any other stays in use (a NodePodCIDR pool gives
// it back only to a node whose podCIDR it is).
func (pl *planner) indexRanges() {
	pl.occupied = make([]netip.Prefix, 0, len(pl.in.Ranges))
	for _, r := range pl.in.Ranges {
		pl.names[r.Name] = r
		if p := pl.validPool(r.Pool); r.free() && p != nil {
			pl.free[r.CIDR] = r
			if p.Mode != jkev1.IPPoolNodePodCIDR && r.CIDR.Bits() == p.BlockBits {
				pl.poolRanges[r.Pool] = append(pl.poolRanges[r.Pool], r)
				continue
			}
		}
		pl.occupied = append(pl.occupied, r.CIDR)
		if r.Node != "" && !r.Deleting {
			// A block of a namespace pool is its pods' address space, not the node's: the
			// node still needs a block of its node pool.
			if p := pl.poolByName[r.Pool]; p == nil || !p.ForNamespaces {
				pl.owns[famKey{r.Node, r.CIDR.Addr().Is4()}] = true
			}
			if r.Pool != "" {
				pl.freeOn[poolNode{r.Pool, r.Node}] += max(r.Free, 0)
			}
		}
		if r.Pool != "" {
			pl.poolRanges[r.Pool] = append(pl.poolRanges[r.Pool], r)
		}
	}
}

// serveNodes finds, for each node and family it has no range of, the first valid pool that
// selects it: a fenced node is skipped, a NodePodCIDR pool mirrors its podCIDRs now, any other
// pool queues it for a block.
func (pl *planner) serveNodes() {
	nodes := slices.Clone(pl.in.Nodes)
	slices.SortFunc(nodes, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
	for _, n := range nodes {
		pl.live[n.Name] = true
		pl.nodes[n.Name] = n
		for _, v4 := range []bool{true, false} {
			if pl.owns[famKey{n.Name, v4}] {
				continue
			}
			pool := pl.poolFor(n, v4)
			switch {
			case pool == nil:
			case n.OutOfService:
				pl.plan.Skips = append(pl.plan.Skips, Skip{Node: n.Name, Pool: pool.Name, Reason: ReasonOutOfService,
					Message: fmt.Sprintf("IPPool %s: no block for a node tainted %s (fenced; node failover moves its ranges away); remove the taint once the node is back and it gets one", pool.Name, corev1.TaintNodeOutOfService)})
			case pool.Mode != jkev1.IPPoolNodePodCIDR:
				pl.waiting[pool.Name] = append(pl.waiting[pool.Name], waiter{node: n.Name})
			default:
				pl.mirrorPodCIDRs(n, pool, v4)
			}
		}
	}
}

// servePods queues a block for each pending pod that finds no free address of its pools on its
// node — per IP family, for a dual-stack pod naming pools of both —: of the first of its pools
// (of that family) that can give that node a block (valid, mode Blocks, its
// nodeSelector selecting the node). A block queued for a pod serves the node's next pending
// pods of that pool too, up to its size; more pods, more blocks. A fenced node gets none (its
// pods wait for failover like the node's own block does).
func (pl *planner) servePods() {
	pods := slices.Clone(pl.in.Pending)
	slices.SortFunc(pods, func(a, b PendingPod) int {
		return cmp.Or(strings.Compare(a.Node, b.Node), strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	for _, whole := range pods {
		n, live := pl.nodes[whole.Node]
		if !live || len(whole.Pools) == 0 {
			continue
		}
		// A dual-stack pod names a pool of each family and takes an address of each: every
		// family is served on its own (a free IPv4 address does not give it its IPv6 one).
		for _, pools := range pl.byFamily(whole.Pools) {
			pod := whole
			pod.Pools = pools
			if !pl.servedOnNode(pod) {
				pl.serveOnePod(n, pod)
			}
		}
	}
}

// byFamily splits a pod's pools by IP family, each keeping the pod's order: one list when they
// are of one family (as before), two for a dual-stack pod. A pool the planner does not know
// (invalid, or gone) goes with every family: it serves none, and its name stays in the reasons.
func (pl *planner) byFamily(pools []string) [][]string {
	var v4, v6, unknown []string
	for _, name := range pools {
		switch p := pl.validPool(name); {
		case p == nil:
			unknown = append(unknown, name)
		case p.is4():
			v4 = append(v4, name)
		default:
			v6 = append(v6, name)
		}
	}
	if len(v4) == 0 || len(v6) == 0 {
		return [][]string{pools}
	}
	return [][]string{append(v4, unknown...), append(v6, unknown...)}
}

// serveOnePod queues a block of the first of the pod's pools that can give node n one, or
// records why the pod waits.
func (pl *planner) serveOnePod(n Node, pod PendingPod) {
	p := pl.blockPoolFor(n, pod.Pools)
	switch {
	case p == nil:
		pl.plan.PodWaits = append(pl.plan.PodWaits, PodWait{Namespace: pod.Namespace, Name: pod.Name, Node: pod.Node, Pool: pod.Pools[0],
			Reason: ReasonNoPoolForNode, Message: fmt.Sprintf("none of the pod's IPPools (%s) can give node %s a block: not Ready, mode NodePodCIDR, or its nodeSelector does not select the node",
				strings.Join(pod.Pools, ", "), pod.Node)})
	case n.OutOfService:
	default:
		k := poolNode{p.Name, n.Name}
		pl.waiting[p.Name] = append(pl.waiting[p.Name], waiter{node: n.Name, pods: []string{pod.key()}})
		pl.promised[k] = promise{left: pl.blockCapacity(p) - 1, waiter: len(pl.waiting[p.Name]) - 1}
	}
}

// servedOnNode: a free address of one of the pod's pools is left on its node (taken from the
// count), or one of a block queued this pass for an earlier pod (the pod joins that waiter).
func (pl *planner) servedOnNode(pod PendingPod) bool {
	for _, name := range pod.Pools {
		k := poolNode{name, pod.Node}
		if pl.freeOn[k] > 0 {
			pl.freeOn[k]--
			return true
		}
		if pr, ok := pl.promised[k]; ok && pr.left > 0 {
			pr.left--
			pl.promised[k] = pr
			w := &pl.waiting[name][pr.waiter]
			w.pods = append(w.pods, pod.key())
			return true
		}
	}
	return false
}

// blockPoolFor is the first of pools that can give node n a block (nil: none).
func (pl *planner) blockPoolFor(n Node, pools []string) *Pool {
	for _, name := range pools {
		p := pl.validPool(name)
		if p != nil && p.Mode != jkev1.IPPoolNodePodCIDR && p.Selector.Matches(labels.Set(n.Labels)) {
			return p
		}
	}
	return nil
}

// blockCapacity is how many pods a block of p gives an address, by the rule the node's IPAM
// allocates by (its first block; excludes are not counted: a pod they leave out gets the
// next block on the next pass).
func (pl *planner) blockCapacity(p *Pool) int {
	if len(p.CIDRs) == 0 {
		return 1
	}
	b := blockAt(p.CIDRs[0], p.BlockBits, 0)
	f := iprangeaddr.Fields{CIDR: b.String()}
	if p.FirstHostGateway {
		f.Gateway = b.Addr().Next().String()
	}
	r, err := iprangeaddr.Parse(f)
	if err != nil || r.Size() < 1 {
		return 1
	}
	return int(min(r.Size(), 1<<20))
}

// validPool is the valid pool of that name (nil: none).
func (pl *planner) validPool(name string) *Pool {
	for _, p := range pl.valid {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// poolFor is the first valid node pool (no namespaceSelector) of the family that selects n
// (nil: none).
func (pl *planner) poolFor(n Node, v4 bool) *Pool {
	set := labels.Set(n.Labels)
	for _, p := range pl.valid {
		if p.is4() == v4 && !p.ForNamespaces && p.Selector.Matches(set) {
			return p
		}
	}
	return nil
}

// mirrorPodCIDRs assigns n's podCIDRs of the family that lie inside pool as its ranges.
func (pl *planner) mirrorPodCIDRs(n Node, pool *Pool, v4 bool) {
	mirrored := false
	for _, pc := range n.PodCIDRs {
		if pc.Addr().Is4() != v4 || !insideAny(pc, pool.CIDRs) {
			continue
		}
		mirrored = true
		if fr, ok := pl.free[pc]; ok && fr.Pool == pool.Name {
			pl.plan.Assign = append(pl.plan.Assign, pl.newAssign(pool, n.Name, pc))
			continue
		}
		if o, ok := overlapping(pc, pl.occupied); ok {
			pl.plan.Skips = append(pl.plan.Skips, Skip{Node: n.Name, Pool: pool.Name, Reason: ReasonPodCIDROverlaps,
				Message: fmt.Sprintf("IPPool %s: the node's podCIDR %s overlaps the IPRange CIDR %s; no range mirrored", pool.Name, pc, o)})
			continue
		}
		pl.plan.Assign = append(pl.plan.Assign, pl.newAssign(pool, n.Name, pc))
		pl.occupied = append(pl.occupied, pc)
	}
	if !mirrored {
		pl.plan.Skips = append(pl.plan.Skips, Skip{Node: n.Name, Pool: pool.Name, Reason: ReasonNoPodCIDR,
			Message: fmt.Sprintf("IPPool %s (NodePodCIDR): the node has no spec.podCIDRs inside %s", pool.Name, prefixList(pool.CIDRs))})
	}
}

// assignBlocks gives the waiting nodes blocks, first fit, per pool in age order, per CIDR in
// spec order, and counts each pool's blocks.
func (pl *planner) assignBlocks() {
	for i := range pl.pools {
		p := &pl.pools[i]
		st := pl.plan.Pools[p.Name]
		for _, c := range p.CIDRs {
			st.Total = satAdd(st.Total, blockCount(c, p.BlockBits))
		}
		queue := pl.waiting[p.Name]
		for _, c := range p.CIDRs {
			queue = pl.firstFit(p, c, queue)
		}
		for _, w := range queue {
			if len(w.pods) == 0 {
				st.Waiting = append(st.Waiting, w.node)
				continue
			}
			for _, pod := range w.pods {
				st.WaitingPods = append(st.WaitingPods, pod+" on "+w.node)
				ns, name, _ := strings.Cut(pod, "/")
				pl.plan.PodWaits = append(pl.plan.PodWaits, PodWait{Namespace: ns, Name: name, Node: w.node, Pool: p.Name, Reason: ReasonPoolExhausted,
					Message: fmt.Sprintf("IPPool %s is exhausted: no free address of it on node %s and no free block to give the node", p.Name, w.node)})
			}
		}
		for _, r := range pl.poolRanges[p.Name] {
			if !r.Deleting && !r.free() {
				st.Assigned++
			}
		}
		st.Assigned += int64(st.AssignedNow)
		for _, a := range pl.plan.Assign {
			if a.Pool == p.Name && p.Mode == jkev1.IPPoolNodePodCIDR {
				st.Assigned++
			}
		}
	}
}

// firstFit assigns the free blocks of CIDR c of pool p to the nodes of queue in turn, walking
// the gaps between occupied intervals, and returns the nodes left waiting.
func (pl *planner) firstFit(p *Pool, c netip.Prefix, queue []waiter) []waiter {
	st := pl.plan.Pools[p.Name]
	occ := occupiedBlocks(c, p.BlockBits, pl.occupied)
	full := excludedBlocks(p, c)
	var used int64
	for _, iv := range occ {
		used += int64(iv.hi-iv.lo) + 1
	}
	for idx := range full {
		if !occupiedAt(occ, idx) {
			used++
		}
	}
	free := blockCount(c, p.BlockBits) - used
	next := uint64(0)
	last := uint64(blockCount(c, p.BlockBits) - 1)
	for i := 0; len(queue) > 0 && next <= last; {
		for i < len(occ) && occ[i].hi < next {
			i++
		}
		if i < len(occ) && occ[i].lo <= next {
			if occ[i].hi == last {
				break
			}
			next = occ[i].hi + 1
			continue
		}
		if !full[next] {
			b := blockAt(c, p.BlockBits, next)
			pl.plan.Assign = append(pl.plan.Assign, pl.newAssign(p, queue[0].node, b))
			pl.occupied = append(pl.occupied, b)
			queue = queue[1:]
			free--
			st.AssignedNow++
		}
		if next == last {
			break
		}
		next++
	}
	st.Free = satAdd(st.Free, free)
	return queue
}

// releaseGone marks the blocks of nodes that are gone, releases them once the quarantine has
// passed and nothing holds them, and unmarks those whose node is back.
func (pl *planner) releaseGone() {
	for _, name := range sortedKeys(pl.poolRanges) {
		// A pool that no longer exists: its blocks on live nodes are releaseOrphans' (at once
		// when empty); those of a deleted node follow the same rule as any, after a default
		// quarantine.
		releaseAfter := orphanQuarantine
		if p := pl.poolByName[name]; p != nil {
			releaseAfter = p.ReleaseAfter
		}
		for _, r := range pl.poolRanges[name] {
			if r.Deleting || r.free() {
				continue
			}
			if r.Node != "" && pl.live[r.Node] {
				if !r.GoneSince.IsZero() { // the node is back
					pl.plan.Mark = append(pl.plan.Mark, Mark{Range: r.Name, Annotation: jkev1.AnnotationNodeGoneSince})
				}
				continue
			}
			if pl.inQuarantine(r, jkev1.AnnotationNodeGoneSince, r.GoneSince, releaseAfter) {
				continue
			}
			gone := "its range was unassigned"
			if r.Node != "" {
				v := nodegone.Verdict{Reason: nodegone.ReasonWaiting, Message: "no rule to prove node " + r.Node + " gone"}
				if pl.in.NodeGone != nil {
					v = pl.in.NodeGone(r.Node, r.GoneSince)
				}
				if !v.Gone {
					pl.plan.Waits = append(pl.plan.Waits, Wait{Range: r.Name, Node: r.Node, Reason: v.Reason, Message: v.Message})
					pl.plan.requeue(cmp.Or(v.RecheckAfter, heldRecheck))
					continue
				}
				gone = v.Message
			}
			if why := pl.in.Held(r, ""); why != "" {
				pl.plan.Waits = append(pl.plan.Waits, Wait{Range: r.Name, Node: r.Node, Reason: ReasonHeld, Message: why})
				pl.plan.requeue(heldRecheck)
				continue
			}
			pl.plan.Release = append(pl.plan.Release, Release{Range: r.Name, Pool: r.Pool, Node: r.Node, Generation: r.OwnerGeneration + 1, NodeGone: gone != "",
				Why: fmt.Sprintf("node %s is gone since %s (%s), the quarantine of %s has passed and nothing holds an IP of %s",
					orNone(r.Node), r.GoneSince.UTC().Format(time.RFC3339), gone, releaseAfter, r.CIDR)})
		}
	}
}

// releaseExtra releases the extra blocks a race gave one live node in one family (ranges still
// at owner generation 0, never moved): those nothing holds go, and if nothing holds any of them
// the first by name stays.
func (pl *planner) releaseExtra() {
	perNode := map[famKey][]Range{}
	for _, name := range sortedKeys(pl.poolRanges) {
		// A namespace pool's blocks are not the node's block of its family: a node may hold
		// several (releaseEmpty returns them).
		if pl.orphaned(name) || pl.poolByName[name].ForNamespaces {
			continue // a deleted pool's blocks: releaseOrphans
		}
		for _, r := range pl.poolRanges[name] {
			if !r.Deleting && r.Node != "" && pl.live[r.Node] && r.givenByAllocator() {
				k := famKey{r.Node, r.CIDR.Addr().Is4()}
				perNode[k] = append(perNode[k], r)
			}
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(perNode), func(a, b famKey) int {
		return cmp.Or(strings.Compare(a.node, b.node), cmp.Compare(boolInt(a.v4), boolInt(b.v4)))
	}) {
		rs := perNode[k]
		if len(rs) < 2 {
			continue
		}
		slices.SortFunc(rs, func(a, b Range) int { return strings.Compare(a.Name, b.Name) })
		var held, free []Range
		for _, r := range rs {
			if pl.in.Held(r, k.node) != "" {
				held = append(held, r)
			} else {
				free = append(free, r)
			}
		}
		if len(held) == 0 {
			free = free[1:] // keep the first by name
		}
		for _, r := range free {
			pl.plan.Release = append(pl.plan.Release, Release{Range: r.Name, Pool: r.Pool, Node: r.Node, Generation: r.OwnerGeneration + 1,
				Why: fmt.Sprintf("node %s got more than one block of its family (two allocators raced); %s is empty", r.Node, r.CIDR)})
		}
	}
}

// releaseEmpty returns the blocks of namespace pools that live nodes no longer use: a block
// nothing holds (no pod object or StaticIP has an address of it, no pod on its node is still
// without an address, the agent reports none used or reserved) is marked empty, and released
// once it has stayed so for the pool's releaseAfter (at its generation + 1, like every release:
// should an address of it still be in use on the node, the node drains it and the next node
// waits for that). A block held again is unmarked. Node pools keep one block per node.
func (pl *planner) releaseEmpty() {
	for _, name := range sortedKeys(pl.poolRanges) {
		if pl.orphaned(name) || !pl.poolByName[name].ForNamespaces {
			continue // a deleted pool's blocks: releaseOrphans
		}
		p := pl.poolByName[name]
		for _, r := range pl.poolRanges[name] {
			if r.Deleting || r.free() || r.Node == "" || !pl.live[r.Node] {
				continue
			}
			if why := pl.in.Held(r, r.Node); why != "" {
				if !r.EmptySince.IsZero() {
					pl.plan.Mark = append(pl.plan.Mark, Mark{Range: r.Name, Annotation: jkev1.AnnotationEmptySince})
				}
				continue
			}
			if pl.inQuarantine(r, jkev1.AnnotationEmptySince, r.EmptySince, p.ReleaseAfter) {
				continue
			}
			pl.plan.Release = append(pl.plan.Release, Release{Range: r.Name, Pool: r.Pool, Node: r.Node, Generation: r.OwnerGeneration + 1,
				Why: fmt.Sprintf("no pod of IPPool %s on node %s has used %s since %s (releaseAfter %s)",
					p.Name, r.Node, r.CIDR, r.EmptySince.UTC().Format(time.RFC3339), p.ReleaseAfter)})
		}
	}
}

// orphaned: the pool named name no longer exists (or is being deleted): its blocks are never
// handed out again (indexRanges keeps them occupied) and go back as they empty.
func (pl *planner) orphaned(name string) bool {
	p := pl.poolByName[name]
	return p == nil || p.Deleting
}

// releaseOrphans releases, from the live nodes that hold them, the blocks of pools that no
// longer exist: at once when nothing holds them — the same rule as an extra block of a race
// (no pod object or StaticIP has an address of it, no pod on its node is still without an
// address, the agent reports none used or reserved, no failover in progress names it), at its
// generation + 1 — without waiting for the node to be drained. A block still in use stays
// served and routed by its node (a held range stays routed) with a Warning saying why, and
// goes the pass after it empties. Released, nobody gets it again unless a pool of the same
// name is created again (then it is that pool's free block, at the generation of its release).
func (pl *planner) releaseOrphans() {
	for _, name := range sortedKeys(pl.poolRanges) {
		if !pl.orphaned(name) {
			continue
		}
		for _, r := range pl.poolRanges[name] {
			if r.Deleting || r.Node == "" || !pl.live[r.Node] {
				continue
			}
			if why := pl.in.Held(r, r.Node); why != "" {
				pl.plan.Waits = append(pl.plan.Waits, Wait{Range: r.Name, Node: r.Node, Reason: ReasonOrphanHeld, Warning: true, Message: fmt.Sprintf(
					"IPPool %s is deleted: %s stays served and routed by node %s while it is in use (%s); it is released once empty", name, r.CIDR, r.Node, why)})
				pl.plan.requeue(heldRecheck)
				continue
			}
			pl.plan.Release = append(pl.plan.Release, Release{Range: r.Name, Pool: r.Pool, Node: r.Node, Generation: r.OwnerGeneration + 1,
				Why: fmt.Sprintf("IPPool %s is deleted and nothing on node %s holds an address of %s", name, r.Node, r.CIDR)})
		}
	}
}

// inQuarantine: the release of r waits for its pool's releaseAfter from since. A range not marked
// yet (since zero) is marked with annotation now; the pass is requeued for the quarantine's end.
func (pl *planner) inQuarantine(r Range, annotation string, since time.Time, after time.Duration) bool {
	if since.IsZero() {
		pl.plan.Mark = append(pl.plan.Mark, Mark{Range: r.Name, Annotation: annotation, Since: pl.in.Now})
		pl.plan.requeue(after)
		return true
	}
	if wait := since.Add(after).Sub(pl.in.Now); wait > 0 {
		pl.plan.requeue(wait)
		return true
	}
	return false
}

func (p *Plan) requeue(d time.Duration) {
	if d <= 0 {
		d = time.Second
	}
	if p.Requeue == 0 || d < p.Requeue {
		p.Requeue = d
	}
}

// blockSpec is the gateway, excludes and natOutgoing pool p gives block b.
func (pl *planner) blockSpec(p *Pool, b netip.Prefix) Assign {
	a := Assign{NATOutgoing: p.NATOutgoing, DisableBGPExport: p.DisableBGPExport, Restricted: p.ForNamespaces}
	if p.FirstHostGateway {
		a.Gateway = b.Addr().Next().String()
	}
	for _, e := range p.Excludes {
		if b.Contains(e) && e.String() != a.Gateway {
			a.Excludes = append(a.Excludes, e.String())
		}
	}
	return a
}

// newAssign gives block b of pool p to node: the pool's free IPRange of that CIDR if there is
// one, else a new one.
func (pl *planner) newAssign(p *Pool, node string, b netip.Prefix) Assign {
	spec := pl.blockSpec(p, b)
	a := Assign{Pool: p.Name, Node: node, Name: RangeName(p.Name, b), CIDR: b, Gateway: spec.Gateway, Excludes: spec.Excludes, NATOutgoing: spec.NATOutgoing,
		DisableBGPExport: spec.DisableBGPExport, Restricted: spec.Restricted}
	if fr, ok := pl.free[b]; ok && fr.Pool == p.Name {
		a.Name, a.Reuse, a.OwnerGeneration = fr.Name, true, fr.OwnerGeneration
		delete(pl.free, b)
	} else if r, taken := pl.names[a.Name]; taken && (r.Pool != p.Name || r.CIDR != b) {
		a.Name = UniqueRangeName(p.Name, b)
	}
	pl.names[a.Name] = Range{Name: a.Name, CIDR: b, Pool: p.Name, Node: node}
	return a
}

func overlapMessage(p *Pool, older []*Pool) string {
	for i, c := range p.CIDRs {
		for _, d := range p.CIDRs[:i] {
			if c.Overlaps(d) {
				return fmt.Sprintf("CIDRs %s and %s overlap", d, c)
			}
		}
		for _, o := range older {
			for _, d := range o.CIDRs {
				if c.Overlaps(d) {
					return fmt.Sprintf("CIDR %s overlaps %s of the older IPPool %s; this pool hands out nothing", c, d, o.Name)
				}
			}
		}
	}
	return ""
}

func insideAny(p netip.Prefix, cidrs []netip.Prefix) bool {
	for _, c := range cidrs {
		if c.Bits() <= p.Bits() && c.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

func overlapping(p netip.Prefix, ps []netip.Prefix) (netip.Prefix, bool) {
	for _, o := range ps {
		if o.Overlaps(p) {
			return o, true
		}
	}
	return netip.Prefix{}, false
}

// interval is a closed range of block indices.
type interval struct{ lo, hi uint64 }

// blockCount is the number of blocks of bits in c (CEL keeps it <= 2^32).
func blockCount(c netip.Prefix, bits int) int64 {
	if bits < c.Bits() || bits-c.Bits() > 62 {
		return 0
	}
	return int64(1) << (bits - c.Bits())
}

// addrBits reads the address bits [from, to) as a number (to-from <= 64).
func addrBits(a netip.Addr, from, to int) uint64 {
	b := a.AsSlice()
	var v uint64
	for i := from; i < to; i++ {
		v = v<<1 | uint64(b[i/8]>>(7-i%8)&1)
	}
	return v
}

// blockAt is block idx of bits inside c.
func blockAt(c netip.Prefix, bits int, idx uint64) netip.Prefix {
	b := c.Addr().AsSlice()
	for i := bits - 1; i >= c.Bits(); i-- {
		if idx&1 == 1 {
			b[i/8] |= 1 << (7 - i%8)
		}
		idx >>= 1
	}
	a, _ := netip.AddrFromSlice(b)
	return netip.PrefixFrom(a, bits)
}

// occupiedBlocks lists, merged and sorted, the block indices of c that overlap any of ps.
func occupiedBlocks(c netip.Prefix, bits int, ps []netip.Prefix) []interval {
	n := blockCount(c, bits)
	var out []interval
	for _, q := range ps {
		if q.Addr().Is4() != c.Addr().Is4() || !q.Overlaps(c) {
			continue
		}
		switch {
		case q.Bits() <= c.Bits(): // q covers c
			out = append(out, interval{0, uint64(n - 1)})
		case q.Bits() >= bits:
			i := addrBits(q.Addr(), c.Bits(), bits)
			out = append(out, interval{i, i})
		default:
			lo := addrBits(q.Addr(), c.Bits(), bits)
			out = append(out, interval{lo, lo + uint64(1)<<(bits-q.Bits()) - 1})
		}
	}
	slices.SortFunc(out, func(a, b interval) int { return cmp.Compare(a.lo, b.lo) })
	merged := out[:0]
	for _, iv := range out {
		if k := len(merged); k > 0 && iv.lo <= merged[k-1].hi+1 {
			merged[k-1].hi = max(merged[k-1].hi, iv.hi)
			continue
		}
		merged = append(merged, iv)
	}
	return merged
}

func occupiedAt(occ []interval, idx uint64) bool {
	i, _ := slices.BinarySearchFunc(occ, idx, func(iv interval, t uint64) int {
		if iv.hi < t {
			return -1
		}
		if iv.lo > t {
			return 1
		}
		return 0
	})
	return i < len(occ) && occ[i].lo <= idx && idx <= occ[i].hi
}

// excludedBlocks are the blocks of c that would give pods no address: the IPRange newAssign
// writes for them (the block, its gateway, its excluded IPs) has no usable address by the rule
// the node-local IPAM allocates by (package iprangeaddr). Such a block is never handed out.
func excludedBlocks(p *Pool, c netip.Prefix) map[uint64]bool {
	if len(p.Excludes) == 0 {
		return nil
	}
	if c.Addr().BitLen()-p.BlockBits > 16 {
		return nil // more than 65534 hosts: never fully excluded by a list of <= 1024
	}
	byBlock := map[uint64][]string{}
	for _, e := range p.Excludes {
		if c.Contains(e) {
			idx := addrBits(e, c.Bits(), p.BlockBits)
			byBlock[idx] = append(byBlock[idx], e.String())
		}
	}
	out := map[uint64]bool{}
	for idx, excludes := range byBlock {
		b := blockAt(c, p.BlockBits, idx)
		f := iprangeaddr.Fields{CIDR: b.String(), Exclude: excludes}
		if p.FirstHostGateway {
			f.Gateway = b.Addr().Next().String() // as newAssign writes it
		}
		if r, err := iprangeaddr.Parse(f); err == nil && r.Size() == 0 {
			out[idx] = true
		}
	}
	return out
}

func satAdd(a, b int64) int64 {
	if a > 0 && b > 0 && a+b < 0 {
		return 1<<63 - 1
	}
	return a + b
}

func prefixList(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
