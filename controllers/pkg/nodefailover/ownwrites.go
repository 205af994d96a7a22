package nodefailover

import (
	"k8s.io/apimachinery/pkg/labels"

	jkev1listers "github.com/staticip/staticip/apis/generated/listers/jke/v1"
	jkev1alpha1listers "github.com/staticip/staticip/apis/generated/listers/jke/v1alpha1"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/ownwrites"
)

// The controller reads IPRanges and its records through views that lay its own writes over
// the informer caches (controllers/pkg/ownwrites): a pass that marks a range and finds its
// routes in place takes the mark off again though the range cache does not show the mark yet,
// and a pass on a record cache one status write behind does not run a finished step again.
// Every IPRange and record write of this controller goes through remember.

// rangeView is the IPRange cache with this controller's range writes laid over it.
type rangeView struct {
	jkev1listers.IPRangeLister
	writes *ownwrites.Overlay[*jkev1.IPRange]
}

func (v rangeView) Get(name string) (*jkev1.IPRange, error) {
	r, err := v.IPRangeLister.Get(name)
	if err != nil {
		return nil, err
	}
	return v.writes.View(name, r), nil
}

func (v rangeView) List(sel labels.Selector) ([]*jkev1.IPRange, error) {
	all, err := v.IPRangeLister.List(sel)
	if err != nil || v.writes.Len() == 0 {
		return all, err
	}
	out := make([]*jkev1.IPRange, len(all))
	for i, r := range all {
		out[i] = v.writes.View(r.Name, r)
	}
	return out, nil
}

// recordView is the NodeFailover cache with this controller's record writes laid over it.
type recordView struct {
	jkev1alpha1listers.NodeFailoverLister
	writes *ownwrites.Overlay[*jkev1alpha1.NodeFailover]
}

func (v recordView) Get(name string) (*jkev1alpha1.NodeFailover, error) {
	rec, err := v.NodeFailoverLister.Get(name)
	if err != nil {
		return nil, err
	}
	return v.writes.View(name, rec), nil
}

// activeRecordsNow are the records not Completed (the activeIndex), each the newer of the
// cached copy and this controller's last write.
func (c *Controller) activeRecordsNow() []*jkev1alpha1.NodeFailover {
	objs, _ := c.activeRecords.ByIndex(activeIndex, "true")
	out := make([]*jkev1alpha1.NodeFailover, 0, len(objs))
	for _, o := range objs {
		if rec, ok := o.(*jkev1alpha1.NodeFailover); ok {
			out = append(out, c.recordWrites.View(rec.Name, rec))
		}
	}
	return out
}
