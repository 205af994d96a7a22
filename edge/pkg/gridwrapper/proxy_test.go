package gridwrapper

import (
	"bytes"
	"compress/gzip"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"

	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		method, target string
		want           route
	}{
		{"GET", "/apis/discovery.k8s.io/v1/endpointslices?labelSelector=%21service.kubernetes.io%2Fheadless", filterSlices},
		{"GET", "/apis/discovery.k8s.io/v1/endpointslices?watch=true&sendInitialEvents=true", filterSlices},
		{"GET", "/api/v1/services?fieldSelector=spec.clusterIP%21%3DNone", pass},
		{"GET", "/apis/networking.k8s.io/v1/servicecidrs", pass},
		{"GET", "/api/v1/nodes?fieldSelector=metadata.name%3Dnode-a", pass},
		{"GET", "/api/v1/nodes/node-a", pass},
		{"GET", "/version", pass},
		{"POST", "/apis/events.k8s.io/v1/namespaces/default/events", pass},
		{"PATCH", "/apis/events.k8s.io/v1/namespaces/default/events/node-a.1234", pass},
		// Refused: other nodes, all nodes, namespaced or other resources, writes.
		{"GET", "/api/v1/nodes?fieldSelector=metadata.name%3Dnode-b", refuse},
		{"GET", "/api/v1/nodes", refuse},
		{"GET", "/api/v1/nodes?fieldSelector=metadata.name%3Dnode-a%2Cspec.unschedulable%3Dfalse", refuse},
		{"GET", "/api/v1/nodes/node-b", refuse},
		{"GET", "/api/v1/secrets", refuse},
		{"GET", "/api/v1/namespaces/kube-system/secrets/x", refuse},
		{"GET", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", refuse},
		{"DELETE", "/apis/discovery.k8s.io/v1/endpointslices", refuse},
		{"POST", "/api/v1/namespaces/default/events", refuse},
		{"DELETE", "/apis/events.k8s.io/v1/namespaces/default/events/x", refuse},
		{"PUT", "/api/v1/nodes/node-a", refuse},
		{"GET", "/api/v1/services/../secrets", refuse},
	}
	for _, tt := range tests {
		u, _ := url.Parse(tt.target)
		r := &http.Request{Method: tt.method, URL: u}
		if got := classify(r, "node-a"); got != tt.want {
			t.Errorf("%s %s = %v, want %v", tt.method, tt.target, got, tt.want)
		}
	}
}

type fakeState struct{ synced bool }

func (f fakeState) Synced() bool                                                    { return f.synced }
func (f fakeState) Filter(es *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice { return es }

// TestNotSyncedAnswers429: EndpointSlice requests wait for the caches (429 + Retry-After),
// other requests pass, refused ones never reach the API server.
func TestNotSyncedAnswers429(t *testing.T) {
	var upstreamCalls []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamCalls = append(upstreamCalls, r.URL.Path)
		if r.Header.Get("Authorization") != "" {
			t.Errorf("client Authorization forwarded")
		}
		_, _ = w.Write([]byte(`{}`))
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	p := NewProxy(u, http.DefaultTransport, "node-a", fakeState{}, NewMetrics())

	do := func(method, path string) *http.Response {
		req := httptest.NewRequest(method, path, nil)
		req.Header.Set("Authorization", "Bearer stolen")
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, req)
		return rec.Result()
	}
	if r := do("GET", "/apis/discovery.k8s.io/v1/endpointslices"); r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") != "1" {
		t.Errorf("endpointslices before sync: %d Retry-After=%q, want 429 and 1", r.StatusCode, r.Header.Get("Retry-After"))
	}
	if r := do("GET", "/api/v1/services"); r.StatusCode != http.StatusOK {
		t.Errorf("services before sync: %d, want 200", r.StatusCode)
	}
	if r := do("GET", "/api/v1/secrets"); r.StatusCode != http.StatusForbidden {
		t.Errorf("secrets: %d, want 403", r.StatusCode)
	}
	if len(upstreamCalls) != 1 || upstreamCalls[0] != "/api/v1/services" {
		t.Errorf("upstream saw %v, want only /api/v1/services", upstreamCalls)
	}
}

// TestStaleWatchStartEnds: a watch resuming from a resourceVersion this wrapper never
// handed out (it restarted) gets a 410 ERROR and ends, so the client relists.
func TestStaleWatchStartEnds(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", mediaTypeProtobuf+";stream=watch")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // an idle watch
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	p := NewProxy(u, http.DefaultTransport, "node-a", fakeState{synced: true}, NewMetrics())
	srv := httptest.NewServer(p)
	defer srv.Close()

	done := make(chan []watch.Event, 1)
	go func() {
		req, _ := http.NewRequest("GET", srv.URL+"/apis/discovery.k8s.io/v1/endpointslices?watch=true&resourceVersion=123", nil)
		req.Header.Set("Accept", mediaTypeProtobuf)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			done <- nil
			return
		}
		done <- decodeStream(t, mediaTypeProtobuf, resp.Body)
	}()
	select {
	case events := <-done:
		if len(events) != 1 || events[0].Type != watch.Error || !apierrors.IsResourceExpired(apierrors.FromObject(events[0].Object)) {
			t.Fatalf("got %+v, want one 410 Expired ERROR", events)
		}
	case <-time.After(30 * time.Second):
		srv.CloseClientConnections()
		upstream.CloseClientConnections()
		t.Fatal("the watch from an unknown resourceVersion was never ended (the client would wait forever)")
	}
}

type dropAll struct{}

func (dropAll) Synced() bool { return true }
func (dropAll) Filter(es *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	out := es.DeepCopy()
	out.Endpoints = nil
	return out
}

// TestGzipList: a gzip-compressed protobuf list (the API server compresses large lists for
// clients that accept gzip, as client-go does) is decompressed, filtered and re-encoded.
func TestGzipList(t *testing.T) {
	info, err := serializerFor(mediaTypeProtobuf)
	if err != nil {
		t.Fatal(err)
	}
	list := &discoveryv1.EndpointSliceList{ListMeta: metav1.ListMeta{ResourceVersion: "9"},
		Items: []discoveryv1.EndpointSlice{*testSlice("a", "8", "10.0.0.1", "10.0.0.2")}}
	raw, err := runtime.Encode(scheme.Codecs.EncoderForVersion(info.Serializer, discoveryv1.SchemeGroupVersion), list)
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(raw)
	_ = zw.Close()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", mediaTypeProtobuf)
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(gz.Bytes())
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	p := NewProxy(u, http.DefaultTransport, "node-a", dropAll{}, NewMetrics())
	req := httptest.NewRequest("GET", "/apis/discovery.k8s.io/v1/endpointslices", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Encoding") != "" {
		t.Fatalf("status %d, Content-Encoding %q", rec.Code, rec.Header().Get("Content-Encoding"))
	}
	got := &discoveryv1.EndpointSliceList{}
	if err := runtime.DecodeInto(scheme.Codecs.UniversalDecoder(), rec.Body.Bytes(), got); err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != "9" || len(got.Items) != 1 || len(got.Items[0].Endpoints) != 0 {
		t.Errorf("filtered list %+v", got)
	}
}
