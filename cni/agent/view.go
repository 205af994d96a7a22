package agent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	sipscheme "github.com/staticip/staticip/apis/generated/clientset/versioned/scheme"
	sipinformers "github.com/staticip/staticip/apis/generated/informers/externalversions"
	jkelisters "github.com/staticip/staticip/apis/generated/listers/jke/v1"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// view is the agent's picture of the API: informer caches, so that a sync costs the API
// server nothing. Listing IPRanges, every StaticIP of the cluster, this node's pods and the
// other nodes on each sync (the agent syncs on every pod deletion) made the agents of a
// cluster a LIST load proportional to nodes x pod churn.
type view struct {
	ranges    jkelisters.IPRangeLister
	staticIPs jkelisters.StaticIPLister
	pods      corelisters.PodLister
	nodes     corelisters.NodeLister
	synced    []cache.InformerSynced
}

// Start starts the informers the sync reads from; Synced (or WaitForCaches) tells when they
// hold the API's state. Changes that matter to the node (a pod of this node deleted; a
// StaticIP, IPRange or node address that changed) call a.trigger, which Run turns into a sync.
// Status-only updates — every agent writing its IPRange counts — do not.
func (a *Agent) Start(ctx context.Context) error {
	if a.view != nil {
		return nil
	}
	if a.recorder == nil && a.kube != nil {
		// Events on the IPRanges and StaticIPs the agent leaves out. The broadcaster sends
		// them in the background (retrying, then dropping them offline): recording never blocks.
		b := record.NewBroadcaster(record.WithContext(ctx))
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.kube.CoreV1().Events("")})
		a.recorder = b.NewRecorder(sipscheme.Scheme, corev1.EventSource{Component: "staticip-agent", Host: a.cfg.NodeName})
		go func() {
			<-ctx.Done()
			b.Shutdown()
		}()
	}
	nodes := informers.NewSharedInformerFactory(a.kube, 0)
	pods := informers.NewSharedInformerFactoryWithOptions(a.kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "spec.nodeName=" + a.cfg.NodeName
	}))
	sips := sipinformers.NewSharedInformerFactory(a.sip, 0)

	podInf := pods.Core().V1().Pods().Informer()
	nodeInf := nodes.Core().V1().Nodes().Informer()
	rangeInf := sips.Jke().V1().IPRanges().Informer()
	sipInf := sips.Jke().V1().StaticIPs().Informer()
	// The agent reads a pod's identity and a node's addresses only: keep nothing else, so a
	// node's cache of every Node of a large cluster stays small.
	if err := podInf.SetTransform(trimPod); err != nil {
		return err
	}
	if err := nodeInf.SetTransform(trimNode); err != nil {
		return err
	}
	register := []struct {
		inf     cache.SharedIndexInformer
		changed func(old, new any) bool
		onAdd   bool
	}{
		{podInf, func(any, any) bool { return false }, false}, // GC cares about pods that are gone
		// A node's addresses (routes) or its report of the ranges it holds (a range assigned
		// here waits until the node it left has drained it).
		{nodeInf, func(o, n any) bool {
			return !reflect.DeepEqual(nodeAddresses(o), nodeAddresses(n)) || observedOf(o) != observedOf(n)
		}, true},
		{rangeInf, func(o, n any) bool { return !reflect.DeepEqual(o.(*jkev1.IPRange).Spec, n.(*jkev1.IPRange).Spec) }, true},
		{sipInf, func(o, n any) bool { return !reflect.DeepEqual(o.(*jkev1.StaticIP).Spec, n.(*jkev1.StaticIP).Spec) }, true},
	}
	for _, r := range register {
		_, err := r.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) {
				if r.onAdd {
					a.trigger()
				}
			},
			UpdateFunc: func(o, n any) {
				if r.changed(o, n) {
					a.trigger()
				}
			},
			DeleteFunc: func(any) { a.trigger() },
		})
		if err != nil {
			return err
		}
	}
	v := &view{
		ranges:    sips.Jke().V1().IPRanges().Lister(),
		staticIPs: sips.Jke().V1().StaticIPs().Lister(),
		pods:      pods.Core().V1().Pods().Lister(),
		nodes:     nodes.Core().V1().Nodes().Lister(),
		synced:    []cache.InformerSynced{podInf.HasSynced, nodeInf.HasSynced, rangeInf.HasSynced, sipInf.HasSynced},
	}
	nodes.Start(ctx.Done())
	pods.Start(ctx.Done())
	sips.Start(ctx.Done())
	a.view = v
	return nil
}

// Synced reports whether every cache has delivered its initial list.
func (a *Agent) Synced() bool {
	if a.view == nil {
		return false
	}
	for _, s := range a.view.synced {
		if !s() {
			return false
		}
	}
	return true
}

// WaitForCaches blocks until the caches are synced or ctx ends.
func (a *Agent) WaitForCaches(ctx context.Context) error {
	if a.view == nil {
		return fmt.Errorf("agent: Start was not called")
	}
	if !cache.WaitForCacheSync(ctx.Done(), a.view.synced...) {
		return fmt.Errorf("agent: caches not synced: %w", ctx.Err())
	}
	return nil
}

// snapshot is one consistent-enough reading of the caches for a sync; the caller owns none of
// the objects (they are the informers'): copy before changing any.
type snapshot struct {
	ranges    []*jkev1.IPRange
	staticIPs []*jkev1.StaticIP
	pods      []*corev1.Pod
	nodeIP    func(name string) net.IP
	// observed are the nodes' ObservedAnnotation values, by node name.
	observed map[string]string
	// nodeAddrs are every node's InternalIP and ExternalIP addresses (outgoing NAT).
	nodeAddrs []netip.Addr
}

func (v *view) snapshot() (*snapshot, error) {
	ranges, err := v.ranges.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	sort.Slice(ranges, func(i, j int) bool { return ranges[i].Name < ranges[j].Name })
	sips, err := v.staticIPs.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	pods, err := v.pods.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	nodes, err := v.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	observed := map[string]string{}
	for _, n := range nodes {
		if a := n.Annotations[ObservedAnnotation]; a != "" {
			observed[n.Name] = a
		}
	}
	return &snapshot{ranges: ranges, staticIPs: sips, pods: pods, observed: observed, nodeAddrs: nodeAddressesOf(nodes), nodeIP: func(name string) net.IP {
		n, err := v.nodes.Get(name)
		if err != nil {
			return nil
		}
		return internalIP(n)
	}}, nil
}

// internalIP is the node's InternalIP, IPv4 preferred.
func internalIP(n *corev1.Node) net.IP {
	var gw net.IP
	for _, addr := range n.Status.Addresses {
		if addr.Type == corev1.NodeInternalIP {
			if ip := net.ParseIP(addr.Address); ip != nil && (gw == nil || ip.To4() != nil) {
				gw = ip
			}
		}
	}
	return gw
}

func nodeAddresses(obj any) []corev1.NodeAddress {
	if n, ok := obj.(*corev1.Node); ok {
		return n.Status.Addresses
	}
	return nil
}

// trimPod keeps what GC reads: namespace, name, UID, its IPs (to name the holders of the IPs
// found on the host when a corrupt database is rebuilt), whether it is a static pod's mirror (the
// kubelet's UID of a static pod is not the mirror pod's, so GC matches those by name), and the
// node, for clarity in dumps.
func trimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a DeletedFinalStateUnknown tombstone
	}
	t := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion},
		Spec:       corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status:     corev1.PodStatus{PodIPs: p.Status.PodIPs},
	}
	if v, ok := p.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		t.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: v}
	}
	return t, nil
}

// trimNode keeps the node's name and addresses (routes go via the InternalIP) and the
// agent's own ObservedAnnotation.
func trimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	t := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion},
		Status:     corev1.NodeStatus{Addresses: n.Status.Addresses},
	}
	if v, ok := n.Annotations[ObservedAnnotation]; ok { // what the node reported (fence.go)
		t.Annotations = map[string]string{ObservedAnnotation: v}
	}
	if c := networkConditionOf(n); c != nil { // what the agent reported (network.go)
		t.Status.Conditions = []corev1.NodeCondition{*c}
	}
	return t, nil
}

// networkCondition is the node's NetworkUnavailable condition as the cache has it, or nil.
func (v *view) networkCondition(node string) *corev1.NodeCondition {
	n, err := v.nodes.Get(node)
	if err != nil {
		return nil
	}
	return networkConditionOf(n)
}

// observedAnnotation is the node's ObservedAnnotation as the cache has it.
func (v *view) observedAnnotation(node string) string {
	n, err := v.nodes.Get(node)
	if err != nil {
		return ""
	}
	return n.Annotations[ObservedAnnotation]
}

func observedOf(obj any) string {
	if n, ok := obj.(*corev1.Node); ok {
		return n.Annotations[ObservedAnnotation]
	}
	return ""
}
