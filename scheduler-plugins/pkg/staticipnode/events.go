package staticipnode

import (
	"context"
	"fmt"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/workloadref"
)

// Event resources of the staticip CRDs in the scheduler's "<plural>.<version>.<group>" form:
// the scheduler watches them through its dynamic informers and hands the queueing hints
// *unstructured.Unstructured objects (see StaticIPEventOf / IPRangeEventOf).
const (
	StaticIPResource fwk.EventResource = "staticips.v1.jke.jdcloud.com"
	IPRangeResource  fwk.EventResource = "ipranges.v1.jke.jdcloud.com"
)

// ForHandle is ForScheduler for a plugin's framework handle.
func ForHandle(ctx context.Context, h fwk.Handle) (*Cache, error) {
	if h.KubeConfig() == nil {
		return nil, fmt.Errorf("staticipnode: the framework handle has no kubeconfig")
	}
	client, err := versioned.NewForConfig(h.KubeConfig())
	if err != nil {
		return nil, fmt.Errorf("staticipnode: staticip client: %w", err)
	}
	return ForScheduler(ctx, h.SharedInformerFactory(), client)
}

// StaticIPFields is what the scheduler needs of one StaticIP.
type StaticIPFields struct {
	Namespace, Name, UID, ResourceVersion string
	// Generation is metadata.generation (0 when unknown: objects not from an API server).
	Generation int64
	Deleting   bool
	Phase      jkev1.StaticIPPhase
	// Pod is the pod the record belongs to (spec.pod, or the record's name).
	Pod, Node, IP string
	// Workload the record belongs to (spec.apiGroup, spec.kind, spec.ref).
	Workload workloadref.Ref
	Request  Resources
}

// Active reports whether the record may hold its pod's place on a node (its pod may still
// be present; see the package comment).
func (f *StaticIPFields) Active() bool {
	return f != nil && f.Node != "" && !f.Deleting && f.Phase != jkev1.StaticIPReleased
}

// IPRangeFields is what the scheduler needs of one IPRange.
type IPRangeFields struct {
	Name, UID, ResourceVersion string
	Generation                 int64
	Spec                       jkev1.IPRangeSpec
}

func staticIPFieldsOf(sip *jkev1.StaticIP) *StaticIPFields {
	return &StaticIPFields{
		Namespace: sip.Namespace, Name: sip.Name, UID: string(sip.UID), ResourceVersion: sip.ResourceVersion,
		Generation: sip.Generation, Deleting: sip.DeletionTimestamp != nil, Phase: sip.Status.Phase,
		Pod: StaticIPPodName(sip), Node: sip.Spec.Node, IP: sip.Spec.IP, Workload: workloadref.FromRecord(sip.Spec.APIGroup, sip.Spec.Kind, sip.Spec.Ref),
		Request: ResourcesFromList(sip.Spec.Resources),
	}
}

func ipRangeFieldsOf(r *jkev1.IPRange) *IPRangeFields {
	return &IPRangeFields{Name: r.Name, UID: string(r.UID), ResourceVersion: r.ResourceVersion, Generation: r.Generation, Spec: r.Spec}
}

// staticIPFieldsFrom reads the fields the scheduler needs from an event object (typed or
// unstructured, nil allowed): no conversion of the whole object, only the fields read.
func staticIPFieldsFrom(obj interface{}) (*StaticIPFields, error) {
	switch o := obj.(type) {
	case nil:
		return nil, nil
	case *jkev1.StaticIP:
		return staticIPFieldsOf(o), nil
	case *unstructured.Unstructured:
		f := &StaticIPFields{Namespace: o.GetNamespace(), Name: o.GetName(), UID: string(o.GetUID()),
			ResourceVersion: o.GetResourceVersion(), Generation: o.GetGeneration(), Deleting: o.GetDeletionTimestamp() != nil}
		phase, _, _ := unstructured.NestedString(o.Object, "status", "phase")
		f.Phase = jkev1.StaticIPPhase(phase)
		f.Pod, _, _ = unstructured.NestedString(o.Object, "spec", "pod")
		if f.Pod == "" {
			f.Pod = f.Name
		}
		f.Node, _, _ = unstructured.NestedString(o.Object, "spec", "node")
		f.IP, _, _ = unstructured.NestedString(o.Object, "spec", "ip")
		group, _, _ := unstructured.NestedString(o.Object, "spec", "apiGroup")
		kind, _, _ := unstructured.NestedString(o.Object, "spec", "kind")
		ref, _, _ := unstructured.NestedString(o.Object, "spec", "ref")
		f.Workload = workloadref.FromRecord(group, kind, ref)
		res, _, err := unstructured.NestedMap(o.Object, "spec", "resources")
		if err != nil {
			return nil, fmt.Errorf("decoding StaticIP %s/%s: spec.resources: %w", f.Namespace, f.Name, err)
		}
		if len(res) > 0 {
			rl := make(v1.ResourceList, len(res))
			for name, v := range res {
				str, ok := v.(string)
				if !ok {
					str = fmt.Sprint(v) // integers decoded from JSON
				}
				q, err := resource.ParseQuantity(str)
				if err != nil {
					return nil, fmt.Errorf("decoding StaticIP %s/%s: spec.resources[%s]: %w", f.Namespace, f.Name, name, err)
				}
				rl[v1.ResourceName(name)] = q
			}
			f.Request = ResourcesFromList(rl)
		}
		return f, nil
	}
	return nil, fmt.Errorf("expected a StaticIP, got %T", obj)
}

func ipRangeFieldsFrom(obj interface{}) (*IPRangeFields, error) {
	switch o := obj.(type) {
	case nil:
		return nil, nil
	case *jkev1.IPRange:
		return ipRangeFieldsOf(o), nil
	case *unstructured.Unstructured:
		f := &IPRangeFields{Name: o.GetName(), UID: string(o.GetUID()), ResourceVersion: o.GetResourceVersion(), Generation: o.GetGeneration()}
		f.Spec.CIDR, _, _ = unstructured.NestedString(o.Object, "spec", "cidr")
		f.Spec.Node, _, _ = unstructured.NestedString(o.Object, "spec", "node")
		f.Spec.Gateway, _, _ = unstructured.NestedString(o.Object, "spec", "gateway")
		f.Spec.RangeStart, _, _ = unstructured.NestedString(o.Object, "spec", "rangeStart")
		f.Spec.RangeEnd, _, _ = unstructured.NestedString(o.Object, "spec", "rangeEnd")
		f.Spec.ExcludeIPs, _, _ = unstructured.NestedStringSlice(o.Object, "spec", "excludeIPs")
		return f, nil
	}
	return nil, fmt.Errorf("expected an IPRange, got %T", obj)
}

// StaticIPEvent is one StaticIP event as the queueing hints see it.
type StaticIPEvent struct {
	// Old is nil for an add, New for a deletion.
	Old, New *StaticIPFields
	// StatusOnly: an update that changed nothing the scheduler reads (same generation,
	// same deletion state, same phase).
	StatusOnly bool
}

// IPRangeEvent is one IPRange event as the queueing hints see it.
type IPRangeEvent struct {
	Old, New   *IPRangeFields
	StatusOnly bool
}

// eventMemo remembers the last event a queueing hint decoded and applied, by the identity
// of its two objects.
type eventMemo[E any] struct {
	last atomic.Pointer[memoEntry[E]]
}

type memoEntry[E any] struct {
	oldObj, newObj interface{}
	ev             *E
	err            error
}

// once returns decode's result for this event, calling it only for an event it has not
// seen last (the tombstone, if any, unwrapped first).
func (m *eventMemo[E]) once(oldObj, newObj interface{}, decode func(oldObj, newObj interface{}, tombstone bool) (*E, error)) (*E, error) {
	oldObj, tombstone := unwrap(oldObj)
	remembered := identity(oldObj) && identity(newObj)
	if last := m.last.Load(); remembered && last != nil && last.oldObj == oldObj && last.newObj == newObj {
		return last.ev, last.err
	}
	ev, err := decode(oldObj, newObj, tombstone)
	if remembered {
		m.last.Store(&memoEntry[E]{oldObj: oldObj, newObj: newObj, ev: ev, err: err})
	}
	return ev, err
}

// unwrap returns a tombstone's object, and whether obj was one. Only pointer types (or nil)
// come back, so the results can be compared with ==.
func unwrap(obj interface{}) (interface{}, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj, true
	}
	return obj, false
}

// comparable reports whether an event object can be remembered by identity.
func identity(obj interface{}) bool {
	switch obj.(type) {
	case nil, *unstructured.Unstructured, *jkev1.StaticIP, *jkev1.IPRange:
		return true
	}
	return false
}

// StaticIPEventOf decodes a StaticIP event handed to a queueing hint (objects typed or
// unstructured, the deleted one possibly a tombstone) and applies it to the cache, once: the
// scheduler calls every hint once per waiting pod with the same two objects, so the first
// call decodes the fields the hints need and applies the change (newer version wins,
// tombstones always), and every later call for that event is two pointer comparisons. A
// status-only update is neither applied nor decoded past its metadata.
func (c *Cache) StaticIPEventOf(oldObj, newObj interface{}) (*StaticIPEvent, error) {
	return c.staticIPEvents.once(oldObj, newObj, c.staticIPEvent)
}

func (c *Cache) staticIPEvent(oldObj, newObj interface{}, tombstone bool) (*StaticIPEvent, error) {
	if oldU, ok := oldObj.(*unstructured.Unstructured); ok {
		if newU, ok := newObj.(*unstructured.Unstructured); ok && statusOnly(oldU, newU) {
			oldPhase, _, _ := unstructured.NestedString(oldU.Object, "status", "phase")
			newPhase, _, _ := unstructured.NestedString(newU.Object, "status", "phase")
			if oldPhase == newPhase {
				return &StaticIPEvent{StatusOnly: true}, nil
			}
		}
	}
	oldF, err := staticIPFieldsFrom(oldObj)
	if err != nil {
		return nil, err
	}
	newF, err := staticIPFieldsFrom(newObj)
	if err != nil {
		return nil, err
	}
	switch {
	case newF != nil:
		c.applyStaticIP(newF)
	case oldF != nil:
		c.deleteStaticIP(oldF, tombstone)
	}
	return &StaticIPEvent{Old: oldF, New: newF}, nil
}

// IPRangeEventOf is StaticIPEventOf for IPRanges (status-only: same generation).
func (c *Cache) IPRangeEventOf(oldObj, newObj interface{}) (*IPRangeEvent, error) {
	return c.ipRangeEvents.once(oldObj, newObj, c.ipRangeEvent)
}

func (c *Cache) ipRangeEvent(oldObj, newObj interface{}, tombstone bool) (*IPRangeEvent, error) {
	if oldU, ok := oldObj.(*unstructured.Unstructured); ok {
		if newU, ok := newObj.(*unstructured.Unstructured); ok && statusOnly(oldU, newU) {
			return &IPRangeEvent{StatusOnly: true}, nil
		}
	}
	oldF, err := ipRangeFieldsFrom(oldObj)
	if err != nil {
		return nil, err
	}
	newF, err := ipRangeFieldsFrom(newObj)
	if err != nil {
		return nil, err
	}
	switch {
	case newF != nil:
		c.applyIPRange(newF)
	case oldF != nil:
		c.deleteIPRange(oldF, tombstone)
	}
	return &IPRangeEvent{Old: oldF, New: newF}, nil
}

// statusOnly: both come from the API server (generation set), the spec did not change
// (same generation) and neither did the deletion state.
func statusOnly(a, b metav1.Object) bool {
	return a.GetGeneration() != 0 && a.GetGeneration() == b.GetGeneration() &&
		(a.GetDeletionTimestamp() == nil) == (b.GetDeletionTimestamp() == nil)
}

// StaticIPPodName is the name of the pod a StaticIP belongs to.
func StaticIPPodName(sip *jkev1.StaticIP) string {
	if sip.Spec.Pod != "" {
		return sip.Spec.Pod
	}
	return sip.Name
}
