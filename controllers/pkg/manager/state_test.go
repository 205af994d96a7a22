package manager

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	jkefake "github.com/staticip/staticip/apis/generated/clientset/versioned/fake"
	"github.com/staticip/staticip/apis/generated/informers/externalversions"
	jkelisters "github.com/staticip/staticip/apis/generated/listers/jke/v1alpha1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/enhancedstatefulset"
	"github.com/staticip/staticip/controllers/pkg/grid"
	"github.com/staticip/staticip/controllers/pkg/metrics"
	"github.com/staticip/staticip/controllers/pkg/nodefailover"
)

// TestStateSource: the state metrics read the listers of the enabled controllers' informers
// (through fake informers), only once the caches are synced, and a disabled controller's kind
// adds no informer and exports nothing.
func TestStateSource(t *testing.T) {
	set := &jkev1alpha1.EnhancedStatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: jkev1alpha1.EnhancedStatefulSetSpec{Replicas: ptr.To[int32](2)}}
	record := &jkev1alpha1.NodeFailover{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec: jkev1alpha1.NodeFailoverSpec{Node: "n1"}, Status: jkev1alpha1.NodeFailoverStatus{Phase: jkev1alpha1.FailoverFenced}}
	tests := []struct {
		name      string
		names     []string
		informers int
		series    int
	}{
		{"both kinds", []string{enhancedstatefulset.Name, nodefailover.Name}, 2, 8 + 2},
		{"sets only", []string{enhancedstatefulset.Name}, 1, 8},
		{"failover only", []string{nodefailover.Name}, 1, 2},
		{"neither", []string{grid.ServiceGridName}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			factory := externalversions.NewSharedInformerFactory(jkefake.NewSimpleClientset(set, record), 0)
			var ready atomic.Bool
			c := &metrics.StateCollector{}
			c.SetSource(stateSource(factory, tt.names, &ready))
			factory.Start(ctx.Done())
			defer factory.Shutdown()
			defer cancel()
			synced := factory.WaitForCacheSync(ctx.Done())
			if len(synced) != tt.informers {
				t.Fatalf("informers started: %v, want %d", synced, tt.informers)
			}
			if n := testutil.CollectAndCount(c); n != 0 {
				t.Fatalf("%d series before the caches are synced, want none", n)
			}
			ready.Store(true)
			if n := testutil.CollectAndCount(c); n != tt.series {
				t.Fatalf("%d series, want %d", n, tt.series)
			}
		})
	}
}

// The manager's registry serves metrics.State: series while it has a source, none without.
func TestStateCollectorRegistered(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := idx.Add(&jkev1alpha1.NodeFailover{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: jkev1alpha1.NodeFailoverSpec{Node: "n1"},
		Status: jkev1alpha1.NodeFailoverStatus{Phase: jkev1alpha1.FailoverCompleted}}); err != nil {
		t.Fatal(err)
	}
	metrics.State.SetSource(&metrics.StateSource{NodeFailovers: jkelisters.NewNodeFailoverLister(idx)})
	defer metrics.State.SetSource(nil)
	want := `# HELP staticip_nodefailover_phase 1 for each NodeFailover record's current phase (status.phase; Pending before the first step).
# TYPE staticip_nodefailover_phase gauge
staticip_nodefailover_phase{node="n1",phase="Completed"} 1
`
	if err := testutil.GatherAndCompare(metrics.Registry, strings.NewReader(want), "staticip_nodefailover_phase"); err != nil {
		t.Fatal(err)
	}
	metrics.State.SetSource(nil)
	if n, err := testutil.GatherAndCount(metrics.Registry, "staticip_nodefailover_phase"); err != nil || n != 0 {
		t.Fatalf("%d series without a source (%v), want none", n, err)
	}
}
