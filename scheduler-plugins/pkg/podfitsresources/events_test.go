package podfitsresources

import (
	"context"
	"testing"

	fwk "k8s.io/kube-scheduler/framework"

	"github.com/staticip/staticip/scheduler-plugins/apis/config"
	"github.com/staticip/staticip/scheduler-plugins/pkg/staticipnode"
)

// The scheduler registers no StaticIP or IPRange cluster event: for each one kube-scheduler
// builds a dynamic informer, holds every object a second time (unstructured, untrimmed) and
// waits for it before scheduling. The cache's informers bring the pods back instead
// (TestRequeueOnCacheChanges).
func TestNoCustomResourceClusterEvents(t *testing.T) {
	pl := NewWithCache(staticipnode.NewEmpty(), config.PodFitsResourcesWithStaticIPArgs{})
	events, err := pl.EventsToRegister(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		switch e.Event.Resource {
		case fwk.Pod, fwk.Node:
		default:
			t.Errorf("registers %s: kube-scheduler would hold those objects in a dynamic informer of its own", e.Event.Resource)
		}
	}
}
