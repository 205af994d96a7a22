package nodefailover

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1informers "github.com/staticip/staticip/apis/generated/informers/externalversions/jke/v1"
	jkev1alpha1informers "github.com/staticip/staticip/apis/generated/informers/externalversions/jke/v1alpha1"
	jkev1listers "github.com/staticip/staticip/apis/generated/listers/jke/v1"
	jkev1alpha1listers "github.com/staticip/staticip/apis/generated/listers/jke/v1alpha1"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/metrics"
	"github.com/staticip/staticip/controllers/pkg/podindex"
	"github.com/staticip/staticip/controllers/pkg/staticip"
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
	ReasonWaitingForPods   = "WaitingForPods"
	ReasonWaitingForFence  = "WaitingForFence"
	ReasonCompleted        = "Completed"
	ReasonPhase            = "FailoverStep"
	ReasonSpareReleased    = "SpareReleased"
	ReasonPodRecreate      = "FailoverRecreate"
	ReasonPodMoved         = "MovedByFailover"
	ReasonDeletionHeld     = "DeletionHeld"
	ReasonDeleted          = "FailoverRecordDeleted"
	ReasonFencedPodDeleted = "FencedPodDeleted"
)

// Finalizer holds a record's deletion while its migration is in flight, so half-moved ranges
// are never forgotten. The controller removes it once the record is Completed (a deletion
// requested meanwhile then goes through), or at a deletion before anything moved.
const Finalizer = "staticip.jke.jdcloud.com/nodefailover"

// recheck is how often a migration that waits on something outside the watched objects (the
// clock, a spare appearing) looks again.
const recheck = 30 * time.Second

// Controller drives NodeFailover records.
type Controller struct {
	kube     kubernetes.Interface
	client   versioned.Interface
	recorder record.EventRecorder

	nodes     corelisters.NodeLister
	pods      corelisters.PodLister
	ranges    jkev1listers.IPRangeLister
	staticIPs jkev1listers.StaticIPLister
	records   jkev1alpha1listers.NodeFailoverLister
	podIndex  *podindex.Pods

	synced []cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]

	// Window is how long a fenced node must have been NotReady before anything moves.
	Window time.Duration
	// MaxUnhealthyPercent: above this share of NotReady nodes failover stops.
	MaxUnhealthyPercent int
	// FencedPodDeletionGrace: once a node has been fenced this long, the pod objects still
	// bound to it that may hold an IP of its ranges are force-deleted.
	FencedPodDeletionGrace time.Duration
	// NodeDeletionIsFence: a deleted Node counts as fenced (off by default).
	NodeDeletionIsFence bool
	// Now is the clock (tests).
	Now func() time.Time

	// gone remembers the zone and instance type of Nodes, for when they are deleted.
	gone *labelMemory
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
		nodes: nodeInformer.Lister(), pods: podInformer.Lister(), ranges: rangeInformer.Lister(),
		staticIPs: sipInformer.Lister(), records: recordInformer.Lister(),
		synced: []cache.InformerSynced{nodeInformer.Informer().HasSynced, podInformer.Informer().HasSynced,
			rangeInformer.Informer().HasSynced, sipInformer.Informer().HasSynced, recordInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name}),
		Window: DefaultWindow, MaxUnhealthyPercent: DefaultMaxUnhealthyPercent, FencedPodDeletionGrace: DefaultFencedPodDeletionGrace, Now: time.Now,
		gone: &labelMemory{m: map[string]map[string]string{}},
	}
	podIndex, err := podindex.New(podInformer.Informer(), podInformer.Lister())
	if err != nil {
		return nil, err
	}
	c.podIndex = podIndex
	// A node's own changes concern its record; any node's health, annotations and labels
	// concern every running migration (unhealthy share, routes, spares).
	nodeHandler := func(obj any) {
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
		c.enqueueActive()
	}
	nodeHandlerReg, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: nodeHandler, UpdateFunc: func(_, cur any) { nodeHandler(cur) },
		DeleteFunc: nodeHandler,
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
	recs, err := c.records.List(labels.Everything())
	if err != nil {
		return
	}
	for _, r := range recs {
		if r.Status.Phase != jkev1alpha1.FailoverCompleted {
			c.queue.Add(r.Name)
		}
	}
}

// Run runs the controller until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
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
	if err != nil {
		m.rec.Status.LastError = err.Error()
	}
	if werr := m.writeStatus(ctx); werr != nil && err == nil {
		err = werr
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
	case node != nil && !OutOfService(node):
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
	if _, err := c.client.JkeV1alpha1().NodeFailovers().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return true, err
	}
	msg := fmt.Sprintf("node %s is fenced (out-of-service or deleted) and owns %d IP ranges and %d static IPs: failover record created", name, len(owned), len(sips))
	c.recorder.Event(created, corev1.EventTypeNormal, ReasonDetected, msg)
	if node != nil {
		c.recorder.Event(node, corev1.EventTypeNormal, ReasonDetected, msg)
	}
	klog.FromContext(ctx).Info("Node failover detected", "controller", Name, "node", name, "ranges", len(owned), "staticIPs", len(sips))
	return true, nil
}

// migration is one sync of one record.
type migration struct {
	c      *Controller
	rec    *jkev1alpha1.NodeFailover
	orig   jkev1alpha1.NodeFailoverStatus
	node   *corev1.Node // nil: deleted
	owned  []*jkev1.IPRange
	now    time.Time
	logger klog.Logger
	// deleted: this sync deleted the record; nothing is written back.
	deleted bool
}

func (m *migration) st() *jkev1alpha1.NodeFailoverStatus { return &m.rec.Status }

func (m *migration) setCondition(t string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&m.rec.Status.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason,
		Message: msg, ObservedGeneration: m.rec.Generation})
}

// became reports whether condition t turned to status/reason in this sync (for one-shot Events).
func (m *migration) became(t string, status metav1.ConditionStatus, reason string) bool {
	old := meta.FindStatusCondition(m.orig.Conditions, t)
	return old == nil || old.Status != status || old.Reason != reason
}

func (m *migration) waiting(reason, msg string) {
	m.setCondition(jkev1alpha1.NodeFailoverConditionProgressing, metav1.ConditionTrue, reason, msg)
}

// setPhase records that step p is done, with its duration and an Event.
func (m *migration) setPhase(p jkev1alpha1.NodeFailoverPhase) {
	st := m.st()
	if Reached(st, p) {
		return
	}
	if st.PhaseTime != nil {
		metrics.NodeFailoverStepDuration.WithLabelValues(string(p)).Observe(m.now.Sub(st.PhaseTime.Time).Seconds())
	}
	now := metav1.NewTime(m.now)
	st.Phase, st.PhaseTime = p, &now
	st.LastError = ""
	m.c.recorder.Eventf(m.rec, corev1.EventTypeNormal, ReasonPhase, "step %s done (target %q)", p, st.Target)
	m.logger.Info("Node failover step done", "phase", p, "target", st.Target)
}

// writeStatus writes the status if this sync changed it.
func (m *migration) writeStatus(ctx context.Context) error {
	if m.deleted {
		return nil
	}
	m.rec.Status.ObservedGeneration = m.rec.Generation
	if apiequality.Semantic.DeepEqual(m.orig, m.rec.Status) {
		return nil
	}
	updated, err := m.c.client.JkeV1alpha1().NodeFailovers().UpdateStatus(ctx, m.rec, metav1.UpdateOptions{})
	metrics.ObserveStatusWrite(Name, err)
	if err != nil {
		return err
	}
	m.rec = updated
	m.orig = *updated.Status.DeepCopy()
	return nil
}

func (m *migration) failedName() string { return m.rec.Spec.Node }

// committed: a range write may have happened. From then on the migration only goes forward.
func (m *migration) committed() bool {
	return len(m.st().MovedRanges) > 0 || Reached(m.st(), jkev1alpha1.FailoverRangesMoved)
}

// fenceRules: the manager's settings, and the operator's node-off statement on the record of a
// deleted Node.
func (m *migration) fenceRules() FenceRules {
	return FenceRules{Window: m.c.Window,
		NodeDeletionIsFence: m.c.NodeDeletionIsFence || m.rec.Annotations[jkev1alpha1.AnnotationNodeOff] == "true"}
}

func (m *migration) paused() bool {
	if m.rec.Annotations[jkev1alpha1.AnnotationFailoverPaused] == "true" {
		return true
	}
	return m.node != nil && m.node.Annotations[jkev1alpha1.AnnotationFailoverPaused] == "true"
}

// run advances the migration as far as it can now.
func (m *migration) run(ctx context.Context) (time.Duration, error) {
	st := m.st()
	if st.Phase == "" { // created, but the first status write was lost
		now := metav1.NewTime(m.now)
		st.Phase, st.StartTime, st.PhaseTime = jkev1alpha1.FailoverDetected, &now, &now
		lbls := m.c.gone.get(m.failedName())
		if m.node != nil {
			lbls = m.node.Labels
		}
		st.Zone, st.InstanceType = lbls[LabelZone], lbls[LabelInstanceType]
	}
	if m.rec.DeletionTimestamp != nil {
		if done, err := m.deleting(ctx); done || err != nil {
			return 0, err
		}
	} else if !slices.Contains(m.rec.Finalizers, Finalizer) && st.Phase != jkev1alpha1.FailoverCompleted {
		// A record made before the finalizer existed, or one an operator stripped.
		if err := m.updateFinalizers(ctx, append(slices.Clone(m.rec.Finalizers), Finalizer)); err != nil {
			return 0, err
		}
	}
	if st.Phase == jkev1alpha1.FailoverCompleted {
		return 0, m.restartIfFailedAgain(ctx)
	}
	if m.paused() {
		if m.became(jkev1alpha1.NodeFailoverConditionPaused, metav1.ConditionTrue, ReasonPaused) {
			m.c.recorder.Eventf(m.rec, corev1.EventTypeNormal, ReasonPaused, "paused by the annotation %s", jkev1alpha1.AnnotationFailoverPaused)
		}
		m.setCondition(jkev1alpha1.NodeFailoverConditionPaused, metav1.ConditionTrue, ReasonPaused, "annotation "+jkev1alpha1.AnnotationFailoverPaused+" is \"true\" on the record or the node: nothing is written")
		return 0, nil
	}
	m.setCondition(jkev1alpha1.NodeFailoverConditionPaused, metav1.ConditionFalse, ReasonNotPaused, "")

	if !m.committed() {
		done, requeue, err := m.beforeMoving(ctx)
		if !done || err != nil {
			return requeue, err
		}
	}
	return m.afterCommit(ctx)
}

// beforeMoving checks the fencing rule, the unhealthy share and the pods left, then reserves a
// target and records the range moves. Until a move is recorded everything here is undone if
// the node stops being fenced.
func (m *migration) beforeMoving(ctx context.Context) (done bool, requeue time.Duration, err error) {
	st := m.st()
	name := m.failedName()
	fence := Fencing(m.node, st.StartTime.Time, m.now, m.fenceRules())
	if !fence.Candidate {
		return false, 0, m.cancel(ctx, fence.Message)
	}
	if !fence.Fenced {
		m.setCondition(jkev1alpha1.NodeFailoverConditionFenced, metav1.ConditionFalse, fence.Reason, fence.Message)
		m.waiting(ReasonWaitingForFence, fence.Message)
		return false, fence.RecheckAfter, nil
	}

	nodes, err := m.c.nodes.List(labels.Everything())
	if err != nil {
		return false, 0, err
	}
	deleted := 0
	if m.node == nil {
		deleted = 1
	}
	notReady, total := Unhealthy(nodes, deleted)
	if TooManyUnhealthy(notReady, total, m.c.MaxUnhealthyPercent) {
		msg := fmt.Sprintf("%d of %d nodes are not Ready (more than %d%%): that looks like a partition, not a node failure; nothing is moved", notReady, total, m.c.MaxUnhealthyPercent)
		if m.became(jkev1alpha1.NodeFailoverConditionStopped, metav1.ConditionTrue, ReasonTooManyUnhealthy) {
			m.c.recorder.Event(m.rec, corev1.EventTypeWarning, ReasonTooManyUnhealthy, msg)
			if m.node != nil {
				m.c.recorder.Event(m.node, corev1.EventTypeWarning, ReasonTooManyUnhealthy, msg)
			}
			metrics.NodeFailoverMigrations.WithLabelValues("stopped_unhealthy").Inc()
		}
		m.setCondition(jkev1alpha1.NodeFailoverConditionStopped, metav1.ConditionTrue, ReasonTooManyUnhealthy, msg)
		m.waiting(ReasonTooManyUnhealthy, msg)
		return false, recheck, nil
	}
	m.setCondition(jkev1alpha1.NodeFailoverConditionStopped, metav1.ConditionFalse, ReasonHealthy,
		fmt.Sprintf("%d of %d nodes are not Ready (at most %d%% allowed)", notReady, total, m.c.MaxUnhealthyPercent))
	m.setPhase(jkev1alpha1.FailoverFenced)

	pods, err := m.c.podsHolding(name, prefixesOf(m.owned))
	if err != nil {
		return false, 0, err
	}
	pods = NeverStarted(pods, name, NotReadySince(m.node))
	if holding := HoldingPods(pods, name, prefixesOf(m.owned)); len(holding) > 0 {
		// The grace runs from the fence as this controller saw it: a node NotReady for hours
		// and tainted a moment ago still gives the taint manager and pod GC the grace first.
		from := fence.FencedAt
		if st.StartTime != nil && st.StartTime.After(from) {
			from = st.StartTime.Time
		}
		doomed, wait := FencedPodDeletion(pods, name, prefixesOf(m.owned), from, m.now, m.c.FencedPodDeletionGrace)
		if err := m.deleteFencedPods(ctx, doomed); err != nil {
			return false, 0, err
		}
		msg := fmt.Sprintf("%s; waiting for %d pod objects that may hold its IPs to be deleted (the taint manager and pod GC delete those that do not tolerate the out-of-service taint; those still bound to the node are force-deleted %s after the fence): %s",
			fence.Message, len(holding), m.c.FencedPodDeletionGrace, shortList(holding))
		m.setCondition(jkev1alpha1.NodeFailoverConditionFenced, metav1.ConditionFalse, ReasonPodsRemain, msg)
		m.waiting(ReasonPodsRemain, msg)
		return false, wait, nil
	}
	m.setCondition(jkev1alpha1.NodeFailoverConditionFenced, metav1.ConditionTrue, ReasonFenced, fence.Message)
	m.setPhase(jkev1alpha1.FailoverSourceEmpty)

	sips, err := m.c.staticIPsOf(name, prefixesOf(m.owned))
	if err != nil {
		return false, 0, err
	}
	target, requeue, err := m.reserveTarget(ctx, sips)
	if target == "" || err != nil {
		return false, requeue, err
	}
	if !Reached(st, jkev1alpha1.FailoverTargetReserved) {
		st.MovedStaticIPs = nil
		for _, s := range sips {
			st.MovedStaticIPs = append(st.MovedStaticIPs, jkev1alpha1.MovedStaticIP{Namespace: s.Namespace, Name: s.Name, IP: s.Spec.IP, FromNode: s.Spec.Node})
		}
		m.setPhase(jkev1alpha1.FailoverTargetReserved)
	}
	// Record every move before the first range write: a restart finishes these moves at these
	// generations and never bumps a range twice.
	for _, r := range m.owned {
		st.MovedRanges = append(st.MovedRanges, jkev1alpha1.MovedRange{Name: r.Name, CIDR: r.Spec.CIDR, FromNode: name,
			ToNode: target, OwnerGeneration: r.Spec.OwnerGeneration + 1})
	}
	if err := m.writeStatus(ctx); err != nil {
		return false, 0, err
	}
	return true, 0, nil
}

// deleteFencedPods force-deletes (grace period 0, UID precondition: never a pod of the same
// name created since) the pod objects FencedPodDeletion chose: the machine is off, so nothing
// runs them, and their objects are all that keeps the node's IPs claimed. Their controllers
// recreate them (a DaemonSet's pod comes back when the node returns).
func (m *migration) deleteFencedPods(ctx context.Context, pods []*corev1.Pod) error {
	zero := int64(0)
	for _, p := range pods {
		uid := p.UID
		err := m.c.kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero,
			Preconditions: &metav1.Preconditions{UID: &uid}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			continue // gone, or another pod of that name: the next sync sees it
		} else if err != nil {
			return fmt.Errorf("force-delete pod %s/%s on fenced node %s: %w", p.Namespace, p.Name, m.failedName(), err)
		}
		msg := fmt.Sprintf("pod %s/%s was still bound to node %s %s after the node was fenced (out-of-service and not Ready): force-deleted so the node's IP ranges can move (its controller recreates it; a DaemonSet's pod comes back when the node returns)",
			p.Namespace, p.Name, m.failedName(), m.c.FencedPodDeletionGrace)
		m.c.recorder.Event(p, corev1.EventTypeWarning, ReasonFencedPodDeleted, msg)
		m.c.recorder.Event(m.rec, corev1.EventTypeNormal, ReasonFencedPodDeleted, msg)
		m.logger.Info("Force-deleted a pod bound to the fenced node", "pod", klog.KObj(p))
	}
	return nil
}

// deleting handles a record whose deletion was requested. Before the first range write nothing
// moved: the claim is released and the record goes (done). A Completed record goes too. In
// between, ranges are half-moved and only this record knows from where: the deletion is held
// (finalizer) and the migration goes on; the record goes once Completed (see sync). An
// operator who really wants it gone removes the finalizer by hand and finishes the moves.
func (m *migration) deleting(ctx context.Context) (done bool, err error) {
	if !slices.Contains(m.rec.Finalizers, Finalizer) {
		m.deleted = true // someone removed the finalizer: the API server deletes it
		return true, nil
	}
	if m.st().Phase == jkev1alpha1.FailoverCompleted {
		return true, m.deleteRecord(ctx, "its migration completed")
	}
	if !m.committed() {
		if err := m.releaseClaim(ctx); err != nil {
			return true, err
		}
		return true, m.deleteRecord(ctx, "nothing had moved yet")
	}
	msg := fmt.Sprintf("deletion requested while %d IP ranges are half-moved to %s: held (finalizer %s) until the migration completes; the record goes then",
		len(m.st().MovedRanges), m.st().Target, Finalizer)
	if !meta.IsStatusConditionTrue(m.orig.Conditions, jkev1alpha1.NodeFailoverConditionDeleting) {
		m.c.recorder.Event(m.rec, corev1.EventTypeWarning, ReasonDeletionHeld, msg)
		if m.node != nil {
			m.c.recorder.Event(m.node, corev1.EventTypeWarning, ReasonDeletionHeld, msg)
		}
		m.logger.Info("NodeFailover deletion held until the migration completes", "movedRanges", len(m.st().MovedRanges))
	}
	m.setCondition(jkev1alpha1.NodeFailoverConditionDeleting, metav1.ConditionTrue, ReasonDeletionHeld, msg)
	return false, nil
}

// updateFinalizers writes the record's finalizers (optimistic lock on its resourceVersion).
func (m *migration) updateFinalizers(ctx context.Context, finalizers []string) error {
	rec := m.rec.DeepCopy()
	rec.Finalizers = finalizers
	updated, err := m.c.client.JkeV1alpha1().NodeFailovers().Update(ctx, rec, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	m.rec.Finalizers, m.rec.ResourceVersion = updated.Finalizers, updated.ResourceVersion
	return nil
}

func withoutFinalizer(fs []string) []string {
	return slices.DeleteFunc(slices.Clone(fs), func(f string) bool { return f == Finalizer })
}

// deleteRecord removes the record: its finalizer first, then the object (UID precondition).
func (m *migration) deleteRecord(ctx context.Context, why string) error {
	if slices.Contains(m.rec.Finalizers, Finalizer) {
		err := m.updateFinalizers(ctx, withoutFinalizer(m.rec.Finalizers))
		if apierrors.IsNotFound(err) {
			m.deleted = true
			return nil
		}
		if err != nil {
			return err
		}
	}
	m.deleted = true
	if m.rec.DeletionTimestamp != nil {
		// The deletion was requested: without the finalizer the API server completes it.
		m.c.recorder.Eventf(m.rec, corev1.EventTypeNormal, ReasonDeleted, "record deleted: %s", why)
		m.logger.Info("NodeFailover record deleted", "reason", why)
		return nil
	}
	uid := m.rec.UID
	err := m.c.client.JkeV1alpha1().NodeFailovers().Delete(ctx, m.rec.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// cancel undoes a migration that moved nothing because the node is no longer fenced (the taint
// was removed): the spare's claim is released and the record deleted.
func (m *migration) cancel(ctx context.Context, why string) error {
	if err := m.releaseClaim(ctx); err != nil {
		return err
	}
	if err := m.deleteRecord(ctx, "cancelled: "+why); err != nil {
		return err
	}
	msg := "failover cancelled before anything moved: " + why
	if m.node != nil {
		m.c.recorder.Event(m.node, corev1.EventTypeNormal, ReasonCancelled, msg)
	}
	metrics.NodeFailoverMigrations.WithLabelValues("cancelled").Inc()
	m.logger.Info("Node failover cancelled", "reason", why)
	return nil
}

// restartIfFailedAgain: a Completed record whose node fails again (it owns ranges or static IPs
// and is fenced once more) is deleted, so the next sync starts a new migration.
func (m *migration) restartIfFailedAgain(ctx context.Context) error {
	if m.node != nil && !OutOfService(m.node) {
		return nil
	}
	sips, err := m.c.staticIPsOf(m.failedName(), prefixesOf(m.owned))
	if err != nil {
		return err
	}
	if len(m.owned) == 0 && len(sips) == 0 {
		return nil
	}
	if m.node == nil {
		// The Node is gone and its labels were forgotten: the new record takes them from this one.
		m.c.gone.put(m.failedName(), map[string]string{LabelZone: m.st().Zone, LabelInstanceType: m.st().InstanceType})
	}
	if err := m.deleteRecord(ctx, "the node failed again; a new migration starts"); err != nil {
		return err
	}
	m.logger.Info("Node failed again after a completed failover; starting a new one")
	m.c.queue.Add(m.rec.Name)
	return nil
}

// claimed lists the nodes labelled as claimed for this failed node.
func (m *migration) claimed() ([]*corev1.Node, error) {
	sel := labels.SelectorFromSet(labels.Set{jkev1alpha1.LabelFailoverFor: m.failedName()})
	return m.c.nodes.List(sel)
}

func (m *migration) releaseClaim(ctx context.Context) error {
	nodes, err := m.claimed()
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := m.c.patchNode(ctx, n, map[string]any{"labels": map[string]any{jkev1alpha1.LabelFailoverFor: nil}}, nil); err != nil {
			return err
		}
	}
	return nil
}

// reserveTarget finds (spec.target, an earlier claim, or a new choice) and claims the target.
func (m *migration) reserveTarget(ctx context.Context, sips []*jkev1.StaticIP) (string, time.Duration, error) {
	st := m.st()
	failed := FailedNode{Name: m.failedName(), Zone: st.Zone, InstanceType: st.InstanceType}
	need := Needed(sips)
	target := m.rec.Spec.Target
	pinned := target != ""
	if target == "" {
		claims, err := m.claimed()
		if err != nil {
			return "", 0, err
		}
		if len(claims) > 0 {
			target = claims[0].Name // a claim of an earlier sync that did not reach spec.target
		}
	}
	nodes, err := m.c.nodes.List(labels.Everything())
	if err != nil {
		return "", 0, err
	}
	// Capacity is counted on the nodes that may become the target only.
	candidates := []string{target}
	for _, n := range nodes {
		if n.Labels[jkev1alpha1.LabelSpare] == "true" {
			candidates = append(candidates, n.Name)
		}
	}
	used, err := m.c.usage(candidates)
	if err != nil {
		return "", 0, err
	}
	if target == "" {
		choice := ChooseTarget(failed, nodes, used, need)
		if choice.Target == "" {
			msg := fmt.Sprintf("%s (need %s for %d static IPs); nothing moved", choice.Message(), resourceString(need), len(sips))
			if m.became(jkev1alpha1.NodeFailoverConditionTargetReserved, metav1.ConditionFalse, ReasonNoTarget) {
				m.c.recorder.Event(m.rec, corev1.EventTypeWarning, ReasonNoTarget, msg)
				if m.node != nil {
					m.c.recorder.Event(m.node, corev1.EventTypeWarning, ReasonNoTarget, msg)
				}
				metrics.NodeFailoverMigrations.WithLabelValues("no_target").Inc()
			}
			m.setCondition(jkev1alpha1.NodeFailoverConditionTargetReserved, metav1.ConditionFalse, ReasonNoTarget, msg)
			m.waiting(ReasonNoTarget, msg)
			return "", recheck, nil
		}
		target = choice.Target
	}
	tn, err := m.c.nodes.Get(target)
	if err != nil && !apierrors.IsNotFound(err) {
		return "", 0, err
	}
	var problem string
	if tn == nil {
		problem = "node not found"
	} else {
		// Capacity is counted before the claim only: once the spare is ours, its own
		// reservations for the moved StaticIPs are part of "used".
		need := need
		if tn.Labels[jkev1alpha1.LabelFailoverFor] == failed.Name {
			need = nil
		}
		problem = TargetProblem(failed, tn, used[target], need, !pinned)
	}
	if problem != "" {
		msg := fmt.Sprintf("target %s cannot take over %s: %s; nothing moved", target, failed.Name, problem)
		if m.became(jkev1alpha1.NodeFailoverConditionTargetReserved, metav1.ConditionFalse, ReasonTargetUnusable) {
			m.c.recorder.Event(m.rec, corev1.EventTypeWarning, ReasonTargetUnusable, msg)
		}
		m.setCondition(jkev1alpha1.NodeFailoverConditionTargetReserved, metav1.ConditionFalse, ReasonTargetUnusable, msg)
		m.waiting(ReasonTargetUnusable, msg)
		return "", recheck, nil
	}
	if tn.Labels[jkev1alpha1.LabelFailoverFor] != failed.Name {
		// Optimistic lock on the node: two migrations racing for one spare cannot both win.
		if err := m.c.patchNode(ctx, tn, map[string]any{"labels": map[string]any{jkev1alpha1.LabelFailoverFor: failed.Name}}, nil); err != nil {
			return "", 0, err
		}
		m.c.recorder.Eventf(tn, corev1.EventTypeNormal, ReasonClaimed, "claimed as the failover target of node %s", failed.Name)
	}
	if m.rec.Spec.Target == "" {
		rec := m.rec.DeepCopy()
		rec.Spec.Target = target
		updated, err := m.c.client.JkeV1alpha1().NodeFailovers().Update(ctx, rec, metav1.UpdateOptions{})
		if err != nil {
			return "", 0, err
		}
		// Keep m.rec (and pointers into its status) and take the new spec and version.
		m.rec.Spec, m.rec.ResourceVersion, m.rec.Generation = updated.Spec, updated.ResourceVersion, updated.Generation
	}
	st.Target = target
	if m.became(jkev1alpha1.NodeFailoverConditionTargetReserved, metav1.ConditionTrue, ReasonClaimed) && m.node != nil {
		m.c.recorder.Eventf(m.node, corev1.EventTypeNormal, ReasonClaimed, "failover target: %s", target)
	}
	m.setCondition(jkev1alpha1.NodeFailoverConditionTargetReserved, metav1.ConditionTrue, ReasonClaimed,
		fmt.Sprintf("%s is claimed (label %s=%s) for %d static IPs needing %s", target, jkev1alpha1.LabelFailoverFor, failed.Name, len(sips), resourceString(need)))
	return target, 0, nil
}

// usage is, for each of nodes, the requests of its pods that are not finished plus the
// reservations of static-IP pods that are absent (the scheduler's staticIPNode cache holds
// those for them). Pods come from the by-node index: no list of every pod.
func (c *Controller) usage(nodes []string) (map[string]corev1.ResourceList, error) {
	out := map[string]corev1.ResourceList{}
	wanted := map[string]bool{}
	var pods []*corev1.Pod
	for _, n := range nodes {
		if n == "" || wanted[n] {
			continue
		}
		wanted[n] = true
		on, err := c.podsOn(n)
		if err != nil {
			return nil, err
		}
		pods = append(pods, on...)
	}
	live := map[string]string{} // namespace/name -> node
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		req := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
		req[corev1.ResourcePods] = resource.MustParse("1")
		out[p.Spec.NodeName] = AddResources(out[p.Spec.NodeName], req)
		live[p.Namespace+"/"+p.Name] = p.Spec.NodeName
	}
	sips, err := c.staticIPs.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	for _, s := range sips {
		pod := s.Spec.Pod
		if pod == "" {
			pod = s.Name
		}
		if !wanted[s.Spec.Node] || live[s.Namespace+"/"+pod] == s.Spec.Node {
			continue
		}
		req := s.Spec.Resources.DeepCopy()
		if req == nil {
			req = corev1.ResourceList{}
		}
		req[corev1.ResourcePods] = resource.MustParse("1")
		out[s.Spec.Node] = AddResources(out[s.Spec.Node], req)
	}
	return out, nil
}

// afterCommit moves the ranges, waits for the target agent and the routes, re-points the
// StaticIPs, opens the spare and waits for the pods.
func (m *migration) afterCommit(ctx context.Context) (time.Duration, error) {
	st := m.st()
	target := st.Target
	if !Reached(st, jkev1alpha1.FailoverRangesMoved) {
		// A range that still names the failed node and has no recorded move (it appeared, or
		// a status write was lost): record its move first, then write it on the next pass.
		recorded := len(st.MovedRanges)
		for _, r := range m.owned {
			if !slices.ContainsFunc(st.MovedRanges, func(mv jkev1alpha1.MovedRange) bool { return mv.Name == r.Name }) {
				st.MovedRanges = append(st.MovedRanges, jkev1alpha1.MovedRange{Name: r.Name, CIDR: r.Spec.CIDR, FromNode: m.failedName(),
					ToNode: target, OwnerGeneration: r.Spec.OwnerGeneration + 1})
			}
		}
		if len(st.MovedRanges) != recorded {
			if err := m.writeStatus(ctx); err != nil {
				return 0, err
			}
		}
		var unsynced, changed []string
		current := make([]*jkev1.IPRange, len(st.MovedRanges))
		decisions := make([]RangeMove, len(st.MovedRanges))
		written, toWrite := false, false
		for i, mv := range st.MovedRanges {
			r, err := m.c.ranges.Get(mv.Name)
			if apierrors.IsNotFound(err) {
				r = nil
			} else if err != nil {
				return 0, err
			}
			current[i], decisions[i] = r, DecideRangeMove(mv, r)
			written = written || decisions[i] == RangeDone
			toWrite = toWrite || decisions[i] == RangeWrite
		}
		if toWrite {
			// The fence is the statement "this machine runs nothing": re-read it before the
			// writes that commit the move, however long ago the move was recorded.
			if ok, requeue, err := m.fenceStillHolds(ctx, written); !ok || err != nil {
				return requeue, err
			}
		}
		for i, mv := range st.MovedRanges {
			r := current[i]
			switch decisions[i] {
			case RangeWrite:
				moved := r.DeepCopy()
				moved.Spec.Node, moved.Spec.OwnerGeneration = mv.ToNode, mv.OwnerGeneration
				// The update carries the cached resourceVersion: a stale cache that still shows
				// the old owner makes it fail with a conflict instead of bumping twice.
				if _, err := m.c.client.JkeV1().IPRanges().Update(ctx, moved, metav1.UpdateOptions{}); err != nil {
					return 0, fmt.Errorf("move IPRange %s to %s: %w", mv.Name, mv.ToNode, err)
				}
				m.c.recorder.Eventf(m.rec, corev1.EventTypeNormal, "RangeMoved", "IPRange %s (%s) moved from %s to %s at owner generation %d", mv.Name, mv.CIDR, mv.FromNode, mv.ToNode, mv.OwnerGeneration)
				unsynced = append(unsynced, mv.Name)
			case RangeDone:
				if !RangeSynced(r) {
					unsynced = append(unsynced, mv.Name)
				}
			case RangeGone:
			case RangeChanged:
				changed = append(changed, fmt.Sprintf("%s (now node %q generation %d, recorded move %s->%s at %d)", mv.Name, r.Spec.Node, r.Spec.OwnerGeneration, mv.FromNode, mv.ToNode, mv.OwnerGeneration))
			}
		}
		if len(changed) > 0 {
			msg := "IPRanges changed by someone else during the migration; not overwritten: " + strings.Join(changed, ", ")
			if st.LastError != msg {
				m.c.recorder.Event(m.rec, corev1.EventTypeWarning, ReasonRangeChanged, msg)
			}
			st.LastError = msg
			m.waiting(ReasonRangeChanged, msg)
			return recheck, nil
		}
		if len(unsynced) > 0 {
			m.waiting(ReasonWaitingForAgent, fmt.Sprintf("waiting for the agent of %s to report Synced for the moved ranges (it reserves every static IP first): %s", target, shortList(unsynced)))
			return 0, nil
		}
		m.setPhase(jkev1alpha1.FailoverRangesMoved)
	}

	var moved []jkev1alpha1.MovedRange // the ranges that still exist
	for _, mv := range st.MovedRanges {
		if _, err := m.c.ranges.Get(mv.Name); err == nil {
			moved = append(moved, mv)
		}
	}
	if !Reached(st, jkev1alpha1.FailoverRoutesConverged) {
		nodes, err := m.c.nodes.List(labels.Everything())
		if err != nil {
			return 0, err
		}
		if lagging := RoutesLagging(nodes, m.failedName(), moved); len(lagging) > 0 {
			m.waiting(ReasonWaitingForRoutes, fmt.Sprintf("waiting for the agents of %d Ready nodes to route the moved ranges to %s (annotation %s): %s",
				len(lagging), target, jkev1alpha1.AnnotationIPRangesObserved, shortList(lagging)))
			return 0, nil
		}
		m.setPhase(jkev1alpha1.FailoverRoutesConverged)
	}

	if !Reached(st, jkev1alpha1.FailoverStaticIPsRebound) {
		if ok, requeue, err := m.fenceStillHolds(ctx, true); !ok || err != nil {
			return requeue, err
		}
		if err := m.rebindStaticIPs(ctx, moved); err != nil {
			return 0, err
		}
		if err := m.writeStatus(ctx); err != nil {
			return 0, err
		}
		m.setPhase(jkev1alpha1.FailoverStaticIPsRebound)
	}

	tn, err := m.c.nodes.Get(target)
	if err != nil {
		return 0, fmt.Errorf("target %s: %w", target, err)
	}
	if slices.ContainsFunc(tn.Spec.Taints, func(t corev1.Taint) bool { return t.Key == jkev1alpha1.TaintSpare }) {
		taints := slices.DeleteFunc(slices.Clone(tn.Spec.Taints), func(t corev1.Taint) bool { return t.Key == jkev1alpha1.TaintSpare })
		if err := m.c.patchNode(ctx, tn, nil, taints); err != nil {
			return 0, fmt.Errorf("remove the spare taint from %s: %w", target, err)
		}
		m.c.recorder.Eventf(tn, corev1.EventTypeNormal, ReasonSpareReleased, "ranges and routes of %s are in place: spare taint removed, its pods may start here", m.failedName())
	}

	if !Reached(st, jkev1alpha1.FailoverPodsRunning) {
		var missing []string
		var running []*corev1.Pod
		for _, ms := range st.MovedStaticIPs {
			s, err := m.c.staticIPs.StaticIPs(ms.Namespace).Get(ms.Name)
			if apierrors.IsNotFound(err) {
				continue // released meanwhile: nothing to wait for
			} else if err != nil {
				return 0, err
			}
			pod, err := m.c.pods.Pods(s.Namespace).Get(podName(s))
			if err != nil || pod.DeletionTimestamp != nil || pod.Spec.NodeName != target || pod.Status.Phase != corev1.PodRunning ||
				!slices.ContainsFunc(pod.Status.PodIPs, func(ip corev1.PodIP) bool { return s.Spec.IP == "" || ip.IP == s.Spec.IP }) {
				missing = append(missing, s.Namespace+"/"+podName(s))
				continue
			}
			running = append(running, pod)
		}
		if len(missing) > 0 {
			m.waiting(ReasonWaitingForPods, fmt.Sprintf("waiting for %d pods to run on %s with their IPs: %s", len(missing), target, shortList(missing)))
			return 0, nil
		}
		for _, p := range running {
			m.c.recorder.Eventf(p, corev1.EventTypeNormal, ReasonPodMoved, "moved from failed node %s to %s with its IP", m.failedName(), target)
		}
		m.setPhase(jkev1alpha1.FailoverPodsRunning)
	}

	// The spare is no longer one (its taint is gone); its claim label goes too, so an operator
	// who returns it to the pool only puts the taint back.
	if tn.Labels[jkev1alpha1.LabelFailoverFor] != "" {
		if err := m.c.patchNode(ctx, tn, map[string]any{"labels": map[string]any{jkev1alpha1.LabelFailoverFor: nil}}, nil); err != nil {
			return 0, err
		}
	}
	m.setPhase(jkev1alpha1.FailoverCompleted)
	now := metav1.NewTime(m.now)
	st.CompletionTime = &now
	m.setCondition(jkev1alpha1.NodeFailoverConditionProgressing, metav1.ConditionFalse, ReasonCompleted,
		fmt.Sprintf("%d ranges and %d static IPs moved from %s to %s", len(st.MovedRanges), len(st.MovedStaticIPs), m.failedName(), target))
	metrics.NodeFailoverMigrations.WithLabelValues("completed").Inc()
	if st.StartTime != nil {
		metrics.NodeFailoverStepDuration.WithLabelValues("Total").Observe(m.now.Sub(st.StartTime.Time).Seconds())
	}
	if m.node != nil {
		m.c.recorder.Eventf(m.node, corev1.EventTypeNormal, ReasonCompleted, "failover to %s completed", target)
	}
	return 0, nil
}

// fenceStillHolds re-checks the fence on the Node as the API server has it now (not the cache),
// right before writes that commit a move. written: a range move was written already. A node
// that is back and un-fenced before any range was written cancels the migration (nothing
// moved); otherwise nothing is written until the node is fenced again (condition Stopped,
// reason FenceWithdrawn, and a Warning Event).
func (m *migration) fenceStillHolds(ctx context.Context, written bool) (bool, time.Duration, error) {
	st := m.st()
	node, err := m.c.kube.CoreV1().Nodes().Get(ctx, m.failedName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node = nil
	} else if err != nil {
		return false, 0, fmt.Errorf("re-read node %s before committing the move: %w", m.failedName(), err)
	}
	var since time.Time
	if st.StartTime != nil {
		since = st.StartTime.Time
	}
	fence := Fencing(node, since, m.now, m.fenceRules())
	switch CheckCommit(fence, written) {
	case CommitProceed:
		if c := meta.FindStatusCondition(st.Conditions, jkev1alpha1.NodeFailoverConditionStopped); c != nil && c.Reason == ReasonFenceWithdrawn {
			m.setCondition(jkev1alpha1.NodeFailoverConditionStopped, metav1.ConditionFalse, ReasonFenced, fence.Message)
			m.setCondition(jkev1alpha1.NodeFailoverConditionFenced, metav1.ConditionTrue, ReasonFenced, fence.Message)
		}
		return true, 0, nil
	case CommitCancel:
		m.node = node
		m.c.recorder.Eventf(m.rec, corev1.EventTypeNormal, ReasonCancelled, "failover cancelled before any range was written: %s", fence.Message)
		return false, 0, m.cancel(ctx, fence.Message+" (re-checked before writing the recorded range moves; none had been written)")
	}
	what := "no recorded range move was written yet"
	if written {
		what = "some ranges were moved already"
	}
	msg := fmt.Sprintf("node %s is no longer fenced (%s) and %s: nothing more is written until it is fenced again. "+
		"Fence it again (out-of-service taint, machine off) to finish, or abandon the migration by hand (controllers/README.md, \"Recovering\")",
		m.failedName(), fence.Message, what)
	if m.became(jkev1alpha1.NodeFailoverConditionStopped, metav1.ConditionTrue, ReasonFenceWithdrawn) {
		m.c.recorder.Event(m.rec, corev1.EventTypeWarning, ReasonFenceWithdrawn, msg)
		if node != nil {
			m.c.recorder.Event(node, corev1.EventTypeWarning, ReasonFenceWithdrawn, msg)
		}
		m.logger.Info("Fence withdrawn mid-migration: holding", "written", written)
	}
	m.setCondition(jkev1alpha1.NodeFailoverConditionStopped, metav1.ConditionTrue, ReasonFenceWithdrawn, msg)
	m.setCondition(jkev1alpha1.NodeFailoverConditionFenced, metav1.ConditionFalse, fence.Reason, fence.Message)
	m.waiting(ReasonFenceWithdrawn, msg)
	requeue := fence.RecheckAfter
	if requeue <= 0 {
		requeue = recheck
	}
	return false, requeue, nil
}

// rebindStaticIPs points every moving StaticIP at the target, and deletes pods that the
// workload controllers created meanwhile pinned (node affinity, immutable) to the failed node:
// they are recreated pinned to the target.
func (m *migration) rebindStaticIPs(ctx context.Context, moved []jkev1alpha1.MovedRange) error {
	st := m.st()
	cidrs := make([]string, 0, len(moved))
	for _, mv := range moved {
		cidrs = append(cidrs, mv.CIDR)
	}
	current, err := m.c.staticIPsOf(m.failedName(), ParsePrefixes(cidrs))
	if err != nil {
		return err
	}
	for _, s := range current { // records that appeared after the target was reserved
		if !slices.ContainsFunc(st.MovedStaticIPs, func(ms jkev1alpha1.MovedStaticIP) bool { return ms.Namespace == s.Namespace && ms.Name == s.Name }) {
			st.MovedStaticIPs = append(st.MovedStaticIPs, jkev1alpha1.MovedStaticIP{Namespace: s.Namespace, Name: s.Name, IP: s.Spec.IP, FromNode: s.Spec.Node})
		}
	}
	for i := range st.MovedStaticIPs {
		ms := &st.MovedStaticIPs[i]
		s, err := m.c.staticIPs.StaticIPs(ms.Namespace).Get(ms.Name)
		if apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return err
		}
		if s.Spec.Node != st.Target {
			cp := s.DeepCopy()
			cp.Spec.Node = st.Target
			if _, err := m.c.client.JkeV1().StaticIPs(cp.Namespace).Update(ctx, cp, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("re-point StaticIP %s/%s to %s: %w", cp.Namespace, cp.Name, st.Target, err)
			}
		}
		ms.Rebound = true
		pod, err := m.c.pods.Pods(s.Namespace).Get(podName(s))
		if err == nil && pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil && staticip.NodeAffinityRequired(pod, m.failedName()) {
			uid := pod.UID
			err := m.c.kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return fmt.Errorf("delete pending pod %s/%s pinned to %s: %w", pod.Namespace, pod.Name, m.failedName(), err)
			}
			m.c.recorder.Eventf(pod, corev1.EventTypeNormal, ReasonPodRecreate, "pending pod pinned to failed node %s deleted: its workload recreates it on %s", m.failedName(), st.Target)
		}
	}
	return nil
}

func podName(s *jkev1.StaticIP) string {
	if s.Spec.Pod != "" {
		return s.Spec.Pod
	}
	return s.Name
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
