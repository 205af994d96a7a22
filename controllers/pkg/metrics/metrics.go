// Package metrics holds the Prometheus metrics of staticip-controller-manager, in one
// registry the manager serves on /metrics.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
		Name: "staticip_enhancedstatefulset_pod_actions_total", Help: "Pod creations, deletions and in-place updates by type, reason and result.",
	}, []string{"action", "reason", "result"})
	// StaticIPConflicts counts conflicts found by the StaticIP controller.
	StaticIPConflicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "staticip_conflicts_total", Help: "StaticIP conflicts detected, by kind (duplicate-ip, annotation-mismatch, pod-ip-mismatch).",
	}, []string{"kind"})
	// StatusWrites counts status writes by controller and result (success, conflict, error):
	// a conflict is a write from a cache that had not yet shown this controller's own last
	// write, or an object changed by someone else meanwhile.
	StatusWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "staticip_controller_status_writes_total", Help: "Status writes by controller and result (success, conflict, error).",
	}, []string{"controller", "result"})
	// IsLeader is 1 while this replica holds the lease.
	IsLeader = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "staticip_controller_manager_leader", Help: "1 while this replica holds the leader lease.",
	})
)

func init() {
	Registry.MustRegister(Syncs, SyncDuration, PodActions, StaticIPConflicts, StatusWrites, IsLeader,
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

// ObserveStatusWrite records one status write.
func ObserveStatusWrite(controller string, err error) {
	result := "success"
	switch {
	case apierrors.IsConflict(err):
		result = "conflict"
	case err != nil:
		result = "error"
	}
	StatusWrites.WithLabelValues(controller, result).Inc()
}

var (
	// NodeFailoverMigrations counts node failover outcomes: completed, cancelled (the node was
	// un-fenced before anything moved), stopped_unhealthy and no_target (each counted when the
	// migration enters that state).
	NodeFailoverMigrations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "staticip_nodefailover_migrations_total", Help: "Node failover migrations by result (completed, cancelled, stopped_unhealthy, no_target).",
	}, []string{"result"})
	// NodeFailoverStepDuration is how long each failover step took (from the previous step),
	// and the whole migration (step "Total").
	NodeFailoverStepDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "staticip_nodefailover_step_duration_seconds", Help: "Duration of each node failover step, from the previous step; step Total is detection to completion.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
	}, []string{"step"})
)

func init() {
	Registry.MustRegister(NodeFailoverMigrations, NodeFailoverStepDuration)
}
