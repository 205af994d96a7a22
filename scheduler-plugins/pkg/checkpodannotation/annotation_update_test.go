package checkpodannotation

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/scheduler-plugins/pkg/staticipnode"
)

// A pending pod rejected for its annotation is retried as soon as the annotation is
// corrected, not at the next periodic flush: Pod/Update is registered and its hint queues
// the pod itself when the annotation changed.
func TestAnnotationCorrectionRequeues(t *testing.T) {
	c := staticipnode.NewEmpty()
	c.MarkSynced()
	pl := NewWithCache(snapshotHandle{}, c, defaultArgs())
	events, err := pl.EventsToRegister(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var hint fwk.QueueingHintFn
	for _, e := range events {
		if e.Event.Resource == fwk.Pod && e.Event.ActionType&fwk.Update == fwk.Update {
			hint = e.QueueingHintFn
		}
	}
	if hint == nil {
		t.Fatal("no hint for Pod/Update: a corrected annotation waits for the periodic flush")
	}
	bad := annotated("web-0", "10.1.2")
	bad.UID = types.UID("uid-web-0")
	fixed := bad.DeepCopy()
	fixed.Annotations[podip.AnnotationIPAddress] = "10.1.2.7"
	relabeled := bad.DeepCopy()
	relabeled.Labels = map[string]string{"a": "b"}
	other := annotated("web-1", "10.1.2.8")
	other.UID = "uid-web-1"
	otherFixed := other.DeepCopy()
	otherFixed.Annotations[podip.AnnotationIPAddress] = "10.1.2.9"
	for _, tc := range []struct {
		name     string
		old, new interface{}
		want     fwk.QueueingHint
	}{
		{"own annotation corrected", bad, fixed, fwk.Queue},
		{"own labels changed", bad, relabeled, fwk.QueueSkip},
		{"another pod's annotation changed", other, otherFixed, fwk.QueueSkip},
	} {
		if got, err := hint(klog.Background(), bad, tc.old, tc.new); err != nil || got != tc.want {
			t.Errorf("%s: %v %v, want %v", tc.name, got, err, tc.want)
		}
	}
}
