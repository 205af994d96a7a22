package staticipnode

import (
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
)

// ViewIndex finds a node's view by the scheduler's Node object instead of its name. Filter
// asks for the view of every node it looks at, once per pod and node; by name (Cache.Node)
// that is a string-keyed map read whose key compares and scattered key bytes were 3.4 % of
// staticip-scheduler's CPU at 1,000 nodes (2026-11-28). Keyed by the *v1.Node the scheduler's
// NodeInfo holds, it is a pointer-keyed map read: the scheduler's NodeInfos of one node,
// and the copies it makes of them (nominated pods, preemption), share one Node object until
// the node is updated (the informer's objects are never modified: an update brings a new one).
//
// Entries go to a pending map under a mutex when first seen (a miss resolves the name as
// Cache.Node does) and are published, lock-free, by Publish, which the plugin calls once per
// scheduling cycle (PreFilter). An entry records the cache's names version it was resolved at:
// after a node name got or lost its slot it is resolved again. Entries of Node objects the
// scheduler no longer holds (a node updated or deleted) are dropped when the index grows past
// the nodes plus an eighth: then the index starts over.
type ViewIndex struct {
	cache *Cache
	// fact is what the index's user derives from a Node object, kept with its entry.
	fact      func(*v1.Node) uint8
	published atomic.Pointer[map[*v1.Node]viewRef]
	mu        sync.Mutex
	pending   map[*v1.Node]viewRef
}

type viewRef struct {
	slot    *nodeSlot // nil: no slot (the cache knows nothing of the node)
	version uint64
	fact    uint8
}

// NewViewIndex returns an empty index over c's views. fact (nil: none) derives a value from
// a Node object once per object; View returns it with the view.
func (c *Cache) NewViewIndex(fact func(*v1.Node) uint8) *ViewIndex {
	if fact == nil {
		fact = func(*v1.Node) uint8 { return 0 }
	}
	x := &ViewIndex{cache: c, fact: fact, pending: map[*v1.Node]viewRef{}}
	x.published.Store(&map[*v1.Node]viewRef{})
	return x
}

// View returns node's NodeRef (its current view is what Cache.Node(node.Name) returns) and the
// index's fact of node.
func (x *ViewIndex) View(node *v1.Node) (NodeRef, uint8) {
	// The version is read before the slot is resolved: a name change after this read makes
	// the entry stale at once.
	version := x.cache.namesVersion.Load()
	if r, ok := (*x.published.Load())[node]; ok && r.version == version {
		return NodeRef{r.slot}, r.fact
	}
	r := viewRef{slot: x.cache.slotOf(node.Name), version: version, fact: x.fact(node)}
	x.mu.Lock()
	x.pending[node] = r
	x.mu.Unlock()
	return NodeRef{r.slot}, r.fact
}

// NodeRef is one node name's place in the cache: its current view, and a reader's memo.
type NodeRef struct{ slot *nodeSlot }

// View returns the node's current view (read-only, as Cache.Node's).
func (r NodeRef) View() *NodeInfo {
	if r.slot == nil {
		return emptyNode
	}
	return r.slot.load()
}

// Memo returns what SetMemo last stored for this node (nil when nothing, and for a node the
// cache knows nothing of). It may have been derived from an older view: a reader keeps the view
// it derived it from in the value and compares it with View. Every value stored for one node
// must be of the same concrete type (atomic.Value).
func (r NodeRef) Memo() any {
	if r.slot == nil {
		return nil
	}
	return r.slot.memo.Load()
}

// SetMemo stores v for this node (ignored for a node the cache knows nothing of).
func (r NodeRef) SetMemo(v any) {
	if r.slot != nil {
		r.slot.memo.Store(v)
	}
}

// Publish makes the entries found since the last call readable without a lock. nodes is how
// many nodes the scheduler knows: an index past nodes + nodes/8 + 64 entries starts over.
func (x *ViewIndex) Publish(nodes int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.pending) == 0 {
		return
	}
	old := *x.published.Load()
	var next map[*v1.Node]viewRef
	if len(old)+len(x.pending) > nodes+nodes/8+64 {
		next = make(map[*v1.Node]viewRef, len(x.pending))
	} else {
		next = make(map[*v1.Node]viewRef, len(old)+len(x.pending))
		for k, v := range old {
			next[k] = v
		}
	}
	for k, v := range x.pending {
		next[k] = v
	}
	clear(x.pending)
	x.published.Store(&next)
}

// Len is how many entries are published (tests).
func (x *ViewIndex) Len() int { return len(*x.published.Load()) }
