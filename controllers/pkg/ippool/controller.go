package ippool

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
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

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1informers "github.com/staticip/staticip/apis/generated/informers/externalversions/jke/v1"
	jkev1alpha1informers "github.com/staticip/staticip/apis/generated/informers/externalversions/jke/v1alpha1"
	jkev1listers "github.com/staticip/staticip/apis/generated/listers/jke/v1"
	jkev1alpha1listers "github.com/staticip/staticip/apis/generated/listers/jke/v1alpha1"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
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
)

// key is the one work-queue key: every pass plans all pools at once (the plan is cheap:
// see BenchmarkCompute), so assignments are serialized inside the process.
const key = "ippools"

// assumeFor is how long a range this process created or deleted is laid over the informer's
// view while the watch has not shown it yet.
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

	synced []cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]

	// Now is the clock (tests).
	Now func() time.Time

	mu sync.Mutex
	// created and deleted are this process's own writes the informer may not show yet.
	created map[string]createdRange
	deleted map[string]time.Time
	// told remembers the last warning given to a node, so an unchanged one is not repeated.
	told map[string]string
	// releasePending > 0 while some pool block waits for its node's pods or StaticIPs: only
	// then do pod and StaticIP events matter.
	releasePending atomic.Int32
}

type createdRange struct {
	r  Range
	at time.Time
}

// NewController wires the allocator to its informers.
func NewController(kube kubernetes.Interface, client versioned.Interface, poolInformer jkev1informers.IPPoolInformer,
	rangeInformer jkev1informers.IPRangeInformer, nodeInformer coreinformers.NodeInformer, podInformer coreinformers.PodInformer,
	sipInformer jkev1informers.StaticIPInformer, failoverInformer jkev1alpha1informers.NodeFailoverInformer,
	recorder record.EventRecorder) (*Controller, error) {
	pods, err := podindex.New(podInformer.Informer(), podInformer.Lister())
	if err != nil {
		return nil, err
	}
	c := &Controller{
		kube: kube, client: client, recorder: recorder,
		pools: poolInformer.Lister(), ranges: rangeInformer.Lister(), nodes: nodeInformer.Lister(),
		staticIPs: sipInformer.Lister(), failovers: failoverInformer.Lister(), pods: pods,
		synced: []cache.InformerSynced{poolInformer.Informer().HasSynced, rangeInformer.Informer().HasSynced,
			nodeInformer.Informer().HasSynced, podInformer.Informer().HasSynced, sipInformer.Informer().HasSynced,
			failoverInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name}),
		Now:     time.Now,
		created: map[string]createdRange{}, deleted: map[string]time.Time{}, told: map[string]string{},
	}
	all := func(any) { c.queue.Add(key) }
	always := cache.ResourceEventHandlerFuncs{AddFunc: all, UpdateFunc: func(_, _ any) { c.queue.Add(key) }, DeleteFunc: all}
	for _, inf := range []cache.SharedIndexInformer{poolInformer.Informer(), rangeInformer.Informer(), failoverInformer.Informer()} {
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
	// Pods and StaticIPs only matter while a block waits to be released.
	pending := func(any) {
		if c.releasePending.Load() > 0 {
			c.queue.Add(key)
		}
	}
	for _, inf := range []cache.SharedIndexInformer{podInformer.Informer(), sipInformer.Informer()} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: pending, DeleteFunc: pending,
			UpdateFunc: func(_, cur any) { pending(cur) }}); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Run runs the allocator until ctx is done. One worker: there is one key.
func (c *Controller) Run(ctx context.Context) {
	worker.Run(ctx, Name, "ippools", c.queue, c.synced, 1, c.sync)
}

// poolOf converts an IPPool for the planner.
func poolOf(p *jkev1.IPPool) Pool {
	out := Pool{Name: p.Name, Created: p.CreationTimestamp.Time, Mode: p.Spec.Mode,
		FirstHostGateway: p.Spec.GatewayPolicy == jkev1.GatewayFirstHost, ReleaseAfter: 5 * time.Minute,
		Deleting: p.DeletionTimestamp != nil}
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
		OwnerGeneration: r.Spec.OwnerGeneration, Deleting: r.DeletionTimestamp != nil}
	if s := r.Annotations[jkev1.AnnotationNodeGoneSince]; s != "" {
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			out.GoneSince = t
		}
	}
	return out, true
}

func (c *Controller) input(now time.Time) (Input, error) {
	in := Input{Now: now}
	pools, err := c.pools.List(labels.Everything())
	if err != nil {
		return in, err
	}
	for _, p := range pools {
		in.Pools = append(in.Pools, poolOf(p))
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
	seen := map[string]bool{}
	for _, r := range ranges {
		seen[r.Name] = true
		if rr, ok := rangeOf(r); ok {
			in.Ranges = append(in.Ranges, rr)
		}
	}
	// Lay this process's own writes over the cache.
	c.mu.Lock()
	for name, cr := range c.created {
		if seen[name] || now.Sub(cr.at) > assumeFor {
			delete(c.created, name)
			continue
		}
		in.Ranges = append(in.Ranges, cr.r)
	}
	for name, at := range c.deleted {
		if !seen[name] || now.Sub(at) > assumeFor {
			delete(c.deleted, name)
			continue
		}
		for i := range in.Ranges {
			if in.Ranges[i].Name == name {
				in.Ranges[i].Deleting = true
			}
		}
	}
	c.mu.Unlock()
	in.Held = c.heldFunc()
	return in, nil
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
			if a, err := netip.ParseAddr(s.Spec.IP); err == nil && s.DeletionTimestamp == nil && r.CIDR.Contains(a.Unmap()) {
				return fmt.Sprintf("StaticIP %s/%s has spec.ip %s", s.Namespace, s.Name, s.Spec.IP)
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
	in, err := c.input(now)
	if err != nil {
		return 0, err
	}
	plan := Compute(in)
	var errs []error
	assignedNow := map[string]bool{}
	for _, a := range plan.Assign {
		if err := c.create(ctx, a); err != nil {
			if apierrors.IsAlreadyExists(err) {
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
	for _, r := range plan.Release {
		if err := c.release(ctx, r); err != nil {
			errs = append(errs, err)
			continue
		}
		logger.Info("Block released", "pool", r.Pool, "range", r.Range, "why", r.Why)
		if p, err := c.pools.Get(r.Pool); err == nil {
			c.recorder.Eventf(p, corev1.EventTypeNormal, ReasonBlockReleased, "IPRange %s returned to the pool: %s", r.Range, r.Why)
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
	pending := int32(0)
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

func (c *Controller) create(ctx context.Context, a Assign) error {
	r := &jkev1.IPRange{
		ObjectMeta: metav1.ObjectMeta{Name: a.Name, Labels: map[string]string{jkev1.LabelIPPool: a.Pool}},
		Spec:       jkev1.IPRangeSpec{CIDR: a.CIDR.String(), Node: a.Node, Gateway: a.Gateway, ExcludeIPs: a.Excludes},
	}
	if _, err := c.client.JkeV1().IPRanges().Create(ctx, r, metav1.CreateOptions{}); err != nil {
		return err
	}
	c.mu.Lock()
	c.created[a.Name] = createdRange{r: Range{Name: a.Name, CIDR: a.CIDR, Node: a.Node, Pool: a.Pool}, at: c.Now()}
	c.mu.Unlock()
	c.forget(a.Node)
	return nil
}

// release deletes a pool range with the cached object's UID and resourceVersion as
// preconditions: a range changed meanwhile (moved by failover, re-marked) is not deleted.
func (c *Controller) release(ctx context.Context, rel Release) error {
	cur, err := c.ranges.Get(rel.Range)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if cur.Labels[jkev1.LabelIPPool] != rel.Pool {
		return nil
	}
	uid, rv := cur.UID, cur.ResourceVersion
	err = c.client.JkeV1().IPRanges().Delete(ctx, rel.Range, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		c.queue.AddAfter(key, time.Second)
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete IPRange %s: %w", rel.Range, err)
	}
	c.mu.Lock()
	c.deleted[rel.Range] = c.Now()
	c.mu.Unlock()
	return nil
}

func (c *Controller) mark(ctx context.Context, m Mark) error {
	var val any // nil removes the annotation in a merge patch
	if !m.Since.IsZero() {
		val = m.Since.UTC().Format(time.RFC3339)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{jkev1.AnnotationNodeGoneSince: val}}})
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
	if len(st.Waiting) > 0 {
		ex.Status, ex.Reason = metav1.ConditionTrue, ReasonPoolExhausted
		ex.Message = fmt.Sprintf("no free block for %d node(s): %s", len(st.Waiting), shortList(st.Waiting))
	}
	meta.SetStatusCondition(&p.Status.Conditions, ex)
	if apiequality.Semantic.DeepEqual(p.Status, cur.Status) {
		return nil
	}
	if len(st.Waiting) > 0 && !meta.IsStatusConditionTrue(cur.Status.Conditions, jkev1.IPPoolExhausted) {
		c.recorder.Eventf(p, corev1.EventTypeWarning, ReasonPoolExhausted, "%s", ex.Message)
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
	if typ == corev1.EventTypeWarning {
		c.mu.Lock()
		same := c.told[node] == reason+msg
		c.told[node] = reason + msg
		c.mu.Unlock()
		if same {
			return
		}
	}
	ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node, UID: types.UID(node)}
	if n, err := c.nodes.Get(node); err == nil {
		ref.UID = n.UID
	}
	c.recorder.Event(ref, typ, reason, msg)
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
