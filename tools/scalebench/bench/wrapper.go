package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

const (
	wrapNS = "wrap"
	// EndpointsPerService: 5,000 Services → 50,000 endpoints.
	EndpointsPerService = 10
	topologyKeys        = `["topology.kubernetes.io/zone","*"]`
)

// gridWrapper is one application-grid-wrapper process and a kube-proxy stand-in (client-go
// informers on Services and EndpointSlices, as kube-proxy's, through the wrapper).
type gridWrapper struct {
	*Component
	slices  cache.SharedIndexInformer
	updates atomic.Int64
	stop    context.CancelFunc
}

func (g *gridWrapper) Stop() {
	g.stop()
	g.Component.Stop()
}

func (c *Cluster) startWrapper(ctx context.Context, name, node string, extra ...string) (*gridWrapper, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	comp, err := c.StartComponent(name, "application-grid-wrapper", func(kc string) []string {
		return append([]string{"--kubeconfig=" + kc, "--node-name=" + node, "--listen-address=127.0.0.1:" + strconv.Itoa(port),
			"--metrics-bind-address=0", "--health-bind-address=0", "--kube-api-qps=1000", "--kube-api-burst=2000"}, extra...)
	})
	if err != nil {
		return nil, err
	}
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	if err := poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		if done, perr := comp.Exited(); done {
			return false, fmt.Errorf("%s exited: %v", name, perr)
		}
		resp, err := http.Get(url + "/version")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		comp.Stop()
		return nil, err
	}
	client, err := kubernetes.NewForConfig(&rest.Config{Host: url, QPS: 1000, Burst: 2000})
	if err != nil {
		comp.Stop()
		return nil, err
	}
	g := &gridWrapper{Component: comp}
	// kube-proxy's informers (edge/README.md: its requests).
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = "!service.kubernetes.io/headless"
	}))
	g.slices = f.Discovery().V1().EndpointSlices().Informer()
	if _, err := g.slices.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, _ any) { g.updates.Add(1) }}); err != nil {
		comp.Stop()
		return nil, err
	}
	fctx, cancel := context.WithCancel(ctx)
	g.stop = cancel
	f.Start(fctx.Done())
	return g, nil
}

// growServices creates Services (topologyKeys zone, then any) and their EndpointSlices up to
// total, endpoints spread over the nodes.
func (c *Cluster) growServices(ctx context.Context, from, total int) error {
	return parallel(ctx, total-from, 32, func(ctx context.Context, j int) error {
		s := from + j
		name := fmt.Sprintf("svc-%d", s)
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"topologyKeys": topologyKeys}},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
		if _, err := c.Kube.CoreV1().Services(wrapNS).Create(ctx, svc, metav1.CreateOptions{}); ignoreExists(err) != nil {
			return err
		}
		_, err := c.Kube.DiscoveryV1().EndpointSlices(wrapNS).Create(ctx, c.slice(s, 0), metav1.CreateOptions{})
		return ignoreExists(err)
	})
}

// slice is Service s's EndpointSlice; gen shifts its addresses (an endpoint change).
func (c *Cluster) slice(s, gen int) *discoveryv1.EndpointSlice {
	name := fmt.Sprintf("svc-%d", s)
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}}}
	for e := 0; e < EndpointsPerService; e++ {
		k := s*EndpointsPerService + e + gen
		node := c.Nodes[k%len(c.Nodes)]
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("172.%d.%d.%d", 16+k>>16&15, k>>8&255, k&255)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}, NodeName: ptr.To(node),
			Zone: ptr.To(fmt.Sprintf("zone-%d", k%len(c.Nodes)%3))})
	}
	return sl
}

// Wrapper (scenario 5): one application-grid-wrapper serving a kwok node while the cluster
// grows to services Services × 10 endpoints: its CPU per EndpointSlice event at a tenth and
// at all of them (flat is the goal) and its memory; then wrappers processes (one per node)
// and a label change of one node: the EndpointSlice LISTs they send the API server, with
// --selection-change=refresh (the default) and with relist (ends kube-proxy's watch: the
// old behaviour's herd).
func (c *Cluster) Wrapper(ctx context.Context, services, wrappers int) ([]Row, error) {
	if err := c.EnsureNamespace(ctx, wrapNS); err != nil {
		return nil, err
	}
	w, err := c.startWrapper(ctx, "application-grid-wrapper", c.Nodes[0])
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	const changes = 200
	row := Row{Scenario: "wrapper", Component: w.Name, Nodes: len(c.Nodes)}
	var perEvent []float64
	have := 0
	for _, size := range []int{services / 10, services} {
		if err := c.growServices(ctx, have, size); err != nil {
			return nil, err
		}
		have = size
		if err := poll(ctx, 20*time.Minute, func(ctx context.Context) (bool, error) {
			return len(w.slices.GetStore().ListKeys()) >= size, nil
		}); err != nil {
			return nil, fmt.Errorf("kube-proxy stand-in saw %d of %d slices: %w", len(w.slices.GetStore().ListKeys()), size, err)
		}
		time.Sleep(5 * time.Second) // let the growth settle
		u0, _ := w.Usage()
		n0 := w.updates.Load()
		for i := 1; i <= changes; i++ {
			sl := c.slice(0, i)
			if _, err := c.Kube.DiscoveryV1().EndpointSlices(wrapNS).Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
				return nil, err
			}
		}
		if err := poll(ctx, 5*time.Minute, func(ctx context.Context) (bool, error) { return w.updates.Load()-n0 >= changes, nil }); err != nil {
			return nil, fmt.Errorf("%d of %d endpoint changes reached the stand-in: %w", w.updates.Load()-n0, changes, err)
		}
		u1, _ := w.Usage()
		ev := (u1.CPU - u0.CPU).Seconds() / changes
		perEvent = append(perEvent, ev)
		row.Note("%d Services: %.2f ms CPU/event, RSS %s MiB", size, ev*1e3, mib(u1.RSS))
	}
	if perEvent[0] > 0 {
		row.Note("per-event CPU ratio %d vs %d Services %.2f", services, services/10, perEvent[1]/perEvent[0])
	}
	u, err := w.Usage()
	if err != nil {
		return nil, err
	}
	row.Wall, row.CPU, row.PeakRSS, row.Requests = time.Since(w.Started), u.CPU, u.PeakRSS, w.Proxy.Counts().Total()
	rows := []Row{row}
	for _, mode := range []string{"refresh", "relist"} {
		r, err := c.labelChangeLists(ctx, wrappers, mode)
		if err != nil {
			return rows, err
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// labelChangeLists starts n wrappers (nodes 1..n) and changes the zone label of node 1: the
// LISTs of EndpointSlices the wrappers send the API server within 20 s.
func (c *Cluster) labelChangeLists(ctx context.Context, n int, mode string) (Row, error) {
	var ws []*gridWrapper
	defer func() {
		for _, w := range ws {
			w.Stop()
		}
	}()
	for i := 1; i <= n && i < len(c.Nodes); i++ {
		w, err := c.startWrapper(ctx, fmt.Sprintf("wrapper-%s-%d", mode, i), c.Nodes[i], "--selection-change="+mode)
		if err != nil {
			return Row{}, err
		}
		ws = append(ws, w)
	}
	var want int
	if l, err := c.Kube.DiscoveryV1().EndpointSlices(wrapNS).List(ctx, metav1.ListOptions{ResourceVersion: "0"}); err == nil {
		want = len(l.Items)
	}
	for _, w := range ws {
		if err := poll(ctx, 20*time.Minute, func(ctx context.Context) (bool, error) {
			return len(w.slices.GetStore().ListKeys()) >= want, nil
		}); err != nil {
			return Row{}, fmt.Errorf("%s synced: %w", w.Name, err)
		}
	}
	// A relist is a LIST, or with WatchList (client-go's default) a new watch that sends the
	// initial events: both count.
	lists := func() (n int) {
		for _, w := range ws {
			n += w.Proxy.Counts().Verb("list", "endpointslices") + w.Proxy.Counts().Verb("watch", "endpointslices")
		}
		return n
	}
	before := lists()
	node, err := c.Kube.CoreV1().Nodes().Get(ctx, c.Nodes[1], metav1.GetOptions{})
	if err != nil {
		return Row{}, err
	}
	zone := "zone-moved"
	if node.Labels[ZoneLabel] == zone {
		zone = "zone-1"
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{ZoneLabel: zone}}})
	if _, err := c.Kube.CoreV1().Nodes().Patch(ctx, c.Nodes[1], types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return Row{}, err
	}
	select {
	case <-ctx.Done():
		return Row{}, ctx.Err()
	case <-time.After(20 * time.Second):
	}
	row := Row{Scenario: "wrapper label change", Component: fmt.Sprintf("%d wrappers (--selection-change=%s)", len(ws), mode), Nodes: len(c.Nodes)}
	var peak int64
	for _, w := range ws {
		u, _ := w.Usage()
		row.CPU += u.CPU
		peak = max(peak, u.PeakRSS)
		row.Requests += w.Proxy.Counts().Total()
	}
	row.PeakRSS = peak
	row.Note("EndpointSlice LISTs+WATCHes to the API server after one node's label change: %d (%.2f per wrapper)", lists()-before, float64(lists()-before)/float64(len(ws)))
	row.Note("CPU and requests summed over the wrappers' whole run, RSS the largest")
	return row, nil
}
