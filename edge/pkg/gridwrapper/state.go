package gridwrapper

import (
	"context"
	"maps"
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
// kubernetes.io/service-name label), the only way a slice names its Service.
const byService = "service"

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
	// keys caches each annotated Service's parsed keys by annotation value.
	keys map[string]parsedKeys
	// decisions remembers the last decision per annotated multi-slice Service, to notice
	// when an endpoint change in one slice changes what the Service's other slices keep.
	decisions map[string]string
	// pending collects the Services changed since the proxy last took them.
	pending Changes

	changed chan struct{}
}

// Changes names the Services whose selection may have changed outside the EndpointSlice
// stream.
type Changes struct {
	// Services by "namespace/name": an annotation changed, or a decision across a
	// multi-slice Service.
	Services map[string]bool
	// All: every Service with topologyKeys (a node's labels changed, a node came or went).
	All bool
}

// Merge adds o to c.
func (c *Changes) Merge(o Changes) {
	c.All = c.All || o.All
	for k := range o.Services {
		if c.Services == nil {
			c.Services = map[string]bool{}
		}
		c.Services[k] = true
	}
}

// Empty says whether nothing changed.
func (c Changes) Empty() bool { return !c.All && len(c.Services) == 0 }

// Affects says whether the Service "namespace/name" is among the changed ones;
// hasTopology tells whether a Service carries topologyKeys now.
func (c Changes) Affects(service string, hasTopology func(string) bool) bool {
	return c.Services[service] || (c.All && hasTopology(service))
}

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
				s.notify("service annotation changed", objKey(cur))
			}
		},
		DeleteFunc: func(obj interface{}) {
			if annotation(obj) != "" {
				s.notify("annotated service deleted", objKey(obj))
			}
		},
	}); err != nil {
		return nil, err
	}
	if _, err := s.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		// A node appearing or going away changes which endpoints match a key, so does a
		// label change on any node (its endpoints' value) or on this one (which keys apply).
		AddFunc: func(obj interface{}) { s.notifyIfTopology("node added") },
		UpdateFunc: func(old, cur interface{}) {
			if !maps.Equal(objLabels(old), objLabels(cur)) {
				s.notifyIfTopology("node labels changed")
			}
		},
		DeleteFunc: func(obj interface{}) { s.notifyIfTopology("node deleted") },
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

// HasTopology says whether the Service "namespace/name" carries a topologyKeys
// annotation (valid or not).
func (s *State) HasTopology(service string) bool {
	obj, exists, err := s.services.GetStore().GetByKey(service)
	return err == nil && exists && annotation(obj) != ""
}

// notify records a change of one Service ("namespace/name"), or of every Service with
// topologyKeys when service is "".
func (s *State) notify(reason, service string) {
	s.metrics.selectionChanges.WithLabelValues(reason).Inc()
	klog.V(2).InfoS("Topology selection may have changed", "reason", reason, "service", service)
	s.mu.Lock()
	if service == "" {
		s.pending.All = true
	} else {
		s.pending.Merge(Changes{Services: map[string]bool{service: true}})
	}
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// notifyIfTopology notifies only when some Service uses topologyKeys: node churn in a
// cluster that does not use the wrapper's filtering must not reset kube-proxy's watches.
func (s *State) notifyIfTopology(reason string) {
	for _, obj := range s.services.GetStore().List() {
		if annotation(obj) != "" {
			s.notify(reason, "")
			return
		}
	}
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
	if !ok {
		return
	}
	siblings, _ := s.slices.GetIndexer().ByIndex(byService, svc)
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
	if err != nil || !exists {
		return nil, false
	}
	value := annotation(obj)
	if value == "" {
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
