package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/staticip/staticip/internal/testenv"
)

// listCounter counts the EndpointSlice LIST requests (GET without watch) that pass through
// a transport: those the wrapper itself makes of the API server.
type listCounter struct {
	rt    http.RoundTripper
	lists *atomic.Int64
}

func (c listCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	w := req.URL.Query().Get("watch")
	if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/endpointslices") && w != "true" && w != "1" {
		c.lists.Add(1)
	}
	return c.rt.RoundTrip(req)
}

// TestNodeLabelChangeListsNothing: a node's label change reaches the open watch of a client
// (client-go's reflector, WatchList, as kube-proxy runs it) as a re-filtered slice, and the
// wrapper lists nothing from the API server for it (with one wrapper per node, every list here
// is one per node of the cluster at the same moment): a label change on a node with no
// endpoint changes nobody's view, one on a node hosting an endpoint is worked out from the
// wrapper's own informers and the slices the stream already carried.
func TestNodeLabelChangeListsNothing(t *testing.T) {
	env := testenv.Get(t)
	ctx := testenv.Context(t, 3*time.Minute)
	admin := kubernetes.NewForConfigOrDie(env.Config)
	wcfg := wrapperConfig(ctx, t, admin, env.Config)
	var lists atomic.Int64
	wcfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return listCounter{rt: rt, lists: &lists} })

	suffix := fmt.Sprintf("%04x", rand.IntN(1<<16))
	self, other, bystander := "hd-a-"+suffix, "hd-b-"+suffix, "hd-c-"+suffix
	createZonedNodes(ctx, t, admin, map[string]string{self: "zone-0", other: "zone-1", bystander: "zone-2"})
	ns := "hd-" + suffix
	createNamespace(ctx, t, admin, ns)
	createService(ctx, t, admin, ns, "topo", `["zone"]`, map[string]string{self: "10.203.0.1", other: "10.203.0.2"})

	rec := &recorder{}
	proxyURL := startWrapper(ctx, t, wcfg, self, "127.0.0.1:0", rec)
	store, _ := runReflector(ctx, t, proxyURL)

	endpoints := func() int {
		obj, ok, _ := store.GetByKey(ns + "/topo-1")
		if !ok {
			return -1
		}
		return len(obj.(*discoveryv1.EndpointSlice).Endpoints)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("%s: %v (endpoints %d)", what, err, endpoints())
		}
	}
	waitFor("initial sync: the zone's endpoint only", func() bool { return endpoints() == 1 })
	before, clientRequests := lists.Load(), len(rec.sliceRequests())

	// A node without endpoints: nobody's view changes.
	relabel(ctx, t, admin, bystander, "zone-3")
	// The node of the other endpoint joins this zone: it must be kept now.
	relabel(ctx, t, admin, other, "zone-0")
	waitFor("the other node's endpoint, now in this zone", func() bool { return endpoints() == 2 })
	// And leaves it again.
	relabel(ctx, t, admin, other, "zone-1")
	waitFor("the other node's endpoint dropped again", func() bool { return endpoints() == 1 })

	n := lists.Load() - before
	t.Logf("EndpointSlice LISTs the wrapper made for 3 node label changes: %d", n)
	if n != 0 {
		t.Errorf("the wrapper listed EndpointSlices %d times for node label changes; want 0 (one wrapper per node: %d lists per node of the cluster)", n, n)
	}
	if after := rec.sliceRequests(); len(after) != clientRequests {
		t.Errorf("the client relisted: %v", after[clientRequests:])
	}
}
