package staticipnode

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"
)

// Resources is an amount of node resources in the units the scheduler compares:
// millicores, bytes, and integer counts for scalar (extended, hugepages) resources.
type Resources struct {
	MilliCPU         int64
	Memory           int64
	EphemeralStorage int64
	// Scalar holds extended and hugepages resources; nil when there are none.
	Scalar map[v1.ResourceName]int64
}

// ResourcesFromList converts a ResourceList (such as StaticIP.spec.resources). The "pods"
// key is ignored: a reservation always takes exactly one pod slot.
func ResourcesFromList(rl v1.ResourceList) Resources {
	var r Resources
	for name, q := range rl {
		switch name {
		case v1.ResourceCPU:
			r.MilliCPU = q.MilliValue()
		case v1.ResourceMemory:
			r.Memory = q.Value()
		case v1.ResourceEphemeralStorage:
			r.EphemeralStorage = q.Value()
		default:
			if schedutil.IsScalarResourceName(name) && !q.IsZero() {
				if r.Scalar == nil {
					r.Scalar = map[v1.ResourceName]int64{}
				}
				r.Scalar[name] = q.Value()
			}
		}
	}
	return r
}

// IsZero reports whether r holds nothing.
func (r Resources) IsZero() bool {
	if r.MilliCPU != 0 || r.Memory != 0 || r.EphemeralStorage != 0 {
		return false
	}
	for _, v := range r.Scalar {
		if v != 0 {
			return false
		}
	}
	return true
}

// add adds sign*o to r.
func (r *Resources) add(o Resources, sign int64) {
	r.MilliCPU += sign * o.MilliCPU
	r.Memory += sign * o.Memory
	r.EphemeralStorage += sign * o.EphemeralStorage
	for name, v := range o.Scalar {
		if r.Scalar == nil {
			r.Scalar = map[v1.ResourceName]int64{}
		}
		r.Scalar[name] += sign * v
		if r.Scalar[name] == 0 {
			delete(r.Scalar, name)
		}
	}
}

// Clone returns a deep copy (the Scalar map is not shared).
func (r Resources) Clone() Resources {
	c := r
	if r.Scalar != nil {
		c.Scalar = make(map[v1.ResourceName]int64, len(r.Scalar))
		for k, v := range r.Scalar {
			c.Scalar[k] = v
		}
	}
	return c
}

// Get returns the amount of one resource in scheduler units.
func (r Resources) Get(name v1.ResourceName) int64 {
	switch name {
	case v1.ResourceCPU:
		return r.MilliCPU
	case v1.ResourceMemory:
		return r.Memory
	case v1.ResourceEphemeralStorage:
		return r.EphemeralStorage
	default:
		return r.Scalar[name]
	}
}

// Names lists the resources with a non-zero amount, cpu/memory/ephemeral-storage first.
func (r Resources) Names() []v1.ResourceName {
	var names []v1.ResourceName
	if r.MilliCPU != 0 {
		names = append(names, v1.ResourceCPU)
	}
	if r.Memory != 0 {
		names = append(names, v1.ResourceMemory)
	}
	if r.EphemeralStorage != 0 {
		names = append(names, v1.ResourceEphemeralStorage)
	}
	var scalar []string
	for n, v := range r.Scalar {
		if v != 0 {
			scalar = append(scalar, string(n))
		}
	}
	sort.Strings(scalar)
	for _, n := range scalar {
		names = append(names, v1.ResourceName(n))
	}
	return names
}

// FormatAmount renders an amount of a resource for people: cores for cpu ("2", "0.5"),
// binary quantities for memory and storage ("4Gi"), plain counts otherwise.
func FormatAmount(name v1.ResourceName, amount int64) string {
	switch name {
	case v1.ResourceCPU:
		return strconv.FormatFloat(float64(amount)/1000, 'f', -1, 64)
	case v1.ResourceMemory, v1.ResourceEphemeralStorage:
		return resource.NewQuantity(amount, resource.BinarySI).String()
	default:
		if strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) {
			return resource.NewQuantity(amount, resource.BinarySI).String()
		}
		return strconv.FormatInt(amount, 10)
	}
}

// Unit is the word after a cpu amount ("cores"); other resources carry their unit in the amount.
func Unit(name v1.ResourceName) string {
	if name == v1.ResourceCPU {
		return " cores"
	}
	return ""
}

func (r Resources) String() string {
	var parts []string
	for _, n := range r.Names() {
		parts = append(parts, fmt.Sprintf("%s=%s", n, FormatAmount(n, r.Get(n))))
	}
	return strings.Join(parts, ",")
}

// Sub subtracts o from r.
func (r *Resources) Sub(o Resources) { r.add(o, -1) }

// Add adds o to r.
func (r *Resources) Add(o Resources) { r.add(o, 1) }
