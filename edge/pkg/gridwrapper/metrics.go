package gridwrapper

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics of application-grid-wrapper, served on the metrics address (loopback).
type Metrics struct {
	Registry           *prometheus.Registry
	requests           *prometheus.CounterVec
	endpoints          *prometheus.CounterVec
	filterSeconds      *prometheus.HistogramVec
	watchesOpen        prometheus.Gauge
	watchResets        *prometheus.CounterVec
	refreshes          *prometheus.CounterVec
	refreshedSlices    prometheus.Counter
	selectionChanges   *prometheus.CounterVec
	invalidAnnotations prometheus.Counter
}

// NewMetrics registers the wrapper's metrics (and the Go/process collectors) in a
// registry of their own.
func NewMetrics() *Metrics {
	const ns = "staticip_application_grid_wrapper"
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "requests_total",
			Help: "Requests from kube-proxy by resource, verb and result (proxied, refused, not_synced)."},
			[]string{"resource", "verb", "result"}),
		endpoints: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "endpoints_total",
			Help: "Endpoints in served EndpointSlices: kept or dropped by a topologyKeys decision, passed for Services without one."},
			[]string{"action"}),
		filterSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "filter_duration_seconds",
			Help:    "Time to decide and filter one EndpointSlice list or watch event (decode and encode of lists included).",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12)}, []string{"kind"}),
		watchesOpen: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "endpointslice_watches",
			Help: "Open EndpointSlice watches."}),
		watchResets: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "watch_resets_total",
			Help: "EndpointSlice watches ended with 410 Expired so that the client relists, by reason."}, []string{"reason"}),
		refreshes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "watch_refreshes_total",
			Help: "Selection changes written into an open EndpointSlice watch, by result (resent, unchanged, failed: the watch was ended with 410)."}, []string{"result"}),
		refreshedSlices: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "refreshed_slices_total",
			Help: "EndpointSlices re-sent re-filtered on open watches after selection changes."}),
		selectionChanges: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "selection_changes_total",
			Help: "Events that may change a topology decision outside the EndpointSlice stream, by reason."}, []string{"reason"}),
		invalidAnnotations: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "invalid_annotations_total",
			Help: "topologyKeys annotation values that did not parse (their Services pass unfiltered)."}),
	}
	m.Registry.MustRegister(m.requests, m.endpoints, m.filterSeconds, m.watchesOpen, m.watchResets, m.refreshes, m.refreshedSlices, m.selectionChanges,
		m.invalidAnnotations, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
