package enhancedstatefulset

import (
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubernetes/pkg/controller/history"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
)

// controllerKind is the kind the ControllerRevisions and pods reference.
var controllerKind = jkev1alpha1.SchemeGroupVersion.WithKind("EnhancedStatefulSet")

// revisionPatch is what a ControllerRevision stores, in the StatefulSet controller's format
// (getPatch): {"spec":{"template":{..., "$patch":"replace"}}}, a strategic merge patch that
// restores the pod template. Only the template is kept, so changes to replicas, partition or
// maxUnavailable never make a new revision.
func revisionPatch(set *jkev1alpha1.EnhancedStatefulSet) ([]byte, error) {
	raw, err := json.Marshal(set.Spec.Template)
	if err != nil {
		return nil, err
	}
	var template map[string]any
	if err := json.Unmarshal(raw, &template); err != nil {
		return nil, err
	}
	template["$patch"] = "replace"
	return json.Marshal(map[string]any{"spec": map[string]any{"template": template}})
}

// newRevision is the ControllerRevision of set's current template (StatefulSet newRevision).
func newRevision(set *jkev1alpha1.EnhancedStatefulSet, revision int64, collisionCount *int32) (*appsv1.ControllerRevision, error) {
	patch, err := revisionPatch(set)
	if err != nil {
		return nil, err
	}
	cr, err := history.NewControllerRevision(set, controllerKind, set.Spec.Template.Labels, runtime.RawExtension{Raw: patch}, revision, collisionCount)
	if err != nil {
		return nil, err
	}
	cr.Namespace = set.Namespace
	// As the StatefulSet controller: the revision carries the set's annotations, so
	// kubernetes.io/change-cause shows in `kubectl staticip rollout history`.
	if cr.Annotations == nil {
		cr.Annotations = make(map[string]string, len(set.Annotations))
	}
	for k, v := range set.Annotations {
		cr.Annotations[k] = v
	}
	return cr, nil
}

// TemplateOf returns the pod template a revision stores.
func TemplateOf(cr *appsv1.ControllerRevision) (*corev1.PodTemplateSpec, error) {
	var data struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	raw := cr.Data.Raw
	if raw == nil && cr.Data.Object != nil {
		var err error
		if raw, err = json.Marshal(cr.Data.Object); err != nil {
			return nil, err
		}
	}
	if err := json.Unmarshal(raw, &data); err != nil {
		return nil, fmt.Errorf("ControllerRevision %s: %w", cr.Name, err)
	}
	return &data.Spec.Template, nil
}

// nextRevision is one more than the highest revision number in the sorted revisions.
func nextRevision(revisions []*appsv1.ControllerRevision) int64 {
	if len(revisions) == 0 {
		return 1
	}
	return revisions[len(revisions)-1].Revision + 1
}
