package serving

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/staticip/staticip/internal/version"
)

func testEndpoints(ready *atomic.Bool) Endpoints {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "serving_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Inc()
	return Endpoints{Component: "serving-test", Metrics: reg, Readyz: func(*http.Request) error {
		if !ready.Load() {
			return errors.New("caches not synced")
		}
		return nil
	}}
}

// The handler: /metrics carries the registry and staticip_build_info; /healthz is ok;
// /readyz 503 with the reason until ready.
func TestHandler(t *testing.T) {
	var ready atomic.Bool
	h := Handler(testEndpoints(&ready))
	get := func(path string) (int, string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		return w.Code, w.Body.String()
	}
	if code, body := get("/healthz"); code != 200 || body != "ok" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "caches not synced") {
		t.Errorf("/readyz before ready = %d %q, want 503 with the reason", code, body)
	}
	ready.Store(true)
	if code, body := get("/readyz"); code != 200 || body != "ok" {
		t.Errorf("/readyz after ready = %d %q", code, body)
	}
	code, body := get("/metrics")
	for _, want := range []string{"serving_test_total 1", `staticip_build_info{component="serving-test",revision="",version="` + version.Version + `"} 1`} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics = %d, lacks %q:\n%s", code, want, body)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		change  func(*Options)
		wantErr string
	}{
		{"defaults", func(*Options) {}, ""},
		{"both off", func(o *Options) { o.MetricsBindAddress, o.HealthBindAddress = "0", "" }, ""},
		{"no port", func(o *Options) { o.MetricsBindAddress = "localhost" }, "--metrics-bind-address"},
		{"bad port", func(o *Options) { o.HealthBindAddress = "127.0.0.1:http" }, "--health-bind-address"},
		{"cert without key", func(o *Options) { o.CertFile = "/c.pem" }, "--tls-private-key-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions(":10260", "127.0.0.1:10261")
			tc.change(o)
			err := o.Validate()
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// Health alone (metrics off): plain HTTP, no credentials; the listener stops with ctx.
func TestStartHealthOnly(t *testing.T) {
	var ready atomic.Bool
	ready.Store(true)
	o := NewOptions("0", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	s, err := o.Start(ctx, testEndpoints(&ready))
	if err != nil {
		t.Fatal(err)
	}
	if s.MetricsAddr != "" {
		t.Errorf("metrics served on %s although off", s.MetricsAddr)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + s.HealthAddr + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok" {
			t.Errorf("%s = %d %q", p, resp.StatusCode, b)
		}
	}
	if resp, err := http.Get("http://" + s.HealthAddr + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("/metrics on the open health port: %d, want 404", resp.StatusCode)
		}
	}
	cancel()
	select {
	case <-s.Stopped():
	case <-time.After(time.Minute):
		t.Fatal("the health server did not stop with its context")
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := http.Get("http://" + s.HealthAddr + "/healthz")
		return err != nil, nil
	}); err != nil {
		t.Fatal("the health port still answers after its context ended")
	}
}
