package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// The workqueue metrics client-go's queues report (the names kube-controller-manager serves),
// in this manager's registry, labelled by queue name (the controller's name).
var (
	workqueueDepth = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: "workqueue", Name: "depth", Help: "Current depth of the workqueue.",
	}, []string{"name"})
	workqueueAdds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: "workqueue", Name: "adds_total", Help: "Total number of adds handled by the workqueue.",
	}, []string{"name"})
	workqueueLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Subsystem: "workqueue", Name: "queue_duration_seconds", Help: "How long an item stays in the workqueue before being requested.",
		Buckets: prometheus.ExponentialBuckets(10e-9, 10, 12),
	}, []string{"name"})
	workqueueWorkDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Subsystem: "workqueue", Name: "work_duration_seconds", Help: "How long processing an item from the workqueue takes.",
		Buckets: prometheus.ExponentialBuckets(10e-9, 10, 12),
	}, []string{"name"})
	workqueueUnfinished = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: "workqueue", Name: "unfinished_work_seconds", Help: "Seconds of work in progress not yet observed by work_duration.",
	}, []string{"name"})
	workqueueLongestRunning = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: "workqueue", Name: "longest_running_processor_seconds", Help: "Seconds the longest running processor has been running.",
	}, []string{"name"})
	workqueueRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: "workqueue", Name: "retries_total", Help: "Total number of retries handled by the workqueue.",
	}, []string{"name"})
)

func init() {
	Registry.MustRegister(workqueueDepth, workqueueAdds, workqueueLatency, workqueueWorkDuration,
		workqueueUnfinished, workqueueLongestRunning, workqueueRetries)
	workqueue.SetProvider(workqueueMetrics{})
}

// workqueueMetrics is the client-go workqueue.MetricsProvider backed by Registry. Queues take
// the provider set when they are created, so the controllers' queues (named after the
// controller) report here.
type workqueueMetrics struct{}

func (workqueueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return workqueueDepth.WithLabelValues(name)
}
func (workqueueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return workqueueAdds.WithLabelValues(name)
}
func (workqueueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return workqueueLatency.WithLabelValues(name)
}
func (workqueueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return workqueueWorkDuration.WithLabelValues(name)
}
func (workqueueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return workqueueUnfinished.WithLabelValues(name)
}
func (workqueueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return workqueueLongestRunning.WithLabelValues(name)
}
func (workqueueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return workqueueRetries.WithLabelValues(name)
}
