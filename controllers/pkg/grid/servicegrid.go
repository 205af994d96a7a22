package grid

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	superedgeinformers "github.com/staticip/staticip/apis/generated/informers/externalversions/superedge/v1"
	superedgelisters "github.com/staticip/staticip/apis/generated/listers/superedge/v1"
	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
	"github.com/staticip/staticip/controllers/pkg/metrics"
	"github.com/staticip/staticip/controllers/pkg/worker"
)

// ServiceGridController keeps one Service per ServiceGrid.
type ServiceGridController struct {
	kube       kubernetes.Interface
	client     versioned.Interface
	recorder   record.EventRecorder
	gridLister superedgelisters.ServiceGridLister
	svcLister  corelisters.ServiceLister
	synced     []cache.InformerSynced
	queue      workqueue.TypedRateLimitingInterface[string]
}

// NewServiceGridController wires the ServiceGrid controller to its informers.
func NewServiceGridController(kube kubernetes.Interface, client versioned.Interface,
	gridInformer superedgeinformers.ServiceGridInformer, svcInformer coreinformers.ServiceInformer,
	recorder record.EventRecorder) (*ServiceGridController, error) {
	c := &ServiceGridController{
		kube: kube, client: client, recorder: recorder,
		gridLister: gridInformer.Lister(), svcLister: svcInformer.Lister(),
		synced: []cache.InformerSynced{gridInformer.Informer().HasSynced, svcInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: ServiceGridName}),
	}
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	if _, err := gridInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, cur any) { enqueue(cur) },
	}); err != nil {
		return nil, err
	}
	gridsInNS := func(ns string) ([]metav1.Object, error) {
		gs, err := c.gridLister.ServiceGrids(ns).List(labels.Everything())
		out := make([]metav1.Object, len(gs))
		for i := range gs {
			out[i] = gs[i]
		}
		return out, err
	}
	if _, err := svcInformer.Informer().AddEventHandler(ownedObjectHandler(c.queue, ServiceGridKind, gridsInNS)); err != nil {
		return nil, err
	}
	return c, nil
}

// Run runs the controller until ctx is done.
func (c *ServiceGridController) Run(ctx context.Context, workers int) {
	worker.Run(ctx, ServiceGridName, ServiceGridKind.Kind, c.queue, c.synced, workers, func(ctx context.Context, key string) (time.Duration, error) {
		return 0, c.sync(ctx, key)
	})
}

// servicePlan is what one sync of a ServiceGrid does.
type servicePlan struct {
	create   *corev1.Service
	update   *corev1.Service
	delete   []*corev1.Service
	conflict *UnitConflict
}

// planService compares the grid's desired Service with the Services it owns; holder is the
// object that has the Service's name, if any.
func planService(desired *corev1.Service, owned []*corev1.Service, holder *corev1.Service, holderOwned bool) servicePlan {
	var p servicePlan
	for _, s := range owned {
		if s.Name != desired.Name && s.DeletionTimestamp == nil {
			p.delete = append(p.delete, s)
		}
	}
	switch {
	case holder == nil:
		p.create = desired
	case !holderOwned:
		by := "no controller"
		if ref := metav1.GetControllerOfNoCopy(holder); ref != nil {
			by = "controller " + ref.Kind + "/" + ref.Name
		}
		p.conflict = &UnitConflict{Name: desired.Name, Reason: ReasonNameTaken,
			Message: fmt.Sprintf("Service %s exists and is not owned by this grid (%s); it is left alone", desired.Name, by)}
	case holder.DeletionTimestamp != nil:
	default:
		p.update = ServiceUpdate(holder, desired)
	}
	return p
}

func (c *ServiceGridController) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	g, err := c.gridLister.ServiceGrids(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil || g.DeletionTimestamp != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("ServiceGrid", klog.KObj(g))
	svcName := ServiceName(g.Name)
	topologyKeys, invalid := ServiceTopologyKeys(g)
	if errs := validation.IsQualifiedName(g.Spec.GridUniqKey); len(errs) > 0 && invalid == nil {
		invalid = fmt.Errorf("gridUniqKey %q is not a valid label key: %v", g.Spec.GridUniqKey, errs)
	}
	if invalid != nil {
		st := serviceGridStatus(&g.Status, g.Generation, svcName, invalid, nil, nil, false)
		if !readyUnchanged(g.Status.Conditions, st.Conditions) {
			c.recorder.Eventf(g, corev1.EventTypeWarning, ReasonInvalidSpec, "%v; nothing was created or changed", invalid)
		}
		return c.writeStatus(ctx, g, st)
	}
	list, err := c.svcLister.Services(ns).List(labels.Everything())
	if err != nil {
		return err
	}
	all := make([]metav1.Object, len(list))
	for i := range list {
		all[i] = list[i]
	}
	claimed, adopted, err := claimObjects(ctx, g, ServiceGridKind, all,
		func(ctx context.Context, ns, name string) (metav1.Object, error) {
			return c.client.SuperedgeV1().ServiceGrids(ns).Get(ctx, name, metav1.GetOptions{})
		},
		func(ctx context.Context, ns, name string, data []byte) error {
			_, err := c.kube.CoreV1().Services(ns).Patch(ctx, name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
			return err
		})
	if err != nil {
		return err
	}
	if adopted > 0 {
		c.recorder.Eventf(g, corev1.EventTypeNormal, "Adopted", "adopted %d orphaned Service(s) labelled %s=%s", adopted, superedgev1.LabelGridSelector, LabelValue(g.Name))
		return nil
	}
	var owned []*corev1.Service
	holderOwned := false
	for _, o := range claimed {
		owned = append(owned, o.(*corev1.Service))
		holderOwned = holderOwned || o.GetName() == svcName
	}
	holder, err := c.svcLister.Services(ns).Get(svcName)
	if apierrors.IsNotFound(err) {
		holder = nil
	} else if err != nil {
		return err
	}
	plan := planService(DesiredService(g, svcName, topologyKeys), owned, holder, holderOwned)

	var errs []error
	if plan.create != nil {
		if _, err := c.kube.CoreV1().Services(ns).Create(ctx, plan.create, metav1.CreateOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("create Service %s: %w", svcName, err))
			c.recorder.Eventf(g, corev1.EventTypeWarning, "FailedCreate", "Service %s: %v", svcName, err)
		} else {
			logger.Info("Created Service", "name", svcName)
			c.recorder.Eventf(g, corev1.EventTypeNormal, "Created", "created Service %s", svcName)
		}
	}
	if plan.update != nil {
		if _, err := c.kube.CoreV1().Services(ns).Update(ctx, plan.update, metav1.UpdateOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("update Service %s: %w", svcName, err))
			c.recorder.Eventf(g, corev1.EventTypeWarning, "FailedUpdate", "Service %s: %v", svcName, err)
		} else {
			logger.Info("Updated Service", "name", svcName)
			c.recorder.Eventf(g, corev1.EventTypeNormal, "Updated", "updated Service %s to the grid's template", svcName)
		}
	}
	for _, s := range plan.delete {
		if err := c.kube.CoreV1().Services(ns).Delete(ctx, s.Name, deleteOptions(s.UID)); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete Service %s: %w", s.Name, err))
			continue
		}
		c.recorder.Eventf(g, corev1.EventTypeNormal, "Deleted", "deleted Service %s: the grid no longer wants it", s.Name)
	}
	syncErr := errors.Join(errs...)
	ok := plan.conflict == nil && syncErr == nil && holder != nil && holder.DeletionTimestamp == nil
	var conflicts []UnitConflict
	if plan.conflict != nil {
		conflicts = append(conflicts, *plan.conflict)
	}
	st := serviceGridStatus(&g.Status, g.Generation, svcName, nil, syncErr, conflicts, ok)
	if conflictChanged(g.Status.Conditions, st.Conditions) && plan.conflict != nil {
		c.recorder.Eventf(g, corev1.EventTypeWarning, "Conflict", "%s", plan.conflict.Message)
	}
	if err := c.writeStatus(ctx, g, st); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// serviceGridStatus is the status to write (old is not modified). ok: the Service exists and
// has been checked against the template (a created or updated one shows on the next pass).
func serviceGridStatus(old *superedgev1.ServiceGridStatus, generation int64, svcName string, invalid, syncErr error,
	conflicts []UnitConflict, ok bool) superedgev1.ServiceGridStatus {
	st := *old.DeepCopy()
	st.ObservedGeneration = generation
	ready := metav1.Condition{Type: superedgev1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: generation}
	switch {
	case invalid != nil:
		ready.Reason, ready.Message = ReasonInvalidSpec, invalid.Error()+"; nothing was created or changed"
	case syncErr != nil:
		ready.Reason, ready.Message = ReasonSyncFailed, syncErr.Error()
	case len(conflicts) > 0:
		ready.Reason, ready.Message = conflicts[0].Reason, conflicts[0].Message
	case !ok:
		ready.Reason, ready.Message = "Pending", fmt.Sprintf("Service %s is being created or updated", svcName)
	default:
		st.ServiceName = svcName
		ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, ReasonServiceReady, fmt.Sprintf("Service %s matches the template", svcName)
	}
	meta.SetStatusCondition(&st.Conditions, ready)
	if invalid == nil {
		cc := conflictCondition(generation, conflicts)
		if len(conflicts) > 0 {
			cc.Message = conflicts[0].Message
		}
		meta.SetStatusCondition(&st.Conditions, cc)
	}
	return st
}

func (c *ServiceGridController) writeStatus(ctx context.Context, g *superedgev1.ServiceGrid, st superedgev1.ServiceGridStatus) error {
	if apiequality.Semantic.DeepEqual(g.Status, st) {
		return nil
	}
	cp := g.DeepCopy()
	cp.Status = st
	_, err := c.client.SuperedgeV1().ServiceGrids(g.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{})
	metrics.ObserveStatusWrite(ServiceGridName, err)
	if apierrors.IsConflict(err) {
		c.queue.Add(g.Namespace + "/" + g.Name) // a newer grid is on its way: look again then
		return nil
	}
	return err
}
