package grid

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller"

	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
	"github.com/staticip/staticip/controllers/pkg/metrics"
	"github.com/staticip/staticip/controllers/pkg/worker"
)

// gridUniqKeyIndex indexes grids by spec.gridUniqKey, so that a node label change queues
// only the grids that use that key.
const gridUniqKeyIndex = "superedge.io/grid-uniq-key"

// gridView is what the shared loop needs of a grid (the cached object, never modified).
type gridView struct {
	obj        metav1.Object
	robj       runtime.Object
	key        string
	selector   *metav1.LabelSelector
	podLabels  map[string]string
	status     *superedgev1.WorkloadGridStatus
	generation int64
}

// workloadOps adapts one grid kind and its workload kind to the shared loop.
type workloadOps struct {
	name     string // controller name
	gridKind schema.GroupVersionKind
	kind     string // workload kind
	maxLen   int

	getGrid     func(ns, name string) (*gridView, error)
	getGridLive func(ctx context.Context, ns, name string) (metav1.Object, error)
	gridsInNS   func(ns string) ([]metav1.Object, error)
	list        func(ns string) ([]metav1.Object, error)
	funcs       func(g *gridView) workloadFuncs
	create      func(ctx context.Context, w metav1.Object) error
	put         func(ctx context.Context, w metav1.Object) error
	remove      func(ctx context.Context, ns, name string, uid types.UID) error
	patch       func(ctx context.Context, ns, name string, data []byte) error
	writeStatus func(ctx context.Context, g *gridView, st superedgev1.WorkloadGridStatus) error
}

// workloadController runs DeploymentGrids or StatefulSetGrids.
type workloadController struct {
	ops        workloadOps
	recorder   record.EventRecorder
	nodeLister corelisters.NodeLister
	gridIndex  cache.Indexer
	synced     []cache.InformerSynced
	queue      workqueue.TypedRateLimitingInterface[string]
}

func newWorkloadController(ops workloadOps, gridInformer, workloadInformer cache.SharedIndexInformer,
	nodeInformer coreinformers.NodeInformer, recorder record.EventRecorder, keyOf func(obj any) (string, bool)) (*workloadController, error) {
	c := &workloadController{
		ops: ops, recorder: recorder, nodeLister: nodeInformer.Lister(), gridIndex: gridInformer.GetIndexer(),
		synced: []cache.InformerSynced{gridInformer.HasSynced, workloadInformer.HasSynced, nodeInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: ops.name}),
	}
	if err := addGridHandlers(gridInformer, nodeInformer, c.queue, keyOf); err != nil {
		return nil, err
	}
	if _, err := workloadInformer.AddEventHandler(ownedObjectHandler(c.queue, ops.gridKind, ops.gridsInNS)); err != nil {
		return nil, err
	}
	return c, nil
}

// addGridHandlers queues a grid when it changes and when a node label its key names changes.
func addGridHandlers(gridInformer cache.SharedIndexInformer, nodeInformer coreinformers.NodeInformer,
	queue workqueue.TypedRateLimitingInterface[string], keyOf func(obj any) (string, bool)) error {
	if err := gridInformer.AddIndexers(cache.Indexers{gridUniqKeyIndex: func(obj any) ([]string, error) {
		if k, ok := keyOf(obj); ok {
			return []string{k}, nil
		}
		return nil, nil
	}}); err != nil {
		return err
	}
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			queue.Add(key)
		}
	}
	if _, err := gridInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, cur any) { enqueue(cur) },
	}); err != nil {
		return err
	}
	index := gridInformer.GetIndexer()
	byKeys := func(keys []string) {
		for _, k := range keys {
			objs, _ := index.ByIndex(gridUniqKeyIndex, k)
			for _, o := range objs {
				enqueue(o)
			}
		}
	}
	nodeLabels := func(obj any) map[string]string {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if n, ok := obj.(*corev1.Node); ok {
			return n.Labels
		}
		return nil
	}
	_, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { byKeys(mapKeys(nodeLabels(obj))) },
		UpdateFunc: func(old, cur any) { byKeys(changedKeys(nodeLabels(old), nodeLabels(cur))) },
		DeleteFunc: func(obj any) { byKeys(mapKeys(nodeLabels(obj))) },
	})
	return err
}

func mapKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// changedKeys are the label keys added, removed or changed between old and cur: a node's
// status heartbeats change none, so they queue nothing.
func changedKeys(old, cur map[string]string) []string {
	var out []string
	for k, v := range cur {
		if ov, ok := old[k]; !ok || ov != v {
			out = append(out, k)
		}
	}
	for k := range old {
		if _, ok := cur[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}

// ownedObjectHandler queues the grid that controls a generated object, or, for an orphan
// carrying the grid-selector label, the grids of its namespace that label may name (to adopt it).
func ownedObjectHandler(queue workqueue.TypedRateLimitingInterface[string], gridKind schema.GroupVersionKind,
	gridsInNS func(ns string) ([]metav1.Object, error)) cache.ResourceEventHandler {
	handle := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		o, ok := obj.(metav1.Object)
		if !ok {
			return
		}
		if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
			if ref.Kind == gridKind.Kind && ref.APIVersion == gridKind.GroupVersion().String() {
				queue.Add(o.GetNamespace() + "/" + ref.Name)
			}
			return
		}
		sel, ok := o.GetLabels()[superedgev1.LabelGridSelector]
		if !ok {
			return
		}
		grids, _ := gridsInNS(o.GetNamespace())
		for _, g := range grids {
			if LabelValue(g.GetName()) == sel {
				queue.Add(g.GetNamespace() + "/" + g.GetName())
			}
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: handle,
		UpdateFunc: func(old, cur any) {
			handle(cur)
			// A workload whose labels or owner changed may have left its grid.
			if o, ok := old.(metav1.Object); ok {
				if c, ok := cur.(metav1.Object); ok && (!apiequality.Semantic.DeepEqual(o.GetLabels(), c.GetLabels()) ||
					!apiequality.Semantic.DeepEqual(o.GetOwnerReferences(), c.GetOwnerReferences())) {
					handle(old)
				}
			}
		},
		DeleteFunc: handle,
	}
}

// Run runs the controller until ctx is done.
func (c *workloadController) Run(ctx context.Context, workers int) {
	worker.Run(ctx, c.ops.name, c.ops.gridKind.Kind, c.queue, c.synced, workers, func(ctx context.Context, key string) (time.Duration, error) {
		return 0, c.sync(ctx, key)
	})
}

func (c *workloadController) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	g, err := c.ops.getGrid(ns, name)
	if apierrors.IsNotFound(err) {
		return nil // its workloads go with it (owner references, garbage collector)
	}
	if err != nil {
		return err
	}
	if g.obj.GetDeletionTimestamp() != nil {
		return nil
	}
	logger := klog.FromContext(ctx).WithValues(c.ops.gridKind.Kind, klog.KObj(g.obj))
	old := g.status
	if invalid := ValidateWorkloadTemplate(g.key, g.selector, g.podLabels); invalid != nil {
		st := workloadGridStatus(old, g.generation, g.key, nil, nil, invalid, nil)
		if !readyUnchanged(old.Conditions, st.Conditions) {
			c.recorder.Eventf(g.robj, corev1.EventTypeWarning, ReasonInvalidSpec, "%v; nothing was created or changed", invalid)
		}
		return c.writeStatus(ctx, g, st)
	}

	nodes, err := c.nodeLister.List(labels.Everything())
	if err != nil {
		return err
	}
	values := NodeUnits(nodes, g.key)
	all, err := c.ops.list(ns)
	if err != nil {
		return err
	}
	owned, adopted, err := claimObjects(ctx, g.obj, c.ops.gridKind, all, c.ops.getGridLive, c.ops.patch)
	if err != nil {
		return err
	}
	if adopted > 0 {
		// The cache still has the adopted objects without our reference (and an older
		// resourceVersion); the watch events of the adoption queue this grid again.
		logger.Info("Adopted orphans", "kind", c.ops.kind, "count", adopted)
		c.recorder.Eventf(g.robj, corev1.EventTypeNormal, "Adopted", "adopted %d orphaned %s(s) labelled %s=%s",
			adopted, c.ops.kind, superedgev1.LabelGridSelector, LabelValue(g.obj.GetName()))
		return nil
	}
	holders := map[string]Holder{}
	for _, w := range all {
		h := Holder{}
		if ref := metav1.GetControllerOfNoCopy(w); ref != nil {
			h.Controller = ref.Kind + "/" + ref.Name
			h.Owned = ref.UID == g.obj.GetUID()
		}
		holders[w.GetName()] = h
	}
	for _, w := range owned { // claimed just now: ours, whatever the cache says
		holders[w.GetName()] = Holder{Owned: true, Unit: w.GetLabels()[superedgev1.LabelGridUnit]}
	}
	plan := planWorkloads(c.ops.funcs(g), g.obj.GetName(), values, owned, holders)

	var errs []error
	for _, w := range plan.create {
		unit := w.GetLabels()[superedgev1.LabelGridUnit]
		if err := c.ops.create(ctx, w); err != nil {
			errs = append(errs, fmt.Errorf("create %s %s: %w", c.ops.kind, w.GetName(), err))
			c.recorder.Eventf(g.robj, corev1.EventTypeWarning, "FailedCreate", "%s %s for unit %s=%s: %v", c.ops.kind, w.GetName(), g.key, unit, err)
			continue
		}
		logger.Info("Created unit workload", "kind", c.ops.kind, "name", w.GetName(), "unit", unit)
		c.recorder.Eventf(g.robj, corev1.EventTypeNormal, "Created", "created %s %s for unit %s=%s", c.ops.kind, w.GetName(), g.key, unit)
	}
	for _, w := range plan.update {
		unit := w.GetLabels()[superedgev1.LabelGridUnit]
		if err := c.ops.put(ctx, w); err != nil {
			errs = append(errs, fmt.Errorf("update %s %s: %w", c.ops.kind, w.GetName(), err))
			c.recorder.Eventf(g.robj, corev1.EventTypeWarning, "FailedUpdate", "%s %s of unit %s=%s: %v", c.ops.kind, w.GetName(), g.key, unit, err)
			continue
		}
		logger.Info("Updated unit workload", "kind", c.ops.kind, "name", w.GetName(), "unit", unit)
		c.recorder.Eventf(g.robj, corev1.EventTypeNormal, "Updated", "updated %s %s of unit %s=%s to the grid's template", c.ops.kind, w.GetName(), g.key, unit)
	}
	for _, w := range plan.delete {
		unit := w.GetLabels()[superedgev1.LabelGridUnit]
		if err := c.ops.remove(ctx, ns, w.GetName(), w.GetUID()); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s %s: %w", c.ops.kind, w.GetName(), err))
			c.recorder.Eventf(g.robj, corev1.EventTypeWarning, "FailedDelete", "%s %s: %v", c.ops.kind, w.GetName(), err)
			continue
		}
		logger.Info("Deleted unit workload", "kind", c.ops.kind, "name", w.GetName(), "unit", unit)
		c.recorder.Eventf(g.robj, corev1.EventTypeNormal, "Deleted", "deleted %s %s: no node carries %s=%s any more", c.ops.kind, w.GetName(), g.key, unit)
	}
	syncErr := errors.Join(errs...)
	st := workloadGridStatus(old, g.generation, g.key, plan.units, plan.conflicts, nil, syncErr)
	if conflictChanged(old.Conditions, st.Conditions) {
		for _, x := range plan.conflicts {
			c.recorder.Eventf(g.robj, corev1.EventTypeWarning, "Conflict", "unit %s=%s: %s", g.key, x.Value, x.Message)
		}
	}
	if err := c.writeStatus(ctx, g, st); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// readyUnchanged: the Ready condition's status, reason and message are the same (Events are
// posted on changes only: a steady grid writes nothing, not even Events).
func readyUnchanged(old, cur []metav1.Condition) bool {
	return sameCondition(old, cur, superedgev1.ConditionReady)
}

func conflictChanged(old, cur []metav1.Condition) bool {
	return !sameCondition(old, cur, superedgev1.ConditionConflict)
}

func sameCondition(old, cur []metav1.Condition, t string) bool {
	var o, c *metav1.Condition
	for i := range old {
		if old[i].Type == t {
			o = &old[i]
		}
	}
	for i := range cur {
		if cur[i].Type == t {
			c = &cur[i]
		}
	}
	if o == nil || c == nil {
		return o == c
	}
	return o.Status == c.Status && o.Reason == c.Reason && o.Message == c.Message
}

func (c *workloadController) writeStatus(ctx context.Context, g *gridView, st superedgev1.WorkloadGridStatus) error {
	if apiequality.Semantic.DeepEqual(*g.status, st) {
		return nil
	}
	err := c.ops.writeStatus(ctx, g, st)
	metrics.ObserveStatusWrite(c.ops.name, err)
	if apierrors.IsConflict(err) {
		// Written from a cached grid older than the API server's (our own previous status
		// write, or a spec change): its watch event is on the way; look again then.
		c.queue.Add(g.obj.GetNamespace() + "/" + g.obj.GetName())
		return nil
	}
	return err
}

// claimObjects adopts matching orphans and releases owned objects that lost the grid-selector
// label (ControllerRefManager), returning the objects the grid owns and how many it adopted.
func claimObjects(ctx context.Context, grid metav1.Object, gridKind schema.GroupVersionKind, all []metav1.Object,
	getLive func(ctx context.Context, ns, name string) (metav1.Object, error),
	patch func(ctx context.Context, ns, name string, data []byte) error) ([]metav1.Object, int, error) {
	m := controller.BaseControllerRefManager{
		Controller: grid,
		Selector:   labels.SelectorFromSet(labels.Set{superedgev1.LabelGridSelector: LabelValue(grid.GetName())}),
		CanAdoptFunc: controller.RecheckDeletionTimestamp(func(ctx context.Context) (metav1.Object, error) {
			fresh, err := getLive(ctx, grid.GetNamespace(), grid.GetName())
			if err != nil {
				return nil, err
			}
			if fresh.GetUID() != grid.GetUID() {
				return nil, fmt.Errorf("%s %s/%s is gone: found uid %v, wanted %v", gridKind.Kind, grid.GetNamespace(), grid.GetName(), fresh.GetUID(), grid.GetUID())
			}
			return fresh, nil
		}),
	}
	match := func(o metav1.Object) bool { return m.Selector.Matches(labels.Set(o.GetLabels())) }
	adopt := func(ctx context.Context, o metav1.Object) error {
		if err := m.CanAdopt(ctx); err != nil {
			return fmt.Errorf("can't adopt %s: %w", o.GetName(), err)
		}
		data, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"ownerReferences": []metav1.OwnerReference{*metav1.NewControllerRef(grid, gridKind)},
			"uid":             o.GetUID(),
		}})
		if err != nil {
			return err
		}
		return patch(ctx, o.GetNamespace(), o.GetName(), data)
	}
	release := func(ctx context.Context, o metav1.Object) error {
		data, err := controller.GenerateDeleteOwnerRefStrategicMergeBytes(o.GetUID(), []types.UID{grid.GetUID()})
		if err != nil {
			return err
		}
		err = patch(ctx, o.GetNamespace(), o.GetName(), data)
		if apierrors.IsNotFound(err) || apierrors.IsInvalid(err) {
			return nil // gone, or the uid precondition says it was replaced: nothing to release
		}
		return err
	}
	var owned []metav1.Object
	var errs []error
	adopted := 0
	for _, o := range all {
		wasOrphan := metav1.GetControllerOfNoCopy(o) == nil
		ok, err := m.ClaimObject(ctx, o, match, adopt, release)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			owned = append(owned, o)
			if wasOrphan {
				adopted++
			}
		}
	}
	return owned, adopted, errors.Join(errs...)
}
