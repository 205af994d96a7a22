package manager

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
)

// unsyncableAPIServer answers every request with 503: no informer of a manager talking to
// it ever syncs, and no lease can be taken.
func unsyncableAPIServer(t *testing.T) *rest.Config {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"ServiceUnavailable","code":503}`))
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL, QPS: -1}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// probe returns the status of GET path, 0 while the server does not answer.
func probe(addr, path string) (int, string) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestReadyzWaitsForCaches: a manager that runs its controllers (no leader election) is not
// ready while its informer caches have not synced; a standby (leader election on, lease not
// held) is ready, as a standby kube-controller-manager is healthy: it has no caches to sync and
// a rolling update must be able to proceed through it.
func TestReadyzWaitsForCaches(t *testing.T) {
	for _, tc := range []struct {
		name        string
		leaderElect bool
		wantReady   bool
	}{
		{name: "controllers running, caches not synced", leaderElect: false, wantReady: false},
		{name: "standby", leaderElect: true, wantReady: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := unsyncableAPIServer(t)
			addr := freeAddr(t)
			o := NewOptions()
			o.LeaderElect = tc.leaderElect
			o.LeaderElectNamespace = "default"
			o.Serving.MetricsBindAddress, o.Serving.HealthBindAddress = "0", addr
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- RunConfig(ctx, &Config{Options: o, Rest: cfg, Hooks: Hooks{Identity: "readyz-test"}}) }()
			defer func() {
				cancel()
				select {
				case <-done:
				case <-time.After(time.Minute):
					t.Error("Run did not return")
				}
			}()
			// The health server is up once /healthz answers (the controllers, if they run, have
			// started their informers by then or soon after).
			if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
				code, _ := probe(addr, "/healthz")
				return code != 0, nil
			}); err != nil {
				t.Fatalf("health server never answered: %v", err)
			}
			// Give the informers several failed lists: they still have not synced.
			for i := 0; i < 5; i++ {
				code, body := probe(addr, "/readyz")
				if got := code == http.StatusOK; got != tc.wantReady {
					t.Fatalf("/readyz = %d %q; want ready=%v", code, body, tc.wantReady)
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	}
}
