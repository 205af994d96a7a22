package kubectlplugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/kubectl/pkg/describe"
	"k8s.io/kubectl/pkg/polymorphichelpers"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/enhancedstatefulset"
)

// RestartedAtAnnotation is the pod template annotation restart sets, as `kubectl rollout restart` does.
const RestartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"

// estsResource is how messages name an EnhancedStatefulSet, as kubectl names a StatefulSet
// ("statefulset.apps/web").
const estsResource = "enhancedstatefulset.jke.jdcloud.com"

// RolloutRef is the workload a rollout command names: an EnhancedStatefulSet, or a
// StatefulSetGrid (Grid) whose unit StatefulSets the grid controller makes.
type RolloutRef struct {
	Grid bool
	Name string
}

// ParseRolloutRef reads the workload argument(s) of a rollout command: "ests/NAME",
// "enhancedstatefulset/NAME", "ssg/NAME", "statefulsetgrid/NAME" (plural and group-qualified
// forms too) or "TYPE NAME".
func ParseRolloutRef(args []string) (RolloutRef, error) {
	var kind, name string
	switch {
	case len(args) == 1 && strings.Contains(args[0], "/"):
		kind, name, _ = strings.Cut(args[0], "/")
	case len(args) == 2:
		kind, name = args[0], args[1]
	default:
		return RolloutRef{}, fmt.Errorf("expected one resource as TYPE/NAME or TYPE NAME, e.g. ests/web, got %q", strings.Join(args, " "))
	}
	var ref RolloutRef
	switch strings.ToLower(kind) {
	case "ests", "enhancedstatefulset", "enhancedstatefulsets", "enhancedstatefulset.jke.jdcloud.com", "enhancedstatefulsets.jke.jdcloud.com":
	case "ssg", "statefulsetgrid", "statefulsetgrids", "statefulsetgrid.superedge.io", "statefulsetgrids.superedge.io":
		ref.Grid = true
	default:
		return RolloutRef{}, fmt.Errorf("rollout is supported for enhancedstatefulset (ests) and statefulsetgrid (ssg) only, not %q", kind)
	}
	if name == "" {
		return RolloutRef{}, fmt.Errorf("resource name may not be empty")
	}
	ref.Name = name
	return ref, nil
}

// ControlledRevisions are the ControllerRevisions set controls, by revision number (the
// controller labels them with the template's labels and sets a controller reference).
func ControlledRevisions(all []appsv1.ControllerRevision, set metav1.Object) []*appsv1.ControllerRevision {
	var out []*appsv1.ControllerRevision
	for i := range all {
		if metav1.IsControlledBy(&all[i], set) {
			out = append(out, &all[i])
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Revision < out[j].Revision })
	return out
}

// FindRevision picks the revision undo rolls back to, as kubectl does for a StatefulSet:
// toRevision 0 is the previous one (the second highest), otherwise the one numbered toRevision.
func FindRevision(toRevision int64, revs []*appsv1.ControllerRevision) (*appsv1.ControllerRevision, error) {
	if toRevision < 0 {
		return nil, fmt.Errorf("unable to find specified revision %d in history", toRevision)
	}
	if toRevision == 0 {
		if len(revs) <= 1 {
			return nil, fmt.Errorf("no last revision to roll back to")
		}
		return revs[len(revs)-2], nil
	}
	for _, r := range revs {
		if r.Revision == toRevision {
			return r, nil
		}
	}
	return nil, fmt.Errorf("unable to find specified revision %d in history", toRevision)
}

// UndoPatch is the JSON patch that puts rev's pod template back into set, guarded by the set's
// spec as read (specGuard); done is true when set already runs that template. The ControllerRevision
// holds a strategic merge patch, which a custom resource does not accept, so the template is
// decoded and replaced whole (what the patch's "$patch": "replace" means).
func UndoPatch(set *jkev1alpha1.EnhancedStatefulSet, rev *appsv1.ControllerRevision) (patch []byte, done bool, err error) {
	tpl, err := enhancedstatefulset.TemplateOf(rev)
	if err != nil {
		return nil, false, err
	}
	if apiequality.Semantic.DeepEqual(*tpl, set.Spec.Template) {
		return nil, true, nil
	}
	patch, err = json.Marshal([]map[string]any{
		specGuard(set.ObjectMeta),
		{"op": "replace", "path": "/spec/template", "value": tpl},
	})
	return patch, false, err
}

// specGuard is the JSON patch test that refuses the patch when the object's spec changed since
// it was read: its generation, which only spec changes raise (the CRDs have a status
// subresource) — not its resourceVersion, which every status write by the controller raises, so
// `rollout undo` failed whenever a pod changed meanwhile. Objects without a generation (fake
// clients) fall back to the resourceVersion.
func specGuard(m metav1.ObjectMeta) map[string]any {
	if m.Generation > 0 {
		return map[string]any{"op": "test", "path": "/metadata/generation", "value": m.Generation}
	}
	return map[string]any{"op": "test", "path": "/metadata/resourceVersion", "value": m.ResourceVersion}
}

// PrintHistory writes the history table as `kubectl rollout history` does (REVISION,
// CHANGE-CAUSE); wide adds the ControllerRevision, whether it is the current or update
// revision, and the containers' images. revision > 0 prints that revision's pod template.
func PrintHistory(out io.Writer, set *jkev1alpha1.EnhancedStatefulSet, revs []*appsv1.ControllerRevision, revision int64, wide bool) error {
	if len(revs) == 0 {
		_, err := fmt.Fprintln(out, "No rollout history found.")
		return err
	}
	if revision > 0 {
		var rev *appsv1.ControllerRevision
		for _, r := range revs {
			if r.Revision == revision {
				rev = r
			}
		}
		if rev == nil {
			return fmt.Errorf("unable to find the specified revision")
		}
		return printRevisionTemplate(out, estsResource+"/"+set.Name, rev)
	}
	fmt.Fprintf(out, "%s/%s \n", estsResource, set.Name)
	w := printers.GetNewTabWriter(out)
	if wide {
		fmt.Fprintln(w, "REVISION\tCONTROLLERREVISION\tSTATUS\tIMAGES\tCHANGE-CAUSE")
	} else {
		fmt.Fprintln(w, "REVISION\tCHANGE-CAUSE")
	}
	for _, r := range revs {
		cause := changeCause(r)
		if !wide {
			fmt.Fprintf(w, "%d\t%s\n", r.Revision, cause)
			continue
		}
		fmt.Fprintf(w, "%d\t%s\t%s\n", r.Revision, wideColumns(r, set.Status.CurrentRevision, set.Status.UpdateRevision), cause)
	}
	fmt.Fprintln(w)
	return w.Flush()
}

// printRevisionTemplate prints the pod template rev stores as kubectl rollout history
// --revision does.
func printRevisionTemplate(out io.Writer, resource string, rev *appsv1.ControllerRevision) error {
	tpl, err := enhancedstatefulset.TemplateOf(rev)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s with revision #%d\n", resource, rev.Revision)
	var buf bytes.Buffer
	describe.DescribePodTemplate(tpl, describe.NewPrefixWriter(&buf))
	_, err = out.Write(buf.Bytes())
	return err
}

// wideColumns are history -o wide's CONTROLLERREVISION, STATUS (whether r is the current or the
// update revision) and IMAGES of revision r, tab-separated.
func wideColumns(r *appsv1.ControllerRevision, current, update string) string {
	var status []string
	if r.Name == current {
		status = append(status, "current")
	}
	if r.Name == update {
		status = append(status, "update")
	}
	images := "<unknown>"
	if tpl, err := enhancedstatefulset.TemplateOf(r); err == nil {
		images = imagesOf(tpl)
	}
	return r.Name + "\t" + none(strings.Join(status, ",")) + "\t" + images
}

// changeCause is a revision's kubernetes.io/change-cause, "<none>" without one.
func changeCause(r *appsv1.ControllerRevision) string {
	if cause := r.Annotations[polymorphichelpers.ChangeCauseAnnotation]; cause != "" {
		return cause
	}
	return "<none>"
}

func imagesOf(tpl *corev1.PodTemplateSpec) string {
	var images []string
	for _, c := range tpl.Spec.Containers {
		images = append(images, c.Image)
	}
	return none(strings.Join(images, ","))
}

// RolloutStatus says how far set's rollout is, with kubectl's StatefulSet wording; done is
// true when it is complete. A paused rollout is an error: it will not finish by itself.
func RolloutStatus(set *jkev1alpha1.EnhancedStatefulSet) (msg string, done bool, err error) {
	if t := set.Spec.UpdateStrategy.Type; t != "" && t != appsv1.RollingUpdateStatefulSetStrategyType {
		return "", true, fmt.Errorf("rollout status is only available for %s strategy type", appsv1.RollingUpdateStatefulSetStrategyType)
	}
	if set.Status.ObservedGeneration == 0 || set.Generation > set.Status.ObservedGeneration {
		return "Waiting for enhancedstatefulset spec update to be observed...\n", false, nil
	}
	ru := set.Spec.UpdateStrategy.RollingUpdate
	replicas := int32(1)
	if set.Spec.Replicas != nil {
		replicas = *set.Spec.Replicas
	}
	if ru != nil && ru.Paused && set.Status.UpdateRevision != set.Status.CurrentRevision {
		return "", true, fmt.Errorf("%s/%s rollout is paused with %d of %d pods updated (resume it: kubectl staticip rollout resume ests/%s)",
			estsResource, set.Name, set.Status.UpdatedReplicas, replicas, set.Name)
	}
	if set.Status.ReadyReplicas < replicas {
		return fmt.Sprintf("Waiting for %d pods to be ready...\n", replicas-set.Status.ReadyReplicas), false, nil
	}
	if ru != nil && ru.Partition != nil && *ru.Partition > 0 {
		want := replicas - *ru.Partition
		if want < 0 {
			want = 0
		}
		if set.Status.UpdatedReplicas < want {
			return fmt.Sprintf("Waiting for partitioned roll out to finish: %d out of %d new pods have been updated...\n",
				set.Status.UpdatedReplicas, want), false, nil
		}
		return fmt.Sprintf("partitioned roll out complete: %d new pods have been updated...\n", set.Status.UpdatedReplicas), true, nil
	}
	if set.Status.UpdateRevision != set.Status.CurrentRevision {
		return fmt.Sprintf("waiting for enhancedstatefulset rolling update to complete %d pods at revision %s...\n",
			set.Status.UpdatedReplicas, set.Status.UpdateRevision), false, nil
	}
	return fmt.Sprintf("enhancedstatefulset rolling update complete %d pods at revision %s...\n",
		set.Status.CurrentReplicas, set.Status.CurrentRevision), true, nil
}

// PausePatch is the merge patch that pauses (or resumes) set's rolling update; changed is
// false when it already is in that state.
func PausePatch(set *jkev1alpha1.EnhancedStatefulSet, pause bool) (patch []byte, changed bool, err error) {
	if t := set.Spec.UpdateStrategy.Type; t != "" && t != appsv1.RollingUpdateStatefulSetStrategyType {
		return nil, false, fmt.Errorf("%s/%s uses the %s update strategy: only RollingUpdate can be paused or resumed", estsResource, set.Name, t)
	}
	ru := set.Spec.UpdateStrategy.RollingUpdate
	if (ru != nil && ru.Paused) == pause {
		return nil, false, nil
	}
	patch, err = json.Marshal(map[string]any{"spec": map[string]any{"updateStrategy": map[string]any{"rollingUpdate": map[string]any{"paused": pause}}}})
	return patch, true, err
}

// RestartPatch is the merge patch that sets the restartedAt annotation on set's pod template,
// so every pod is replaced by the rolling update. A paused set is refused, as kubectl refuses
// a paused Deployment.
func RestartPatch(set *jkev1alpha1.EnhancedStatefulSet, now string) ([]byte, error) {
	if ru := set.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Paused {
		return nil, fmt.Errorf("can't restart paused %s/%s (run rollout resume first)", estsResource, set.Name)
	}
	return json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{RestartedAtAnnotation: now}}}}})
}
