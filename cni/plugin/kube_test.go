package plugin

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// DEL frees a pod's IP on errNotFound, so only the API server saying that the StaticIP itself
// does not exist may produce it; a bare 404 (a proxy, the CRD not installed) keeps the IP.
func TestOnlyAnObjectNotFoundIsNotFound(t *testing.T) {
	for name, tc := range map[string]struct {
		body     string
		notFound bool
	}{
		"object not found": {`{"kind":"Status","status":"Failure","reason":"NotFound","details":{"name":"web-0","group":"jke.jdcloud.com","kind":"staticips"},"code":404}`, true},
		"bare 404":         {`404 page not found`, false},
		"resource unknown": {`{"kind":"Status","status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}`, false},
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusNotFound)
				w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			kc := &kubeClient{http: srv.Client(), host: srv.URL, timeout: 5 * time.Second}
			_, err := kc.getStaticIP(context.Background(), "ns", "web-0")
			if err == nil || errors.Is(err, errNotFound) != tc.notFound {
				t.Fatalf("%v: errNotFound=%v, want %v", err, errors.Is(err, errNotFound), tc.notFound)
			}
		})
	}
}
