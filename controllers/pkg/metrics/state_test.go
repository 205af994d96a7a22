package metrics

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	jkelisters "github.com/staticip/staticip/apis/generated/listers/jke/v1alpha1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
)

func es(name string, desired *int32, partition *int32, paused bool, st jkev1alpha1.EnhancedStatefulSetStatus) *jkev1alpha1.EnhancedStatefulSet {
	e := &jkev1alpha1.EnhancedStatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Status: st}
	e.Spec.Replicas = desired
	if partition != nil || paused {
		e.Spec.UpdateStrategy.RollingUpdate = &jkev1alpha1.RollingUpdateEnhancedStatefulSetStrategy{Partition: partition, Paused: paused}
	}
	return e
}

func nf(node string, phase jkev1alpha1.NodeFailoverPhase, phaseTime, start *time.Time) *jkev1alpha1.NodeFailover {
	n := &jkev1alpha1.NodeFailover{ObjectMeta: metav1.ObjectMeta{Name: node, CreationTimestamp: metav1.Unix(1000, 0)}}
	n.Spec.Node = node
	n.Status.Phase = phase
	if phaseTime != nil {
		n.Status.PhaseTime = ptr.To(metav1.NewTime(*phaseTime))
	}
	if start != nil {
		n.Status.StartTime = ptr.To(metav1.NewTime(*start))
	}
	return n
}

func indexer(t *testing.T, objs ...runtime.Object) cache.Indexer {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, o := range objs {
		if err := idx.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return idx
}

const esHelp = `# HELP staticip_enhancedstatefulset_paused 1 when the EnhancedStatefulSet's update is paused (spec.updateStrategy.rollingUpdate.paused).
# TYPE staticip_enhancedstatefulset_paused gauge
# HELP staticip_enhancedstatefulset_replicas Replicas of an EnhancedStatefulSet by state: desired (spec.replicas), current, ready, available, updated (status) and unavailable (desired - available, at least 0).
# TYPE staticip_enhancedstatefulset_replicas gauge
# HELP staticip_enhancedstatefulset_rollout_in_progress 1 while the EnhancedStatefulSet rolls out: fewer pods updated than desired at or above the partition, or (no partition) status.updateRevision differs from status.currentRevision.
# TYPE staticip_enhancedstatefulset_rollout_in_progress gauge
`

const nfHelp = `# HELP staticip_nodefailover_phase 1 for each NodeFailover record's current phase (status.phase; Pending before the first step).
# TYPE staticip_nodefailover_phase gauge
# HELP staticip_nodefailover_phase_since_timestamp_seconds Unix time the NodeFailover record's current phase began (status.phaseTime, else status.startTime, else its creation).
# TYPE staticip_nodefailover_phase_since_timestamp_seconds gauge
`

func replicas(name string, desired, current, ready, available, updated, unavailable int) string {
	var b strings.Builder
	for _, s := range []struct {
		state string
		v     int
	}{{"available", available}, {"current", current}, {"desired", desired}, {"ready", ready}, {"unavailable", unavailable}, {"updated", updated}} {
		b.WriteString(`staticip_enhancedstatefulset_replicas{name="` + name + `",namespace="ns",state="` + s.state + `"} ` + strconv.Itoa(s.v) + "\n")
	}
	return b.String()
}

func TestStateCollector(t *testing.T) {
	phaseAt := time.Unix(5000, 0)
	startAt := time.Unix(4000, 0)
	tests := []struct {
		name  string
		src   func(t *testing.T) *StateSource
		names []string
		want  string
	}{{
		name: "no source (standby): nothing",
		src:  func(*testing.T) *StateSource { return nil },
		want: "",
	}, {
		name: "caches not synced: nothing",
		src: func(t *testing.T) *StateSource {
			return &StateSource{EnhancedStatefulSets: jkelisters.NewEnhancedStatefulSetLister(indexer(t, es("a", ptr.To[int32](3), nil, false, jkev1alpha1.EnhancedStatefulSetStatus{}))),
				Synced: func() bool { return false }}
		},
		want: "",
	}, {
		name: "sets: rolled out, mid-rollout, paused, partition stage done, more available than desired, default replicas",
		src: func(t *testing.T) *StateSource {
			return &StateSource{EnhancedStatefulSets: jkelisters.NewEnhancedStatefulSetLister(indexer(t,
				es("done", ptr.To[int32](3), nil, false, jkev1alpha1.EnhancedStatefulSetStatus{Replicas: 3, CurrentReplicas: 3, ReadyReplicas: 3, AvailableReplicas: 3, UpdatedReplicas: 3, CurrentRevision: "r2", UpdateRevision: "r2"}),
				es("rolling", ptr.To[int32](5), nil, false, jkev1alpha1.EnhancedStatefulSetStatus{Replicas: 5, CurrentReplicas: 3, ReadyReplicas: 4, AvailableReplicas: 3, UpdatedReplicas: 2, CurrentRevision: "r1", UpdateRevision: "r2"}),
				es("paused", ptr.To[int32](2), nil, true, jkev1alpha1.EnhancedStatefulSetStatus{Replicas: 2, CurrentReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2, CurrentRevision: "r1", UpdateRevision: "r2"}),
				es("staged", ptr.To[int32](4), ptr.To[int32](2), false, jkev1alpha1.EnhancedStatefulSetStatus{Replicas: 4, CurrentReplicas: 2, ReadyReplicas: 4, AvailableReplicas: 4, UpdatedReplicas: 2, CurrentRevision: "r1", UpdateRevision: "r2"}),
				es("scaledown", ptr.To[int32](1), nil, false, jkev1alpha1.EnhancedStatefulSetStatus{Replicas: 2, CurrentReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2, UpdatedReplicas: 2, CurrentRevision: "r1", UpdateRevision: "r1"}),
				es("default", nil, nil, false, jkev1alpha1.EnhancedStatefulSetStatus{}),
			))}
		},
		names: []string{"staticip_enhancedstatefulset_replicas", "staticip_enhancedstatefulset_paused", "staticip_enhancedstatefulset_rollout_in_progress"},
		want: esHelp +
			`staticip_enhancedstatefulset_paused{name="default",namespace="ns"} 0
staticip_enhancedstatefulset_paused{name="done",namespace="ns"} 0
staticip_enhancedstatefulset_paused{name="paused",namespace="ns"} 1
staticip_enhancedstatefulset_paused{name="rolling",namespace="ns"} 0
staticip_enhancedstatefulset_paused{name="scaledown",namespace="ns"} 0
staticip_enhancedstatefulset_paused{name="staged",namespace="ns"} 0
` + replicas("default", 1, 0, 0, 0, 0, 1) + replicas("done", 3, 3, 3, 3, 3, 0) + replicas("paused", 2, 2, 2, 2, 0, 0) +
			replicas("rolling", 5, 3, 4, 3, 2, 2) + replicas("scaledown", 1, 2, 2, 2, 2, 0) + replicas("staged", 4, 2, 4, 4, 2, 0) +
			`staticip_enhancedstatefulset_rollout_in_progress{name="default",namespace="ns"} 1
staticip_enhancedstatefulset_rollout_in_progress{name="done",namespace="ns"} 0
staticip_enhancedstatefulset_rollout_in_progress{name="paused",namespace="ns"} 1
staticip_enhancedstatefulset_rollout_in_progress{name="rolling",namespace="ns"} 1
staticip_enhancedstatefulset_rollout_in_progress{name="scaledown",namespace="ns"} 0
staticip_enhancedstatefulset_rollout_in_progress{name="staged",namespace="ns"} 0
`,
	}, {
		name: "failover records: phase time, start time, creation time",
		src: func(t *testing.T) *StateSource {
			return &StateSource{NodeFailovers: jkelisters.NewNodeFailoverLister(indexer(t,
				nf("n1", jkev1alpha1.FailoverRangesMoved, &phaseAt, &startAt),
				nf("n2", jkev1alpha1.FailoverCompleted, nil, &startAt),
				nf("n3", "", nil, nil),
			)), Synced: func() bool { return true }}
		},
		names: []string{"staticip_nodefailover_phase", "staticip_nodefailover_phase_since_timestamp_seconds"},
		want: nfHelp + `staticip_nodefailover_phase{node="n1",phase="RangesMoved"} 1
staticip_nodefailover_phase{node="n2",phase="Completed"} 1
staticip_nodefailover_phase{node="n3",phase="Pending"} 1
staticip_nodefailover_phase_since_timestamp_seconds{node="n1"} 5000
staticip_nodefailover_phase_since_timestamp_seconds{node="n2"} 4000
staticip_nodefailover_phase_since_timestamp_seconds{node="n3"} 1000
`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &StateCollector{}
			c.SetSource(tt.src(t))
			if tt.want == "" {
				if n := testutil.CollectAndCount(c); n != 0 {
					t.Fatalf("collected %d series, want none", n)
				}
				return
			}
			if err := testutil.CollectAndCompare(c, strings.NewReader(tt.want), tt.names...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A deleted object's series go with it: the collector keeps nothing between scrapes.
func TestStateCollectorForgetsDeleted(t *testing.T) {
	idx := indexer(t, es("a", ptr.To[int32](1), nil, false, jkev1alpha1.EnhancedStatefulSetStatus{}))
	c := &StateCollector{}
	c.SetSource(&StateSource{EnhancedStatefulSets: jkelisters.NewEnhancedStatefulSetLister(idx)})
	if n := testutil.CollectAndCount(c); n != 8 {
		t.Fatalf("collected %d series, want 8 (6 replicas, paused, rollout)", n)
	}
	obj, _, _ := idx.GetByKey("ns/a")
	if err := idx.Delete(obj); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Fatalf("collected %d series after the delete, want none", n)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatalf("the collector is not pedantically valid: %v", err)
	}
}
