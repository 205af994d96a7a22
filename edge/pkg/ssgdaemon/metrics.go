package ssgdaemon

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics of statefulset-grid-daemon, served on the metrics address (loopback).
type Metrics struct {
	Registry    *prometheus.Registry
	records     prometheus.Gauge
	skipped     prometheus.Gauge
	writes      prometheus.Counter
	writeErrors *prometheus.CounterVec
	lastWrite   prometheus.Gauge
	syncSeconds prometheus.Histogram
}

// NewMetrics registers the daemon's metrics (and the Go/process collectors) in a registry of
// their own.
func NewMetrics() *Metrics {
	const ns = "staticip_statefulset_grid_daemon"
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		records: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "records",
			Help: "Records in the hosts file as last written (or found up to date)."}),
		skipped: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "skipped",
			Help: "Grid StatefulSets or names of this node's units that give no record (see the GridRecordSkipped events)."}),
		writes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "writes_total",
			Help: "Rewrites of the hosts file (only when its content changes)."}),
		writeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "write_errors_total",
			Help: "Failed rewrites by reason (DirMissing, NotADirectory, NotWritable, Other); the previous file stays."}, []string{"reason"}),
		lastWrite: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "last_write_timestamp_seconds",
			Help: "Unix time of the last rewrite of the hosts file."}),
		syncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "sync_duration_seconds",
			Help: "Time to compute the records and write the file (when it changed).", Buckets: prometheus.ExponentialBuckets(1e-4, 4, 10)}),
	}
	m.Registry.MustRegister(m.records, m.skipped, m.writes, m.writeErrors, m.lastWrite, m.syncSeconds,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
