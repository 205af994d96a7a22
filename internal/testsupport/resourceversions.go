package testsupport

import (
	"strconv"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

// faker is a generated fake clientset: its reactor chain and its object tracker.
type faker interface {
	PrependReactor(verb, resource string, reaction clienttesting.ReactionFunc)
	Tracker() clienttesting.ObjectTracker
}

// StampResourceVersions makes a fake clientset give every object it creates, updates or
// patches a new, increasing integer resourceVersion, as an etcd-backed API server does (the
// fake tracker keeps metadata.resourceVersion as written). Code that tells an older copy from
// a newer one by it (controllers/pkg/ownwrites) can then be tested on fake clients. Objects
// the fake was seeded with keep theirs: give them one below 1000.
func StampResourceVersions(cs faker) {
	var last atomic.Int64
	last.Store(1000)
	tracker := cs.Tracker()
	stamp := func(obj runtime.Object) {
		if m, err := meta.Accessor(obj); err == nil {
			m.SetResourceVersion(strconv.FormatInt(last.Add(1), 10))
		}
	}
	cs.PrependReactor("create", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		stamp(a.(clienttesting.CreateAction).GetObject())
		return false, nil, nil // the tracker stores the stamped object
	})
	cs.PrependReactor("update", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		stamp(a.(clienttesting.UpdateAction).GetObject())
		return false, nil, nil
	})
	cs.PrependReactor("patch", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		handled, obj, err := clienttesting.ObjectReaction(tracker)(a)
		if !handled || err != nil || obj == nil {
			return handled, obj, err
		}
		stamp(obj)
		if err := tracker.Update(a.GetResource(), obj, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, obj, nil
	})
}
