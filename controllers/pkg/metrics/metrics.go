// Package metrics holds the Prometheus metrics of staticip-controller-manager, in one
// registry the manager serves on /metrics.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Registry is what /metrics serves.
var Registry = prometheus.NewRegistry()

var (
	// Syncs counts reconciles per controller and result.
	Syncs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "staticip_controller_syncs_total", Help: "Reconciles by controller and result (success, error).",
	}, []string{"controller", "result"})
	// SyncDuration is how long reconciles take.
	SyncDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "staticip_controller_sync_duration_seconds", Help: "Duration of one reconcile.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	}, []string{"controller"})
	// PodActions counts the planner's actions the EnhancedStatefulSet controller carried out.
	PodActions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "enhancedstatefulset_pod_actions_total", Help: "Pod creations, deletions and in-place updates by type, reason and result.",
	}, []string{"action", "reason", "result"})
	// StaticIPConflicts counts conflicts found by the StaticIP controller.
	StaticIPConflicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "staticip_conflicts_total", Help: "StaticIP conflicts detected, by kind (duplicate-ip, annotation-mismatch, pod-ip-mismatch).",
	}, []string{"kind"})
	// IsLeader is 1 while this replica holds the lease.
	IsLeader = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "staticip_controller_manager_leader", Help: "1 while this replica holds the leader lease.",
	})
)

func init() {
	Registry.MustRegister(Syncs, SyncDuration, PodActions, StaticIPConflicts, IsLeader,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// ObserveSync records one reconcile.
func ObserveSync(controller string, start time.Time, err error) {
	result := "success"
	if err != nil {
		result = "error"
	}
	Syncs.WithLabelValues(controller, result).Inc()
	SyncDuration.WithLabelValues(controller).Observe(time.Since(start).Seconds())
}
