package podfitsresources

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/scheduler-plugins/apis/config"
	"github.com/staticip/staticip/scheduler-plugins/pkg/staticipnode"
)

// hintAfter delivers a StaticIP or IPRange change (old nil: an add; new nil: a deletion, old
// possibly a tombstone) to the cache's informer handlers, as its informers do, and returns
// what hint says for pod about the change the cache then notified — QueueSkip when it
// notified none (a status-only update, an older version): such a change requeues nobody.
func hintAfter(t *testing.T, c *staticipnode.Cache, hint func(klog.Logger, *v1.Pod, staticipnode.Change) bool, pod *v1.Pod, oldObj, newObj interface{}) fwk.QueueingHint {
	t.Helper()
	var notified []staticipnode.Change
	listening := true
	c.Listen(func(ch staticipnode.Change) {
		if listening {
			notified = append(notified, ch)
		}
	})
	defer func() { listening = false }()
	obj := newObj
	if obj == nil {
		obj = oldObj
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
	}
	switch obj.(type) {
	case *jkev1.StaticIP:
		if newObj != nil {
			c.OnStaticIPUpdate(oldObj, newObj)
		} else {
			c.OnStaticIPDelete(oldObj)
		}
	case *jkev1.IPRange:
		if newObj != nil {
			c.OnIPRangeUpdate(oldObj, newObj)
		} else {
			c.OnIPRangeDelete(oldObj)
		}
	default:
		t.Fatalf("hintAfter: %T is neither a StaticIP nor an IPRange", obj)
	}
	if len(notified) > 1 {
		t.Fatalf("one change notified %d times", len(notified))
	}
	if len(notified) == 0 || !hint(klog.Background(), pod, notified[0]) {
		return fwk.QueueSkip
	}
	return fwk.Queue
}

// activations records what a Requeue activates.
type activations struct{ pods []string }

func (a *activations) Activate(_ klog.Logger, pods map[string]*v1.Pod) {
	for k := range pods {
		a.pods = append(a.pods, k)
	}
}

// The scheduler registers no StaticIP or IPRange cluster event (kube-scheduler would build a
// dynamic informer for each and hold every object a second time): a pod this plugin waits on
// is brought back by the cache's own informers, after the change is applied.
func TestRequeueOnCacheChanges(t *testing.T) {
	held := func(rv string) *jkev1.StaticIP {
		return &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "held", UID: "u-held", ResourceVersion: rv, Generation: 1},
			Spec: jkev1.StaticIPSpec{Node: "n1", IP: "10.1.2.3", Resources: rl("cpu", "2")}}
	}
	rng := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "r2", UID: "u-r2", ResourceVersion: "3", Generation: 1},
		Spec: jkev1.IPRangeSpec{CIDR: "10.1.3.0/29", Node: "n2"}}
	cases := []struct {
		name string
		// change is what the cache's informer delivers after the pod started waiting.
		change func(c *staticipnode.Cache)
		placed bool
		want   bool
	}{
		{"the absent pod's record is deleted: its reservation is freed", func(c *staticipnode.Cache) { c.OnStaticIPDelete(held("1")) }, false, true},
		{"a status-only update of the record frees nothing", func(c *staticipnode.Cache) {
			s := held("2")
			s.Status.ObservedGeneration = 1
			c.OnStaticIPUpdate(held("1"), s)
		}, false, false},
		{"the record is released", func(c *staticipnode.Cache) {
			s := held("2")
			s.Status.Phase = jkev1.StaticIPReleased
			c.OnStaticIPUpdate(held("1"), s)
		}, false, true},
		{"a node gets an IPRange", func(c *staticipnode.Cache) { c.OnIPRangeUpdate(nil, rng) }, false, true},
		{"a pod placed meanwhile is not brought back", func(c *staticipnode.Cache) { c.OnStaticIPDelete(held("1")) }, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := staticipnode.NewEmpty()
			c.MarkSynced()
			c.OnStaticIPUpdate(nil, held("1"))
			pl := NewWithCache(c, config.PodFitsResourcesWithStaticIPArgs{CheckIPs: true, NodesWithoutIPRange: config.NodesWithoutIPRangeAllow})
			var got activations
			pl.requeue = c.NewRequeue(klog.Background(), &got, pl.hint)
			pod := mkPod("ns", "waiting", "", rl("cpu", "1"))
			pod.UID = types.UID("u-waiting")
			pl.requeue.Wait(pod)
			if tc.placed {
				if st := pl.Reserve(context.Background(), nil, pod, "n1"); st != nil {
					t.Fatal(st)
				}
			}
			tc.change(c)
			activated := strings.Join(got.pods, ",") == "ns/waiting"
			if activated != tc.want {
				t.Errorf("activated %v, want %v", got.pods, tc.want)
			}
			if tc.want && pl.requeue.Waiting() != 0 {
				t.Errorf("an activated pod still waits")
			}
		})
	}
}
