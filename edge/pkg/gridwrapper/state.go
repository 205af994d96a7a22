package gridwrapper

import (
	"context"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
	"github.com/staticip/staticip/edge/pkg/topology"
)

// byService indexes EndpointSlices by "namespace/service-name" (the
// kubernetes.io/service-name label), the only way a slice names its Service; byNode by the
// nodes of their endpoints (which Services a node's labels can matter to).
const (
	byService = "service"
	byNode    = "node"
)

// State is what the wrapper decides from: annotated Services and node labels (metadata
// informers: no spec, no status), and the EndpointSlices themselves (a Service's decision
// spans all its slices). It tells the proxy when a decision may have changed for reasons
// the EndpointSlice stream itself does not carry (Changed).
type State struct {
	nodeName string
	metrics  *Metrics

	services cache.SharedIndexInformer // PartialObjectMetadata
	nodes    cache.SharedIndexInformer // PartialObjectMetadata, labels only
	slices   cache.SharedIndexInformer // discoveryv1.EndpointSlice

	mu sync.Mutex
	// keys caches each annotated Service's parsed keys by annotation value; pruned when the
	// Service or its annotation goes.
	keys map[string]parsedKeys
	// decisions remembers the last decision per annotated multi-slice Service, to notice
	// when an endpoint change in one slice changes what the Service's other slices keep;
	// pruned with the Service, its annotation or its last slice.
	decisions map[string]string
	// pending collects the Services changed since the proxy last took them.
	pending Changes

	changed chan struct{}
}

// Changes names the Services whose selection may have changed outside the EndpointSlice
// stream.
type Changes struct {
	// Services by "namespace/name": an annotation changed, a decision across a multi-slice
	// Service, or a node label that Service compares (affectedByNode).
	Services map[string]bool
}

// Merge adds o to c.
func (c *Changes) Merge(o Changes) {
	for k := range o.Services {
		if c.Services == nil {
			c.Services = map[string]bool{}
		}
		c.Services[k] = true
	}
}

// Empty says whether nothing changed.
func (c Changes) Empty() bool { return len(c.Services) == 0 }

type parsedKeys struct {
	value string
	keys  []string
	err   error
}

// NewState builds the informers. Call Run, then wait for Synced.
func NewState(client kubernetes.Interface, metaClient metadata.Interface, nodeName string, m *Metrics) (*State, error) {
	s := &State{
		nodeName:  nodeName,
		metrics:   m,
		keys:      map[string]parsedKeys{},
		decisions: map[string]string{},
		changed:   make(chan struct{}, 1),
	}
	metaFactory := metadatainformer.NewSharedInformerFactory(metaClient, 0)
	s.services = metaFactory.ForResource(corev1.SchemeGroupVersion.WithResource("services")).Informer()
	s.nodes = metaFactory.ForResource(corev1.SchemeGroupVersion.WithResource("nodes")).Informer()

	// The same slices kube-proxy watches: it never sees headless ones.
	noHeadless, err := labels.NewRequirement(corev1.IsHeadlessService, selection.DoesNotExist, nil)
	if err != nil {
		return nil, err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = labels.NewSelector().Add(*noHeadless).String()
	}))
	s.slices = factory.Discovery().V1().EndpointSlices().Informer()

	for _, inf := range []cache.SharedIndexInformer{s.services, s.nodes, s.slices} {
		if err := inf.SetTransform(trim); err != nil {
			return nil, err
		}
	}
	if err := s.slices.AddIndexers(cache.Indexers{byService: func(obj interface{}) ([]string, error) {
		es, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return nil, nil
		}
		svc := es.Labels[discoveryv1.LabelServiceName]
		if svc == "" {
			return nil, nil
		}
		return []string{es.Namespace + "/" + svc}, nil
	}, byNode: func(obj interface{}) ([]string, error) {
		es, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return nil, nil
		}
		var nodes []string
		for i := range es.Endpoints {
			if n := es.Endpoints[i].NodeName; n != nil && !slices.Contains(nodes, *n) {
				nodes = append(nodes, *n)
			}
		}
		return nodes, nil
	}}); err != nil {
		return nil, err
	}

	if _, err := s.services.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if annotation(obj) != "" {
				s.notify("service annotated", objKey(obj))
			}
		},
		UpdateFunc: func(old, cur interface{}) {
			if annotation(old) != annotation(cur) {
				if annotation(cur) == "" {
					s.forget(objKey(cur))
				}
				s.notify("service annotation changed", objKey(cur))
			}
		},
		DeleteFunc: func(obj interface{}) {
			s.forget(objKey(obj))
			if annotation(obj) != "" {
				s.notify("annotated service deleted", objKey(obj))
			}
		},
	}); err != nil {
		return nil, err
	}
	if _, err := s.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		// A node appearing or going away changes which of its endpoints match a key, so does
		// a label change (its endpoints' value; on this node: which keys apply). Only the
		// Services that compare a changed label are named (affectedByNode).
		AddFunc: func(obj interface{}) { s.nodeChanged("node added", objKey(obj), nil, objLabels(obj)) },
		UpdateFunc: func(old, cur interface{}) {
			if !maps.Equal(objLabels(old), objLabels(cur)) {
				s.nodeChanged("node labels changed", objKey(cur), objLabels(old), objLabels(cur))
			}
		},
		DeleteFunc: func(obj interface{}) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			s.nodeChanged("node deleted", objKey(obj), objLabels(obj), nil)
		},
	}); err != nil {
		return nil, err
	}
	if _, err := s.slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { s.sliceChanged(obj) },
		UpdateFunc: func(_, cur interface{}) { s.sliceChanged(cur) },
		DeleteFunc: func(obj interface{}) { s.sliceChanged(obj) },
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// Run starts the informers; they stop with ctx.
func (s *State) Run(ctx context.Context) {
	go s.services.RunWithContext(ctx)
	go s.nodes.RunWithContext(ctx)
	go s.slices.RunWithContext(ctx)
}

// Synced reports whether every informer holds a full list.
func (s *State) Synced() bool {
	return s.services.HasSynced() && s.nodes.HasSynced() && s.slices.HasSynced()
}

// Changed fires (coalesced) when a decision may have changed in a way the EndpointSlice
// stream does not show: an annotation, a node's labels, or the decision of a Service
// whose other slices did not change. TakeChanges says which Services.
func (s *State) Changed() <-chan struct{} { return s.changed }

// TakeChanges returns the Services changed since the last call.
func (s *State) TakeChanges() Changes {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.pending
	s.pending = Changes{}
	return c
}

// notify records a change of the named Services ("namespace/name").
func (s *State) notify(reason string, services ...string) {
	if len(services) == 0 {
		return
	}
	s.metrics.selectionChanges.WithLabelValues(reason).Inc()
	klog.V(2).InfoS("Topology selection may have changed", "reason", reason, "services", services)
	s.mu.Lock()
	if s.pending.Services == nil {
		s.pending.Services = map[string]bool{}
	}
	for _, svc := range services {
		s.pending.Services[svc] = true
	}
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// nodeChanged names the Services whose selection a node's change can move, worked out from
// the informers alone (no request): see affectedByNode.
func (s *State) nodeChanged(reason, node string, old, cur map[string]string) {
	if !s.Synced() {
		return // nothing is served before the sync, and everything after it is filtered anew
	}
	affected := affectedByNode(nodeChange{
		self: s.nodeName, selfLabels: s.selfLabels(), node: node, old: old, cur: cur,
		keysOf: func(svc string) ([]string, bool) {
			ns, name, err := cache.SplitMetaNamespaceKey(svc)
			if err != nil {
				return nil, false
			}
			return s.serviceKeys(ns, name)
		},
		annotated: func() []string {
			var out []string
			for _, obj := range s.services.GetStore().List() {
				if annotation(obj) != "" {
					out = append(out, objKey(obj))
				}
			}
			return out
		},
		onNode: func(node string) []string {
			objs, _ := s.slices.GetIndexer().ByIndex(byNode, node)
			out := make([]string, 0, len(objs))
			for _, o := range objs {
				if es := o.(*discoveryv1.EndpointSlice); es.Labels[discoveryv1.LabelServiceName] != "" {
					out = append(out, es.Namespace+"/"+es.Labels[discoveryv1.LabelServiceName])
				}
			}
			return out
		},
	})
	s.notify(reason, slices.Sorted(maps.Keys(affected))...)
}

// forget drops what State remembers of a Service (its annotation or the Service is gone).
func (s *State) forget(service string) {
	s.mu.Lock()
	delete(s.keys, service)
	delete(s.decisions, service)
	s.mu.Unlock()
}

// sliceChanged re-decides a multi-slice annotated Service after one of its slices
// changed: the changed slice reaches kube-proxy through its own stream, but its siblings
// would keep the old decision.
func (s *State) sliceChanged(obj interface{}) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || !s.Synced() {
		return
	}
	svc := es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]
	keys, ok := s.serviceKeys(es.Namespace, es.Labels[discoveryv1.LabelServiceName])
	siblings, _ := s.slices.GetIndexer().ByIndex(byService, svc)
	if !ok || len(siblings) == 0 {
		// Not (or no longer) annotated, or its last slice is gone: nothing to remember.
		s.mu.Lock()
		delete(s.decisions, svc)
		s.mu.Unlock()
		return
	}
	all := make([]*discoveryv1.EndpointSlice, 0, len(siblings))
	for _, o := range siblings {
		all = append(all, o.(*discoveryv1.EndpointSlice))
	}
	d := topology.Decide(keys, s.selfLabels(), all, s.nodeLabels).String()
	s.mu.Lock()
	prev, seen := s.decisions[svc]
	s.decisions[svc] = d
	s.mu.Unlock()
	if seen && prev != d && len(all) > 1 {
		s.notify("multi-slice service decision changed", svc)
	}
}

// Filter returns what this node's kube-proxy may see of one slice: unchanged when its
// Service has no (valid) topologyKeys, otherwise only the endpoints the Service's
// decision keeps. The decision is taken over the Service's slices as the wrapper's cache
// holds them, with this slice in the version being served.
func (s *State) Filter(es *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	svcName := es.Labels[discoveryv1.LabelServiceName]
	keys, ok := s.serviceKeys(es.Namespace, svcName)
	if !ok {
		s.metrics.endpoints.WithLabelValues("passed").Add(float64(len(es.Endpoints)))
		return es
	}
	siblings, _ := s.slices.GetIndexer().ByIndex(byService, es.Namespace+"/"+svcName)
	all := make([]*discoveryv1.EndpointSlice, 0, len(siblings)+1)
	all = append(all, es)
	for _, o := range siblings {
		if sib := o.(*discoveryv1.EndpointSlice); sib.Name != es.Name {
			all = append(all, sib)
		}
	}
	d := topology.Decide(keys, s.selfLabels(), all, s.nodeLabels)
	out, dropped := topology.Filter(es, d, s.nodeLabels)
	s.metrics.endpoints.WithLabelValues("kept").Add(float64(len(out.Endpoints)))
	s.metrics.endpoints.WithLabelValues("dropped").Add(float64(dropped))
	return out
}

// serviceKeys returns the parsed topologyKeys of a Service, false when it has none or
// they are invalid (then the slices pass unchanged: nothing is lost, and the error is
// logged once per annotation value).
func (s *State) serviceKeys(namespace, name string) ([]string, bool) {
	if name == "" {
		return nil, false
	}
	key := namespace + "/" + name
	obj, exists, err := s.services.GetStore().GetByKey(key)
	value := ""
	if err == nil && exists {
		value = annotation(obj)
	}
	if value == "" {
		s.mu.Lock()
		delete(s.keys, key)
		s.mu.Unlock()
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.keys[key]
	if !ok || p.value != value {
		p = parsedKeys{value: value}
		p.keys, p.err = superedgev1.ParseTopologyKeys(value)
		s.keys[key] = p
		if p.err != nil {
			s.metrics.invalidAnnotations.Inc()
			klog.ErrorS(p.err, "Service's topologyKeys ignored: its endpoints pass unfiltered", "service", key)
		}
	}
	return p.keys, p.err == nil
}

func (s *State) selfLabels() map[string]string {
	l, _ := s.nodeLabels(s.nodeName)
	return l
}

func (s *State) nodeLabels(name string) (map[string]string, bool) {
	obj, exists, err := s.nodes.GetStore().GetByKey(name)
	if err != nil || !exists {
		return nil, false
	}
	return objLabels(obj), true
}

func annotation(obj interface{}) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return m.GetAnnotations()[superedgev1.AnnotationTopologyKeys]
}

func objKey(obj interface{}) string {
	key, _ := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	return key
}

func objLabels(obj interface{}) map[string]string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	return m.GetLabels()
}

// trim keeps in the caches only what decisions read: no managedFields anywhere, only
// the topologyKeys annotation of Services, no annotations of Nodes.
func trim(obj interface{}) (interface{}, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return obj, nil
	}
	m.SetManagedFields(nil)
	switch o := obj.(type) {
	case *metav1.PartialObjectMetadata:
		if v, ok := o.Annotations[superedgev1.AnnotationTopologyKeys]; ok {
			o.Annotations = map[string]string{superedgev1.AnnotationTopologyKeys: v}
		} else {
			o.Annotations = nil
		}
	case *discoveryv1.EndpointSlice:
		o.Annotations = nil
	}
	return obj, nil
}
