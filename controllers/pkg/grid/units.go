package grid

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
)

// NodeUnits returns the node units of key: the distinct values of that label on nodes,
// sorted. Nodes without the label belong to no unit.
func NodeUnits(nodes []*corev1.Node, key string) []string {
	seen := map[string]bool{}
	for _, n := range nodes {
		if v, ok := n.Labels[key]; ok && len(validation.IsValidLabelValue(v)) == 0 {
			seen[v] = true
		}
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// Assignment is a node unit and the name of its workload.
type Assignment struct{ Value, Name string }

// Conflict reasons.
const (
	// ReasonNameTaken: the unit's name is held by an object the grid does not own.
	ReasonNameTaken = "NameTaken"
	// ReasonDuplicateName: two units of the grid map to one name.
	ReasonDuplicateName = "DuplicateName"
)

// UnitConflict is a unit that gets no workload, and why.
type UnitConflict struct{ Value, Name, Reason, Message string }

// Holder describes the object that already has a name in the grid's namespace.
type Holder struct {
	// Owned: the grid controls it; Unit is then its unit label.
	Owned bool
	Unit  string
	// Controller describes who controls it otherwise ("" for nobody).
	Controller string
}

// AssignNames gives every unit value a workload name and reports the units that cannot have
// one: two values that map to one name (the one whose owned workload already carries the
// name keeps it, else the smallest value), and names held by an object the grid does not own
// (never overwritten). holders maps the names that exist in the namespace to their holder.
func AssignNames(gridName, kind string, values []string, maxLen int, holders map[string]Holder) ([]Assignment, []UnitConflict) {
	byName := map[string][]string{}
	var names []string
	for _, v := range values {
		n := WorkloadName(gridName, v, maxLen)
		if _, ok := byName[n]; !ok {
			names = append(names, n)
		}
		byName[n] = append(byName[n], v)
	}
	var out []Assignment
	var conflicts []UnitConflict
	for _, n := range names {
		vs := byName[n]
		sort.Strings(vs)
		h, exists := holders[n]
		winner := vs[0]
		if exists && h.Owned && slices.Contains(vs, h.Unit) {
			winner = h.Unit
		}
		for _, v := range vs {
			if v != winner {
				conflicts = append(conflicts, UnitConflict{Value: v, Name: n, Reason: ReasonDuplicateName,
					Message: fmt.Sprintf("units %s map to one %s name %s; %q has it", strings.Join(quoteAll(vs), ", "), kind, n, winner)})
			}
		}
		if exists && !h.Owned {
			by := "no controller"
			if h.Controller != "" {
				by = "controller " + h.Controller
			}
			conflicts = append(conflicts, UnitConflict{Value: winner, Name: n, Reason: ReasonNameTaken,
				Message: fmt.Sprintf("%s %s exists and is not owned by this grid (%s); it is left alone", kind, n, by)})
			continue
		}
		out = append(out, Assignment{Value: winner, Name: n})
	}
	sort.Slice(conflicts, func(i, j int) bool { return conflicts[i].Value < conflicts[j].Value })
	return out, conflicts
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}

// ValidateWorkloadTemplate reports what the API server would reject in every unit's workload
// (and what CEL in the CRD may not have caught, e.g. matchExpressions), so that nothing is
// created half-way.
func ValidateWorkloadTemplate(key string, selector *metav1.LabelSelector, podLabels map[string]string) error {
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return fmt.Errorf("gridUniqKey %q is not a valid label key: %s", key, strings.Join(errs, "; "))
	}
	if selector == nil {
		return fmt.Errorf("template.selector is required")
	}
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return fmt.Errorf("template.selector: %w", err)
	}
	if sel.Empty() {
		return fmt.Errorf("template.selector is empty: it would select every pod of the namespace")
	}
	if !sel.Matches(labels.Set(podLabels)) {
		return fmt.Errorf("template.selector %s does not match template.metadata.labels %v", sel, podLabels)
	}
	return nil
}

// gridLabels are the labels of every object a grid generates; unit is "" for a Service.
func gridLabels(gridName, key, unit string) map[string]string {
	l := map[string]string{
		superedgev1.LabelGridSelector: LabelValue(gridName),
		superedgev1.LabelGridUniqKey:  LabelValue(key),
	}
	if unit != "" {
		l[superedgev1.LabelGridUnit] = unit
	}
	return l
}
