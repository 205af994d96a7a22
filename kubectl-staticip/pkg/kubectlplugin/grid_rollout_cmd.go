package kubectlplugin

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
)

// The I/O of the rollout commands for a StatefulSetGrid (rollout_grid.go decides).

// gridHistory gets the grid and the history of its units.
func (o *Options) gridHistory(ctx context.Context, name string) (*Clients, *superedgev1.StatefulSetGrid, []UnitHistory, error) {
	ns, err := o.namespace()
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := o.clients()
	if err != nil {
		return nil, nil, nil, err
	}
	g, err := c.StaticIP.SuperedgeV1().StatefulSetGrids(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, nil, err
	}
	sets, err := c.Kube.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{LabelSelector: superedgev1.LabelGridSelector})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("unable to list the unit StatefulSets of %s %s: %w", ssgResource, name, err)
	}
	revs, err := c.Kube.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("unable to find history controlled by the units of %s %s: %w", ssgResource, name, err)
	}
	return c, g, GridHistory(g, sets.Items, revs.Items), nil
}

// runGridHistory is `rollout history ssg/NAME`.
func (o *Options) runGridHistory(ctx context.Context, name, unit string, revision int64, output string) error {
	_, g, units, err := o.gridHistory(ctx, name)
	if err != nil {
		return err
	}
	if output == "json" || output == "yaml" {
		list := &appsv1.ControllerRevisionList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}}
		for _, u := range units {
			if unit != "" && u.Unit != unit {
				continue
			}
			for _, r := range u.Revisions {
				if revision > 0 && r.Revision != revision {
					continue
				}
				r.APIVersion, r.Kind = "apps/v1", "ControllerRevision"
				list.Items = append(list.Items, *r)
			}
		}
		return printStructured(o.Out, output, list)
	}
	if revision > 0 {
		u, err := PickUnit(units, unit)
		if err != nil {
			return err
		}
		rev, err := FindRevision(revision, u.Revisions)
		if err != nil {
			return err
		}
		return printRevisionTemplate(o.Out, fmt.Sprintf("%s/%s unit %s (statefulset %s)", ssgResource, g.Name, u.Unit, u.StatefulSet.Name), rev)
	}
	return PrintGridHistory(o.Out, g, units, output == "wide")
}

// runGridUndo is `rollout undo ssg/NAME`.
func (o *Options) runGridUndo(ctx context.Context, name, unit string, toRevision int64) error {
	c, g, units, err := o.gridHistory(ctx, name)
	if err != nil {
		return err
	}
	u, err := PickUnit(units, unit)
	if err != nil {
		return err
	}
	rev, err := FindRevision(toRevision, u.Revisions)
	if err != nil {
		return fmt.Errorf("unit %s (statefulset %s): %w", u.Unit, u.StatefulSet.Name, err)
	}
	patch, done, err := GridUndoPatch(g, u.Unit, rev)
	if err != nil {
		return err
	}
	if done {
		_, err = fmt.Fprintf(o.Out, "%s/%s skipped rollback (current template already matches revision %d of unit %s)\n", ssgResource, g.Name, rev.Revision, u.Unit)
		return err
	}
	if err := o.patchGrid(ctx, c, g, types.JSONPatchType, patch, "rolled back"); err != nil {
		return fmt.Errorf("failed restoring revision %d of unit %s: %w", rev.Revision, u.Unit, err)
	}
	return nil
}

// gridStatus is one look at `rollout status ssg/NAME`.
func (o *Options) gridStatus(ctx context.Context, name string) (string, bool, error) {
	_, g, units, err := o.gridHistory(ctx, name)
	if err != nil {
		return "", false, err
	}
	return GridRolloutStatus(g, units)
}

// runGridRestart is `rollout restart ssg/NAME`.
func (o *Options) runGridRestart(ctx context.Context, name string) error {
	ns, err := o.namespace()
	if err != nil {
		return err
	}
	c, err := o.clients()
	if err != nil {
		return err
	}
	g, err := c.StaticIP.SuperedgeV1().StatefulSetGrids(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	patch, err := GridRestartPatch(o.now().Format(time.RFC3339))
	if err != nil {
		return err
	}
	return o.patchGrid(ctx, c, g, types.MergePatchType, patch, "restarted")
}

// patchGrid patches g and prints kubectl's "<resource>/<name> <what>".
func (o *Options) patchGrid(ctx context.Context, c *Clients, g *superedgev1.StatefulSetGrid, pt types.PatchType, patch []byte, what string) error {
	if _, err := c.StaticIP.SuperedgeV1().StatefulSetGrids(g.Namespace).Patch(ctx, g.Name, pt, patch, metav1.PatchOptions{}); err != nil {
		return err
	}
	_, err := fmt.Fprintf(o.Out, "%s/%s %s\n", ssgResource, g.Name, what)
	return err
}

// errGridPause: a StatefulSetGrid's units are StatefulSets, which cannot be paused.
func errGridPause(name string) error {
	return fmt.Errorf("%s/%s cannot be paused or resumed: its unit StatefulSets have no paused field "+
		"(hold pods back with spec.template.updateStrategy.rollingUpdate.partition)", ssgResource, name)
}
