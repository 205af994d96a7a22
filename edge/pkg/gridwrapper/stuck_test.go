package gridwrapper

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	metadatafake "k8s.io/client-go/metadata/fake"

	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
)

// TestStuckClientDoesNotBlockOtherWatches: a client that never reads its watch stream
// (the wrapper is blocked writing to it) must not hold up a selection change for every
// other watch: no lock is held while writing to a client.
func TestStuckClientDoesNotBlockOtherWatches(t *testing.T) {
	info := h0info(t, mediaTypeJSON)
	p := &Proxy{metrics: NewMetrics(), watches: map[*watchFilter]struct{}{}, rvGen: map[string]uint64{}}
	keep := func(es *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice { return es }

	upR, upW := io.Pipe()
	_, stuckOut := io.Pipe() // nobody reads: the client is stuck
	stuck := newWatchFilter(info, upR, stuckOut, keep, nil)
	stuck.pos = streamPosition{rv: "10", bookmarks: true}
	stuck.refreshes = true
	p.watches[stuck] = struct{}{}
	go func() { _ = stuck.run() }()
	t.Cleanup(func() { _ = upW.Close() })
	enc := streaming.NewEncoder(info.StreamSerializer.Framer.NewFrameWriter(upW), info.StreamSerializer.Serializer)
	send := func(es *discoveryv1.EndpointSlice) {
		raw, err := runtime.Encode(scheme.Codecs.EncoderForVersion(info.Serializer, discoveryv1.SchemeGroupVersion), es)
		if err != nil {
			t.Fatal(err)
		}
		if err := enc.Encode(&metav1.WatchEvent{Type: string(watch.Modified), Object: runtime.RawExtension{Raw: raw}}); err != nil {
			t.Fatal(err)
		}
	}
	// Two frames in: the first is being written to the stuck client (the second waits behind it).
	send(withSvc(testSlice("a", "11", "10.0.0.1"), "svc-a"))
	send(withSvc(testSlice("b", "12", "10.0.0.2"), "svc-a"))
	// Let the forwarding goroutine reach its blocked write (not an assertion: the check below
	// waits generously either way).
	time.Sleep(100 * time.Millisecond)

	done := make(chan struct{})
	go func() {
		p.SelectionChanged(Changes{Services: map[string]bool{"ns/svc-a": true}})
		close(done)
	}()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		select {
		case <-done:
			return true, nil
		default:
			return false, nil
		}
	}); err != nil {
		t.Fatalf("a selection change is stuck behind a client that does not read its stream: %v", err)
	}
}

// TestStatePrunesServices: the parsed keys and remembered decisions of a Service go when the
// Service does (or loses its annotation), and a Service's decision when its last slice does.
func TestStatePrunesServices(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ms := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(ms); err != nil {
		t.Fatal(err)
	}
	meta := func(kind, ns, name string, labels, annotations map[string]string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: kind},
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Annotations: annotations}}
	}
	metaClient := metadatafake.NewSimpleMetadataClient(ms,
		meta("Node", "", "self", map[string]string{"zone": "a"}, nil),
		meta("Service", "ns", "s1", nil, map[string]string{superedgev1.AnnotationTopologyKeys: `["zone"]`}),
		meta("Service", "ns", "s2", nil, map[string]string{superedgev1.AnnotationTopologyKeys: `["zone","zone"]`}))
	slice := func(svc, name string) *discoveryv1.EndpointSlice {
		es := withSvc(testSlice(name, "1", "10.0.0.1"), svc)
		es.Namespace = "ns"
		es.Endpoints[0].NodeName = ptrTo("self")
		return es
	}
	client := kubefake.NewSimpleClientset(slice("s1", "s1-a"), slice("s1", "s1-b"), slice("s2", "s2-a"))
	s, err := NewState(client, metaClient, "self", NewMetrics())
	if err != nil {
		t.Fatal(err)
	}
	s.Run(ctx)
	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			keys, decisions := s.tracked()
			t.Fatalf("%s: %v (keys %v, decisions %v)", what, err, keys, decisions)
		}
	}
	poll("synced", s.Synced)
	for _, name := range []string{"s1-a", "s2-a"} {
		s.Filter(slice(name[:2], name))
	}
	// A slice event after the sync records the multi-slice decision.
	if _, err := client.DiscoveryV1().EndpointSlices("ns").Update(ctx, slice("s1", "s1-b"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll("keys and decisions tracked", func() bool { keys, decisions := s.tracked(); return len(keys) == 2 && len(decisions) == 1 })

	svcs := metaClient.Resource(corev1.SchemeGroupVersion.WithResource("services")).Namespace("ns")
	if err := svcs.Delete(ctx, "s2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := svcs.Delete(ctx, "s1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"s1-a", "s1-b", "s2-a"} {
		if err := client.DiscoveryV1().EndpointSlices("ns").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll("nothing tracked once the Services are gone", func() bool { keys, decisions := s.tracked(); return len(keys) == 0 && len(decisions) == 0 })
}

func ptrTo[T any](v T) *T { return &v }

// tracked names the Services State keeps parsed keys and decisions of.
func (s *State) tracked() (keys, decisions []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.keys)), slices.Sorted(maps.Keys(s.decisions))
}

// TestStuckClientIsDropped: a watch client that never reads is dropped after the write
// timeout: the wrapper's watch ends and so does its upstream watch (the client re-watches, as
// after any broken watch).
func TestStuckClientIsDropped(t *testing.T) {
	info := h0info(t, mediaTypeProtobuf)
	upstreamEnded := make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(upstreamEnded)
		w.Header().Set("Content-Type", mediaTypeProtobuf+";stream=watch")
		w.WriteHeader(http.StatusOK)
		fw := info.StreamSerializer.Framer.NewFrameWriter(w)
		enc := streaming.NewEncoder(fw, info.StreamSerializer.Serializer)
		ips := make([]string, 2000)
		for i := range ips {
			ips[i] = fmt.Sprintf("10.1.%d.%d", i/250, i%250)
		}
		for rv := 1; ; rv++ {
			raw, err := runtime.Encode(scheme.Codecs.EncoderForVersion(info.Serializer, discoveryv1.SchemeGroupVersion), testSlice("big", fmt.Sprint(rv), ips...))
			if err != nil {
				t.Error(err)
				return
			}
			if err := enc.Encode(&metav1.WatchEvent{Type: string(watch.Modified), Object: runtime.RawExtension{Raw: raw}}); err != nil {
				return // the wrapper closed the upstream watch
			}
			w.(http.Flusher).Flush()
		}
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	p := NewProxy(u, http.DefaultTransport, "node-a", fakeState{synced: true}, NewMetrics())
	p.WriteTimeout = 200 * time.Millisecond
	srv := httptest.NewServer(p)
	defer srv.Close()

	// A client that sends its watch request and never reads a byte of the answer.
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "GET /apis/discovery.k8s.io/v1/endpointslices?watch=true&sendInitialEvents=true&allowWatchBookmarks=true HTTP/1.1\r\nHost: x\r\nAccept: %s\r\n\r\n", mediaTypeProtobuf); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		select {
		case <-upstreamEnded:
			p.mu.Lock()
			defer p.mu.Unlock()
			return len(p.watches) == 0, nil
		default:
			return false, nil
		}
	}); err != nil {
		t.Fatalf("a client that does not read was never dropped: %v", err)
	}
}
