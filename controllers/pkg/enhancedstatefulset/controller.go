// Package enhancedstatefulset is the EnhancedStatefulSet controller: a sync loop over the pure
// update planner (planner.go), cut as Kubernetes' StatefulSet controller is: the set's side
// (set_control.go), pod, in-place and claim writes (pod_control.go, inplace_control.go,
// claim_control.go), status (status_updater.go), and the overlay of its own writes the caches
// do not show yet (own_writes.go).
package enhancedstatefulset

import (
	"context"
	"reflect"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	kcontroller "k8s.io/kubernetes/pkg/controller"
	"k8s.io/kubernetes/pkg/controller/history"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1informers "github.com/staticip/staticip/apis/generated/informers/externalversions/jke/v1"
	jkev1alpha1informers "github.com/staticip/staticip/apis/generated/informers/externalversions/jke/v1alpha1"
	jkev1listers "github.com/staticip/staticip/apis/generated/listers/jke/v1"
	jkev1alpha1listers "github.com/staticip/staticip/apis/generated/listers/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/worker"
)

// Name is the controller's name for --controllers, metrics and Events.
const Name = "enhancedstatefulset"

// Condition types on EnhancedStatefulSet status.
const (
	ConditionProgressing      = "Progressing"
	ConditionAvailable        = "Available"
	ConditionPaused           = "Paused"
	ConditionStaticIPConflict = "StaticIPConflict"
	// ConditionReplicaFailure (as on ReplicaSets): a pod could not be created, e.g. a pod of
	// its name exists that the set does not control.
	ConditionReplicaFailure = "ReplicaFailure"
)

// conflictRetry is how often a set whose pod is blocked by a StaticIP conflict is retried.
const conflictRetry = 30 * time.Second

// Controller syncs EnhancedStatefulSets.
type Controller struct {
	kubeClient kubernetes.Interface
	client     versioned.Interface
	history    history.Interface
	recorder   record.EventRecorder
	podControl kcontroller.PodControlInterface

	setLister jkev1alpha1listers.EnhancedStatefulSetLister
	podLister corelisters.PodLister
	pvcLister corelisters.PersistentVolumeClaimLister
	// pvcIndexer indexes claims by their controller's UID (claimsByControllerIndex).
	pvcIndexer cache.Indexer
	sipLister  jkev1listers.StaticIPLister
	synced     []cache.InformerSynced

	queue workqueue.TypedRateLimitingInterface[string]
	// writes is the overlay of this controller's writes the caches do not show yet
	// (own_writes.go).
	writes *ownWrites
	// preclaimed are StaticIPs claimed while their pod terminated (preclaim.go).
	preclaimed preclaims

	// now is the clock (tests may replace it).
	now func() time.Time

	// InPlaceUpdateTimeout: an in-place update whose new containers the kubelet has not
	// started after this long is given up and the pod recreated; 0 never gives up.
	InPlaceUpdateTimeout time.Duration
}

// DefaultInPlaceUpdateTimeout is long enough for a large image pull.
const DefaultInPlaceUpdateTimeout = 5 * time.Minute

// NewController wires the controller to its informers.
func NewController(kubeClient kubernetes.Interface, client versioned.Interface,
	setInformer jkev1alpha1informers.EnhancedStatefulSetInformer, podInformer coreinformers.PodInformer,
	revInformer appsinformers.ControllerRevisionInformer, pvcInformer coreinformers.PersistentVolumeClaimInformer,
	sipInformer jkev1informers.StaticIPInformer, recorder record.EventRecorder) (*Controller, error) {
	if err := history.AddControllerRevisionControllerIndexer(revInformer.Informer()); err != nil {
		return nil, err
	}
	if err := addClaimsByControllerIndex(pvcInformer.Informer()); err != nil {
		return nil, err
	}
	c := &Controller{
		kubeClient: kubeClient, client: client, recorder: recorder,
		podControl: kcontroller.RealPodControl{KubeClient: kubeClient, Recorder: recorder},
		history:    history.NewHistory(kubeClient, revInformer.Lister(), revInformer.Informer().GetIndexer()),
		setLister:  setInformer.Lister(), podLister: podInformer.Lister(), pvcLister: pvcInformer.Lister(), pvcIndexer: pvcInformer.Informer().GetIndexer(), sipLister: sipInformer.Lister(),
		synced: []cache.InformerSynced{setInformer.Informer().HasSynced, podInformer.Informer().HasSynced,
			revInformer.Informer().HasSynced, pvcInformer.Informer().HasSynced, sipInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name}),
		now: time.Now,

		InPlaceUpdateTimeout: DefaultInPlaceUpdateTimeout,
	}
	c.writes = newOwnWrites(c.podLister, func() time.Time { return c.now() })
	if _, err := setInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
		DeleteFunc: c.enqueue,
	}); err != nil {
		return nil, err
	}
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueOwner,
		UpdateFunc: func(old, cur any) {
			c.enqueueOwner(cur)
			// A pod whose labels or controller changed may have to be released by its old set
			// or adopted by another (as the StatefulSet controller's updatePod).
			o, n := old.(*corev1.Pod), cur.(*corev1.Pod)
			if !reflect.DeepEqual(o.Labels, n.Labels) || !reflect.DeepEqual(metav1.GetControllerOf(o), metav1.GetControllerOf(n)) {
				c.enqueueOwner(old)
			}
		},
		DeleteFunc: func(obj any) {
			c.podDeleted(obj) // before the sync it starts
			c.enqueueOwner(obj)
		},
	}); err != nil {
		return nil, err
	}
	// A PVC that goes away may be one a Pending pod waits for (recreated) or one a new pod
	// waited for (terminating → gone): sync the sets whose selector its labels match (the
	// controller labels its claims with the selector).
	if _, err := pvcInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: c.enqueueClaimSets}); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Controller) enqueueClaimSets(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	claim, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return
	}
	sets, _ := c.setLister.EnhancedStatefulSets(claim.Namespace).List(labels.Everything())
	for _, set := range sets {
		if len(set.Spec.VolumeClaimTemplates) == 0 {
			continue
		}
		if selector, err := metav1.LabelSelectorAsSelector(set.Spec.Selector); err == nil && !selector.Empty() && selector.Matches(labels.Set(claim.Labels)) {
			c.queue.Add(claim.Namespace + "/" + set.Name)
		}
	}
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

// podOf returns the pod of an informer event (also a deletion's last known state).
func podOf(obj any) (*corev1.Pod, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	return pod, ok
}

// ownerKey is the key of the EnhancedStatefulSet that controls pod, if one does.
func ownerKey(pod *corev1.Pod) (string, bool) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != controllerKind.Kind || ref.APIVersion != controllerKind.GroupVersion().String() {
		return "", false
	}
	return pod.Namespace + "/" + ref.Name, true
}

// podDeleted tells the own-writes overlay that a pod of a set is gone (own_writes.go, podDeleted).
func (c *Controller) podDeleted(obj any) {
	if pod, ok := podOf(obj); ok {
		if key, ok := ownerKey(pod); ok {
			c.writes.podDeleted(key, pod)
		}
	}
}

func (c *Controller) enqueueOwner(obj any) {
	pod, ok := podOf(obj)
	if !ok {
		return
	}
	if metav1.GetControllerOf(pod) == nil {
		// An orphan: every set whose selector matches it may adopt it.
		if pod.DeletionTimestamp != nil {
			return
		}
		sets, _ := c.setLister.EnhancedStatefulSets(pod.Namespace).List(labels.Everything())
		for _, set := range sets {
			if selector, err := metav1.LabelSelectorAsSelector(set.Spec.Selector); err == nil && !selector.Empty() && selector.Matches(labels.Set(pod.Labels)) {
				c.queue.Add(pod.Namespace + "/" + set.Name)
			}
		}
		return
	}
	if key, ok := ownerKey(pod); ok {
		c.queue.Add(key)
	}
}

// Run starts workers and blocks until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	worker.Run(ctx, Name, "EnhancedStatefulSet", c.queue, c.synced, workers, c.sync)
}

// sync reconciles one set and says when to look again: the set's pods and revisions from the
// caches with this controller's own writes laid over them (own_writes.go), the plan
// (planner.go), its execution (set_control.go → pod_control.go, inplace_control.go), the claims
// (claim_control.go), history, and status (status_updater.go).
func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil
	}
	cached, err := c.setLister.EnhancedStatefulSets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.writes.clear(key)
		return 0, nil // pods, revisions, PVCs and StaticIPs go with it through owner references
	}
	if err != nil {
		return 0, err
	}
	if cached.DeletionTimestamp != nil {
		return 0, nil
	}
	set := c.writes.withStatus(key, cached.DeepCopy())

	selector, ok := c.selectorOf(set)
	if !ok {
		return 0, nil
	}
	pods, err := c.claimPods(ctx, set, selector)
	if err != nil {
		return 0, err
	}
	// The planner sees this controller's own writes the pod cache does not show yet (a pod it
	// deleted as terminating, a pod it created or patched as the API server returned it), so it
	// neither spends budget twice nor waits for the cache: the sync that handles the next
	// event acts at once, as the StatefulSet controller does.
	pods, wait := c.writes.withPods(key, pods)
	if wait {
		return 200 * time.Millisecond, nil
	}
	revs, err := c.revisions(set, selector)
	if err != nil {
		return 0, err
	}
	plan, err := ComputePlan(PlanInput{Spec: &set.Spec, SetName: set.Name, Pods: pods,
		CurrentRevision: revs.current.Name, UpdateRevision: revs.update.Name, Templates: revs.templates, Now: c.now(),
		InPlaceUpdateTimeout: c.InPlaceUpdateTimeout})
	if err != nil {
		c.recorder.Eventf(set, corev1.EventTypeWarning, "InvalidSpec", "%v", err)
		return 0, nil
	}

	// Claims first, as upstream fixes the claims of condemned pods before deleting them: a
	// scaled-down pod must control its claims (whenScaled: Delete) before it goes.
	if err := c.reconcileClaimOwners(ctx, set, pods); err != nil {
		return 0, err
	}
	done, actErr := c.execute(ctx, set, plan, pods, revs.templates)
	if len(done.conflicts)+len(done.createFailures) > 0 && (plan.RequeueAfter == 0 || plan.RequeueAfter > conflictRetry) {
		// A human must resolve a StaticIP conflict; look again now and then, not in a hot loop.
		plan.RequeueAfter = conflictRetry
	}
	if err := c.ensurePendingPodClaims(ctx, set, pods); err != nil && actErr == nil {
		actErr = err
	}
	if err := c.deleteScaledPVCs(ctx, set, pods); err != nil && actErr == nil {
		actErr = err
	}
	if err := c.truncateHistory(set, pods, revs); err != nil && actErr == nil {
		actErr = err
	}
	if err := c.updateStatus(ctx, set, plan, revs, selector, done); err != nil && actErr == nil {
		actErr = err
	}
	if open := c.writes.untilExpiry(key); open > 0 && (plan.RequeueAfter == 0 || open < plan.RequeueAfter) {
		// Writes the cache has not shown yet: look again when their expectations expire.
		plan.RequeueAfter = open
	}
	return plan.RequeueAfter, actErr
}
