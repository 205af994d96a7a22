package bench

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/rest"
)

// A component reaches the API server through its proxy over HTTP/2, as it would reach a real
// kube-apiserver: over HTTP/1.1 every request in flight takes a connection of its own, and
// kube-scheduler's asynchronous binds at 1,000 nodes exhausted the harness's file descriptors.
func TestProxyServesHTTP2(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{}")) }))
	defer api.Close()
	p, err := NewCountingProxy(&rest.Config{Host: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rt, err := rest.TransportFor(p.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: rt}).Get(p.URL + "/api/v1/namespaces/default/pods")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Errorf("a client of the proxy speaks %s, want HTTP/2", resp.Proto)
	}
	if got := p.Counts()["list pods"]; got != 1 {
		t.Errorf("counted %d list pods, want 1 (counts %v)", got, p.Counts())
	}
}
