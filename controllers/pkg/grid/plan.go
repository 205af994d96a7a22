package grid

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
)

// workloadFuncs are the pure per-kind parts the plan needs.
type workloadFuncs struct {
	kind       string
	maxNameLen int
	// desired builds the unit's workload from the grid.
	desired func(value, name string) metav1.Object
	// update returns what to write over existing, nil when nothing.
	update func(existing, desired metav1.Object) metav1.Object
	// unitStatus reads a unit's status from its workload.
	unitStatus func(value string, w metav1.Object) superedgev1.GridUnitStatus
}

// workloadPlan is what one sync of a workload grid does.
type workloadPlan struct {
	create    []metav1.Object
	update    []metav1.Object
	delete    []metav1.Object
	units     []superedgev1.GridUnitStatus
	conflicts []UnitConflict
}

// planWorkloads compares the units with the workloads the grid owns (after adoption) and
// returns the writes and the per-unit status. holders names every object of the kind in the
// grid's namespace that might be in the way. Owned workloads of units that are gone, or
// whose names the units no longer use, are deleted; nothing else is touched.
func planWorkloads(f workloadFuncs, gridName string, values []string, owned []metav1.Object, holders map[string]Holder) workloadPlan {
	var p workloadPlan
	ownedByName := map[string]metav1.Object{}
	for _, w := range owned {
		ownedByName[w.GetName()] = w
	}
	assigned, conflicts := AssignNames(gridName, f.kind, values, f.maxNameLen, holders)
	p.conflicts = conflicts
	wanted := map[string]bool{}
	for _, a := range assigned {
		wanted[a.Name] = true
		desired := f.desired(a.Value, a.Name)
		existing, ok := ownedByName[a.Name]
		switch {
		case !ok:
			p.create = append(p.create, desired)
			p.units = append(p.units, superedgev1.GridUnitStatus{Value: a.Value, Name: a.Name, Message: f.kind + " created"})
		case existing.GetDeletionTimestamp() != nil:
			p.units = append(p.units, superedgev1.GridUnitStatus{Value: a.Value, Name: a.Name,
				Message: fmt.Sprintf("waiting for the deleted %s %s to go before recreating it", f.kind, a.Name)})
		default:
			st := f.unitStatus(a.Value, existing)
			if upd := f.update(existing, desired); upd != nil {
				p.update = append(p.update, upd)
				st.Ready = false
				st.Message = f.kind + " updated to the grid's template"
			}
			p.units = append(p.units, st)
		}
	}
	for _, c := range conflicts {
		p.units = append(p.units, superedgev1.GridUnitStatus{Value: c.Value, Message: c.Message})
	}
	for _, w := range owned {
		if !wanted[w.GetName()] && w.GetDeletionTimestamp() == nil {
			p.delete = append(p.delete, w)
		}
	}
	sort.Slice(p.units, func(i, j int) bool { return p.units[i].Value < p.units[j].Value })
	sort.Slice(p.delete, func(i, j int) bool { return p.delete[i].GetName() < p.delete[j].GetName() })
	return p
}

// Ready condition reasons.
const (
	ReasonAllUnitsReady = "AllUnitsReady"
	ReasonUnitsNotReady = "UnitsNotReady"
	ReasonNoNodeUnits   = "NoNodeUnits"
	ReasonInvalidSpec   = "InvalidSpec"
	ReasonSyncFailed    = "SyncFailed"
	ReasonNoConflict    = "NoConflict"
	ReasonServiceReady  = "ServiceReady"
)

// workloadGridStatus is the status to write: old is the grid's current status (not modified).
// invalid and syncErr, when set, make Ready False with their message.
func workloadGridStatus(old *superedgev1.WorkloadGridStatus, generation int64, key string, units []superedgev1.GridUnitStatus,
	conflicts []UnitConflict, invalid, syncErr error) superedgev1.WorkloadGridStatus {
	st := *old.DeepCopy()
	st.ObservedGeneration = generation
	if invalid == nil {
		st.Units = units
		st.UnitCount = int32(len(units))
		st.ReadyUnits = 0
		for _, u := range units {
			if u.Ready {
				st.ReadyUnits++
			}
		}
	}
	ready := metav1.Condition{Type: superedgev1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: generation}
	switch {
	case invalid != nil:
		ready.Reason, ready.Message = ReasonInvalidSpec, invalid.Error()+"; nothing was created or changed"
	case syncErr != nil:
		ready.Reason, ready.Message = ReasonSyncFailed, syncErr.Error()
	case len(units) == 0:
		ready.Reason, ready.Message = ReasonNoNodeUnits, fmt.Sprintf("no node has the label %s", key)
	case st.ReadyUnits == st.UnitCount:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, ReasonAllUnitsReady, fmt.Sprintf("%d of %d units ready", st.ReadyUnits, st.UnitCount)
	default:
		ready.Reason, ready.Message = ReasonUnitsNotReady, fmt.Sprintf("%d of %d units ready", st.ReadyUnits, st.UnitCount)
	}
	meta.SetStatusCondition(&st.Conditions, ready)
	if invalid == nil {
		meta.SetStatusCondition(&st.Conditions, conflictCondition(generation, conflicts))
	}
	return st
}

func conflictCondition(generation int64, conflicts []UnitConflict) metav1.Condition {
	c := metav1.Condition{Type: superedgev1.ConditionConflict, Status: metav1.ConditionFalse, Reason: ReasonNoConflict, ObservedGeneration: generation}
	if len(conflicts) > 0 {
		c.Status, c.Reason = metav1.ConditionTrue, conflicts[0].Reason
		for i, x := range conflicts {
			if i > 0 {
				c.Message += "; "
			}
			c.Message += fmt.Sprintf("unit %q: %s", x.Value, x.Message)
		}
	}
	return c
}
