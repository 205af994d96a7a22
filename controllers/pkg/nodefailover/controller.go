package nodefailover

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
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

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1informers "github.com/staticip/staticip/apis/generated/informers/externalversions/jke/v1"
	jkev1alpha1informers "github.com/staticip/staticip/apis/generated/informers/externalversions/jke/v1alpha1"
	jkev1listers "github.com/staticip/staticip/apis/generated/listers/jke/v1"
	jkev1alpha1listers "github.com/staticip/staticip/apis/generated/listers/jke/v1alpha1"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/nodegone"
	"github.com/staticip/staticip/controllers/pkg/ownwrites"
	"github.com/staticip/staticip/controllers/pkg/podindex"
	"github.com/staticip/staticip/controllers/pkg/worker"
)

// Name is the controller's name in --controllers, logs and metrics.
const Name = "nodefailover"

// Defaults of the flags.
const (
	DefaultWindow              = 2 * time.Minute
	DefaultMaxUnhealthyPercent = 34
	// DefaultFencedPodDeletionGrace: how long after the fence the pods still bound to the node
	// (those that tolerate the out-of-service taint) are force-deleted: the fence (taint + NotReady
	// past the window) already says the node is off; the grace only lets the taint manager and pod
	// GC delete what they delete first, so the static pods are back within seconds.
	DefaultFencedPodDeletionGrace = 5 * time.Second
	// DefaultMaxRangesReportingRoutes: how many moved ranges carry the report-routes mark at
	// once, over all migrations (RouteReportTurns). Every Ready node's agent reports a route
	// to each marked range in its route-report Lease: the cap bounds that report (64 entries of
	// at most 532 bytes: 34 KiB with maximum-length names, ~8 KiB with 60-character ones) and
	// the bytes every failover makes each agent write, however many nodes fail at once.
	DefaultMaxRangesReportingRoutes = 64
)

// Reasons of conditions and Events (besides the fencing reasons in decide.go).
const (
	ReasonDetected         = "FailoverDetected"
	ReasonCancelled        = "FailoverCancelled"
	ReasonTooManyUnhealthy = "TooManyUnhealthy"
	ReasonHealthy          = "HealthyShare"
	ReasonNoTarget         = "NoTarget"
	ReasonTargetUnusable   = "TargetUnusable"
	ReasonClaimed          = "Claimed"
	ReasonPaused           = "Paused"
	ReasonNotPaused        = "NotPaused"
	ReasonRangeChanged     = "RangeChanged"
	ReasonWaitingForAgent  = "WaitingForTargetAgent"
	ReasonWaitingForRoutes = "WaitingForRoutes"
	// ReasonWaitingForRouteTurn: other migrations' ranges fill the report-routes cap.
	ReasonWaitingForRouteTurn = "WaitingForRouteTurn"
	ReasonWaitingForPods      = "WaitingForPods"
	ReasonWaitingForFence     = "WaitingForFence"
	ReasonCompleted           = "Completed"
	ReasonPhase               = "FailoverStep"
	ReasonSpareReleased       = "SpareReleased"
	ReasonPodRecreate         = "FailoverRecreate"
	ReasonPodMoved            = "MovedByFailover"
	ReasonDeletionHeld        = "DeletionHeld"
	ReasonDeleted             = "FailoverRecordDeleted"
	// ReasonHandedToAllocator: the record of a deleted node that owns only pool blocks is
	// deleted: the range allocator gives them back (LeftToAllocator).
	ReasonHandedToAllocator = "HandedToAllocator"
	ReasonFencedPodDeleted  = "FencedPodDeleted"
)

// Finalizer holds a record's deletion while its migration is in flight, so half-moved ranges
// are never forgotten. The controller removes it once the record is Completed (a deletion
// requested meanwhile then goes through), or at a deletion before anything moved.
const Finalizer = "staticip.jke.jdcloud.com/nodefailover"

// recheck is how often a migration that waits on something outside the watched objects (the
// clock, a spare appearing) looks again.
const recheck = 30 * time.Second

// conflictRetry: how soon a sync whose write met a newer version looks again.
const conflictRetry = 100 * time.Millisecond

// progressWriteGap: a status change that is only the Progressing condition's message (how many
// agents still lag, which pods are missing) is written at most this often. While routes
// converge every agent's report changes the message: one status write per Node update (1,004
// at 1,000 nodes) spent the manager's client rate limit (50/s) that the re-points and pod
// creations of the same failover wait for.
const progressWriteGap = 2 * time.Second

// Controller drives NodeFailover records.
type Controller struct {
	kube     kubernetes.Interface
	client   versioned.Interface
	recorder record.EventRecorder

	nodes corelisters.NodeLister
	pods  corelisters.PodLister
	// ranges and records: the informer caches with this controller's writes laid over them
	// (rangeView, recordView; ownwrites.go).
	ranges    jkev1listers.IPRangeLister
	staticIPs jkev1listers.StaticIPLister
	// activeRecords: the records' indexer (activeIndex: not Completed).
	activeRecords cache.Indexer
	records       jkev1alpha1listers.NodeFailoverLister
	rangeWrites   *ownwrites.Overlay[*jkev1.IPRange]
	recordWrites  *ownwrites.Overlay[*jkev1alpha1.NodeFailover]
	podIndex      *podindex.Pods
	// routeLeases: the agents' route-report Leases (routereports.go), run by Run.
	routeLeases cache.SharedIndexInformer
	// routeReports reads the route reports from routeLeases, each decoded once per version.
	routeReports *routeReports

	synced []cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]

	// Window is how long a fenced node must have been NotReady before anything moves.
	Window time.Duration
	// MaxUnhealthyPercent: above this share of NotReady nodes failover stops.
	MaxUnhealthyPercent int
	// FencedPodDeletionGrace: once a node has been fenced this long, the pod objects still
	// bound to it that may hold an IP of its ranges are force-deleted.
	FencedPodDeletionGrace time.Duration
	// MaxRangesReportingRoutes: at most this many moved ranges carry the report-routes mark
	// at once, over all migrations (RouteReportTurns); <= 0: no cap.
	MaxRangesReportingRoutes int
	// NodeDeletionIsFence: a deleted Node counts as fenced (off by default).
	NodeDeletionIsFence bool
	// NodeGoneAfter: how long a deleted node must show no sign of life (Lease renewal) before
	// it is proven gone (controllers/pkg/nodegone).
	NodeGoneAfter time.Duration
	// AllocatorRuns: the range allocator runs in this manager; a deleted node that owns only
	// pool blocks and no StaticIP is left to it (LeftToAllocator).
	AllocatorRuns bool
	// Now is the clock (tests).
	Now func() time.Time

	// gone remembers the zone and instance type of Nodes, for when they are deleted.
	gone *labelMemory
	// statusWritten: when each record's status was last written (progressWriteGap).
	statusWritten sync.Map
}

// podsOn lists the pods bound to node.
func (c *Controller) podsOn(node string) ([]*corev1.Pod, error) { return c.podIndex.On(node) }

// podsHolding returns the pods that may hold an IP of node: those bound to it and those with
// an IP in one of ranges (index lookups per IP block; HoldingPods then decides exactly).
func (c *Controller) podsHolding(node string, ranges []netip.Prefix) ([]*corev1.Pod, error) {
	return c.podIndex.Candidates(node, ranges)
}

// NewController wires the controller to its informers.
func NewController(kube kubernetes.Interface, client versioned.Interface, nodeInformer coreinformers.NodeInformer,
	podInformer coreinformers.PodInformer, rangeInformer jkev1informers.IPRangeInformer,
	sipInformer jkev1informers.StaticIPInformer, recordInformer jkev1alpha1informers.NodeFailoverInformer,
	recorder record.EventRecorder) (*Controller, error) {
	c := &Controller{
		kube: kube, client: client, recorder: recorder,
		nodes: nodeInformer.Lister(), pods: podInformer.Lister(),
		staticIPs:    sipInformer.Lister(),
		rangeWrites:  ownwrites.New[*jkev1.IPRange](0, nil),
		recordWrites: ownwrites.New[*jkev1alpha1.NodeFailover](0, nil),
		synced: []cache.InformerSynced{nodeInformer.Informer().HasSynced, podInformer.Informer().HasSynced,
			rangeInformer.Informer().HasSynced, sipInformer.Informer().HasSynced, recordInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name}),
		Window: DefaultWindow, NodeGoneAfter: nodegone.DefaultLeaseGoneAfter, MaxUnhealthyPercent: DefaultMaxUnhealthyPercent, FencedPodDeletionGrace: DefaultFencedPodDeletionGrace, Now: time.Now,
		MaxRangesReportingRoutes: DefaultMaxRangesReportingRoutes,
		gone:                     &labelMemory{m: map[string]map[string]string{}},
	}
	c.ranges = rangeView{IPRangeLister: rangeInformer.Lister(), writes: c.rangeWrites}
	c.records = recordView{NodeFailoverLister: recordInformer.Lister(), writes: c.recordWrites}
	podIndex, err := podindex.New(podInformer.Informer(), podInformer.Lister())
	if err != nil {
		return nil, err
	}
	c.podIndex = podIndex
	// Running migrations are found through an index, not by listing every record: records stay
	// as history, and this runs on Node events.
	if err := recordInformer.Informer().AddIndexers(cache.Indexers{activeIndex: activeRecordIndex, routesIndex: waitingForRoutesIndex}); err != nil {
		return nil, err
	}
	c.activeRecords = recordInformer.Informer().GetIndexer()
	// Route reports: a report's change concerns only the migrations waiting for routes.
	c.routeLeases = newRouteReportInformer(kube)
	c.routeReports = &routeReports{store: c.routeLeases.GetStore(), parsed: map[string]parsedRouteReport{}}
	reportHandler := func(any) { c.enqueueWaitingForRoutes() }
	if _, err := c.routeLeases.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: reportHandler,
		UpdateFunc: func(_, cur any) { reportHandler(cur) }, DeleteFunc: func(obj any) { c.routeReports.forget(obj); reportHandler(obj) }}); err != nil {
		return nil, err
	}
	c.synced = append(c.synced, c.routeLeases.HasSynced)
	// A node's own changes concern its record; any node's health, annotations, labels, taints
	// and capacity concern every running migration (unhealthy share, routes, spares) — its
	// heartbeats do not (NodeConcernsMigrations), so that a large cluster's Node updates do not
	// re-run every migration.
	nodeHandler := func(old, obj any) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				n, _ = t.Obj.(*corev1.Node)
			}
		}
		if n == nil {
			return
		}
		c.gone.put(n.Name, n.Labels)
		c.queue.Add(n.Name)
		if o, ok := old.(*corev1.Node); !ok || NodeConcernsMigrations(o, n) {
			c.enqueueActive()
		}
	}
	nodeHandlerReg, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { nodeHandler(nil, obj) }, UpdateFunc: nodeHandler,
		DeleteFunc: func(obj any) { nodeHandler(nil, obj) },
	})
	if err != nil {
		return nil, err
	}
	// The workers start only once this handler has seen every Node of the initial list: the
	// informer's store is filled before its handlers run, so a sync could otherwise find a
	// Node deleted from the store whose zone the memory above has not been told yet.
	c.synced = append(c.synced, nodeHandlerReg.HasSynced)
	// Ranges and StaticIPs: their node (old and new) and the running migrations.
	ownerHandler := cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueOwner,
		UpdateFunc: func(old, cur any) {
			c.enqueueOwner(old)
			c.enqueueOwner(cur)
		},
		DeleteFunc: c.enqueueOwner,
	}
	for _, inf := range []cache.SharedIndexInformer{rangeInformer.Informer(), sipInformer.Informer()} {
		if _, err := inf.AddEventHandler(ownerHandler); err != nil {
			return nil, err
		}
	}
	// Pods: only running migrations care (pods left holding an IP, pods coming back).
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.enqueueActive() }, UpdateFunc: func(_, _ any) { c.enqueueActive() },
		DeleteFunc: func(any) { c.enqueueActive() },
	}); err != nil {
		return nil, err
	}
	if _, err := recordInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.enqueueKey(obj) }, UpdateFunc: func(_, cur any) { c.enqueueKey(cur) },
		DeleteFunc: func(obj any) { c.enqueueKey(obj) },
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// labelMemory keeps the zone and instance type of every Node seen, so a Node that is deleted
// before its record is made still gets a target in its zone. (Filled from the event handler:
// a sync may see the Node gone from the lister before the delete event is handled.)
type labelMemory struct {
	mu sync.Mutex
	m  map[string]map[string]string
}

func (l *labelMemory) put(name string, lbls map[string]string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.m[name] = map[string]string{LabelZone: lbls[LabelZone], LabelInstanceType: lbls[LabelInstanceType]}
}

// forget drops a deleted Node's labels once nothing needs them: no record is to be made for
// it, or its record holds the zone and instance type in its status.
func (l *labelMemory) forget(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, name)
}

func (l *labelMemory) get(name string) map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m[name]
}

func (c *Controller) enqueueKey(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// enqueueOwner queues the node an IPRange or StaticIP names, and the running migrations.
func (c *Controller) enqueueOwner(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	switch o := obj.(type) {
	case *jkev1.IPRange:
		if o.Spec.Node != "" {
			c.queue.Add(o.Spec.Node)
		}
	case *jkev1.StaticIP:
		if o.Spec.Node != "" {
			c.queue.Add(o.Spec.Node)
		}
	}
	c.enqueueActive()
}

// enqueueActive queues every migration that is not Completed.
func (c *Controller) enqueueActive() {
	keys, err := c.activeRecords.IndexKeys(activeIndex, "true")
	if err != nil {
		return
	}
	for _, k := range keys {
		c.queue.Add(k) // records are cluster-scoped: the key is the name
	}
}

// activeIndex indexes the NodeFailover records that are not Completed under "true".
const activeIndex = "active"

func activeRecordIndex(obj any) ([]string, error) {
	if r, ok := obj.(*jkev1alpha1.NodeFailover); ok && r.Status.Phase != jkev1alpha1.FailoverCompleted {
		return []string{"true"}, nil
	}
	return nil, nil
}

// NodeConcernsMigrations says whether a Node update can change what a running migration
// decides: its labels, annotations (the route reports of agents of the previous release, which
// have no route-report Lease), taints, schedulability,
// addresses, allocatable, deletion, or the status of a condition. A kubelet's status refresh
// (heartbeat times only) does not.
func NodeConcernsMigrations(old, cur *corev1.Node) bool {
	if !maps.Equal(old.Labels, cur.Labels) || !maps.Equal(old.Annotations, cur.Annotations) ||
		!equality.Semantic.DeepEqual(old.Spec.Taints, cur.Spec.Taints) || old.Spec.Unschedulable != cur.Spec.Unschedulable ||
		!equality.Semantic.DeepEqual(old.Status.Addresses, cur.Status.Addresses) ||
		!equality.Semantic.DeepEqual(old.Status.Allocatable, cur.Status.Allocatable) ||
		(old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil) || len(old.Status.Conditions) != len(cur.Status.Conditions) {
		return true
	}
	for i, c := range cur.Status.Conditions {
		if o := old.Status.Conditions[i]; o.Type != c.Type || o.Status != c.Status || o.Reason != c.Reason {
			return true
		}
	}
	return false
}

// Run runs the controller until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	go c.routeLeases.Run(ctx.Done())
	worker.Run(ctx, Name, "node", c.queue, c.synced, workers, c.sync)
}

// sync looks at one node (the key is the node's name, which is also its record's name).
func (c *Controller) sync(ctx context.Context, name string) (time.Duration, error) {
	node, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		node = nil
	} else if err != nil {
		return 0, err
	}
	owned, err := c.rangesOf(name)
	if err != nil {
		return 0, err
	}
	rec, err := c.records.Get(name)
	if apierrors.IsNotFound(err) {
		recorded, err := c.detect(ctx, name, node, owned)
		if err == nil && node == nil && !recorded {
			c.gone.forget(name) // a deleted Node with nothing to move
		}
		return 0, err
	} else if err != nil {
		return 0, err
	}
	m := &migration{c: c, rec: rec.DeepCopy(), node: node, owned: owned, now: c.Now(),
		logger: klog.FromContext(ctx).WithValues("controller", Name, "node", name)}
	m.orig = *m.rec.Status.DeepCopy()
	requeue, err := m.run(ctx)
	if err != nil && !apierrors.IsConflict(err) {
		m.rec.Status.LastError = err.Error()
	}
	if werr := m.writeStatus(ctx); werr != nil && err == nil {
		err = werr
	}
	if apierrors.IsConflict(err) {
		// A write met a newer version of its object (a StaticIP the workload controller just
		// claimed, the record itself): the newer version is on its way, so look again soon —
		// not through the worker's backoff, which grows with every conflict in a row (seconds
		// added to a 1,000-node failover in tools/scalebench after its routes had converged).
		return conflictRetry, nil
	}
	if m.deleted {
		c.statusWritten.Delete(name)
	}
	if m.deferred > 0 && (requeue == 0 || m.deferred < requeue) {
		requeue = m.deferred
	}
	if err == nil && !m.deleted && m.st().Phase == jkev1alpha1.FailoverCompleted && slices.Contains(m.rec.Finalizers, Finalizer) {
		// Nothing is half-moved any more: a deletion held until now goes through, and a record
		// kept as history carries no finalizer (it can be deleted without this controller).
		if m.rec.DeletionTimestamp != nil {
			err = m.deleteRecord(ctx, "its migration completed")
		} else {
			err = m.updateFinalizers(ctx, withoutFinalizer(m.rec.Finalizers))
		}
	}
	if err == nil && node == nil && !m.deleted && m.orig.Phase != "" {
		c.gone.forget(name) // the record's status holds the deleted Node's zone now
	}
	return requeue, err
}

// rangesOf lists the IPRanges that name node.
func (c *Controller) rangesOf(node string) ([]*jkev1.IPRange, error) {
	all, err := c.ranges.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []*jkev1.IPRange
	for _, r := range all {
		if r.Spec.Node == node && r.DeletionTimestamp == nil {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *jkev1.IPRange) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// staticIPsOf lists the StaticIPs that move with node.
func (c *Controller) staticIPsOf(node string, prefixes []netip.Prefix) ([]*jkev1.StaticIP, error) {
	all, err := c.staticIPs.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	return MovingStaticIPs(all, node, prefixes), nil
}

func prefixesOf(ranges []*jkev1.IPRange) []netip.Prefix {
	cidrs := make([]string, 0, len(ranges))
	for _, r := range ranges {
		cidrs = append(cidrs, r.Spec.CIDR)
	}
	return ParsePrefixes(cidrs)
}

// detect creates the record of a node that is out-of-service (or whose Node is gone) and owns
// ranges or static IPs. A NotReady node without the taint gets no record: nothing of it moves.
// recorded: a record exists or was made (its first status write may have failed).
func (c *Controller) detect(ctx context.Context, name string, node *corev1.Node, owned []*jkev1.IPRange) (recorded bool, err error) {
	var lbls map[string]string
	switch {
	case node != nil && !jkev1alpha1.NodeOutOfService(node):
		return false, nil
	case node != nil:
		lbls = node.Labels
	default:
		// A deleted Node: only when one of its ranges was served (an agent reported it), so a
		// range created ahead of its node joining is not mistaken for a lost node.
		if !slices.ContainsFunc(owned, func(r *jkev1.IPRange) bool { return meta.FindStatusCondition(r.Status.Conditions, "Synced") != nil }) {
			return false, nil
		}
		lbls = c.gone.get(name)
	}
	sips, err := c.staticIPsOf(name, prefixesOf(owned))
	if err != nil {
		return false, err
	}
	if len(owned) == 0 && len(sips) == 0 {
		return false, nil
	}
	if node == nil && LeftToAllocator(c.AllocatorRuns, owned, sips) {
		return false, nil
	}
	rec := &jkev1alpha1.NodeFailover{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{Finalizer}}, Spec: jkev1alpha1.NodeFailoverSpec{Node: name}}
	created, err := c.client.JkeV1alpha1().NodeFailovers().Create(ctx, rec, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return true, nil // the informer will show it
	}
	if err != nil {
		return false, err
	}
	now := metav1.NewTime(c.Now())
	created.Status = jkev1alpha1.NodeFailoverStatus{Phase: jkev1alpha1.FailoverDetected, StartTime: &now, PhaseTime: &now,
		Zone: lbls[LabelZone], InstanceType: lbls[LabelInstanceType], ObservedGeneration: created.Generation}
	c.recordWrites.Remember(name, created)
	updated, err := c.client.JkeV1alpha1().NodeFailovers().UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		return true, err
	}
	c.recordWrites.Remember(name, updated)
	msg := fmt.Sprintf("node %s is fenced (out-of-service or deleted) and owns %d IP ranges and %d static IPs: failover record created", name, len(owned), len(sips))
	c.recorder.Event(created, corev1.EventTypeNormal, ReasonDetected, msg)
	if node != nil {
		c.recorder.Event(node, corev1.EventTypeNormal, ReasonDetected, msg)
	}
	klog.FromContext(ctx).Info("Node failover detected", "controller", Name, "node", name, "ranges", len(owned), "staticIPs", len(sips))
	return true, nil
}

// patchNode merge-patches a node's labels (nil values delete) and/or its taints, with the
// cached resourceVersion as precondition.
func (c *Controller) patchNode(ctx context.Context, n *corev1.Node, lbls map[string]any, taints []corev1.Taint) error {
	meta := map[string]any{"resourceVersion": n.ResourceVersion}
	if lbls != nil {
		meta["labels"] = lbls["labels"]
	}
	patch := map[string]any{"metadata": meta}
	if taints != nil || lbls == nil {
		if taints == nil {
			taints = []corev1.Taint{}
		}
		patch["spec"] = map[string]any{"taints": taints}
	}
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = c.kube.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, data, metav1.PatchOptions{})
	return err
}

func shortList(items []string) string {
	if len(items) > 10 {
		return strings.Join(items[:10], ", ") + fmt.Sprintf(" and %d more", len(items)-10)
	}
	return strings.Join(items, ", ")
}

func resourceString(l corev1.ResourceList) string {
	names := make([]string, 0, len(l))
	for n := range l {
		names = append(names, string(n))
	}
	slices.Sort(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		q := l[corev1.ResourceName(n)]
		parts = append(parts, n+"="+q.String())
	}
	return strings.Join(parts, ",")
}
