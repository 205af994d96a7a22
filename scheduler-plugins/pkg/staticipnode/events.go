package staticipnode

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// Event resources of the staticip CRDs in the scheduler's "<plural>.<version>.<group>" form:
// the scheduler watches them through its dynamic informers and hands the queueing hints
// *unstructured.Unstructured objects (see AsStaticIP / AsIPRange).
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

// AsStaticIP converts an event object (typed or unstructured, nil allowed, possibly wrapped
// in a cache.DeletedFinalStateUnknown tombstone) to a StaticIP.
func AsStaticIP(obj interface{}) (*jkev1.StaticIP, error) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if obj == nil {
		return nil, nil
	}
	switch o := obj.(type) {
	case *jkev1.StaticIP:
		return o, nil
	case *unstructured.Unstructured:
		out := &jkev1.StaticIP{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
			return nil, fmt.Errorf("decoding StaticIP %s: %w", o.GetName(), err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("expected a StaticIP, got %T", obj)
}

// AsIPRange converts an event object (typed or unstructured, nil allowed, possibly wrapped
// in a tombstone) to an IPRange.
func AsIPRange(obj interface{}) (*jkev1.IPRange, error) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if obj == nil {
		return nil, nil
	}
	switch o := obj.(type) {
	case *jkev1.IPRange:
		return o, nil
	case *unstructured.Unstructured:
		out := &jkev1.IPRange{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
			return nil, fmt.Errorf("decoding IPRange %s: %w", o.GetName(), err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("expected an IPRange, got %T", obj)
}

// StaticIPPodName is the name of the pod a StaticIP belongs to.
func StaticIPPodName(sip *jkev1.StaticIP) string {
	if sip.Spec.Pod != "" {
		return sip.Spec.Pod
	}
	return sip.Name
}

// HoldsReservation reports whether sip can hold its pod's place on a node (the pod may
// still be present; see the package comment).
func HoldsReservation(sip *jkev1.StaticIP) bool {
	return sip != nil && sip.Spec.Node != "" && sip.DeletionTimestamp == nil && sip.Status.Phase != jkev1.StaticIPReleased
}
