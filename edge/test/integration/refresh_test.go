package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/staticip/staticip/internal/testenv"
)

// TestRefreshKeepsReflectorPosition: client-go's own reflector (WatchList, as kube-proxy
// runs it) behind the wrapper gets an annotation change on its open watch, with no
// relist, the slice at its own resourceVersion, and its lastSyncResourceVersion is not
// moved back to that (older) resourceVersion: the refresh's closing BOOKMARK restores it,
// so the next watch resumes where the API server left the stream.
func TestRefreshKeepsReflectorPosition(t *testing.T) {
	env := testenv.Get(t)
	ctx := testenv.Context(t, 3*time.Minute)
	admin := kubernetes.NewForConfigOrDie(env.Config)
	wcfg := wrapperConfig(ctx, t, admin, env.Config)

	suffix := fmt.Sprintf("%04x", rand.IntN(1<<16))
	self, other := "rf-a-"+suffix, "rf-b-"+suffix
	createZonedNodes(ctx, t, admin, map[string]string{self: "zone-0", other: "zone-1"})
	ns := "rf-" + suffix
	createNamespace(ctx, t, admin, ns)
	createService(ctx, t, admin, ns, "topo", `["zone"]`, map[string]string{self: "10.201.0.1", other: "10.201.0.2"})

	rec := &recorder{}
	proxyURL := startWrapper(ctx, t, wcfg, self, "127.0.0.1:0", rec)
	store, reflector := runReflector(ctx, t, proxyURL)

	held := func() *discoveryv1.EndpointSlice {
		obj, ok, _ := store.GetByKey(ns + "/topo-1")
		if !ok {
			return nil
		}
		return obj.(*discoveryv1.EndpointSlice)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("%s: %v (held %+v, lastSyncResourceVersion %s)", what, err, held(), reflector.LastSyncResourceVersion())
		}
	}
	waitFor("initial sync: the zone's endpoint only", func() bool { es := held(); return es != nil && len(es.Endpoints) == 1 })
	sliceRV := held().ResourceVersion

	// A later write to another slice moves the stream (and the reflector) past the topo
	// slice's resourceVersion.
	createService(ctx, t, admin, ns, "later", "", map[string]string{other: "10.201.0.3"})
	later, err := admin.DiscoveryV1().EndpointSlices(ns).Get(ctx, "later-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor("reflector past the later slice", func() bool { return reflector.LastSyncResourceVersion() == later.ResourceVersion })
	before := rec.sliceRequests()

	annotate(ctx, t, admin, ns, "topo", `["*"]`)
	waitFor(`annotation ["*"]: both endpoints`, func() bool { es := held(); return es != nil && len(es.Endpoints) == 2 })
	if es := held(); es.ResourceVersion != sliceRV {
		t.Errorf("refreshed slice at resourceVersion %s, want its own %s", es.ResourceVersion, sliceRV)
	}
	// The bookmark follows the MODIFIED in the same write; give the reflector a moment.
	waitFor("lastSyncResourceVersion back at the stream's position", func() bool {
		c, err := resourceversion.CompareResourceVersion(reflector.LastSyncResourceVersion(), later.ResourceVersion)
		return err == nil && c >= 0
	})
	if got := reflector.LastSyncResourceVersion(); got == sliceRV {
		t.Errorf("lastSyncResourceVersion %s is the refreshed slice's: a resumed watch would replay from the past", got)
	}
	if after := rec.sliceRequests(); len(after) != len(before) {
		t.Errorf("the reflector relisted: %v", after[len(before):])
	}
}

// TestResumeFromOlderResourceVersionReplays shows why a refresh must not leave a client's
// lastSyncResourceVersion at the older resourceVersion of a re-sent slice: the API
// server answers a watch from an older resourceVersion with every event since, so a
// client that already holds a newer version of a slice gets older versions of it again.
func TestResumeFromOlderResourceVersionReplays(t *testing.T) {
	env := testenv.Get(t)
	ctx := testenv.Context(t, 2*time.Minute)
	admin := kubernetes.NewForConfigOrDie(env.Config)
	ns := fmt.Sprintf("replay-%04x", rand.IntN(1<<16))
	createNamespace(ctx, t, admin, ns)
	createService(ctx, t, admin, ns, "x", "", map[string]string{"n": "10.202.0.1"})
	slices := admin.DiscoveryV1().EndpointSlices(ns)
	es, err := slices.Get(ctx, "x-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := es.ResourceVersion // what a refresh would re-send "x-1" at
	var rvs []string
	for _, ip := range []string{"10.202.0.2", "10.202.0.3"} {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
		if es, err = slices.Update(ctx, es, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		rvs = append(rvs, es.ResourceVersion)
	}
	// The client holds x-1 at rvs[1]; had its lastSyncResourceVersion gone back to old,
	// its next watch would start there.
	w, err := slices.Watch(ctx, metav1.ListOptions{ResourceVersion: old, FieldSelector: fields.OneTermEqualSelector("metadata.name", "x-1").String()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case ev := <-w.ResultChan():
		got, ok := ev.Object.(*discoveryv1.EndpointSlice)
		if !ok || ev.Type != watch.Modified || got.ResourceVersion != rvs[0] {
			t.Fatalf("first event %s %#v, want MODIFIED at %s", ev.Type, ev.Object, rvs[0])
		}
		t.Logf("watch from %s replays x-1 at %s (2 endpoints) to a client that holds it at %s (3 endpoints)", old, got.ResourceVersion, rvs[1])
	case <-time.After(time.Minute):
		t.Fatal("no replay")
	}
}

// runReflector runs client-go's own reflector (WatchList, as kube-proxy runs it) on the
// EndpointSlices kube-proxy watches, through the wrapper at proxyURL, until the test ends.
func runReflector(ctx context.Context, t *testing.T, proxyURL string) (cache.Store, *cache.Reflector) {
	client := kubernetes.NewForConfigOrDie(&rest.Config{Host: proxyURL, ContentConfig: rest.ContentConfig{ContentType: "application/vnd.kubernetes.protobuf"}})
	lw := cache.NewFilteredListWatchFromClient(client.DiscoveryV1().RESTClient(), "endpointslices", metav1.NamespaceAll,
		func(o *metav1.ListOptions) { o.LabelSelector = "!" + corev1.IsHeadlessService })
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	reflector := cache.NewReflector(lw, &discoveryv1.EndpointSlice{}, store, 0)
	rctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	go reflector.RunWithContext(rctx)
	return store, reflector
}
