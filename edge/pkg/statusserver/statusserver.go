// Package statusserver serves an edge binary's /metrics, /healthz and /readyz on their own
// listener, apart from the binary's main traffic (so a probe or a scrape never queues behind it,
// and the address can stay on loopback).
package statusserver

import (
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler is /metrics from reg, /healthz (the process answers) and /readyz: 200 once ready
// returns nil, 503 with its error's text before.
func Handler(reg *prometheus.Registry, ready func() error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return mux
}

// Start listens on addr and serves Handler(reg, ready) until the returned server is closed;
// Serve's error goes to errCh. It returns the server and the address it listens on (addr may
// name port 0).
func Start(addr string, reg *prometheus.Registry, ready func() error, errCh chan<- error) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	srv := &http.Server{Handler: Handler(reg, ready), ReadHeaderTimeout: 10 * time.Second}
	go func() { errCh <- srv.Serve(ln) }()
	return srv, ln.Addr().String(), nil
}
