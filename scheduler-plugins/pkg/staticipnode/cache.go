// Package staticipnode is the staticIPNode cache: per node, the resources and IPs held for
// static-IP pods that are absent from the node their StaticIP names, and the node's IP
// capacity from its IPRanges. The scheduler plugins read it in every scheduling cycle; it is
// fed only by informers, so a scheduling cycle never calls the API server, and a restarted
// scheduler rebuilds exactly the same state from the initial lists.
//
// # When a StaticIP holds a reservation
//
// A StaticIP S in namespace ns, for pod P = S.spec.pod (or S's name when empty), reserves
// S.spec.resources, one pod slot and one IP on node N = S.spec.node when all of these hold:
//   - N is not empty, S is not being deleted and S.status.phase is not Released;
//   - P is not present on N. P is present on N when a live (not Succeeded/Failed) pod ns/P
//     exists whose spec.nodeName is N, or when this scheduler has assumed ns/P onto N
//     (Reserve, until the binding shows up in the informer or Unreserve undoes it).
//
// Present pods are already counted by the scheduler in the node's requested resources,
// so dropping their reservation is what keeps resources from being counted twice. A pod
// ns/P that exists but is pending, or that runs on another node, is absent from N: its
// reservation stays, so nothing else can take its place on the only node its IP works on.
// The pod itself never competes with its own reservation (see ReservedFor).
package staticipnode

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	"github.com/staticip/staticip/apis/generated/informers/externalversions"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// PodKey is "namespace/name" of a pod.
func PodKey(namespace, name string) string { return namespace + "/" + name }

// podRecord is what the cache needs of a live pod.
type podRecord struct {
	node string
}

// reservation is one StaticIP as the cache sees it.
type reservation struct {
	key    string // namespace/name of the StaticIP
	uid    string
	podKey string // namespace/pod
	node   string
	ip     string
	// active: it may hold a reservation (node set, not deleting, not Released).
	active bool
	req    Resources
	// counted: its req, one pod slot and one IP are currently added to node's totals.
	counted bool
}

// nodeState is what one node holds.
type nodeState struct {
	// reserved is the sum of the requests of the counted reservations on the node.
	reserved Resources
	// reservations is how many reservations are counted (each holds one pod slot and one IP).
	reservations int
	// active are all the reservations naming the node whose pod may be absent or present.
	active map[string]*reservation
	ranges map[string]*ipRange
	// view is the NodeInfo readers get, built on first read after a change: Filter asks for
	// it once per pod and node, events change a node rarely. Readers under the read lock may
	// race to build it (each builds the same value); every change, under the write lock,
	// drops it (touch).
	view atomic.Pointer[NodeInfo]
}

// touch drops the node's view after a change (c.mu held for writing).
func (n *nodeState) touch() { n.view.Store(nil) }

// StaticIPInfo is the StaticIP of one pod.
type StaticIPInfo struct {
	Name string
	Node string
	IP   string
	// Active: the record holds the pod's place on Node (not Released, not deleting).
	Active bool
	// Reserved: the pod is absent from Node and its requests are held there now.
	Reserved bool
	Request  Resources
}

// RangeInfo is an IPRange as the plugins need it.
type RangeInfo struct {
	Name string
	CIDR string
	Node string
}

// NodeInfo is a consistent copy of one node's state.
type NodeInfo struct {
	// Reserved is the sum of the requests reserved on the node for absent static-IP pods.
	Reserved Resources
	// Reservations is how many absent static-IP pods hold a pod slot and an IP on the node.
	Reservations int
	// HasRanges: the node owns at least one IPRange.
	HasRanges bool
	// IPCapacity is how many addresses its valid IPRanges can give to pods.
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
	Request               Resources
}

// Cache is the staticIPNode cache. All methods are safe for concurrent use.
type Cache struct {
	mu        sync.RWMutex
	pods      map[string]podRecord
	assumed   map[string]string // pod key -> node, from Reserve until the binding is seen
	staticIPs map[string]*reservation
	byPod     map[string]sets.Set[string] // pod key -> StaticIP keys
	ranges    map[string]*ipRange
	nodes     map[string]*nodeState
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
}

// NewEmpty returns a cache fed by nobody; tests and New fill it through the On* handlers.
func NewEmpty() *Cache {
	return &Cache{
		pods:      map[string]podRecord{},
		assumed:   map[string]string{},
		staticIPs: map[string]*reservation{},
		byPod:     map[string]sets.Set[string]{},
		ranges:    map[string]*ipRange{},
		nodes:     map[string]*nodeState{},
		versions:  map[string]version{},
		now:       time.Now,
	}
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
// factory). Pods come from podInformerFactory (the scheduler's own); StaticIPs and IPRanges
// from generated informers built on kubeConfig and started here, stopped with ctx.
func ForScheduler(ctx context.Context, podInformerFactory informers.SharedInformerFactory, client versioned.Interface) (*Cache, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if c, ok := shared[podInformerFactory]; ok {
		return c, nil
	}
	c := NewEmpty()
	podReg, err := podInformerFactory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { c.OnPodUpdate(nil, obj) },
		UpdateFunc: c.OnPodUpdate,
		DeleteFunc: c.OnPodDelete,
	})
	if err != nil {
		return nil, fmt.Errorf("staticipnode: watching pods: %w", err)
	}
	factory := externalversions.NewSharedInformerFactory(client, 0)
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
	c.synced = []cache.InformerSynced{podReg.HasSynced, sipReg.HasSynced, rangeReg.HasSynced}
	factory.Start(ctx.Done())
	shared[podInformerFactory] = c
	go func() {
		<-ctx.Done()
		factory.Shutdown()
		sharedMu.Lock()
		delete(shared, podInformerFactory)
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
	c.ready.Store(true)
	return true
}

// MarkSynced is for caches filled by hand (unit tests).
func (c *Cache) MarkSynced() { c.ready.Store(true) }

// ---- event handlers ----

// OnPodUpdate handles a pod add (old nil) or update.
func (c *Cache) OnPodUpdate(_, newObj interface{}) {
	pod, ok := newObj.(*v1.Pod)
	if !ok {
		return
	}
	key := PodKey(pod.Namespace, pod.Name)
	c.mu.Lock()
	defer c.mu.Unlock()
	if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		delete(c.pods, key)
		delete(c.assumed, key)
	} else {
		c.pods[key] = podRecord{node: pod.Spec.NodeName}
		if pod.Spec.NodeName != "" {
			// The binding is visible now; the pod no longer needs to be remembered as assumed.
			delete(c.assumed, key)
		}
	}
	c.refreshPodLocked(key)
}

// OnPodDelete handles a pod deletion.
func (c *Cache) OnPodDelete(obj interface{}) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	key := PodKey(pod.Namespace, pod.Name)
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pods, key)
	delete(c.assumed, key)
	c.refreshPodLocked(key)
}

// OnStaticIPUpdate handles a StaticIP add (old nil) or update.
func (c *Cache) OnStaticIPUpdate(_, newObj interface{}) {
	sip, ok := newObj.(*jkev1.StaticIP)
	if !ok {
		return
	}
	key := sip.Namespace + "/" + sip.Name
	podName := sip.Spec.Pod
	if podName == "" {
		podName = sip.Name
	}
	next := &reservation{
		key:    key,
		uid:    string(sip.UID),
		podKey: PodKey(sip.Namespace, podName),
		node:   sip.Spec.Node,
		ip:     sip.Spec.IP,
		active: sip.Spec.Node != "" && sip.DeletionTimestamp == nil && sip.Status.Phase != jkev1.StaticIPReleased,
		req:    ResourcesFromList(sip.Spec.Resources),
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.newerUIDLocked("sip/"+key, string(sip.UID), sip.ResourceVersion, false) {
		return
	}
	c.removeStaticIPLocked(key)
	c.staticIPs[key] = next
	if next.active {
		n := c.nodeLocked(next.node)
		if n.active == nil {
			n.active = map[string]*reservation{}
		}
		n.active[key] = next
		n.touch()
	}
	set := c.byPod[next.podKey]
	if set == nil {
		set = sets.New[string]()
		c.byPod[next.podKey] = set
	}
	set.Insert(key)
	c.refreshLocked(next)
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
	key := sip.Namespace + "/" + sip.Name
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.deleteLocked("sip/"+key, string(sip.UID), sip.ResourceVersion, tombstone) {
		return
	}
	c.removeStaticIPLocked(key)
}

// OnIPRangeUpdate handles an IPRange add (old nil) or update.
func (c *Cache) OnIPRangeUpdate(_, newObj interface{}) {
	r, ok := newObj.(*jkev1.IPRange)
	if !ok {
		return
	}
	parsed := parseIPRange(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.newerUIDLocked("range/"+r.Name, string(r.UID), r.ResourceVersion, false) {
		return
	}
	c.removeRangeLocked(r.Name)
	c.ranges[r.Name] = parsed
	if parsed.node != "" {
		n := c.nodeLocked(parsed.node)
		if n.ranges == nil {
			n.ranges = map[string]*ipRange{}
		}
		n.ranges[r.Name] = parsed
		n.touch()
	}
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
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.deleteLocked("range/"+r.Name, string(r.UID), r.ResourceVersion, tombstone) {
		return
	}
	c.removeRangeLocked(r.Name)
}

// ---- assume / forget (Reserve / Unreserve) ----

// Assume records that the scheduler placed pod namespace/name on node: from now on the
// pod is present there (its requests are in the scheduler's own node accounting) and its
// reservation on that node is dropped, until the informer shows the binding.
func (c *Cache) Assume(namespace, name, node string) {
	key := PodKey(namespace, name)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.assumed[key] = node
	c.refreshPodLocked(key)
}

// Forget undoes Assume (the binding failed or was rejected).
func (c *Cache) Forget(namespace, name, node string) {
	key := PodKey(namespace, name)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.assumed[key] == node {
		delete(c.assumed, key)
		c.refreshPodLocked(key)
	}
}

// ---- reads ----

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
	if !keys.Has(key) {
		key = sets.List(keys)[0]
	}
	r := c.staticIPs[key]
	_, recName, _ := cutKey(key)
	return StaticIPInfo{Name: recName, Node: r.node, IP: r.ip, Active: r.active, Reserved: r.counted, Request: r.req.Clone()}, true
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

// Node returns a consistent picture of what node holds. Its slices and Reserved are shared
// with every other caller until the node changes: read them, never modify them.
func (c *Cache) Node(node string) NodeInfo {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := c.nodes[node]
	if n == nil {
		return NodeInfo{}
	}
	if v := n.view.Load(); v != nil {
		return *v
	}
	info := n.build()
	n.view.Store(&info)
	return info
}

// build computes the node's NodeInfo (c.mu held, for reading at least).
func (n *nodeState) build() NodeInfo {
	info := NodeInfo{Reserved: n.reserved.Clone(), Reservations: n.reservations, HasRanges: len(n.ranges) > 0}
	for _, r := range n.ranges {
		info.CIDRs = append(info.CIDRs, r.cidr)
		if r.err == nil {
			info.IPCapacity = addSat(info.IPCapacity, r.capacity)
		}
	}
	sort.Strings(info.CIDRs)
	for _, r := range n.active {
		ns, name, _ := cutKey(r.podKey)
		info.Held = append(info.Held, Held{StaticIP: r.key, PodNamespace: ns, PodName: name, Request: r.req})
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
	return n
}

func (c *Cache) gcNodeLocked(name string) {
	if n := c.nodes[name]; n != nil && n.reservations == 0 && len(n.ranges) == 0 && len(n.active) == 0 && n.reserved.IsZero() {
		delete(c.nodes, name)
	}
}

func (c *Cache) presentLocked(podKey, node string) bool {
	if c.assumed[podKey] == node {
		return true
	}
	p, ok := c.pods[podKey]
	return ok && p.node == node
}

// refreshLocked brings r's contribution to its node's totals in line with the current
// state of its pod.
func (c *Cache) refreshLocked(r *reservation) {
	want := r.active && !c.presentLocked(r.podKey, r.node)
	if want == r.counted {
		return
	}
	n := c.nodeLocked(r.node)
	n.touch()
	if want {
		n.reserved.add(r.req, 1)
		n.reservations++
	} else {
		n.reserved.add(r.req, -1)
		n.reservations--
		c.gcNodeLocked(r.node)
	}
	r.counted = want
}

func (c *Cache) refreshPodLocked(podKey string) {
	for key := range c.byPod[podKey] {
		c.refreshLocked(c.staticIPs[key])
	}
}

func (c *Cache) removeStaticIPLocked(key string) {
	old := c.staticIPs[key]
	if old == nil {
		return
	}
	if old.active {
		if n := c.nodes[old.node]; n != nil {
			delete(n.active, key)
			n.touch()
		}
	}
	old.active = false
	c.refreshLocked(old)
	c.gcNodeLocked(old.node)
	delete(c.staticIPs, key)
	if set := c.byPod[old.podKey]; set != nil {
		set.Delete(key)
		if set.Len() == 0 {
			delete(c.byPod, old.podKey)
		}
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

func cutKey(key string) (string, string, bool) {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return "", key, false
}

// ObserveStaticIPEvent applies a StaticIP event the scheduler delivered to a queueing hint
// (objects typed or unstructured; newObj nil for a deletion), so that a pod the hint
// requeues is retried against a cache that already knows the change. Older news than the
// cache has is ignored.
func (c *Cache) ObserveStaticIPEvent(oldObj, newObj interface{}) {
	if newObj == nil {
		if old, err := AsStaticIP(oldObj); err == nil && old != nil {
			if t, ok := oldObj.(cache.DeletedFinalStateUnknown); ok {
				c.OnStaticIPDelete(cache.DeletedFinalStateUnknown{Key: t.Key, Obj: old})
			} else {
				c.OnStaticIPDelete(old)
			}
		}
		return
	}
	if sip, err := AsStaticIP(newObj); err == nil && sip != nil {
		c.OnStaticIPUpdate(nil, sip)
	}
}

// ObserveIPRangeEvent is ObserveStaticIPEvent for IPRanges.
func (c *Cache) ObserveIPRangeEvent(oldObj, newObj interface{}) {
	if newObj == nil {
		if old, err := AsIPRange(oldObj); err == nil && old != nil {
			if t, ok := oldObj.(cache.DeletedFinalStateUnknown); ok {
				c.OnIPRangeDelete(cache.DeletedFinalStateUnknown{Key: t.Key, Obj: old})
			} else {
				c.OnIPRangeDelete(old)
			}
		}
		return
	}
	if r, err := AsIPRange(newObj); err == nil && r != nil {
		c.OnIPRangeUpdate(nil, r)
	}
}
