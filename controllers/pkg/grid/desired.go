package grid

import (
	"cmp"
	"encoding/json"
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
)

// Kinds of the grids, for controller references and Events.
var (
	DeploymentGridKind  = superedgev1.SchemeGroupVersion.WithKind("DeploymentGrid")
	StatefulSetGridKind = superedgev1.SchemeGroupVersion.WithKind("StatefulSetGrid")
	ServiceGridKind     = superedgev1.SchemeGroupVersion.WithKind("ServiceGrid")
)

// specHash is a hash of what the controller writes into an object: the labels and annotations
// it sets and the spec. Comparing it with the hash stored on the object (instead of comparing
// the object) keeps the controller from fighting the API server's defaults, and costs no
// write when nothing changed.
func specHash(labels, annotations map[string]string, spec any) string {
	b, err := json.Marshal(struct {
		L map[string]string `json:"l"`
		A map[string]string `json:"a"`
		S any               `json:"s"`
	}{labels, annotations, spec})
	if err != nil {
		panic(err) // API types always marshal
	}
	return shortHash(string(b))
}

// unitMeta is the metadata of a unit workload: the grid labels, the readable key, the
// controller reference, and (set by the caller) the hash.
func unitMeta(grid metav1.Object, kind schema.GroupVersionKind, key, value, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            name,
		Namespace:       grid.GetNamespace(),
		Labels:          gridLabels(grid.GetName(), key, value),
		Annotations:     map[string]string{superedgev1.AnnotationGridUniqKey: key},
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(grid, kind)},
	}
}

// pinToUnit returns podSpec with key=value merged into a copy of its nodeSelector (the unit's
// value wins over the template's own value for that key).
func pinToUnit(spec *corev1.PodSpec, key, value string) {
	sel := maps.Clone(spec.NodeSelector)
	if sel == nil {
		sel = map[string]string{}
	}
	sel[key] = value
	spec.NodeSelector = sel
}

func stamp(meta *metav1.ObjectMeta, spec any) {
	meta.Annotations[superedgev1.AnnotationTemplateHash] = specHash(meta.Labels, meta.Annotations, spec)
}

// DesiredDeployment is the Deployment of one unit: a deep copy of the grid's template pinned
// to the unit. The grid is never modified.
func DesiredDeployment(g *superedgev1.DeploymentGrid, value, name string) *appsv1.Deployment {
	d := &appsv1.Deployment{
		ObjectMeta: unitMeta(g, DeploymentGridKind, g.Spec.GridUniqKey, value, name),
		Spec:       *g.Spec.Template.DeepCopy(),
	}
	pinToUnit(&d.Spec.Template.Spec, g.Spec.GridUniqKey, value)
	stamp(&d.ObjectMeta, d.Spec)
	return d
}

// DesiredStatefulSet is the StatefulSet of one unit: a deep copy of the grid's template
// pinned to the unit. When the grid carries staticip.jke.jdcloud.com/enable: "true", so does
// the pod template: the StaticIP controller then keeps the pods' IPs (native StatefulSets).
func DesiredStatefulSet(g *superedgev1.StatefulSetGrid, value, name string) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{
		ObjectMeta: unitMeta(g, StatefulSetGridKind, g.Spec.GridUniqKey, value, name),
		Spec:       *g.Spec.Template.DeepCopy(),
	}
	pinToUnit(&s.Spec.Template.Spec, g.Spec.GridUniqKey, value)
	// The pods carry the grid labels too: statefulset-grid-daemon watches only the pods these
	// select (not every pod of the cluster). The selector is not changed (it is immutable);
	// the unit itself it reads from the StatefulSet and the pod's owner, not from the labels.
	podLabels := maps.Clone(s.Spec.Template.Labels)
	if podLabels == nil {
		podLabels = map[string]string{}
	}
	maps.Copy(podLabels, gridLabels(g.Name, g.Spec.GridUniqKey, value))
	s.Spec.Template.Labels = podLabels
	if g.Annotations[jkev1.AnnotationEnable] == "true" || s.Spec.Template.Annotations[jkev1.AnnotationEnable] == "true" {
		s.ObjectMeta.Annotations[jkev1.AnnotationEnable] = "true"
		a := maps.Clone(s.Spec.Template.Annotations)
		if a == nil {
			a = map[string]string{}
		}
		a[jkev1.AnnotationEnable] = "true"
		s.Spec.Template.Annotations = a
	}
	stamp(&s.ObjectMeta, s.Spec)
	return s
}

// GridTemplateOf is the grid pod template a unit StatefulSet's pod template tpl was made from:
// DesiredStatefulSet's changes undone (the unit's nodeSelector pin, the grid labels, and the
// staticip enable annotation the grid's own annotation adds). kubectl staticip rollout undo
// puts it back into the grid; DesiredStatefulSet of the grid then gives tpl again.
func GridTemplateOf(g *superedgev1.StatefulSetGrid, value string, tpl *corev1.PodTemplateSpec) *corev1.PodTemplateSpec {
	out := tpl.DeepCopy()
	key := g.Spec.GridUniqKey
	if out.Spec.NodeSelector[key] == value {
		delete(out.Spec.NodeSelector, key)
	}
	for k := range gridLabels(g.Name, key, value) {
		delete(out.Labels, k)
	}
	if g.Annotations[jkev1.AnnotationEnable] == "true" && g.Spec.Template.Template.Annotations[jkev1.AnnotationEnable] != "true" {
		delete(out.Annotations, jkev1.AnnotationEnable)
	}
	// An emptied map is no map, as the API server stores it.
	if len(out.Spec.NodeSelector) == 0 {
		out.Spec.NodeSelector = nil
	}
	if len(out.Labels) == 0 {
		out.Labels = nil
	}
	if len(out.Annotations) == 0 {
		out.Annotations = nil
	}
	return out
}

// metaNeedsUpdate: a label or annotation the controller sets is missing or different.
func metaNeedsUpdate(existing, desired metav1.Object) bool {
	for k, v := range desired.GetLabels() {
		if cur, ok := existing.GetLabels()[k]; !ok || cur != v {
			return true
		}
	}
	for k, v := range desired.GetAnnotations() {
		if cur, ok := existing.GetAnnotations()[k]; !ok || cur != v {
			return true
		}
	}
	return false
}

// mergeMeta sets the controller's labels and annotations on a copy that keeps everyone else's.
func mergeMeta(dst *metav1.ObjectMeta, desired metav1.Object) {
	dst.Labels = maps.Clone(dst.Labels)
	if dst.Labels == nil {
		dst.Labels = map[string]string{}
	}
	maps.Copy(dst.Labels, desired.GetLabels())
	dst.Annotations = maps.Clone(dst.Annotations)
	if dst.Annotations == nil {
		dst.Annotations = map[string]string{}
	}
	maps.Copy(dst.Annotations, desired.GetAnnotations())
}

// upToDate: existing carries the controller's labels and annotations (hash included) and is
// still pinned to its unit.
func upToDate(existing, desired metav1.Object, existingSelector, desiredSelector map[string]string, key string) bool {
	return !metaNeedsUpdate(existing, desired) && existingSelector[key] == desiredSelector[key]
}

// DeploymentUpdate returns the update to write, or nil when existing is what the grid wants:
// same hash, same labels and annotations, still pinned to its unit. A template without
// replicas keeps the Deployment's own count (an autoscaler's).
func DeploymentUpdate(existing, desired *appsv1.Deployment, key string) *appsv1.Deployment {
	if upToDate(existing, desired, existing.Spec.Template.Spec.NodeSelector, desired.Spec.Template.Spec.NodeSelector, key) {
		return nil
	}
	out := existing.DeepCopy()
	kept := out.Spec.Replicas // the deep copy's, not the cached object's
	mergeMeta(&out.ObjectMeta, desired)
	out.Spec = *desired.Spec.DeepCopy()
	out.Spec.Replicas = cmp.Or(out.Spec.Replicas, kept)
	return out
}

// StatefulSetUpdate is DeploymentUpdate for StatefulSets.
func StatefulSetUpdate(existing, desired *appsv1.StatefulSet, key string) *appsv1.StatefulSet {
	if upToDate(existing, desired, existing.Spec.Template.Spec.NodeSelector, desired.Spec.Template.Spec.NodeSelector, key) {
		return nil
	}
	out := existing.DeepCopy()
	kept := out.Spec.Replicas // the deep copy's, not the cached object's
	mergeMeta(&out.ObjectMeta, desired)
	out.Spec = *desired.Spec.DeepCopy()
	out.Spec.Replicas = cmp.Or(out.Spec.Replicas, kept)
	return out
}

// DeploymentUnitStatus is a unit's status from its Deployment. Ready: the Deployment has seen
// its current spec and all its replicas are updated, ready and available.
func DeploymentUnitStatus(value string, d *appsv1.Deployment) superedgev1.GridUnitStatus {
	want := ptr.Deref(d.Spec.Replicas, 1)
	st := d.Status
	return superedgev1.GridUnitStatus{
		Value: value, Name: d.Name,
		Replicas: st.Replicas, ReadyReplicas: st.ReadyReplicas, AvailableReplicas: st.AvailableReplicas, UpdatedReplicas: st.UpdatedReplicas,
		Ready: st.ObservedGeneration >= d.Generation && st.Replicas == want && st.UpdatedReplicas == want &&
			st.ReadyReplicas == want && st.AvailableReplicas == want,
	}
}

// StatefulSetUnitStatus is a unit's status from its StatefulSet.
func StatefulSetUnitStatus(value string, s *appsv1.StatefulSet) superedgev1.GridUnitStatus {
	want := ptr.Deref(s.Spec.Replicas, 1)
	st := s.Status
	return superedgev1.GridUnitStatus{
		Value: value, Name: s.Name,
		Replicas: st.Replicas, ReadyReplicas: st.ReadyReplicas, AvailableReplicas: st.AvailableReplicas, UpdatedReplicas: st.UpdatedReplicas,
		Ready: st.ObservedGeneration >= s.Generation && st.Replicas == want && st.UpdatedReplicas == want &&
			st.ReadyReplicas == want && st.AvailableReplicas == want,
	}
}
