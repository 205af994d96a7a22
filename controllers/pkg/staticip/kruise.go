package staticip

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/workloadref"
)

// OpenKruise's Advanced StatefulSet (apps.kruise.io) keeps its pods' IPs like a native
// StatefulSet: its controller creates the pods without asking us, the StaticIP controller
// records them (adoptPod), tells a recreated pod its IP, and applies the record's own
// retention policy with Kruise's rule for which ordinals the set still wants. staticip does
// not depend on Kruise: the sets are read through the dynamic client, trimmed to the fields
// used here, and only once the API server serves the resource — Kruise may be installed
// before or after staticip, so discovery is asked until it is there.

// KruiseStatefulSetKind is the kind and version the Kruise controller puts in its pods' owner
// references (v1beta1 is its storage version; the group and kind identify the workload).
var KruiseStatefulSetKind = schema.GroupVersionKind{Group: workloadref.KruiseGroup, Version: "v1beta1", Kind: "StatefulSet"}

var kruiseStatefulSets = schema.GroupVersionResource{Group: workloadref.KruiseGroup, Version: "v1beta1", Resource: "statefulsets"}

// KruiseDiscoveryInterval is how often the controller asks whether apps.kruise.io serves
// StatefulSets, until it does (one small discovery GET).
var KruiseDiscoveryInterval = 30 * time.Second

// kruiseSets is the trimmed cache of Advanced StatefulSets, once the resource is served.
type kruiseSets struct {
	lister cache.GenericLister
	client dynamic.NamespaceableResourceInterface
}

// kruiseState holds the cache once it has synced; nil before (the pods of Kruise sets are
// then left alone and queued again when it arrives).
type kruiseState = atomic.Pointer[kruiseSets]

// trimKruiseStatefulSet keeps what the controller reads: identity, annotations (the enable
// annotation may be on the set), replicas, ordinals.start and reserveOrdinals. A set's pod
// template alone can be tens of kilobytes; none of it is needed.
func trimKruiseStatefulSet(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	out := &unstructured.Unstructured{Object: map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind()}}
	out.SetName(u.GetName())
	out.SetNamespace(u.GetNamespace())
	out.SetUID(u.GetUID())
	out.SetResourceVersion(u.GetResourceVersion())
	out.SetGeneration(u.GetGeneration())
	out.SetDeletionTimestamp(u.GetDeletionTimestamp())
	out.SetAnnotations(u.GetAnnotations())
	spec := map[string]any{}
	for _, f := range []string{"replicas", "ordinals", "reserveOrdinals"} {
		if v, found, _ := unstructured.NestedFieldCopy(u.Object, "spec", f); found {
			spec[f] = v
		}
	}
	out.Object["spec"] = spec
	return out, nil
}

// kruiseOrdinals is what decides membership in an Advanced StatefulSet.
type kruiseOrdinals struct {
	replicas int
	start    int
	reserved map[int]bool
}

// kruiseOrdinalsOf reads replicas (default 1, as the Kruise webhook defaults it), ordinals.start
// and reserveOrdinals (numbers and "a-b" ranges) from a set.
func kruiseOrdinalsOf(u *unstructured.Unstructured) kruiseOrdinals {
	o := kruiseOrdinals{replicas: 1, reserved: map[int]bool{}}
	if r, found, err := unstructured.NestedInt64(u.Object, "spec", "replicas"); found && err == nil {
		o.replicas = int(r)
	}
	if s, found, err := unstructured.NestedInt64(u.Object, "spec", "ordinals", "start"); found && err == nil {
		o.start = int(s)
	}
	list, _, _ := unstructured.NestedSlice(u.Object, "spec", "reserveOrdinals")
	for _, e := range list {
		switch v := e.(type) {
		case int64:
			o.reserved[int(v)] = true
		case float64:
			o.reserved[int(v)] = true
		case string:
			from, to, ok := parseOrdinalRange(v)
			if !ok {
				// Kruise (GetReserveOrdinalIntSet) then reserves nothing at all: so do we.
				o.reserved = map[int]bool{}
				return o
			}
			for i := from; i <= to; i++ {
				o.reserved[i] = true
			}
		}
	}
	return o
}

// parseOrdinalRange parses Kruise's "a-b" (a <= b).
func parseOrdinalRange(s string) (int, int, bool) {
	a, b, found := strings.Cut(s, "-")
	if !found {
		return 0, 0, false
	}
	from, err1 := strconv.Atoi(a)
	to, err2 := strconv.Atoi(b)
	return from, to, err1 == nil && err2 == nil && from <= to
}

// wants is Kruise's membership rule (getStatefulSetReplicasRange, podInOrdinalRange): the
// first `replicas` ordinals from start that are not reserved. A reserved ordinal is one the
// set moved its pod away from: like a scale-down, it no longer wants it.
func (o kruiseOrdinals) wants(n int) bool {
	if n < o.start || o.reserved[n] {
		return false
	}
	count := 0
	for i := o.start; i < n; i++ {
		if !o.reserved[i] {
			count++
		}
	}
	return count < o.replicas
}

// kruiseScaledAway: the Advanced StatefulSet no longer wants ordinal n (the record's own
// policy decides, as for a native StatefulSet).
func kruiseScaledAway(u *unstructured.Unstructured, n int, policy jkev1.StaticIPRetentionPolicy) bool {
	return u.GetDeletionTimestamp() == nil && policy.WhenScaled == jkev1.DeleteStaticIP && !kruiseOrdinalsOf(u).wants(n)
}

// isKruiseStatefulSet says whether an owner reference names an Advanced StatefulSet (any
// version of the group).
func isKruiseStatefulSet(ref *metav1.OwnerReference) bool {
	return ref != nil && ref.Kind == KruiseStatefulSetKind.Kind && workloadref.FromOwner(ref.APIVersion, ref.Kind, ref.Name).Group == workloadref.KruiseGroup
}

// kruiseServed asks discovery whether apps.kruise.io/v1beta1 serves statefulsets.
func kruiseServed(d discovery.DiscoveryInterface) bool {
	list, err := d.ServerResourcesForGroupVersion(kruiseStatefulSets.GroupVersion().String())
	if err != nil || list == nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Name == kruiseStatefulSets.Resource {
			return true
		}
	}
	return false
}

// watchKruise waits until the API server serves Advanced StatefulSets, then starts their
// trimmed informer and, once it has synced, queues every pod of a Kruise set: until then
// those pods were left alone.
func (c *Controller) watchKruise(ctx context.Context) {
	if c.dynamic == nil || c.discovery == nil {
		return
	}
	logger := klog.FromContext(ctx)
	_ = wait.PollUntilContextCancel(ctx, KruiseDiscoveryInterval, true, func(context.Context) (bool, error) {
		return kruiseServed(c.discovery), nil
	})
	if ctx.Err() != nil {
		return
	}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(c.dynamic, 0)
	inf := factory.ForResource(kruiseStatefulSets)
	if err := inf.Informer().SetTransform(trimKruiseStatefulSet); err != nil {
		logger.Error(err, "OpenKruise StatefulSets: transform")
		return
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: c.workloadUpdated,
		DeleteFunc: c.enqueueWorkload,
	}); err != nil {
		logger.Error(err, "OpenKruise StatefulSets: event handler")
		return
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return
	}
	c.kruise.Store(&kruiseSets{lister: inf.Lister(), client: c.dynamic.Resource(kruiseStatefulSets)})
	logger.Info("OpenKruise Advanced StatefulSets are served: their pods keep their IPs from now on")
	pods, _ := c.podLister.List(labels.Everything())
	for _, p := range pods {
		if isKruiseStatefulSet(metav1.GetControllerOf(p)) {
			c.queue.Add(p.Namespace + "/" + p.Name)
		}
	}
	<-ctx.Done()
	factory.Shutdown()
}

// kruiseSet is the cached Advanced StatefulSet ns/name, nil when unknown.
func (c *Controller) kruiseSet(ns, name string) *unstructured.Unstructured {
	k := c.kruise.Load()
	if k == nil {
		return nil
	}
	obj, err := k.lister.ByNamespace(ns).Get(name)
	if err != nil {
		return nil
	}
	u, _ := obj.(*unstructured.Unstructured)
	return u
}

// kruiseWorkload is the workload of an Advanced StatefulSet: a record's own retention policy
// applies (its API has no staticIP field), as for a native StatefulSet.
func kruiseWorkload(u *unstructured.Unstructured, recordPolicy *jkev1.StaticIPRetentionPolicy) *Workload {
	return &Workload{Object: u, GVK: KruiseStatefulSetKind, Retention: RetentionPolicy(recordPolicy)}
}

// kruiseScaledAwayLive confirms kruiseScaledAway against the set read from the API server.
func (c *Controller) kruiseScaledAwayLive(ctx context.Context, sip *jkev1.StaticIP, n int, policy jkev1.StaticIPRetentionPolicy) bool {
	cached := c.kruiseSet(sip.Namespace, sip.Spec.Ref)
	k := c.kruise.Load()
	if cached == nil || k == nil || !kruiseScaledAway(cached, n, policy) {
		return false
	}
	live, err := k.client.Namespace(sip.Namespace).Get(ctx, sip.Spec.Ref, metav1.GetOptions{})
	return err == nil && kruiseScaledAway(live, n, policy)
}

// podOfKruiseSet is the pod's Advanced StatefulSet workload, nil when the pod has none or the
// sets are not cached (yet).
func (c *Controller) podOfKruiseSet(pod *corev1.Pod, ref *metav1.OwnerReference) *Workload {
	u := c.kruiseSet(pod.Namespace, ref.Name)
	if u == nil || u.GetUID() != ref.UID {
		return nil
	}
	return kruiseWorkload(u, nil)
}
