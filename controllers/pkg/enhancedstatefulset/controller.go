// Package enhancedstatefulset is the EnhancedStatefulSet controller: a thin sync loop over
// the pure update planner (planner.go), in the style of Kubernetes' StatefulSet controller.
package enhancedstatefulset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
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
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/apis/ordinal"
	"github.com/staticip/staticip/controllers/pkg/metrics"
	"github.com/staticip/staticip/controllers/pkg/staticip"
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

// expectationTTL bounds how long a sync waits for the informer to see its own writes.
const expectationTTL = time.Minute

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
	// expectations: per set, the writes of the last sync the informer has not shown yet. The
	// planner must not run on a cache that still shows a pod it deleted as healthy: it would
	// take more pods down than maxUnavailable allows.
	mu           sync.Mutex
	expectations map[string]map[string]expectation
	// statusWrites: per set, the object this controller's last status write returned, until
	// the set cache shows it (guarded by mu).
	statusWrites map[string]statusWrite

	// now is the clock (tests may replace it).
	now func() time.Time

	// InPlaceUpdateTimeout: an in-place update whose new containers the kubelet has not
	// started after this long is given up and the pod recreated; 0 never gives up.
	InPlaceUpdateTimeout time.Duration
}

// DefaultInPlaceUpdateTimeout is long enough for a large image pull.
const DefaultInPlaceUpdateTimeout = 5 * time.Minute

// statusWrite is a status write the set cache may not show yet: written is what the API
// server returned, staleRVs the resourceVersions that writes (this one and the earlier ones
// it followed) replaced.
type statusWrite struct {
	written  *jkev1alpha1.EnhancedStatefulSet
	staleRVs []string
}

// maxStaleRVs bounds a statusWrite's history: a cache that lags behind more writes than this
// is not waited for (the next write may then conflict and is retried).
const maxStaleRVs = 8

type expectation struct {
	// deleted: the pod with this UID must be gone or terminating; otherwise the pod must exist
	// with a resourceVersion other than those in staleRVs (none = just exist).
	deletedUID types.UID
	staleRVs   []string
	// written is the pod as the API server returned it from this controller's create or patch;
	// until the cache shows the write, the planner sees this copy instead. nil while the
	// write is in flight.
	written  *corev1.Pod
	deadline time.Time
}

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
		expectations: map[string]map[string]expectation{},
		statusWrites: map[string]statusWrite{},
		now:          time.Now,

		InPlaceUpdateTimeout: DefaultInPlaceUpdateTimeout,
	}
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
		DeleteFunc: c.enqueueOwner,
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

func (c *Controller) enqueueOwner(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
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
	if ref.Kind != controllerKind.Kind || ref.APIVersion != controllerKind.GroupVersion().String() {
		return
	}
	c.queue.Add(pod.Namespace + "/" + ref.Name)
}

// Run starts workers and blocks until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	worker.Run(ctx, Name, "EnhancedStatefulSet", c.queue, c.synced, workers, c.sync)
}

// sync reconciles one set and says when to look again.
func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil
	}
	cached, err := c.setLister.EnhancedStatefulSets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.clearExpectations(key)
		return 0, nil // pods, revisions, PVCs and StaticIPs go with it through owner references
	}
	if err != nil {
		return 0, err
	}
	if cached.DeletionTimestamp != nil {
		return 0, nil
	}
	set := c.withOwnStatusWrite(key, cached.DeepCopy())

	selector, err := metav1.LabelSelectorAsSelector(set.Spec.Selector)
	if err != nil || selector.Empty() {
		c.recorder.Eventf(set, corev1.EventTypeWarning, "InvalidSelector", "spec.selector: %v", errOr(err, "must not be empty"))
		return 0, nil
	}
	if !selector.Matches(labels.Set(set.Spec.Template.Labels)) {
		c.recorder.Event(set, corev1.EventTypeWarning, "InvalidSelector", "spec.selector does not match spec.template.metadata.labels")
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
	pods, wait := c.withOwnPodWrites(key, pods)
	if wait {
		return 200 * time.Millisecond, nil
	}
	revisions, err := c.ownedRevisions(set, selector)
	if err != nil {
		return 0, err
	}
	current, update, collisionCount, err := c.getRevisions(set, revisions)
	if err != nil {
		c.recorder.Eventf(set, corev1.EventTypeWarning, "FailedRevision", "creating ControllerRevision: %v", err)
		return 0, err
	}
	templates := map[string]*corev1.PodTemplateSpec{}
	for _, r := range append(revisions, update) {
		if t, err := TemplateOf(r); err == nil {
			templates[r.Name] = t
		}
	}
	plan, err := ComputePlan(PlanInput{Spec: &set.Spec, SetName: set.Name, Pods: pods,
		CurrentRevision: current.Name, UpdateRevision: update.Name, Templates: templates, Now: c.now(),
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
	done, actErr := c.execute(ctx, set, plan, pods, templates)
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
	if err := c.truncateHistory(set, pods, revisions, current, update); err != nil && actErr == nil {
		actErr = err
	}
	if err := c.updateStatus(ctx, set, plan, current, update, collisionCount, selector, done); err != nil && actErr == nil {
		actErr = err
	}
	return plan.RequeueAfter, actErr
}

func errOr(err error, msg string) string {
	if err != nil {
		return err.Error()
	}
	return msg
}

// claimPods returns the set's pods like the StatefulSet controller's getPodsForStatefulSet:
// the ControllerRefManager adopts orphans that match the selector and carry a pod name of the
// set (after re-reading the set from the API server, so a set being deleted adopts nothing),
// and releases owned pods that no longer match.
func (c *Controller) claimPods(ctx context.Context, set *jkev1alpha1.EnhancedStatefulSet, selector labels.Selector) ([]*corev1.Pod, error) {
	all, err := c.podLister.Pods(set.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	canAdopt := kcontroller.RecheckDeletionTimestamp(func(ctx context.Context) (metav1.Object, error) {
		fresh, err := c.client.JkeV1alpha1().EnhancedStatefulSets(set.Namespace).Get(ctx, set.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if fresh.UID != set.UID {
			return nil, fmt.Errorf("original EnhancedStatefulSet %s/%s is gone: got uid %v, wanted %v", set.Namespace, set.Name, fresh.UID, set.UID)
		}
		return fresh, nil
	})
	cm := kcontroller.NewPodControllerRefManager(c.podControl, set, selector, controllerKind, canAdopt)
	return cm.ClaimPods(ctx, all, func(pod *corev1.Pod) bool { return ordinal.Of(set.Name, pod.Name) >= 0 })
}

// ownedRevisions lists the set's ControllerRevisions and adopts orphans that match, as the
// StatefulSet controller does.
func (c *Controller) ownedRevisions(set *jkev1alpha1.EnhancedStatefulSet, selector labels.Selector) ([]*appsv1.ControllerRevision, error) {
	revs, err := c.history.ListControllerRevisions(set, controllerKind, selector)
	if err != nil {
		return nil, err
	}
	var out []*appsv1.ControllerRevision
	for _, r := range revs {
		if metav1.GetControllerOf(r) == nil {
			adopted, err := c.history.AdoptControllerRevision(set, controllerKind, r)
			if err != nil {
				continue
			}
			r = adopted
		}
		out = append(out, r)
	}
	history.SortControllerRevisions(out)
	return out, nil
}

// getRevisions is the StatefulSet controller's getStatefulSetRevisions: the update revision is
// the revision equal to the current template (re-used, and renumbered when it is an older
// one — that is how a rollback re-uses the old revision name); the current revision is
// status.currentRevision, or the update revision on the first sync.
func (c *Controller) getRevisions(set *jkev1alpha1.EnhancedStatefulSet, revisions []*appsv1.ControllerRevision) (current, update *appsv1.ControllerRevision, collisionCount int32, err error) {
	if set.Status.CollisionCount != nil {
		collisionCount = *set.Status.CollisionCount
	}
	update, err = newRevision(set, nextRevision(revisions), &collisionCount)
	if err != nil {
		return nil, nil, collisionCount, err
	}
	equal := history.FindEqualRevisions(revisions, update)
	switch n := len(equal); {
	case n > 0 && history.EqualRevision(revisions[len(revisions)-1], equal[n-1]):
		update = revisions[len(revisions)-1]
	case n > 0:
		update, err = c.history.UpdateControllerRevision(equal[n-1], update.Revision)
	default:
		update, err = c.history.CreateControllerRevision(set, update, &collisionCount)
	}
	if err != nil {
		return nil, nil, collisionCount, err
	}
	for _, r := range revisions {
		if r.Name == set.Status.CurrentRevision {
			current = r
		}
	}
	if current == nil {
		current = update
	}
	return current, update, collisionCount, nil
}

// truncateHistory deletes the oldest revisions beyond revisionHistoryLimit that no pod, and
// neither the current nor the update revision, uses.
func (c *Controller) truncateHistory(set *jkev1alpha1.EnhancedStatefulSet, pods []*corev1.Pod, revisions []*appsv1.ControllerRevision, current, update *appsv1.ControllerRevision) error {
	live := map[string]bool{current.Name: true, update.Name: true}
	for _, p := range pods {
		live[PodRevision(p)] = true
	}
	var history []*appsv1.ControllerRevision
	for _, r := range revisions {
		if !live[r.Name] {
			history = append(history, r)
		}
	}
	limit := 10
	if set.Spec.RevisionHistoryLimit != nil {
		limit = int(*set.Spec.RevisionHistoryLimit)
	}
	for i := 0; i < len(history)-limit; i++ {
		if err := c.history.DeleteControllerRevision(history[i]); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// execute carries out the plan. Creations and deletions of one plan are independent, so they
// run concurrently: a batch of maxUnavailable pods starts at once.
func (c *Controller) execute(ctx context.Context, set *jkev1alpha1.EnhancedStatefulSet, plan *Plan, pods []*corev1.Pod, templates map[string]*corev1.PodTemplateSpec) (executed, error) {
	byName := map[string]*corev1.Pod{}
	for _, p := range pods {
		byName[p.Name] = p
	}
	var (
		mu        sync.Mutex
		errs      []error
		conflicts []string
		failures  []string
		wg        sync.WaitGroup
	)
	for _, a := range plan.Actions {
		wg.Go(func() {
			var err error
			switch a.Type {
			case ActionCreate:
				err = c.createPod(ctx, set, a, templates[a.Revision])
				var conflict *staticip.ConflictError
				if errors.As(err, &conflict) {
					mu.Lock()
					conflicts = append(conflicts, conflict.Error())
					mu.Unlock()
				}
				var failed *createError
				if errors.As(err, &failed) {
					mu.Lock()
					failures = append(failures, failed.Error())
					mu.Unlock()
				}
			case ActionDelete:
				err = c.deletePod(ctx, set, byName[a.Pod], a.Reason)
			case ActionInPlaceUpdate:
				err = c.updateInPlace(ctx, set, byName[a.Pod], a)
			case ActionInPlaceReady:
				err = c.finishInPlace(ctx, set, byName[a.Pod])
			}
			metrics.PodActions.WithLabelValues(string(a.Type), string(a.Reason), resultOf(err)).Inc()
			var conflict *staticip.ConflictError
			if errors.As(err, &conflict) {
				return // reported in the StaticIPConflict condition; retried on the slow requeue
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	sort.Strings(conflicts)
	sort.Strings(failures)
	return executed{conflicts: conflicts, createFailures: failures}, errors.Join(errs...)
}

// executed is what a plan's execution reports for status: StaticIP conflicts and pod
// creations a human must look at.
type executed struct {
	conflicts, createFailures []string
}

func resultOf(err error) string {
	if err != nil {
		return "error"
	}
	return "success"
}

// ReasonTemplateIPAddressIgnored: the Warning Event on a set whose pod template carries
// staticip.jke.jdcloud.com/ip-address; its pods do not get it (see newPod).
const ReasonTemplateIPAddressIgnored = "TemplateIPAddressIgnored"

// newPod builds the pod of ordinal from template: name {set}-{ordinal}, stable hostname and
// subdomain, the StatefulSet labels, the revision label and PVC volumes.
func newPod(set *jkev1alpha1.EnhancedStatefulSet, template *corev1.PodTemplateSpec, ordinal int, revision string) *corev1.Pod {
	name := PodName(set.Name, ordinal)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: set.Namespace,
			Labels:          map[string]string{},
			Annotations:     map[string]string{},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(set, controllerKind)},
		},
		Spec: *template.Spec.DeepCopy(),
	}
	for k, v := range template.Labels {
		pod.Labels[k] = v
	}
	for k, v := range template.Annotations {
		pod.Annotations[k] = v
	}
	// The IP a pod gets comes from its StaticIP record (DecoratePod), never from the template:
	// this controller creates pods with an identity the ip-address policy trusts, so a template
	// annotation would let anyone who may write the set pick any IP (manifests/admission).
	delete(pod.Annotations, jkev1.AnnotationIPAddress)
	pod.Labels[PodNameLabel] = name
	pod.Labels[PodIndexLabel] = strconv.Itoa(ordinal)
	pod.Labels[RevisionLabel] = revision
	pod.Spec.Hostname = name
	pod.Spec.Subdomain = set.Spec.ServiceName
	if ru := set.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.PodUpdatePolicy == jkev1alpha1.InPlaceIfPossiblePodUpdatePolicy &&
		!slices.ContainsFunc(pod.Spec.ReadinessGates, func(g corev1.PodReadinessGate) bool { return g.ConditionType == InPlaceUpdateReady }) {
		pod.Spec.ReadinessGates = append(pod.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: InPlaceUpdateReady})
	}
	// Volumes of the claim templates replace template volumes of the same name.
	claims := map[string]bool{}
	for _, claim := range set.Spec.VolumeClaimTemplates {
		claims[claim.Name] = true
	}
	var volumes []corev1.Volume
	for _, v := range pod.Spec.Volumes {
		if !claims[v.Name] {
			volumes = append(volumes, v)
		}
	}
	for _, claim := range set.Spec.VolumeClaimTemplates {
		volumes = append(volumes, corev1.Volume{Name: claim.Name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: ClaimName(set, claim.Name, ordinal)}}})
	}
	pod.Spec.Volumes = volumes
	return pod
}

// ClaimName is the PVC of claim template claim for ordinal: {claim}-{set}-{ordinal}.
func ClaimName(set *jkev1alpha1.EnhancedStatefulSet, claim string, ordinal int) string {
	return fmt.Sprintf("%s-%s-%d", claim, set.Name, ordinal)
}

func pvcRetention(set *jkev1alpha1.EnhancedStatefulSet) appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy {
	p := appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType, WhenScaled: appsv1.RetainPersistentVolumeClaimRetentionPolicyType}
	if r := set.Spec.PersistentVolumeClaimRetentionPolicy; r != nil {
		if r.WhenDeleted != "" {
			p.WhenDeleted = r.WhenDeleted
		}
		if r.WhenScaled != "" {
			p.WhenScaled = r.WhenScaled
		}
	}
	return p
}

// createPod creates the PVCs and the StaticIP of an ordinal, then the pod itself.
func (c *Controller) createPod(ctx context.Context, set *jkev1alpha1.EnhancedStatefulSet, a Action, template *corev1.PodTemplateSpec) error {
	if template == nil {
		return fmt.Errorf("no template for revision %s", a.Revision)
	}
	pod := newPod(set, template, a.Ordinal, a.Revision)
	if ip, ok := template.Annotations[jkev1.AnnotationIPAddress]; ok {
		c.recorder.Eventf(set, corev1.EventTypeWarning, ReasonTemplateIPAddressIgnored,
			"pod %s: the template's %s=%s is not copied (a pod's IP comes from its StaticIP record; ask for an IP on a pod in a namespace labelled %s=true)",
			pod.Name, jkev1.AnnotationIPAddress, ip, jkev1.LabelAllowIPRequest)
	}
	if err := c.ensureClaims(ctx, set, a.Ordinal, nil); err != nil {
		if errors.Is(err, errClaimGoing) {
			return err // retried; not a failure
		}
		c.recorder.Eventf(set, corev1.EventTypeWarning, "FailedCreate", "create claims for pod %s: %v", pod.Name, err)
		return err
	}
	if staticip.Enabled(set.Annotations, set.Spec.Template.Annotations) {
		w := staticip.Workload{Object: set, GVK: controllerKind, Retention: staticip.RetentionPolicy(set.Spec.StaticIPRetentionPolicy)}
		sip, err := staticip.Ensure(ctx, c.client, c.sipLister, w, pod.Name, c.now())
		if err != nil {
			var releasing *staticip.ReleasingError
			if errors.As(err, &releasing) || apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
				return err // a release or another write raced with us: retried, nothing to report
			}
			reason := "FailedCreateStaticIP"
			var conflict *staticip.ConflictError
			if errors.As(err, &conflict) {
				reason = "StaticIPConflict"
			}
			// The pod is not created without its record: it would get an IP nobody keeps.
			c.recorder.Eventf(set, corev1.EventTypeWarning, reason, "pod %s: %v", pod.Name, err)
			return err
		}
		staticip.DecoratePod(pod, sip)
	}
	c.expect(set, pod.Name, expectation{})
	created, err := c.kubeClient.CoreV1().Pods(set.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		c.forget(set, pod.Name)
		// Ours (the cache has not shown it yet) is fine; anything else holds the ordinal's name
		// and the set cannot run that ordinal until a human removes it.
		existing, getErr := c.kubeClient.CoreV1().Pods(set.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if getErr == nil {
			if ref := metav1.GetControllerOf(existing); ref != nil && ref.UID == set.UID {
				return nil
			}
		}
		err = fmt.Errorf("create Pod %s: %w (a pod of that name that this set does not control: %s)", pod.Name, err, describeOwner(existing))
		c.recorder.Eventf(set, corev1.EventTypeWarning, "FailedCreate", "%v", err)
		return &createError{err: err}
	}
	if err != nil {
		c.forget(set, pod.Name)
		c.recorder.Eventf(set, corev1.EventTypeWarning, "FailedCreate", "create Pod %s: %v", pod.Name, err)
		return err
	}
	c.expect(set, pod.Name, expectation{written: created})
	c.recorder.Eventf(set, corev1.EventTypeNormal, "SuccessfulCreate", "create Pod %s at revision %s", pod.Name, a.Revision)
	return nil
}

// createError is a pod creation that failed in a way a human must resolve (reported in the
// ReplicaFailure condition).
type createError struct{ err error }

func (e *createError) Error() string { return e.err.Error() }
func (e *createError) Unwrap() error { return e.err }

func describeOwner(pod *corev1.Pod) string {
	if pod == nil {
		return "unknown"
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		return fmt.Sprintf("controlled by %s %s", ref.Kind, ref.Name)
	}
	return "no controller, labels " + labels.Set(pod.Labels).String()
}

// ensureClaims creates the missing PVCs of an ordinal, with the owner references the retention
// policy wants. Like upstream, a PVC that is going away is never used: one that is terminating,
// or that a deleted pod controls (the garbage collector deletes it with that pod, upstream's
// PodClaimIsStale). The pod waits (errClaimGoing) until it is gone, then a new one is created.
// livePod is the ordinal's pod if it exists.
func (c *Controller) ensureClaims(ctx context.Context, set *jkev1alpha1.EnhancedStatefulSet, ordinal int, livePod *corev1.Pod) error {
	live := map[string]bool{}
	if livePod != nil {
		live[string(livePod.UID)] = true
	}
	for _, tmpl := range set.Spec.VolumeClaimTemplates {
		name := ClaimName(set, tmpl.Name, ordinal)
		if existing, err := c.pvcLister.PersistentVolumeClaims(set.Namespace).Get(name); err == nil {
			if existing.DeletionTimestamp != nil || claimOfGonePod(existing, live) {
				return fmt.Errorf("%w: %s", errClaimGoing, name)
			}
			continue
		}
		claim := tmpl.DeepCopy()
		claim.ObjectMeta = metav1.ObjectMeta{Name: name, Namespace: set.Namespace, Labels: map[string]string{}, Annotations: tmpl.Annotations}
		for k, v := range set.Spec.Selector.MatchLabels {
			claim.Labels[k] = v
		}
		for k, v := range tmpl.Labels {
			claim.Labels[k] = v
		}
		claim.OwnerReferences = withClaimOwners(claim, set, livePod, ordinal)
		if _, err := c.kubeClient.CoreV1().PersistentVolumeClaims(set.Namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// errClaimGoing: a pod waits for its PVC to finish going away before a new one is made.
var errClaimGoing = errors.New("PersistentVolumeClaim is being deleted (terminating, or controlled by a deleted pod); the pod waits for it to go")

// ensurePendingPodClaims recreates the missing PVCs of pods that are not scheduled yet (a PVC
// deleted under a Pending pod would keep it Pending forever), as upstream's processReplica.
func (c *Controller) ensurePendingPodClaims(ctx context.Context, set *jkev1alpha1.EnhancedStatefulSet, pods []*corev1.Pod) error {
	if len(set.Spec.VolumeClaimTemplates) == 0 {
		return nil
	}
	var errs []error
	for _, pod := range pods {
		if pod.Status.Phase == corev1.PodPending && pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil {
			if ord := ordinal.Of(set.Name, pod.Name); ord >= 0 {
				if err := c.ensureClaims(ctx, set, ord, pod); err != nil && !errors.Is(err, errClaimGoing) {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// reconcileClaimOwners gives the existing claims of the set's pods the owner references the
// retention policy wants (upstream's UpdatePodClaimForRetentionPolicy), so a policy change
// applies to claims made before it and a scaled-down pod controls its claims before it is
// deleted (whenScaled: Delete).
func (c *Controller) reconcileClaimOwners(ctx context.Context, set *jkev1alpha1.EnhancedStatefulSet, pods []*corev1.Pod) error {
	var errs []error
	for _, pod := range pods {
		ord := ordinal.Of(set.Name, pod.Name)
		if ord < 0 {
			continue
		}
		for _, tmpl := range set.Spec.VolumeClaimTemplates {
			claim, err := c.pvcLister.PersistentVolumeClaims(set.Namespace).Get(ClaimName(set, tmpl.Name, ord))
			if err != nil || claim.DeletionTimestamp != nil || claimOwnersUpToDate(claim, set, pod, ord) {
				continue // a missing claim is created (or waited for) with the pod
			}
			if hasOtherController(claim, set, pod) {
				c.recorder.Eventf(set, corev1.EventTypeWarning, "ConflictingController",
					"PersistentVolumeClaim %s is controlled by %s %s: the retention policy is ignored for it", claim.Name, metav1.GetControllerOf(claim).Kind, metav1.GetControllerOf(claim).Name)
			}
			claim = claim.DeepCopy()
			claim.OwnerReferences = withClaimOwners(claim, set, pod, ord)
			if _, err := c.kubeClient.CoreV1().PersistentVolumeClaims(set.Namespace).Update(ctx, claim, metav1.UpdateOptions{}); err != nil {
				if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
					c.recorder.Eventf(set, corev1.EventTypeWarning, "FailedUpdateClaim", "owner references of PersistentVolumeClaim %s for pod %s: %v", claim.Name, pod.Name, err)
				}
				errs = append(errs, fmt.Errorf("update owner references of PersistentVolumeClaim %s: %w", claim.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// claimsByControllerIndex indexes PersistentVolumeClaims by their controller: its UID, and for a
// pod controller also podsOfSetKey of the set the pod's name says it belongs to (a set's pod is
// {set}-{ordinal}), so the claims handed to scaled-down pods are found after the pods are gone.
const claimsByControllerIndex = "staticip.enhancedstatefulset/claims-by-controller"

func podsOfSetKey(namespace, setName string) string { return "pods-of/" + namespace + "/" + setName }

func addClaimsByControllerIndex(informer cache.SharedIndexInformer) error {
	if _, ok := informer.GetIndexer().GetIndexers()[claimsByControllerIndex]; ok {
		return nil
	}
	return informer.AddIndexers(cache.Indexers{claimsByControllerIndex: func(obj any) ([]string, error) {
		claim, ok := obj.(*corev1.PersistentVolumeClaim)
		if !ok {
			return nil, nil
		}
		ref := metav1.GetControllerOf(claim)
		if ref == nil {
			return nil, nil
		}
		keys := []string{string(ref.UID)}
		if i := strings.LastIndex(ref.Name, "-"); ref.Kind == podKind.Kind && ref.APIVersion == "v1" && i > 0 {
			keys = append(keys, podsOfSetKey(claim.Namespace, ref.Name[:i]))
		}
		return keys, nil
	}})
}

// deleteScaledPVCs, when persistentVolumeClaimRetentionPolicy.whenScaled is Delete, deletes the
// claims of the set that are found by their controller, never by name alone (a claim the set
// does not control is never deleted):
//   - claims this set controls whose ordinal is scaled down and whose pod is gone (a pod that
//     went before its claims were handed to it);
//   - claims controlled by a pod of this set that is gone. Those are the claims handed to
//     scaled-down pods: the garbage collector deletes them too, this only does not wait for it
//     (a scaled-up pod waits for such a claim to go, errClaimGoing).
func (c *Controller) deleteScaledPVCs(ctx context.Context, set *jkev1alpha1.EnhancedStatefulSet, pods []*corev1.Pod) error {
	if len(set.Spec.VolumeClaimTemplates) == 0 || pvcRetention(set).WhenScaled != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
		return nil
	}
	present := map[int]bool{}
	live := map[types.UID]bool{}
	for _, p := range pods {
		present[ordinal.Of(set.Name, p.Name)] = true
		live[p.UID] = true
	}
	ofSet, err := c.pvcIndexer.ByIndex(claimsByControllerIndex, string(set.UID))
	if err != nil {
		return err
	}
	ofPods, err := c.pvcIndexer.ByIndex(claimsByControllerIndex, podsOfSetKey(set.Namespace, set.Name))
	if err != nil {
		return err
	}
	var errs []error
	for _, obj := range append(ofSet, ofPods...) {
		claim := obj.(*corev1.PersistentVolumeClaim)
		ref := metav1.GetControllerOf(claim)
		if claim.Namespace != set.Namespace || claim.DeletionTimestamp != nil || ref == nil {
			continue
		}
		ord := -1
		for _, tmpl := range set.Spec.VolumeClaimTemplates {
			if o := ordinal.Of(tmpl.Name+"-"+set.Name, claim.Name); o >= 0 {
				ord = o
			}
		}
		if ord < 0 {
			continue
		}
		switch {
		case ref.UID == set.UID:
			if ord < replicasOf(set) || present[ord] {
				continue
			}
		case ref.Kind == podKind.Kind && ref.Name == fmt.Sprintf("%s-%d", set.Name, ord):
			if live[ref.UID] {
				continue
			}
		default:
			continue
		}
		err := c.kubeClient.CoreV1().PersistentVolumeClaims(set.Namespace).Delete(ctx, claim.Name,
			metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &claim.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *Controller) deletePod(ctx context.Context, set *jkev1alpha1.EnhancedStatefulSet, pod *corev1.Pod, reason DeleteReason) error {
	if pod == nil {
		return nil
	}
	c.expect(set, pod.Name, expectation{deletedUID: pod.UID})
	err := c.kubeClient.CoreV1().Pods(set.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		c.forget(set, pod.Name)
		c.recorder.Eventf(set, corev1.EventTypeWarning, "FailedDelete", "delete Pod %s (%s): %v", pod.Name, reason, err)
		return err
	}
	switch reason {
	case ReasonInPlaceTimeout:
		c.recorder.Eventf(set, corev1.EventTypeWarning, "InPlaceUpdateTimeout", "delete Pod %s to recreate it: its in-place update did not reach the kubelet within %v (%s)",
			pod.Name, c.InPlaceUpdateTimeout, podProblem(pod, set.Spec.MinReadySeconds, c.now()))
	case ReasonUnavailable:
		c.recorder.Eventf(set, corev1.EventTypeNormal, "SuccessfulDelete", "delete Pod %s to replace it at the update revision: it is unavailable (%s) on revision %s",
			pod.Name, podProblem(pod, set.Spec.MinReadySeconds, c.now()), PodRevision(pod))
	default:
		c.recorder.Eventf(set, corev1.EventTypeNormal, "SuccessfulDelete", "delete Pod %s (%s)", pod.Name, reason)
	}
	return nil
}

// updateInPlace moves a pod to a.Revision by patching its container images, so it keeps its
// node and IP. First the InPlaceUpdateReady readiness gate goes False (Services stop sending
// traffic before the container restarts), then the spec is patched together with the record
// of the containers it replaces (InPlaceUpdateState): the pod counts as unavailable until the
// kubelet runs new containers of the new images.
func (c *Controller) updateInPlace(ctx context.Context, set *jkev1alpha1.EnhancedStatefulSet, cached *corev1.Pod, a Action) error {
	if cached == nil {
		return nil
	}
	state := InPlaceUpdateState{Revision: a.Revision, UpdateTimestamp: metav1.NewTime(c.now()), Containers: map[string]InPlaceContainer{}}
	var containers []map[string]string
	for _, ctr := range cached.Spec.Containers {
		img, ok := a.Images[ctr.Name]
		if !ok || img == ctr.Image {
			continue
		}
		old := ""
		for _, st := range cached.Status.ContainerStatuses {
			if st.Name == ctr.Name {
				old = st.ContainerID
			}
		}
		state.Containers[ctr.Name] = InPlaceContainer{OldContainerID: old, Image: img}
		containers = append(containers, map[string]string{"name": ctr.Name, "image": img})
	}
	stale := []string{cached.ResourceVersion}
	rv := cached.ResourceVersion
	c.expect(set, cached.Name, expectation{staleRVs: stale})
	if hasReadinessGate(cached) && len(containers) > 0 {
		patched, err := c.patchInPlaceReady(ctx, cached, corev1.ConditionFalse, "InPlaceUpdating", "updating in place to revision "+a.Revision)
		if err != nil {
			c.forget(set, cached.Name)
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				return nil
			}
			c.recorder.Eventf(set, corev1.EventTypeWarning, "FailedUpdate", "set %s False on Pod %s: %v", InPlaceUpdateReady, cached.Name, err)
			return err
		}
		rv = patched.ResourceVersion
		c.expect(set, cached.Name, expectation{staleRVs: append(stale, rv)})
	}
	annotations := map[string]any{AnnotationInPlaceUpdate: nil}
	if len(containers) > 0 {
		raw, _ := json.Marshal(state)
		annotations[AnnotationInPlaceUpdate] = string(raw)
	}
	body := map[string]any{"metadata": map[string]any{"uid": cached.UID, "resourceVersion": rv,
		"labels": map[string]string{RevisionLabel: a.Revision}, "annotations": annotations}}
	if len(containers) > 0 {
		body["spec"] = map[string]any{"containers": containers}
	}
	patch, _ := json.Marshal(body)
	patched, err := c.kubeClient.CoreV1().Pods(set.Namespace).Patch(ctx, cached.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		c.forget(set, cached.Name)
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil // the next sync sees the newer pod
		}
		c.recorder.Eventf(set, corev1.EventTypeWarning, "FailedUpdate", "update Pod %s in place: %v", cached.Name, err)
		return err
	}
	c.expect(set, cached.Name, expectation{staleRVs: append(stale, rv), written: patched})
	c.recorder.Eventf(set, corev1.EventTypeNormal, "SuccessfulUpdateInPlace", "update Pod %s in place to revision %s", cached.Name, a.Revision)
	return nil
}

// finishInPlace ends an in-place update the kubelet has carried out (or readies a new pod of
// an InPlaceIfPossible set): InPlaceUpdateReady True, the update record removed.
func (c *Controller) finishInPlace(ctx context.Context, set *jkev1alpha1.EnhancedStatefulSet, pod *corev1.Pod) error {
	if pod == nil {
		return nil
	}
	if hasReadinessGate(pod) && !conditionTrue(pod, InPlaceUpdateReady) {
		if _, err := c.patchInPlaceReady(ctx, pod, corev1.ConditionTrue, "ContainersUpdated", ""); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("set %s True on Pod %s: %w", InPlaceUpdateReady, pod.Name, err)
		}
	}
	if _, ok := pod.Annotations[AnnotationInPlaceUpdate]; !ok {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"uid": pod.UID, "annotations": map[string]any{AnnotationInPlaceUpdate: nil}}})
	_, err := c.kubeClient.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove the in-place update record of Pod %s: %w", pod.Name, err)
	}
	return nil
}

// patchInPlaceReady sets the InPlaceUpdateReady condition of pod (strategic merge on the
// status subresource: the kubelet's own conditions stay).
func (c *Controller) patchInPlaceReady(ctx context.Context, pod *corev1.Pod, status corev1.ConditionStatus, reason, message string) (*corev1.Pod, error) {
	cond := corev1.PodCondition{Type: InPlaceUpdateReady, Status: status, Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(c.now())}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"uid": pod.UID}, "status": map[string]any{"conditions": []corev1.PodCondition{cond}}})
	return c.kubeClient.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
}

// updateStatus writes the observed status and conditions, completing the rollout (current
// revision := update revision) once every replica runs the update revision and is ready.
func (c *Controller) updateStatus(ctx context.Context, set *jkev1alpha1.EnhancedStatefulSet, plan *Plan, current, update *appsv1.ControllerRevision,
	collisionCount int32, selector labels.Selector, result executed) error {
	conflicts := result.conflicts
	replicas := int32(1)
	if set.Spec.Replicas != nil {
		replicas = *set.Spec.Replicas
	}
	st := set.Status.DeepCopy()
	st.ObservedGeneration = set.Generation
	st.Replicas, st.ReadyReplicas, st.AvailableReplicas = plan.Replicas, plan.ReadyReplicas, plan.AvailableReplicas
	st.CurrentReplicas, st.UpdatedReplicas = plan.CurrentReplicas, plan.UpdatedReplicas
	st.CurrentRevision, st.UpdateRevision = current.Name, update.Name
	st.CollisionCount = &collisionCount
	st.LabelSelector = selector.String()
	if st.UpdatedReplicas == replicas && st.ReadyReplicas == replicas && st.Replicas == replicas {
		st.CurrentRevision, st.CurrentReplicas = update.Name, st.UpdatedReplicas
	}

	gen := set.Generation
	ru := set.Spec.UpdateStrategy.RollingUpdate
	paused := ru != nil && ru.Paused && set.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType
	if paused {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionPaused, Status: metav1.ConditionTrue, Reason: "Paused", Message: "updateStrategy.rollingUpdate.paused is true: no pod moves to a new revision", ObservedGeneration: gen})
	} else {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionPaused, Status: metav1.ConditionFalse, Reason: "NotPaused", ObservedGeneration: gen})
	}
	done := st.Replicas == replicas && st.ReadyReplicas == replicas && len(plan.Actions) == 0 && plan.Waiting == nil
	prev := meta.FindStatusCondition(set.Status.Conditions, ConditionProgressing)
	switch {
	case paused && !done:
		msg := "updateStrategy.rollingUpdate.paused is true"
		if plan.Waiting != nil {
			msg = plan.Waiting.Message
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionProgressing, Status: metav1.ConditionFalse, Reason: "Paused", Message: msg, ObservedGeneration: gen})
	case done:
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionProgressing, Status: metav1.ConditionFalse, Reason: "Settled",
			Message: fmt.Sprintf("%d/%d pods at revision %s", st.UpdatedReplicas, replicas, update.Name), ObservedGeneration: gen})
	case plan.Waiting != nil:
		// The message names the pods the rollout waits on and why: what a user needs to see when
		// a rollout does not move.
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionProgressing, Status: metav1.ConditionTrue, Reason: string(plan.Waiting.Reason),
			Message: plan.Waiting.Message, ObservedGeneration: gen})
		if plan.Waiting.Stuck && (prev == nil || prev.Reason != string(plan.Waiting.Reason) || prev.Message != plan.Waiting.Message) {
			c.recorder.Event(set, corev1.EventTypeWarning, "RolloutWaiting", plan.Waiting.Message)
		}
	default:
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionProgressing, Status: metav1.ConditionTrue, Reason: "Updating",
			Message: fmt.Sprintf("%d/%d pods at revision %s, %d unavailable of budget %d", st.UpdatedReplicas, replicas, update.Name, plan.Unavailable, plan.MaxUnavailable), ObservedGeneration: gen})
	}
	if paused && plan.Waiting != nil && (prev == nil || prev.Reason != "Paused") {
		c.recorder.Event(set, corev1.EventTypeNormal, "RolloutPaused", plan.Waiting.Message)
	}
	if st.AvailableReplicas >= replicas-int32(plan.MaxUnavailable) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionAvailable, Status: metav1.ConditionTrue, Reason: "MinimumReplicasAvailable", ObservedGeneration: gen})
	} else {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionAvailable, Status: metav1.ConditionFalse, Reason: "MinimumReplicasUnavailable",
			Message: fmt.Sprintf("%d available, %d required", st.AvailableReplicas, replicas-int32(plan.MaxUnavailable)), ObservedGeneration: gen})
	}
	if len(conflicts) > 0 {
		b, _ := json.Marshal(conflicts)
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionStaticIPConflict, Status: metav1.ConditionTrue, Reason: "StaticIPOwnedElsewhere", Message: string(b), ObservedGeneration: gen})
	} else if meta.FindStatusCondition(st.Conditions, ConditionStaticIPConflict) != nil && plan.Replicas == replicas {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionStaticIPConflict, Status: metav1.ConditionFalse, Reason: "NoConflict", ObservedGeneration: gen})
	}
	if len(result.createFailures) > 0 {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionReplicaFailure, Status: metav1.ConditionTrue, Reason: "FailedCreate",
			Message: strings.Join(result.createFailures, "; "), ObservedGeneration: gen})
	} else if meta.FindStatusCondition(st.Conditions, ConditionReplicaFailure) != nil && plan.Replicas >= replicas {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionReplicaFailure, Status: metav1.ConditionFalse, Reason: "AllCreated", ObservedGeneration: gen})
	}
	if apiequality.Semantic.DeepEqual(st, &set.Status) {
		return nil
	}
	upd := set.DeepCopy()
	upd.Status = *st
	written, err := c.client.JkeV1alpha1().EnhancedStatefulSets(set.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	metrics.ObserveStatusWrite(Name, err)
	key := set.Namespace + "/" + set.Name
	if err == nil {
		c.rememberStatusWrite(key, set.ResourceVersion, written)
	}
	if apierrors.IsConflict(err) {
		c.queue.Add(key)
		return nil
	}
	return err
}

// --- the controller's own status writes ---

// withOwnStatusWrite returns set (a copy of the cached object) with the status and
// resourceVersion of this controller's last status write while the cache still shows a
// version that write replaced. Pod events start the next sync before the set's own watch
// event for a write arrives; from the older copy that sync would find the status changed,
// write it again and fail with a conflict (30 of 198 writes in a 50-pod rollout). Any other
// resourceVersion means the cache has caught up or someone else wrote the set: the cache wins.
func (c *Controller) withOwnStatusWrite(key string, set *jkev1alpha1.EnhancedStatefulSet) *jkev1alpha1.EnhancedStatefulSet {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.statusWrites[key]
	if !ok {
		return set
	}
	if !slices.Contains(w.staleRVs, set.ResourceVersion) || w.written.Generation != set.Generation {
		delete(c.statusWrites, key)
		return set
	}
	set.ResourceVersion = w.written.ResourceVersion
	set.Status = *w.written.Status.DeepCopy()
	return set
}

// rememberStatusWrite records a successful status write made from a set at resourceVersion
// from (the cached one, or the previous write's).
func (c *Controller) rememberStatusWrite(key, from string, written *jkev1alpha1.EnhancedStatefulSet) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var stale []string
	if w, ok := c.statusWrites[key]; ok && w.written.ResourceVersion == from {
		stale = w.staleRVs
	}
	if len(stale) >= maxStaleRVs {
		delete(c.statusWrites, key)
		return
	}
	c.statusWrites[key] = statusWrite{written: written, staleRVs: append(slices.Clone(stale), from)}
}

// --- expectations ---

func (c *Controller) expect(set *jkev1alpha1.EnhancedStatefulSet, pod string, e expectation) {
	key := set.Namespace + "/" + set.Name
	e.deadline = c.now().Add(expectationTTL)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.expectations[key] == nil {
		c.expectations[key] = map[string]expectation{}
	}
	c.expectations[key][pod] = e
}

func (c *Controller) forget(set *jkev1alpha1.EnhancedStatefulSet, pod string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.expectations[set.Namespace+"/"+set.Name], pod)
}

func (c *Controller) clearExpectations(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.expectations, key)
	delete(c.statusWrites, key)
}

// withOwnPodWrites returns pods (the set's pods in the cache) with the writes of this
// controller the cache does not show yet applied: a pod it deleted is terminating, a pod it
// created or patched is the object the API server returned. Planning on that view keeps the
// budget exact without waiting for the watch; the expectations only end when the cache has
// caught up (or after expectationTTL). wait is true only when a write is unknown (in flight
// in another goroutine: never while syncs of one key are serialized).
func (c *Controller) withOwnPodWrites(key string, pods []*corev1.Pod) (out []*corev1.Pod, wait bool) {
	ns, _, _ := cache.SplitMetaNamespaceKey(key)
	c.mu.Lock()
	defer c.mu.Unlock()
	out = pods
	cloned := false
	replace := func(name string, with *corev1.Pod) {
		if !cloned { // pods is the caller's slice
			out, cloned = slices.Clone(pods), true
		}
		for i, p := range out {
			if p.Name == name {
				out[i] = with
				return
			}
		}
		out = append(out, with)
	}
	for name, e := range c.expectations[key] {
		pod, err := c.podLister.Pods(ns).Get(name)
		var met bool
		switch {
		case e.deletedUID != "":
			met = err != nil || pod.UID != e.deletedUID || pod.DeletionTimestamp != nil
		case len(e.staleRVs) > 0:
			met = err != nil || !slices.Contains(e.staleRVs, pod.ResourceVersion)
		default:
			met = err == nil
		}
		if met || c.now().After(e.deadline) {
			delete(c.expectations[key], name)
			continue
		}
		switch {
		case e.deletedUID != "":
			if slices.ContainsFunc(pods, func(p *corev1.Pod) bool { return p.Name == name && p.UID == e.deletedUID }) {
				deleting := pod.DeepCopy()
				now := metav1.NewTime(c.now())
				deleting.DeletionTimestamp = &now
				replace(name, deleting)
			}
		case e.written != nil:
			replace(name, e.written)
		default:
			wait = true
		}
	}
	return out, wait
}
