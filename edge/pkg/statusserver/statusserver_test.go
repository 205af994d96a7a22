package statusserver

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "statusserver_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Inc()
	var synced atomic.Bool
	errCh := make(chan error, 1)
	srv, addr, err := Start("127.0.0.1:0", reg, func() error {
		if !synced.Load() {
			return errors.New("caches not synced")
		}
		return nil
	}, errCh)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "caches not synced") {
		t.Errorf("/readyz before sync = %d %q, want 503 with the reason", code, body)
	}
	synced.Store(true)
	if code, body := get("/readyz"); code != 200 || body != "ok" {
		t.Errorf("/readyz after sync = %d %q", code, body)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "statusserver_test_total 1") {
		t.Errorf("/metrics = %d, missing the registry's counter:\n%s", code, body)
	}
	srv.Close()
	if err := <-errCh; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve returned %v, want ErrServerClosed", err)
	}
}
