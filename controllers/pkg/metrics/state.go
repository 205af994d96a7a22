package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	jkelisters "github.com/staticip/staticip/apis/generated/listers/jke/v1alpha1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
)

// StateSource is where the State collector reads the objects at scrape time: the listers of the
// informers the leading manager runs. A nil lister exports nothing for its kind (its
// controllers are disabled); Synced, when set, must report true before anything is exported
// (a cache still filling would show sets and records as missing).
type StateSource struct {
	EnhancedStatefulSets jkelisters.EnhancedStatefulSetLister
	NodeFailovers        jkelisters.NodeFailoverLister
	Synced               func() bool
}

// StateCollector exports the state of each EnhancedStatefulSet and NodeFailover from the
// informer caches when /metrics is scraped, as kube-state-metrics does: nothing is kept
// between scrapes, so a deleted object's series vanish with it. Without a source (a standby
// replica, which holds no cache) it exports nothing.
type StateCollector struct {
	src atomic.Pointer[StateSource]
}

// State is the collector in Registry; the manager sets its source while it runs controllers.
var State = &StateCollector{}

func init() { Registry.MustRegister(State) }

// SetSource makes the collector read src (nil: export nothing).
func (c *StateCollector) SetSource(src *StateSource) { c.src.Store(src) }

var (
	esReplicasDesc = prometheus.NewDesc("staticip_enhancedstatefulset_replicas",
		"Replicas of an EnhancedStatefulSet by state: desired (spec.replicas), current, ready, available, updated (status) and unavailable (desired - available, at least 0).",
		[]string{"namespace", "name", "state"}, nil)
	esPausedDesc = prometheus.NewDesc("staticip_enhancedstatefulset_paused",
		"1 when the EnhancedStatefulSet's update is paused (spec.updateStrategy.rollingUpdate.paused).",
		[]string{"namespace", "name"}, nil)
	esRolloutDesc = prometheus.NewDesc("staticip_enhancedstatefulset_rollout_in_progress",
		"1 while the EnhancedStatefulSet rolls out: fewer pods updated than desired at or above the partition, or (no partition) status.updateRevision differs from status.currentRevision.",
		[]string{"namespace", "name"}, nil)
	nfPhaseDesc = prometheus.NewDesc("staticip_nodefailover_phase",
		"1 for each NodeFailover record's current phase (status.phase; Pending before the first step).",
		[]string{"node", "phase"}, nil)
	nfPhaseSinceDesc = prometheus.NewDesc("staticip_nodefailover_phase_since_timestamp_seconds",
		"Unix time the NodeFailover record's current phase began (status.phaseTime, else status.startTime, else its creation).",
		[]string{"node"}, nil)
)

// Describe sends the descriptors of every series the collector may export.
func (c *StateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{esReplicasDesc, esPausedDesc, esRolloutDesc, nfPhaseDesc, nfPhaseSinceDesc} {
		ch <- d
	}
}

// Collect lists the cached objects and sends their series.
func (c *StateCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.src.Load()
	if src == nil || (src.Synced != nil && !src.Synced()) {
		return
	}
	if src.EnhancedStatefulSets != nil {
		sets, err := src.EnhancedStatefulSets.List(labels.Everything())
		if err != nil {
			klog.ErrorS(err, "Listing EnhancedStatefulSets for metrics")
		}
		for _, es := range sets {
			collectEnhancedStatefulSet(ch, es)
		}
	}
	if src.NodeFailovers != nil {
		records, err := src.NodeFailovers.List(labels.Everything())
		if err != nil {
			klog.ErrorS(err, "Listing NodeFailovers for metrics")
		}
		for _, nf := range records {
			collectNodeFailover(ch, nf)
		}
	}
}

// EnhancedStatefulSetReplicas is the replicas series of one set, by state.
func EnhancedStatefulSetReplicas(es *jkev1alpha1.EnhancedStatefulSet) map[string]int32 {
	desired := int32(1)
	if es.Spec.Replicas != nil {
		desired = *es.Spec.Replicas
	}
	st := es.Status
	return map[string]int32{"desired": desired, "current": st.CurrentReplicas, "ready": st.ReadyReplicas,
		"available": st.AvailableReplicas, "updated": st.UpdatedReplicas, "unavailable": max(0, desired-st.AvailableReplicas)}
}

// RolloutInProgress reports whether the set has pods left to move to its update revision:
// fewer pods updated than the desired ones at or above the partition, or (no partition) the
// current revision not yet the update revision. A partitioned set whose ordinals from the
// partition up are updated has finished its stage (its currentRevision stays the old one).
func RolloutInProgress(es *jkev1alpha1.EnhancedStatefulSet) bool {
	r := EnhancedStatefulSetReplicas(es)
	partition := int32(0)
	if ru := es.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		partition = min(max(*ru.Partition, 0), r["desired"])
	}
	if r["updated"] < r["desired"]-partition {
		return true
	}
	return partition == 0 && es.Status.UpdateRevision != es.Status.CurrentRevision
}

// Paused reports whether the set's rolling update is paused.
func Paused(es *jkev1alpha1.EnhancedStatefulSet) bool {
	ru := es.Spec.UpdateStrategy.RollingUpdate
	return ru != nil && ru.Paused
}

var replicaStates = []string{"desired", "current", "ready", "available", "updated", "unavailable"}

func collectEnhancedStatefulSet(ch chan<- prometheus.Metric, es *jkev1alpha1.EnhancedStatefulSet) {
	r := EnhancedStatefulSetReplicas(es)
	for _, s := range replicaStates {
		ch <- prometheus.MustNewConstMetric(esReplicasDesc, prometheus.GaugeValue, float64(r[s]), es.Namespace, es.Name, s)
	}
	ch <- prometheus.MustNewConstMetric(esPausedDesc, prometheus.GaugeValue, boolValue(Paused(es)), es.Namespace, es.Name)
	ch <- prometheus.MustNewConstMetric(esRolloutDesc, prometheus.GaugeValue, boolValue(RolloutInProgress(es)), es.Namespace, es.Name)
}

func collectNodeFailover(ch chan<- prometheus.Metric, nf *jkev1alpha1.NodeFailover) {
	phase := string(nf.Status.Phase)
	if phase == "" {
		phase = "Pending"
	}
	node := nf.Spec.Node
	if node == "" {
		node = nf.Name
	}
	ch <- prometheus.MustNewConstMetric(nfPhaseDesc, prometheus.GaugeValue, 1, node, phase)
	since := nf.CreationTimestamp
	switch {
	case nf.Status.PhaseTime != nil:
		since = *nf.Status.PhaseTime
	case nf.Status.StartTime != nil:
		since = *nf.Status.StartTime
	}
	ch <- prometheus.MustNewConstMetric(nfPhaseSinceDesc, prometheus.GaugeValue, float64(since.Unix()), node)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
