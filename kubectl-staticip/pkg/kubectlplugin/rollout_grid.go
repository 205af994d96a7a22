package kubectlplugin

// Rollouts of a StatefulSetGrid. The grid controller makes one StatefulSet per node unit
// ({grid}-{unit}, controlled by the grid); the StatefulSet controller keeps each unit's
// ControllerRevisions. The grid has no revisions of its own: its history is its units'
// histories, numbered per unit, and undo puts a unit revision's template, without what the grid
// controller adds for the unit (grid.GridTemplateOf), back into the grid's template, which the
// controller then hands to every unit.

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/kubectl/pkg/polymorphichelpers"

	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
	"github.com/staticip/staticip/controllers/pkg/enhancedstatefulset"
	"github.com/staticip/staticip/controllers/pkg/grid"
)

// ssgResource is how messages name a StatefulSetGrid, as kubectl names a StatefulSet.
const ssgResource = "statefulsetgrid.superedge.io"

// UnitHistory is one unit of a grid: its value, its StatefulSet and that StatefulSet's
// ControllerRevisions, oldest first.
type UnitHistory struct {
	Unit        string
	StatefulSet *appsv1.StatefulSet
	Revisions   []*appsv1.ControllerRevision
}

// GridHistory are the units of g (the StatefulSets g controls, by unit value) with their
// revisions, from all the StatefulSets and ControllerRevisions of g's namespace.
func GridHistory(g *superedgev1.StatefulSetGrid, sets []appsv1.StatefulSet, revs []appsv1.ControllerRevision) []UnitHistory {
	var out []UnitHistory
	for i := range sets {
		s := &sets[i]
		if !metav1.IsControlledBy(s, g) {
			continue
		}
		out = append(out, UnitHistory{Unit: s.Labels[superedgev1.LabelGridUnit], StatefulSet: s, Revisions: ControlledRevisions(revs, s)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Unit != out[j].Unit {
			return out[i].Unit < out[j].Unit
		}
		return out[i].StatefulSet.Name < out[j].StatefulSet.Name
	})
	return out
}

// PickUnit is the unit whose revision numbers --to-revision and --revision mean: the one
// named, or else the one with the longest history (a unit that joined later has fewer
// revisions; ties: the first unit).
func PickUnit(units []UnitHistory, unit string) (*UnitHistory, error) {
	if len(units) == 0 {
		return nil, fmt.Errorf("the grid has no unit StatefulSets (no node carries its gridUniqKey, or the grid controller has not made them yet)")
	}
	var best *UnitHistory
	var names []string
	for i := range units {
		u := &units[i]
		names = append(names, u.Unit)
		if unit != "" && u.Unit == unit {
			return u, nil
		}
		if best == nil || len(u.Revisions) > len(best.Revisions) {
			best = u
		}
	}
	if unit != "" {
		return nil, fmt.Errorf("the grid has no unit %q (units: %s)", unit, strings.Join(names, ", "))
	}
	return best, nil
}

// GridUndoPatch is the JSON patch that puts the grid template rev was made from back into g,
// guarded by g's spec as read (specGuard); done is true when g already has that template.
func GridUndoPatch(g *superedgev1.StatefulSetGrid, unit string, rev *appsv1.ControllerRevision) (patch []byte, done bool, err error) {
	tpl, err := enhancedstatefulset.TemplateOf(rev)
	if err != nil {
		return nil, false, err
	}
	want := grid.GridTemplateOf(g, unit, tpl)
	if apiequality.Semantic.DeepEqual(*want, g.Spec.Template.Template) {
		return nil, true, nil
	}
	patch, err = json.Marshal([]map[string]any{
		specGuard(g.ObjectMeta),
		{"op": "replace", "path": "/spec/template/template", "value": want},
	})
	return patch, false, err
}

// GridRestartPatch is the merge patch that sets the restartedAt annotation on the grid's pod
// template; the grid controller passes it to every unit, whose pods the StatefulSet controller
// then replaces.
func GridRestartPatch(now string) ([]byte, error) {
	return json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"template": map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{RestartedAtAnnotation: now}}}}}})
}

// PrintGridHistory writes each unit's revisions (UNIT, STATEFULSET, REVISION, CHANGE-CAUSE;
// wide adds the ControllerRevision, current/update and images).
func PrintGridHistory(out io.Writer, g *superedgev1.StatefulSetGrid, units []UnitHistory, wide bool) error {
	if len(units) == 0 {
		_, err := fmt.Fprintln(out, "No rollout history found.")
		return err
	}
	fmt.Fprintf(out, "%s/%s \n", ssgResource, g.Name)
	w := printers.GetNewTabWriter(out)
	if wide {
		fmt.Fprintln(w, "UNIT\tSTATEFULSET\tREVISION\tCONTROLLERREVISION\tSTATUS\tIMAGES\tCHANGE-CAUSE")
	} else {
		fmt.Fprintln(w, "UNIT\tSTATEFULSET\tREVISION\tCHANGE-CAUSE")
	}
	for _, u := range units {
		for _, r := range u.Revisions {
			if !wide {
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\n", u.Unit, u.StatefulSet.Name, r.Revision, changeCause(r))
				continue
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", u.Unit, u.StatefulSet.Name, r.Revision,
				wideColumns(r, u.StatefulSet.Status.CurrentRevision, u.StatefulSet.Status.UpdateRevision), changeCause(r))
		}
	}
	fmt.Fprintln(w)
	return w.Flush()
}

// GridRolloutStatus says how far the grid's rollout is: the grid controller must have observed
// the grid's spec, then each unit StatefulSet's rollout is judged with kubectl's StatefulSet
// status (one line per unit that is not done); done when every unit is.
func GridRolloutStatus(g *superedgev1.StatefulSetGrid, units []UnitHistory) (msg string, done bool, err error) {
	if g.Status.ObservedGeneration == 0 || g.Generation > g.Status.ObservedGeneration {
		return "Waiting for statefulsetgrid spec update to be observed...\n", false, nil
	}
	if len(units) == 0 {
		return fmt.Sprintf("%s/%s has no unit StatefulSets: no node carries %s\n", ssgResource, g.Name, g.Spec.GridUniqKey), true, nil
	}
	var b strings.Builder
	done = true
	for _, u := range units {
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(u.StatefulSet)
		if err != nil {
			return "", false, err
		}
		m, unitDone, err := (&polymorphichelpers.StatefulSetStatusViewer{}).Status(&unstructured.Unstructured{Object: obj}, 0)
		if err != nil {
			return "", false, fmt.Errorf("unit %s (statefulset %s): %w", u.Unit, u.StatefulSet.Name, err)
		}
		if !unitDone {
			done = false
			fmt.Fprintf(&b, "unit %s (statefulset %s): %s", u.Unit, u.StatefulSet.Name, m)
		}
	}
	if done {
		return fmt.Sprintf("%s/%s rolling update complete in %d units\n", ssgResource, g.Name, len(units)), true, nil
	}
	return b.String(), false, nil
}
