// Package staticipnode is the staticIPNode cache: per node, the active StaticIPs naming it
// (each may hold its pod's requests, one pod slot and one IP while the pod is absent) and
// the node's IP capacity from its IPRanges. The scheduler plugins read it in every
// scheduling cycle; it is fed only by informers (and the scheduler's queueing hints, which
// see the same objects), so a scheduling cycle never calls the API server, and a restarted
// scheduler rebuilds exactly the same state from the initial lists.
//
// # When a StaticIP holds a reservation
//
// A StaticIP S in namespace ns, for pod P = S.spec.pod (or S's name when empty), is active
// on node N = S.spec.node when N is not empty, S is not being deleted and S.status.phase is
// not Released. It reserves S.spec.resources, one pod slot and one IP on N while P is absent
// from N. Whether P is present is not this cache's to say: the Filter decides it against the
// scheduler's own snapshot of N (bound, assumed and nominated pods), the same snapshot the
// node's requested resources come from, so every static-IP pod is counted exactly once —
// as a request when it is there, as a reservation otherwise.
package staticipnode

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	"github.com/staticip/staticip/apis/generated/informers/externalversions"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/workloadref"
)

// PodKey is "namespace/name" of a pod.
func PodKey(namespace, name string) string { return namespace + "/" + name }

// reservation is one StaticIP as the cache sees it.
type reservation struct {
	key    string // namespace/name of the StaticIP
	uid    string
	podKey string // namespace/pod
	node   string
	ip     string
	// workload the record belongs to.
	workload workloadref.Ref
	// active: it may hold a reservation (node set, not deleting, not Released).
	active bool
	req    Resources
}

// nodeState is what one node holds.
type nodeState struct {
	// active are all the reservations naming the node whose pod may be absent or present.
	active map[string]*reservation
	ranges map[string]*ipRange
	// dirty: changed since its view was published (publishLocked rebuilds it).
	dirty bool
}

// touch marks the node changed (c.mu held for writing); the change's writer publishes the
// node's new view before it releases the lock (publishLocked).
func (n *nodeState) touch() { n.dirty = true }

// StaticIPInfo is the StaticIP of one pod.
type StaticIPInfo struct {
	Name string
	Node string
	IP   string
	// Workload the record belongs to (API group, kind, name; empty name when not recorded yet).
	Workload workloadref.Ref
	// Active: the record holds the pod's place on Node (not Released, not deleting).
	Active  bool
	Request Resources
}

// RangeInfo is an IPRange as the plugins need it.
type RangeInfo struct {
	Name string
	CIDR string
	Node string
}

// NodeInfo is a consistent, read-only picture of one node's state. A new one is built after
// every change of the node, so its address identifies its contents.
type NodeInfo struct {
	// HasRanges: the node owns at least one IPRange.
	HasRanges bool
	// IPCapacity is how many pods its valid IPRanges can give addresses to (podCapacity): a pod
	// takes one address of every IP family the node's ranges give, so a dual-stack node's
	// capacity is its smaller family's, never the sum of both.
	IPCapacity int64
	// CIDRs of the node's IPRanges, sorted, for messages.
	CIDRs []string
	// Held lists every active StaticIP naming the node, whether its pod is absent or not,
	// so that a Filter can decide presence against the scheduler's own snapshot.
	Held []Held
}

// Held is one active StaticIP on a node.
type Held struct {
	// StaticIP is the record's namespace/name (for messages).
	StaticIP              string
	PodNamespace, PodName string
	// Workload the record belongs to.
	Workload workloadref.Ref
	Request  Resources
}

// Cache is the staticIPNode cache. All methods are safe for concurrent use.
type Cache struct {
	mu sync.RWMutex
	// Node views: Filter finds one per pod and node, without any lock (a cache-wide read
	// lock per call was shared by every Filter goroutine). Each node name the cache knows
	// has a slot holding its current view; writers (under mu) store a node's new view in its
	// slot after changing it. Readers find the slot in published, an immutable map from node
	// name to slot: a plain map read (a sync.Map's lookup — hashing an interface, walking a
	// trie — was 5 % of staticip-scheduler's CPU at 300 nodes, 2026-11-28). published only
	// changes when a name comes or goes, so a new node view costs nothing more. slots is
	// the writers' map; until every informer has synced (Synced) new names are published
	// in batches, a copy whenever they have doubled — an O(nodes) copy per name cost
	// 1.7–3.2 s for the initial list of 5,000 IPRanges (BenchmarkInitialList) — and a reader
	// that misses while some are unpublished (unpublished > 0) looks in slots under the read
	// lock. From the sync on every change of the names is published at once.
	slots       map[string]*nodeSlot
	published   atomic.Pointer[map[string]*nodeSlot]
	unpublished atomic.Int64
	// namesChanged: slots differs from published (names added or removed).
	namesChanged bool
	// namesVersion goes up whenever a name gets or loses its slot, and when the names are
	// published: a ViewIndex entry resolved at an older version may hold a slot that is gone.
	namesVersion atomic.Uint64
	staticIPs    map[string]*reservation
	// byPod maps a pod key to the keys of the StaticIPs naming the pod, sorted: nearly
	// always one (several are a conflict the StaticIP controller reports). A slice, not a
	// set: a Go map per pod cost ~500 bytes per record (BenchmarkCacheBytesPerStaticIP).
	byPod  map[string][]string
	ranges map[string]*ipRange
	nodes  map[string]*nodeState
	// changed are the nodes a change under mu touched, to publish (publishLocked).
	changed map[string]struct{}
	// versions are the resourceVersions applied per StaticIP ("sip/ns/name") and IPRange
	// ("range/name"), deleted ones included: the same change reaches the cache twice, from
	// its own informers and from the scheduler's queueing hints (Observe*), and only the
	// newer one may win. A deleted entry only has to outlive the slower source's copy of
	// the same deletion: it expires after deletedVersionTTL (expiring, oldest first).
	versions map[string]version
	expiring []expiry
	// now is the clock of the expiry (tests replace it).
	now func() time.Time

	synced []cache.InformerSynced
	// ready latches once every informer has delivered its initial list.
	ready atomic.Bool

	// activeRecords counts the active StaticIPs (those in some node's active set), and
	// rangesVersion goes up with every change of an IPRange the cache applies: what a
	// plugin needs to know, per pod, whether any node view can reject it (ActiveRecords,
	// RangesVersion) without looking at every node's view.
	activeRecords atomic.Int64
	rangesVersion atomic.Uint64

	// listeners are told of every change the informers apply (Listen), after it is applied.
	listenersMu sync.RWMutex
	listeners   []func(Change)
}

// NewEmpty returns a cache fed by nobody; tests and New fill it through the On* handlers.
func NewEmpty() *Cache {
	c := &Cache{
		slots:     map[string]*nodeSlot{},
		staticIPs: map[string]*reservation{},
		byPod:     map[string][]string{},
		ranges:    map[string]*ipRange{},
		nodes:     map[string]*nodeState{},
		changed:   map[string]struct{}{},
		versions:  map[string]version{},
		now:       time.Now,
	}
	c.published.Store(&map[string]*nodeSlot{})
	return c
}

// deletedVersionTTL is how long the version of a deleted object is remembered: far longer
// than the two informers feeding the cache lag behind each other, short enough that churn
// of short-lived records does not grow the map without bound.
const deletedVersionTTL = 10 * time.Minute

type expiry struct {
	key string
	at  time.Time
}

// newerLocked reports whether resourceVersion rv of object key is newer than what the
// cache applied, and records it when it is. Unparsable versions count as newer.
// A deletion carries the object's last version but happened after it: it beats an update
// with that same version, and loses to a re-creation (which gets a larger version).
func (c *Cache) newerLocked(key, rv string, deleted bool) bool {
	return c.newerUIDLocked(key, "", rv, deleted)
}

func (c *Cache) newerUIDLocked(key, uid, rv string, deleted bool) bool {
	if prev, ok := c.versions[key]; ok && rv != "" {
		cmp, err := resourceversion.CompareResourceVersion(rv, prev.rv)
		if err == nil && (cmp < 0 || (cmp == 0 && (prev.deleted || !deleted))) {
			return false
		}
	}
	c.versions[key] = version{rv: rv, uid: uid, deleted: deleted}
	return true
}

type version struct {
	rv      string
	uid     string
	deleted bool
	// at is when the deletion was recorded (deleted entries only).
	at time.Time
}

// newerLocked is what an update asks; deleteLocked decides for a deletion.
//
// A deletion the informer observed (a watch event) follows the same rule as an update. A
// tombstone (cache.DeletedFinalStateUnknown: the informer relisted and the object was gone)
// always wins, whatever resourceVersion it carries — it carries the last version its
// informer saw, which may be older than one the other source applied — unless the cache
// holds a different object (another UID) under that name: that one was created after the
// deletion. The deletion is recorded with the newest version seen, so neither source's
// older updates can bring the object back.
func (c *Cache) deleteLocked(key, uid, rv string, tombstone bool) bool {
	prev, ok := c.versions[key]
	if tombstone {
		if ok && !prev.deleted && prev.uid != "" && uid != "" && prev.uid != uid {
			return false // re-created since: the tombstone is about the old object
		}
		if ok && rv != "" {
			if cmp, err := resourceversion.CompareResourceVersion(rv, prev.rv); err == nil && cmp < 0 {
				rv = prev.rv
			}
		}
	} else if !c.newerLocked(key, rv, true) {
		return false
	}
	c.recordDeletedLocked(key, uid, rv)
	return true
}

// recordDeletedLocked remembers key's deletion until it expires, and expires older ones.
func (c *Cache) recordDeletedLocked(key, uid, rv string) {
	now := c.now()
	c.versions[key] = version{rv: rv, uid: uid, deleted: true, at: now}
	c.expiring = append(c.expiring, expiry{key: key, at: now})
	c.expireLocked(now)
}

// expireLocked forgets deletions older than deletedVersionTTL.
func (c *Cache) expireLocked(now time.Time) {
	i := 0
	for ; i < len(c.expiring) && now.Sub(c.expiring[i].at) > deletedVersionTTL; i++ {
		e := c.expiring[i]
		if v, ok := c.versions[e.key]; ok && v.deleted && v.at.Equal(e.at) {
			delete(c.versions, e.key)
		}
	}
	if i > 0 {
		c.expiring = append(c.expiring[:0:0], c.expiring[i:]...)
	}
}

// VersionsTracked is how many object versions the cache remembers (tests, metrics).
func (c *Cache) VersionsTracked() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.versions)
}

var (
	sharedMu sync.Mutex
	shared   = map[informers.SharedInformerFactory]*Cache{}
)

// ForScheduler returns the cache of one scheduler instance, creating it on first use: both
// plugins and every profile of a scheduler share it (keyed by the scheduler's informer
// factory). StaticIPs and IPRanges come from generated informers built on client and
// started here, stopped with ctx.
func ForScheduler(ctx context.Context, schedulerInformers informers.SharedInformerFactory, client versioned.Interface) (*Cache, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if c, ok := shared[schedulerInformers]; ok {
		return c, nil
	}
	c := NewEmpty()
	// The transform keeps of each object only what the cache reads (TrimStaticIP,
	// TrimIPRange): the informer's store holds the trimmed copies, not whole objects with
	// managedFields, annotations and status counters.
	factory := externalversions.NewSharedInformerFactoryWithOptions(client, 0, externalversions.WithTransform(Trim))
	sipReg, err := factory.Jke().V1().StaticIPs().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { c.OnStaticIPUpdate(nil, obj) },
		UpdateFunc: c.OnStaticIPUpdate,
		DeleteFunc: c.OnStaticIPDelete,
	})
	if err != nil {
		return nil, fmt.Errorf("staticipnode: watching StaticIPs: %w", err)
	}
	rangeReg, err := factory.Jke().V1().IPRanges().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { c.OnIPRangeUpdate(nil, obj) },
		UpdateFunc: c.OnIPRangeUpdate,
		DeleteFunc: c.OnIPRangeDelete,
	})
	if err != nil {
		return nil, fmt.Errorf("staticipnode: watching IPRanges: %w", err)
	}
	c.synced = []cache.InformerSynced{sipReg.HasSynced, rangeReg.HasSynced}
	factory.Start(ctx.Done())
	shared[schedulerInformers] = c
	go func() {
		<-ctx.Done()
		factory.Shutdown()
		sharedMu.Lock()
		delete(shared, schedulerInformers)
		sharedMu.Unlock()
	}()
	klog.FromContext(ctx).V(2).Info("staticIPNode cache started")
	return c, nil
}

// Synced reports whether every informer feeding the cache has delivered its initial list.
// Before that the plugins refuse to decide (a pod would be placed without its node's
// reservations); the scheduler retries the pod.
func (c *Cache) Synced() bool {
	if c.ready.Load() {
		return true
	}
	if len(c.synced) == 0 {
		return false // filled by hand: MarkSynced says when
	}
	for _, s := range c.synced {
		if !s() {
			return false
		}
	}
	c.markReady()
	return true
}

// MarkSynced is for caches filled by hand (unit tests).
func (c *Cache) MarkSynced() { c.markReady() }

// markReady latches the sync and publishes the node names batched until then: from here on
// Node finds every known node without a lock.
func (c *Cache) markReady() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ready.Store(true)
	c.publishNamesLocked()
}

// ---- event handlers ----

// OnStaticIPUpdate handles a StaticIP add (old nil) or update. An update that changed
// nothing the cache reads — same generation, deletion state and phase: the status writes of
// agents and controllers — is dropped before anything else is read.
func (c *Cache) OnStaticIPUpdate(oldObj, newObj interface{}) {
	sip, ok := newObj.(*jkev1.StaticIP)
	if !ok {
		return
	}
	old, _ := oldObj.(*jkev1.StaticIP)
	if old != nil && statusOnly(old, sip) && old.Status.Phase == sip.Status.Phase {
		return
	}
	f := staticIPFieldsOf(sip)
	if !c.applyStaticIP(f) {
		return
	}
	ev := &StaticIPEvent{New: f}
	if old != nil {
		ev.Old = staticIPFieldsOf(old)
	}
	c.notify(Change{StaticIP: ev})
}

// applyStaticIP applies a StaticIP that exists now (newer version wins) and reports whether
// it did.
func (c *Cache) applyStaticIP(f *StaticIPFields) bool {
	key := f.Namespace + "/" + f.Name
	next := &reservation{
		key:      key,
		uid:      f.UID,
		podKey:   PodKey(f.Namespace, f.Pod),
		node:     f.Node,
		ip:       f.IP,
		workload: f.Workload,
		active:   f.Active(),
		req:      f.Request,
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.newerUIDLocked("sip/"+key, f.UID, f.ResourceVersion, false) {
		return false
	}
	defer c.publishLocked()
	c.removeStaticIPLocked(key)
	c.staticIPs[key] = next
	if next.active {
		n := c.nodeLocked(next.node)
		if n.active == nil {
			n.active = map[string]*reservation{}
		}
		n.active[key] = next
		c.activeRecords.Add(1)
		n.touch()
	}
	c.byPod[next.podKey] = insertSorted(c.byPod[next.podKey], key)
	return true
}

// OnStaticIPDelete handles a StaticIP deletion, tombstones (cache.DeletedFinalStateUnknown)
// included: those are always applied (see deleteLocked).
func (c *Cache) OnStaticIPDelete(obj interface{}) {
	t, tombstone := obj.(cache.DeletedFinalStateUnknown)
	if tombstone {
		obj = t.Obj
	}
	sip, ok := obj.(*jkev1.StaticIP)
	if !ok {
		return
	}
	f := staticIPFieldsOf(sip)
	if c.deleteStaticIP(f, tombstone) {
		c.notify(Change{StaticIP: &StaticIPEvent{Old: f}})
	}
}

func (c *Cache) deleteStaticIP(f *StaticIPFields, tombstone bool) bool {
	key := f.Namespace + "/" + f.Name
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.deleteLocked("sip/"+key, f.UID, f.ResourceVersion, tombstone) {
		return false
	}
	defer c.publishLocked()
	c.removeStaticIPLocked(key)
	return true
}

// OnIPRangeUpdate handles an IPRange add (old nil) or update. An update of the status alone
// (same generation and deletion state: the agents' counters) is dropped at once.
func (c *Cache) OnIPRangeUpdate(oldObj, newObj interface{}) {
	r, ok := newObj.(*jkev1.IPRange)
	if !ok {
		return
	}
	old, _ := oldObj.(*jkev1.IPRange)
	if old != nil && statusOnly(old, r) {
		return
	}
	f := ipRangeFieldsOf(r)
	if !c.applyIPRange(f) {
		return
	}
	ev := &IPRangeEvent{New: f}
	if old != nil {
		ev.Old = ipRangeFieldsOf(old)
	}
	c.notify(Change{IPRange: ev})
}

func (c *Cache) applyIPRange(f *IPRangeFields) bool {
	parsed := parseIPRange(&jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: f.Name}, Spec: f.Spec})
	parsed.restricted = f.Restricted
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.newerUIDLocked("range/"+f.Name, f.UID, f.ResourceVersion, false) {
		return false
	}
	// The version goes up once the node views are published (defers run last-first): a
	// reader that sees the new version finds the new views.
	defer c.rangesVersion.Add(1)
	defer c.publishLocked()
	c.removeRangeLocked(f.Name)
	c.ranges[f.Name] = parsed
	if parsed.node != "" {
		n := c.nodeLocked(parsed.node)
		if n.ranges == nil {
			n.ranges = map[string]*ipRange{}
		}
		n.ranges[f.Name] = parsed
		n.touch()
	}
	return true
}

// OnIPRangeDelete handles an IPRange deletion, tombstones included (always applied).
func (c *Cache) OnIPRangeDelete(obj interface{}) {
	t, tombstone := obj.(cache.DeletedFinalStateUnknown)
	if tombstone {
		obj = t.Obj
	}
	r, ok := obj.(*jkev1.IPRange)
	if !ok {
		return
	}
	f := ipRangeFieldsOf(r)
	if c.deleteIPRange(f, tombstone) {
		c.notify(Change{IPRange: &IPRangeEvent{Old: f}})
	}
}

func (c *Cache) deleteIPRange(f *IPRangeFields, tombstone bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.deleteLocked("range/"+f.Name, f.UID, f.ResourceVersion, tombstone) {
		return false
	}
	// The version goes up once the node views are published (defers run last-first): a
	// reader that sees the new version finds the new views.
	defer c.rangesVersion.Add(1)
	defer c.publishLocked()
	c.removeRangeLocked(f.Name)
	return true
}

// ---- reads ----

// ActiveRecords is how many StaticIPs hold a place on some node (active: node set, not
// Released, not being deleted), whether their pods are present or absent. When it is 0 no
// node's view holds anything (every NodeInfo.Held is empty).
func (c *Cache) ActiveRecords() int64 { return c.activeRecords.Load() }

// RangesVersion changes whenever an IPRange change is applied (added, changed, deleted): a
// reader that derived something from the nodes' ranges (HasRanges, IPCapacity) keeps it while
// the version stays the same.
func (c *Cache) RangesVersion() uint64 { return c.rangesVersion.Load() }

// StaticIPForPod returns the StaticIP of pod namespace/name. When several records name the
// same pod (a conflict the StaticIP controller reports), the one whose name is the pod's
// name wins, else the first by name, so the answer is stable.
func (c *Cache) StaticIPForPod(namespace, name string) (StaticIPInfo, bool) {
	podKey := PodKey(namespace, name)
	c.mu.RLock()
	defer c.mu.RUnlock()
	keys := c.byPod[podKey]
	if len(keys) == 0 {
		return StaticIPInfo{}, false
	}
	key := podKey
	if !slices.Contains(keys, key) {
		key = keys[0]
	}
	r := c.staticIPs[key]
	_, recName, _ := cutKey(key)
	return StaticIPInfo{Name: recName, Node: r.node, IP: r.ip, Workload: r.workload, Active: r.active, Request: r.req.Clone()}, true
}

// StaticIPOfPod is StaticIPForPod for a pod object: the record only if it belongs to the
// pod's workload (BelongsTo). A record retained from EnhancedStatefulSet web is not the record
// of StatefulSet web's pod web-0: it neither pins that pod nor counts as its own reservation.
func (c *Cache) StaticIPOfPod(pod *v1.Pod) (StaticIPInfo, bool) {
	info, ok := c.StaticIPForPod(pod.Namespace, pod.Name)
	if !ok || !BelongsTo(info.Workload, pod) {
		return StaticIPInfo{}, false
	}
	return info, true
}

// NodesHoldingPod lists the nodes where an active record names pod namespace/name (whatever
// workload it belongs to): only there can the pod meet its own reservation.
func (c *Cache) NodesHoldingPod(namespace, name string) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []string
	for _, key := range c.byPod[PodKey(namespace, name)] {
		if r := c.staticIPs[key]; r != nil && r.active {
			out = append(out, r.node)
		}
	}
	return out
}

// BelongsTo reports whether a record of workload w (spec.apiGroup, spec.kind, spec.ref) is
// pod's: the pod's controller reference has that API group, kind and name. A record that
// names no workload yet belongs to any pod of its pod name (as before the workload was
// recorded). The same rule as the StaticIP controller's and the CNI's (package workloadref).
func BelongsTo(w workloadref.Ref, pod *v1.Pod) bool {
	if c := metav1.GetControllerOf(pod); c != nil {
		owner := workloadref.FromOwner(c.APIVersion, c.Kind, c.Name)
		return workloadref.Belongs(w, &owner)
	}
	return workloadref.Belongs(w, nil)
}

// RangeForIP returns the IPRange whose cidr contains ip (the most specific one when
// ranges overlap).
func (c *Cache) RangeForIP(ip netip.Addr) (RangeInfo, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var best *ipRange
	for _, r := range c.ranges {
		if r.contains(ip) && (best == nil || r.prefix.Bits() > best.prefix.Bits() ||
			(r.prefix.Bits() == best.prefix.Bits() && r.name < best.name)) {
			best = r
		}
	}
	if best == nil {
		return RangeInfo{}, false
	}
	return RangeInfo{Name: best.name, CIDR: best.cidr, Node: best.node}, true
}

// emptyNode is what Node returns for a node the cache knows nothing about.
var emptyNode = &NodeInfo{}

// nodeSlot holds the current view of one node name, and what a reader derived from some view
// of it (NodeRef.Memo): both on one cache line, so a Filter that finds its value still valid
// for the current view touches neither the view nor anything else of the cache.
type nodeSlot struct {
	view atomic.Pointer[NodeInfo]
	memo atomic.Value
	_    [8]byte // 32 bytes: the allocator's size class, never across two cache lines
}

func (s *nodeSlot) load() *NodeInfo {
	if v := s.view.Load(); v != nil {
		return v
	}
	return emptyNode
}

// Node returns a consistent picture of what node holds. It is shared with every other
// caller until the node changes (then a new one is published): read it, never modify it.
// Once the cache has synced it takes no lock.
func (c *Cache) Node(node string) *NodeInfo {
	if s := c.slotOf(node); s != nil {
		return s.load()
	}
	return emptyNode
}

// slotOf returns node's slot, nil when the cache knows nothing of the node.
func (c *Cache) slotOf(node string) *nodeSlot {
	if s := (*c.published.Load())[node]; s != nil {
		return s
	}
	if c.unpublished.Load() == 0 {
		return nil
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.slots[node]
}

// publishLocked publishes a new view of every node changed since the last publication, and
// drops the views of nodes the cache no longer knows (c.mu held for writing). A change
// touches one or two nodes.
func (c *Cache) publishLocked() {
	for name := range c.changed {
		if n := c.nodes[name]; n != nil {
			if n.dirty {
				c.slotLocked(name).view.Store(n.build())
				n.dirty = false
			}
		} else if s := c.slots[name]; s != nil {
			// Readers of the published names see an empty node until they are republished.
			s.view.Store(emptyNode)
			delete(c.slots, name)
			c.namesChanged = true
			c.namesVersion.Add(1)
		}
	}
	clear(c.changed)
	if c.namesChanged && (c.ready.Load() || c.unpublished.Load() >= int64(max(len(*c.published.Load()), 64))) {
		c.publishNamesLocked()
	}
}

// slotLocked returns node name's slot, adding one for a new name (c.mu held for writing). A
// name removed and added again before the names were republished gets its published slot
// back, so the published map never holds a stale slot of a known node.
func (c *Cache) slotLocked(name string) *nodeSlot {
	if s := c.slots[name]; s != nil {
		return s
	}
	s := (*c.published.Load())[name]
	if s == nil {
		s = &nodeSlot{}
		c.unpublished.Add(1)
	}
	c.slots[name] = s
	c.namesChanged = true
	c.namesVersion.Add(1)
	return s
}

// publishNamesLocked publishes the current node names (c.mu held for writing).
func (c *Cache) publishNamesLocked() {
	if !c.namesChanged {
		return
	}
	m := make(map[string]*nodeSlot, len(c.slots))
	for name, s := range c.slots {
		m[name] = s
	}
	c.published.Store(&m)
	c.unpublished.Store(0)
	c.namesChanged = false
	c.namesVersion.Add(1)
}

// build computes the node's NodeInfo (c.mu held, for reading at least).
func (n *nodeState) build() *NodeInfo {
	info := &NodeInfo{HasRanges: len(n.ranges) > 0}
	ranges := make([]*ipRange, 0, len(n.ranges))
	for _, r := range n.ranges {
		info.CIDRs = append(info.CIDRs, r.cidr)
		ranges = append(ranges, r)
	}
	info.IPCapacity = podCapacity(ranges)
	sort.Strings(info.CIDRs)
	for _, r := range n.active {
		ns, name, _ := cutKey(r.podKey)
		info.Held = append(info.Held, Held{StaticIP: r.key, PodNamespace: ns, PodName: name, Workload: r.workload, Request: r.req})
	}
	sort.Slice(info.Held, func(i, j int) bool { return info.Held[i].StaticIP < info.Held[j].StaticIP })
	return info
}

// ---- internals (c.mu held) ----

func (c *Cache) nodeLocked(name string) *nodeState {
	n := c.nodes[name]
	if n == nil {
		n = &nodeState{}
		c.nodes[name] = n
	}
	c.changed[name] = struct{}{}
	return n
}

func (c *Cache) gcNodeLocked(name string) {
	c.changed[name] = struct{}{}
	if n := c.nodes[name]; n != nil && len(n.ranges) == 0 && len(n.active) == 0 {
		delete(c.nodes, name)
	}
}

func (c *Cache) removeStaticIPLocked(key string) {
	old := c.staticIPs[key]
	if old == nil {
		return
	}
	if old.active {
		if n := c.nodes[old.node]; n != nil {
			if _, ok := n.active[key]; ok {
				delete(n.active, key)
				c.activeRecords.Add(-1)
			}
			n.touch()
		}
	}
	c.gcNodeLocked(old.node)
	delete(c.staticIPs, key)
	if keys := slices.DeleteFunc(c.byPod[old.podKey], func(k string) bool { return k == key }); len(keys) > 0 {
		c.byPod[old.podKey] = keys
	} else {
		delete(c.byPod, old.podKey)
	}
}

func (c *Cache) removeRangeLocked(name string) {
	old := c.ranges[name]
	if old == nil {
		return
	}
	delete(c.ranges, name)
	if n := c.nodes[old.node]; n != nil {
		delete(n.ranges, name)
		n.touch()
		c.gcNodeLocked(old.node)
	}
}

// insertSorted adds key to the sorted keys (once).
func insertSorted(keys []string, key string) []string {
	i, found := slices.BinarySearch(keys, key)
	if found {
		return keys
	}
	return slices.Insert(keys, i, key)
}

func cutKey(key string) (string, string, bool) {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return "", key, false
}
