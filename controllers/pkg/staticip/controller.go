package staticip

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1informers "github.com/staticip/staticip/apis/generated/informers/externalversions/jke/v1"
	jkev1alpha1informers "github.com/staticip/staticip/apis/generated/informers/externalversions/jke/v1alpha1"
	jkev1listers "github.com/staticip/staticip/apis/generated/listers/jke/v1"
	jkev1alpha1listers "github.com/staticip/staticip/apis/generated/listers/jke/v1alpha1"
	"github.com/staticip/staticip/apis/iprangelabel"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/apis/ordinal"
	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/apis/workloadref"
	"github.com/staticip/staticip/controllers/pkg/metrics"
	"github.com/staticip/staticip/controllers/pkg/worker"
)

// Name is the controller's name for --controllers, metrics and Events.
const Name = "staticip"

// Workload kinds whose pods can have StaticIPs.
var (
	EnhancedStatefulSetKind = jkev1alpha1.SchemeGroupVersion.WithKind("EnhancedStatefulSet")
	StatefulSetKind         = appsv1.SchemeGroupVersion.WithKind("StatefulSet")
)

const (
	ipIndex       = "staticip.jke.jdcloud.com/ip"
	workloadIndex = "staticip.jke.jdcloud.com/workload"
	rangeIndex    = "staticip.jke.jdcloud.com/iprange"
)

// Conflict reasons, also the label of staticip_conflicts_total.
const (
	ConflictDuplicateIP        = "DuplicateIP"
	ConflictAnnotationMismatch = "AnnotationMismatch"
	ConflictPodIPMismatch      = "PodIPMismatch"
	ConflictWorkloadMismatch   = "WorkloadMismatch"
)

// Controller keeps StaticIP records in step with their pods and workloads.
type Controller struct {
	kubeClient kubernetes.Interface
	client     versioned.Interface
	recorder   record.EventRecorder

	sipLister  jkev1listers.StaticIPLister
	sipIndexer cache.Indexer
	// ranges: a reported pod IP is recorded only inside an IPRange of the pod's node.
	ranges    jkev1listers.IPRangeLister
	podLister corelisters.PodLister
	setLister jkev1alpha1listers.EnhancedStatefulSetLister
	stsLister appslisters.StatefulSetLister
	synced    []cache.InformerSynced

	// OpenKruise Advanced StatefulSets (kruise.go): read through the dynamic client once
	// discovery says they are served; nil clients leave them out.
	dynamic   dynamic.Interface
	discovery discovery.DiscoveryInterface
	kruise    kruiseState

	queue workqueue.TypedRateLimitingInterface[string]
}

// NewController wires the StaticIP controller to its informers.
func NewController(kubeClient kubernetes.Interface, client versioned.Interface,
	sipInformer jkev1informers.StaticIPInformer, podInformer coreinformers.PodInformer,
	setInformer jkev1alpha1informers.EnhancedStatefulSetInformer, stsInformer appsinformers.StatefulSetInformer,
	rangeInformer jkev1informers.IPRangeInformer, dynamicClient dynamic.Interface, recorder record.EventRecorder) (*Controller, error) {
	if err := sipInformer.Informer().AddIndexers(cache.Indexers{
		ipIndex: func(obj any) ([]string, error) {
			if s, ok := obj.(*jkev1.StaticIP); ok {
				return addressKeys(s), nil // every address of a dual-stack record
			}
			return nil, nil
		},
		// The records an IPRange's arrival, removal or resize may relabel: those labelled with
		// it, and those with an IP and no label (rangeIndexUnlabelled).
		rangeIndex: func(obj any) ([]string, error) {
			if s, ok := obj.(*jkev1.StaticIP); ok {
				if v, ok := s.Labels[iprangelabel.Key]; ok {
					return []string{v}, nil
				}
				if s.Spec.IP != "" {
					return []string{rangeIndexUnlabelled}, nil
				}
			}
			return nil, nil
		},
		workloadIndex: func(obj any) ([]string, error) {
			if s, ok := obj.(*jkev1.StaticIP); ok && s.Spec.Ref != "" {
				return []string{workloadKey(s.Namespace, RecordRef(s))}, nil
			}
			return nil, nil
		},
	}); err != nil {
		return nil, err
	}
	c := &Controller{
		kubeClient: kubeClient, client: client, recorder: recorder,
		sipLister: sipInformer.Lister(), sipIndexer: sipInformer.Informer().GetIndexer(),
		podLister: podInformer.Lister(), setLister: setInformer.Lister(), stsLister: stsInformer.Lister(),
		ranges: rangeInformer.Lister(), dynamic: dynamicClient, discovery: kubeClient.Discovery(),
		synced: []cache.InformerSynced{sipInformer.Informer().HasSynced, podInformer.Informer().HasSynced,
			setInformer.Informer().HasSynced, stsInformer.Informer().HasSynced, rangeInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name}),
	}
	add := func(h cache.ResourceEventHandler, inf cache.SharedIndexInformer) error {
		_, err := inf.AddEventHandler(h)
		return err
	}
	sipHandler := cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			c.enqueueKey(obj)
			if s, ok := obj.(*jkev1.StaticIP); ok {
				c.enqueueIPs(s) // a new record may duplicate an existing one's IP
			}
		},
		UpdateFunc: func(old, cur any) {
			c.enqueueKey(cur)
			// Another record with the old or new IP may now be (or no longer be) in conflict.
			for _, o := range []any{old, cur} {
				if s, ok := o.(*jkev1.StaticIP); ok {
					c.enqueueIPs(s)
				}
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if s, ok := obj.(*jkev1.StaticIP); ok {
				c.enqueueIPs(s)
				c.queue.Add(s.Namespace + "/" + s.Name) // a pod that still wants one gets it back
			}
		},
	}
	podHandler := cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueuePod,
		UpdateFunc: func(_, cur any) { c.enqueuePod(cur) },
		DeleteFunc: c.enqueuePod,
	}
	workloadHandler := cache.ResourceEventHandlerFuncs{
		UpdateFunc: c.workloadUpdated,
		DeleteFunc: c.enqueueWorkload,
	}
	rangeHandler := cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueRangeRecords,
		UpdateFunc: func(old, cur any) {
			o, okOld := old.(*jkev1.IPRange)
			n, okCur := cur.(*jkev1.IPRange)
			if !okOld || !okCur || o.Spec.CIDR != n.Spec.CIDR || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) {
				c.enqueueRangeRecords(cur)
			}
		},
		DeleteFunc: c.enqueueRangeRecords,
	}
	for _, e := range []error{
		add(sipHandler, sipInformer.Informer()), add(podHandler, podInformer.Informer()), add(rangeHandler, rangeInformer.Informer()),
		add(workloadHandler, setInformer.Informer()), add(workloadHandler, stsInformer.Informer()),
	} {
		if e != nil {
			return nil, e
		}
	}
	return c, nil
}

// rangeIndexUnlabelled is rangeIndex's key for the records with an IP and no range label.
const rangeIndexUnlabelled = "\x00unlabelled"

// enqueueRangeRecords queues the records an IPRange event may relabel: those labelled with it
// and the unlabelled ones with an IP.
func (c *Controller) enqueueRangeRecords(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	r, ok := obj.(*jkev1.IPRange)
	if !ok {
		return
	}
	for _, key := range []string{iprangelabel.Value(r.Name), rangeIndexUnlabelled} {
		objs, _ := c.sipIndexer.ByIndex(rangeIndex, key)
		for _, o := range objs {
			c.enqueueKey(o)
		}
	}
}

// withRangeLabel sets (or removes) sip's iprangelabel.Key to the IPRange its IP lies in; it
// says whether that changed anything. sip must be the caller's copy.
func withRangeLabel(sip *jkev1.StaticIP, ranges []*jkev1.IPRange) bool {
	want := iprangelabel.For(ranges, sip.Spec.IP)
	cur, has := sip.Labels[iprangelabel.Key]
	switch {
	case want == "" && !has, want != "" && has && cur == want:
		return false
	case want == "":
		delete(sip.Labels, iprangelabel.Key)
	default:
		if sip.Labels == nil {
			sip.Labels = map[string]string{}
		}
		sip.Labels[iprangelabel.Key] = want
	}
	return true
}

// labelRange writes the record's range label when it is not what its IP says (records written
// before the label existed, a range created, deleted or resized): the node agents watch only
// the records of their own ranges, and the unlabelled ones.
func (c *Controller) labelRange(ctx context.Context, sip *jkev1.StaticIP) (*jkev1.StaticIP, error) {
	ranges, err := c.ranges.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	upd := sip.DeepCopy()
	if !withRangeLabel(upd, ranges) {
		return sip, nil
	}
	return c.client.JkeV1().StaticIPs(sip.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
}

func workloadKey(ns string, w workloadref.Ref) string {
	return ns + "/" + w.Group + "/" + w.Kind + "/" + w.Name
}

func (c *Controller) enqueueKey(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// enqueueIPs queues the records that claim any address of s.
func (c *Controller) enqueueIPs(s *jkev1.StaticIP) {
	for _, ip := range addressKeys(s) {
		c.enqueueIP(ip)
	}
}

func (c *Controller) enqueueIP(ip string) {
	if ip == "" {
		return
	}
	objs, _ := c.sipIndexer.ByIndex(ipIndex, ip)
	for _, o := range objs {
		c.enqueueKey(o)
	}
}

// enqueuePod queues the StaticIP of a pod that has one or asks for one.
func (c *Controller) enqueuePod(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if pod.Annotations[jkev1.AnnotationEnable] == "true" || pod.Annotations[podip.AnnotationIPAddress] != "" {
		c.queue.Add(pod.Namespace + "/" + pod.Name)
		return
	}
	// The enable annotation may be on the EnhancedStatefulSet only (as in the published
	// example), not on its pods.
	if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == EnhancedStatefulSetKind.Kind && ref.APIVersion == EnhancedStatefulSetKind.GroupVersion().String() {
		c.queue.Add(pod.Namespace + "/" + pod.Name)
		return
	}
	if _, err := c.sipLister.StaticIPs(pod.Namespace).Get(pod.Name); err == nil {
		c.queue.Add(pod.Namespace + "/" + pod.Name)
	}
}

// workloadUpdated queues the StaticIPs of a workload whose spec (replicas, retention policy)
// changed or that is being deleted. Status writes — one per pod readiness change during a
// rollout — change neither, and would otherwise re-sync every record of the workload.
func (c *Controller) workloadUpdated(old, cur any) {
	o, okOld := old.(metav1.Object)
	n, okCur := cur.(metav1.Object)
	if okOld && okCur && o.GetGeneration() == n.GetGeneration() &&
		(o.GetDeletionTimestamp() == nil) == (n.GetDeletionTimestamp() == nil) {
		return
	}
	c.enqueueWorkload(cur)
}

// enqueueWorkload queues the StaticIPs of a workload that scaled or went away.
func (c *Controller) enqueueWorkload(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	var key string
	switch w := obj.(type) {
	case *jkev1alpha1.EnhancedStatefulSet:
		key = workloadKey(w.Namespace, refOf(EnhancedStatefulSetKind, w.Name))
	case *appsv1.StatefulSet:
		key = workloadKey(w.Namespace, refOf(StatefulSetKind, w.Name))
	case *unstructured.Unstructured:
		if w.GroupVersionKind().GroupKind() != KruiseStatefulSetKind.GroupKind() {
			return
		}
		key = workloadKey(w.GetNamespace(), refOf(KruiseStatefulSetKind, w.GetName()))
	default:
		return
	}
	objs, _ := c.sipIndexer.ByIndex(workloadIndex, key)
	for _, o := range objs {
		c.enqueueKey(o)
	}
}

// Run starts workers and blocks until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	go c.watchKruise(ctx)
	worker.Run(ctx, Name, "StaticIP", c.queue, c.synced, workers, func(ctx context.Context, key string) (time.Duration, error) {
		return 0, c.sync(ctx, key)
	})
}

// podWorkload finds the workload a pod belongs to, if it is one whose pods can have StaticIPs.
func (c *Controller) podWorkload(pod *corev1.Pod) (*Workload, error) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return nil, nil
	}
	switch {
	case ref.Kind == EnhancedStatefulSetKind.Kind && ref.APIVersion == EnhancedStatefulSetKind.GroupVersion().String():
		set, err := c.setLister.EnhancedStatefulSets(pod.Namespace).Get(ref.Name)
		if err != nil || set.UID != ref.UID {
			return nil, err
		}
		w := EnhancedStatefulSetWorkload(set)
		return &w, nil
	case ref.Kind == StatefulSetKind.Kind && ref.APIVersion == StatefulSetKind.GroupVersion().String():
		sts, err := c.stsLister.StatefulSets(pod.Namespace).Get(ref.Name)
		if err != nil || sts.UID != ref.UID {
			return nil, err
		}
		return &Workload{Object: sts, GVK: StatefulSetKind, Retention: RetentionPolicy(nil)}, nil
	case isKruiseStatefulSet(ref):
		return c.podOfKruiseSet(pod, ref), nil
	}
	return nil, nil
}

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := c.podLister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		pod = nil
	} else if err != nil {
		return err
	}
	cached, err := c.sipLister.StaticIPs(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return c.adoptPod(ctx, pod)
	}
	if err != nil {
		return err
	}
	if cached.DeletionTimestamp != nil {
		return nil
	}
	sip, err := c.reconcileOwnership(ctx, cached.DeepCopy())
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		c.queue.Add(key) // a newer version is on its way
		return nil
	}
	if err != nil {
		c.recorder.Eventf(cached, corev1.EventTypeWarning, "FailedRetentionPolicy", "apply the workload's retention policy: %v", err)
		return err
	}
	if sip, err = c.labelRange(ctx, sip); apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		c.queue.Add(key)
		return nil
	} else if err != nil {
		return err
	}
	if pod != nil && pod.DeletionTimestamp == nil && !isPodTerminal(pod) {
		return c.syncLivePod(ctx, sip, pod)
	}
	return c.syncAbsentPod(ctx, sip)
}

func isPodTerminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded
}

// adoptPod creates the record for a live pod of an enabled workload that has none: the pod of
// a native StatefulSet whose template carries the enable annotation (the StatefulSet
// controller creates pods without asking us), or a pod whose record went away under it (a
// user deleted it, or it was released while the pod was being created). Self-healing: the pod
// keeps its IP, recorded again on the next sync.
func (c *Controller) adoptPod(ctx context.Context, pod *corev1.Pod) error {
	if pod == nil || pod.DeletionTimestamp != nil || isPodTerminal(pod) {
		return nil
	}
	w, err := c.podWorkload(pod)
	if err != nil || w == nil {
		return err
	}
	if !Enabled(w.Object.GetAnnotations(), pod.Annotations) {
		return nil
	}
	_, err = Ensure(ctx, c.client, c.sipLister, *w, pod.Name, time.Now())
	if err == nil {
		c.recorder.Eventf(pod, corev1.EventTypeNormal, "StaticIPCreated", "created StaticIP %s for the pod of %s %s", pod.Name, w.GVK.Kind, w.Object.GetName())
		return nil
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return err // retried; nothing failed
	}
	c.recorder.Eventf(pod, corev1.EventTypeWarning, "FailedCreateStaticIP", "%v", err)
	return err
}

// recordWorkload returns the live workload a record names (spec.kind/ref) with the retention
// policy that applies to the record: the EnhancedStatefulSet's staticIPRetentionPolicy, or for
// a StatefulSet (whose API has no such field) the record's own spec.retentionPolicy.
func (c *Controller) recordWorkload(sip *jkev1.StaticIP) *Workload {
	switch {
	case recordOfKind(sip, EnhancedStatefulSetKind):
		set, err := c.setLister.EnhancedStatefulSets(sip.Namespace).Get(sip.Spec.Ref)
		if err != nil || set.DeletionTimestamp != nil {
			return nil
		}
		w := EnhancedStatefulSetWorkload(set)
		return &w
	case recordOfKind(sip, StatefulSetKind):
		sts, err := c.stsLister.StatefulSets(sip.Namespace).Get(sip.Spec.Ref)
		if err != nil || sts.DeletionTimestamp != nil {
			return nil
		}
		return &Workload{Object: sts, GVK: StatefulSetKind, Retention: RetentionPolicy(sip.Spec.RetentionPolicy)}
	case recordOfKind(sip, KruiseStatefulSetKind):
		u := c.kruiseSet(sip.Namespace, sip.Spec.Ref)
		if u == nil || u.GetDeletionTimestamp() != nil {
			return nil
		}
		return kruiseWorkload(u, sip.Spec.RetentionPolicy)
	}
	return nil
}

// reconcileOwnership makes the owner references of a record follow its workload's retention
// policy when that policy changed after the record was made: whenDeleted Retain removes the
// reference (the garbage collector must not delete the record with the workload), Delete adds
// it.
func (c *Controller) reconcileOwnership(ctx context.Context, sip *jkev1.StaticIP) (*jkev1.StaticIP, error) {
	w := c.recordWorkload(sip)
	if w == nil {
		return sip, nil
	}
	upd, changed := ReconcileOwnership(sip, *w)
	if !changed {
		return sip, nil
	}
	updated, err := c.client.JkeV1().StaticIPs(sip.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	c.recorder.Eventf(updated, corev1.EventTypeNormal, "RetentionPolicyApplied", "whenDeleted=%s, whenScaled=%s of %s %s",
		w.Retention.WhenDeleted, w.Retention.WhenScaled, w.GVK.Kind, w.Object.GetName())
	return updated, nil
}

// syncLivePod records a live pod's IP, node, workload and requests (Bound), or reports a
// conflict without overwriting anything.
func (c *Controller) syncLivePod(ctx context.Context, sip *jkev1.StaticIP, pod *corev1.Pod) error {
	orig := sip.DeepCopy()
	annotated := pod.Annotations[podip.AnnotationIPAddress]
	// Per IP family: a dual-stack pod runs with two addresses, a dual-stack record names two.
	rec, running := sip.Spec.ParsedAddresses(), podAddresses(pod)
	var conflicts, kinds []string
	conflict := func(kind, format string, args ...any) {
		conflicts = append(conflicts, fmt.Sprintf(format, args...))
		kinds = append(kinds, kind)
	}
	// Events and the metric fire when a conflict appears or changes, not on every resync.
	defer func() {
		if len(conflicts) == 0 {
			return
		}
		if cond := meta.FindStatusCondition(orig.Status.Conditions, jkev1.StaticIPConditionConflict); cond != nil &&
			cond.Status == metav1.ConditionTrue && cond.Message == strings.Join(conflicts, "; ") {
			return
		}
		for i, msg := range conflicts {
			metrics.StaticIPConflicts.WithLabelValues(kinds[i]).Inc()
			c.recorder.Event(sip, corev1.EventTypeWarning, "Conflict"+kinds[i], msg)
			c.recorder.Event(pod, corev1.EventTypeWarning, "StaticIPConflict", msg)
		}
	}()

	// A record retained from one workload is never taken by another of the same pod name (an
	// EnhancedStatefulSet web and a StatefulSet web, or apps' StatefulSet web and OpenKruise's):
	// report it, record nothing, annotate nothing. Any controller counts, not only the kinds we
	// record. A pod without a controller (orphaned, about to be adopted) is no conflict.
	w, _ := c.podWorkload(pod)
	if ref := metav1.GetControllerOf(pod); ref != nil {
		owner := workloadref.FromOwner(ref.APIVersion, ref.Kind, ref.Name)
		if rec := RecordRef(sip); !workloadref.Belongs(rec, &owner) {
			conflict(ConflictWorkloadMismatch, "pod %s belongs to %s but StaticIP %s is retained for %s", pod.Name, owner, sip.Name, rec)
		}
	}
	if rec.IsValid() && annotated != "" {
		if choice, err := podip.Choose(rec.String(), annotated); err != nil || choice.Overrode.IsValid() {
			conflict(ConflictAnnotationMismatch, "pod %s has %s=%s but StaticIP %s records %s", pod.Name, podip.AnnotationIPAddress, annotated, sip.Name, rec)
		}
	}
	// The record's addresses, once set, are the truth per family: a pod that came up with
	// another address is a conflict for a human (or the CNI) to resolve, never a silent rewrite;
	// a single-stack record gains the pod's address of the other family (recordAddresses).
	next, mismatch := recordAddresses(rec, running)
	if mismatch != "" {
		conflict(ConflictPodIPMismatch, "pod %s runs with IP %s but StaticIP %s records %s", pod.Name, running, sip.Name, rec)
	}
	for _, ip := range next.List() {
		for _, other := range c.duplicates(sip, ip.String()) {
			conflict(ConflictDuplicateIP, "IP %s is also claimed by StaticIP %s", ip, other)
		}
	}
	// The addresses a node reports are recorded (or the record moved to that node) only inside
	// the node's own ranges: a node cannot pin addresses of other nodes' ranges.
	if running.IsValid() && mismatch == "" && pod.Spec.NodeName != "" && (next != rec || sip.Spec.Node != pod.Spec.NodeName) {
		ranges, err := c.ranges.List(labels.Everything())
		if err != nil {
			return err
		}
		for _, ip := range next.List() {
			if running.Of(podip.Family(ip)) != ip {
				continue // recorded before, not held by the pod now
			}
			if why := OutsideNodeRanges(ranges, ip.String(), pod.Spec.NodeName); why != "" {
				conflict(ConflictIPOutsideNodeRanges, "pod %s: %s", pod.Name, why)
			}
		}
	}

	if len(conflicts) == 0 && running.IsValid() && pod.Spec.NodeName != "" {
		setAddresses(&sip.Spec, next)
		sip.Spec.Node = pod.Spec.NodeName // the IP followed the pod (e.g. a failover moved its range)
		sip.Spec.Pod = pod.Name
		if w != nil {
			sip.Spec.APIGroup, sip.Spec.Kind, sip.Spec.Ref = w.GVK.Group, w.GVK.Kind, w.Object.GetName()
		}
		sip.Spec.Resources = resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
		if !apiequality.Semantic.DeepEqual(orig.Spec, sip.Spec) {
			// The range label goes with the IP, in one write: the record moves from every
			// agent's view (unlabelled) to the view of its range's holder.
			ranges, err := c.ranges.List(labels.Everything())
			if err != nil {
				return err
			}
			withRangeLabel(sip, ranges)
			updated, err := c.client.JkeV1().StaticIPs(sip.Namespace).Update(ctx, sip, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				// An optimistic-lock retry (the record changed since the cache showed it), not a
				// failure: the newer version comes with its own sync.
				c.queue.Add(sip.Namespace + "/" + sip.Name)
				return nil
			}
			if err != nil {
				c.recorder.Eventf(sip, corev1.EventTypeWarning, "FailedRecord", "record pod %s: %v", pod.Name, err)
				return err
			}
			sip = updated
		}
	} else if len(conflicts) == 0 && !running.IsValid() && rec.IsValid() && annotated == "" && pod.Spec.NodeName == "" {
		// A pod created without our annotation (a native StatefulSet's): tell the CNI which IP
		// to give it, as long as it has no sandbox yet. The node is the scheduler's business
		// (it finds the StaticIP by pod name); a pod's affinity cannot change after creation.
		//
		// The patch names the pod checked above (its workload is the record's): uid and
		// resourceVersion are preconditions, so a same-name pod of another workload created
		// since the cache saw this one (or this pod changed) gets nothing: a conflict, retried
		// with the newer pod, which is checked again.
		patch := fmt.Sprintf(`{"metadata":{"uid":%q,"resourceVersion":%q,"annotations":{%q:%q}}}`,
			pod.UID, pod.ResourceVersion, podip.AnnotationIPAddress, rec)
		_, err := c.kubeClient.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		switch {
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			c.queue.Add(sip.Namespace + "/" + sip.Name) // the newer pod comes with its own sync
			return nil
		case err != nil:
			return err
		}
	}

	st := sip.Status.DeepCopy()
	gen := sip.Generation
	if len(conflicts) > 0 {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: jkev1.StaticIPConditionConflict, Status: metav1.ConditionTrue,
			Reason: "Conflict", Message: strings.Join(conflicts, "; "), ObservedGeneration: gen})
	} else {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: jkev1.StaticIPConditionConflict, Status: metav1.ConditionFalse, Reason: "NoConflict", ObservedGeneration: gen})
	}
	recorded := sip.Spec.ParsedAddresses().Primary
	switch {
	case len(conflicts) == 0 && running.IsValid() && running.Of(podip.Family(recorded)) == recorded:
		st.Phase, st.PodUID = jkev1.StaticIPBound, pod.UID
	case st.Phase == "":
		st.Phase = jkev1.StaticIPPending
	}
	st.ObservedGeneration = gen
	return c.updateStatus(ctx, sip, st)
}

// syncAbsentPod keeps the record of an absent pod Reserved (or Pending when it never had an
// IP) and applies whenScaled: the records of ordinals the workload scaled away are deleted.
func (c *Controller) syncAbsentPod(ctx context.Context, sip *jkev1.StaticIP) error {
	if c.scaledAway(ctx, sip) {
		// Released, then deleted with the resourceVersion of that write as precondition: if a
		// workload controller claimed the record for a new pod in between (staticip.Ensure
		// writes it), the delete fails and the next sync sees the pod; and Ensure refuses a
		// record that is already Released. So a released record never decorates a new pod.
		released := sip.DeepCopy()
		released.Status.Phase = jkev1.StaticIPReleased
		if sip.Status.Phase != jkev1.StaticIPReleased {
			written, err := c.client.JkeV1().StaticIPs(sip.Namespace).UpdateStatus(ctx, released, metav1.UpdateOptions{})
			metrics.ObserveStatusWrite(Name, err)
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				c.queue.Add(sip.Namespace + "/" + sip.Name)
				return nil
			}
			if err != nil {
				return err
			}
			released = written
		}
		err := c.client.JkeV1().StaticIPs(sip.Namespace).Delete(ctx, sip.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &sip.UID, ResourceVersion: &released.ResourceVersion}})
		if apierrors.IsConflict(err) {
			c.queue.Add(sip.Namespace + "/" + sip.Name) // claimed meanwhile: look again
			return nil
		}
		if err != nil && !apierrors.IsNotFound(err) {
			c.recorder.Eventf(sip, corev1.EventTypeWarning, "FailedRelease", "delete after scale-down: %v", err)
			return err
		}
		return nil
	}
	st := sip.Status.DeepCopy()
	if sip.Spec.IP != "" {
		st.Phase = jkev1.StaticIPReserved
	} else {
		st.Phase = jkev1.StaticIPPending
	}
	st.ObservedGeneration = sip.Generation
	var msgs []string
	for _, ip := range sip.Spec.AddressList() {
		if dups := c.duplicates(sip, ip.String()); len(dups) > 0 {
			msgs = append(msgs, fmt.Sprintf("IP %s is also claimed by StaticIP %s", ip, strings.Join(dups, ", ")))
		}
	}
	if len(msgs) > 0 {
		msg := strings.Join(msgs, "; ")
		if cond := meta.FindStatusCondition(st.Conditions, jkev1.StaticIPConditionConflict); cond == nil || cond.Status != metav1.ConditionTrue || cond.Message != msg {
			metrics.StaticIPConflicts.WithLabelValues(ConflictDuplicateIP).Inc()
			c.recorder.Event(sip, corev1.EventTypeWarning, "Conflict"+ConflictDuplicateIP, msg)
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: jkev1.StaticIPConditionConflict, Status: metav1.ConditionTrue,
			Reason: "Conflict", Message: msg, ObservedGeneration: sip.Generation})
	} else if meta.FindStatusCondition(st.Conditions, jkev1.StaticIPConditionConflict) != nil {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: jkev1.StaticIPConditionConflict, Status: metav1.ConditionFalse, Reason: "NoConflict", ObservedGeneration: sip.Generation})
	}
	return c.updateStatus(ctx, sip, st)
}

// duplicates names the other live records that claim ip.
func (c *Controller) duplicates(sip *jkev1.StaticIP, ip string) []string {
	if ip == "" {
		return nil
	}
	var out []string
	others, _ := c.sipIndexer.ByIndex(ipIndex, ip)
	for _, o := range others {
		other := o.(*jkev1.StaticIP)
		if other.UID != sip.UID && other.DeletionTimestamp == nil {
			out = append(out, other.Namespace+"/"+other.Name)
		}
	}
	sort.Strings(out)
	return out
}

// scaledAway says whether the record's ordinal is at or above its workload's replicas and the
// workload's policy deletes records on scale-down. The cache decides "no" (every sync of a
// record its workload still wants, which is nearly all of them, costs no API read); a "yes"
// is confirmed against the workload read from the API server, not the cache: deleting the
// record of an ordinal that just came back would lose its IP. A cache that lags a scale-down
// only delays the deletion: the scale-down's own update event queues the records again.
func (c *Controller) scaledAway(ctx context.Context, sip *jkev1.StaticIP) bool {
	if sip.Spec.Ref == "" {
		return false
	}
	n := ordinal.Of(sip.Spec.Ref, sip.Name)
	if n < 0 {
		return false
	}
	switch {
	case recordOfKind(sip, EnhancedStatefulSetKind):
		cached, err := c.setLister.EnhancedStatefulSets(sip.Namespace).Get(sip.Spec.Ref)
		if err != nil || !setScaledAway(cached, n) {
			return false
		}
		set, err := c.client.JkeV1alpha1().EnhancedStatefulSets(sip.Namespace).Get(ctx, sip.Spec.Ref, metav1.GetOptions{})
		return err == nil && setScaledAway(set, n)
	case recordOfKind(sip, StatefulSetKind):
		policy := RetentionPolicy(sip.Spec.RetentionPolicy)
		cached, err := c.stsLister.StatefulSets(sip.Namespace).Get(sip.Spec.Ref)
		if err != nil || !stsScaledAway(cached, n, policy) {
			return false
		}
		sts, err := c.kubeClient.AppsV1().StatefulSets(sip.Namespace).Get(ctx, sip.Spec.Ref, metav1.GetOptions{})
		return err == nil && stsScaledAway(sts, n, policy)
	case recordOfKind(sip, KruiseStatefulSetKind):
		return c.kruiseScaledAwayLive(ctx, sip, n, RetentionPolicy(sip.Spec.RetentionPolicy))
	}
	return false
}

// setScaledAway: the EnhancedStatefulSet (its own retention policy) no longer wants ordinal n.
// A set being deleted: deletion is the garbage collector's job (owner reference).
func setScaledAway(set *jkev1alpha1.EnhancedStatefulSet, n int) bool {
	return set.DeletionTimestamp == nil && RetentionPolicy(set.Spec.StaticIPRetentionPolicy).WhenScaled == jkev1.DeleteStaticIP &&
		n >= int(ptrOr(set.Spec.Replicas, 1))
}

// stsScaledAway: the StatefulSet no longer wants ordinal n (the record's own policy decides).
func stsScaledAway(sts *appsv1.StatefulSet, n int, policy jkev1.StaticIPRetentionPolicy) bool {
	if sts.DeletionTimestamp != nil || policy.WhenScaled != jkev1.DeleteStaticIP {
		return false
	}
	if sts.Spec.Ordinals != nil {
		n -= int(sts.Spec.Ordinals.Start)
	}
	return n >= int(ptrOr(sts.Spec.Replicas, 1))
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

func (c *Controller) updateStatus(ctx context.Context, sip *jkev1.StaticIP, st *jkev1.StaticIPStatus) error {
	if apiequality.Semantic.DeepEqual(*st, sip.Status) {
		return nil
	}
	upd := sip.DeepCopy()
	upd.Status = *st
	_, err := c.client.JkeV1().StaticIPs(sip.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	metrics.ObserveStatusWrite(Name, err)
	if apierrors.IsConflict(err) {
		c.queue.Add(sip.Namespace + "/" + sip.Name)
		return nil
	}
	return err
}
