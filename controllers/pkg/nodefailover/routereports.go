package nodefailover

import (
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationinformers "k8s.io/client-go/informers/coordination/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
)

// The agents' route reports (RoutesConverged): one Lease per node in jkev1.NamespaceRouteReports,
// named after the node, each carrying the routes its agent has programmed to the ranges marked
// jkev1.AnnotationReportRoutes (cni/agent, fence.go). They used to be an annotation of the Node
// object: one Node write per Ready node per failover, 60-110 ms each at 1,000-5,000 nodes
// because every Node watcher receives it (tools/scalebench/README.md); a Lease in a namespace of
// its own is watched by this controller alone.

// newRouteReportInformer watches the route-report Leases: only that namespace, only those
// labelled jkev1.LabelRouteReport, trimmed to what RoutesLagging reads (name, holder, the report).
func newRouteReportInformer(kube kubernetes.Interface) cache.SharedIndexInformer {
	inf := coordinationinformers.NewFilteredLeaseInformer(kube, jkev1.NamespaceRouteReports, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = jkev1.LabelRouteReport + "=true" })
	_ = inf.SetTransform(trimRouteReport) // only fails once the informer runs
	return inf
}

// trimRouteReport keeps of a route-report Lease what the controller reads.
func trimRouteReport(obj any) (any, error) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return obj, nil // a tombstone
	}
	t := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.Name, Namespace: l.Namespace, UID: l.UID, ResourceVersion: l.ResourceVersion},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: l.Spec.HolderIdentity}}
	if v, ok := l.Annotations[jkev1.AnnotationRoutesObserved]; ok {
		t.Annotations = map[string]string{jkev1.AnnotationRoutesObserved: v}
	}
	return t, nil
}

// routeReports gives the nodes' route reports from the Lease cache, by node: a Lease named after
// a node that is not a report of it (LeaseRouteReport) is left out, so that node is read from
// its Node annotation like one without a Lease. Each Lease's report is decoded once per
// resourceVersion: a migration waiting for routes is evaluated on every report change, and
// decoding every node's report each time cost O(nodes) JSON decodes per evaluation (5,000 at
// 5,000 nodes) — now a lookup per node, and a decode per changed report.
type routeReports struct {
	store  cache.Store
	mu     sync.Mutex
	parsed map[string]parsedRouteReport
}

type parsedRouteReport struct {
	resourceVersion string
	report          RouteReport
	ok              bool
}

// of is node's route report, ok false when it has no Lease or the Lease is not its report.
func (r *routeReports) of(node string) (RouteReport, bool) {
	o, exists, err := r.store.GetByKey(jkev1.NamespaceRouteReports + "/" + node)
	if err != nil || !exists {
		return RouteReport{}, false
	}
	l, isLease := o.(*coordinationv1.Lease)
	if !isLease {
		return RouteReport{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, hit := r.parsed[node]; hit && p.resourceVersion == l.ResourceVersion && l.ResourceVersion != "" {
		return p.report, p.ok
	}
	routes, ok, err := LeaseRouteReport(l)
	p := parsedRouteReport{resourceVersion: l.ResourceVersion, report: RouteReport{Routes: routes, Lease: true, Err: err}, ok: ok}
	r.parsed[node] = p
	return p.report, p.ok
}

// forget drops a deleted Lease's decoded report.
func (r *routeReports) forget(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if l, ok := obj.(*coordinationv1.Lease); ok {
		r.mu.Lock()
		delete(r.parsed, l.Name)
		r.mu.Unlock()
	}
}

// routesIndex indexes under "true" the records whose migration waits for routes: it has moved
// its ranges (phase RangesMoved), routes not converged yet. A report change re-runs those only.
const routesIndex = "waitingForRoutes"

func waitingForRoutesIndex(obj any) ([]string, error) {
	if r, ok := obj.(*jkev1alpha1.NodeFailover); ok && r.Status.Phase == jkev1alpha1.FailoverRangesMoved {
		return []string{"true"}, nil
	}
	return nil, nil
}

// enqueueWaitingForRoutes queues the migrations waiting for routes (a route report changed).
func (c *Controller) enqueueWaitingForRoutes() {
	keys, err := c.activeRecords.IndexKeys(routesIndex, "true")
	if err != nil {
		return
	}
	for _, k := range keys {
		c.queue.Add(k)
	}
}
