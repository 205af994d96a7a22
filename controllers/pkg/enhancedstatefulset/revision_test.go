package enhancedstatefulset

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
)

// TestNewRevisionCarriesTheSetsAnnotations: as the StatefulSet controller does, a new
// ControllerRevision carries the set's annotations, so `kubectl staticip rollout history`
// shows the kubernetes.io/change-cause the user recorded for that template.
func TestNewRevisionCarriesTheSetsAnnotations(t *testing.T) {
	set := &jkev1alpha1.EnhancedStatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "demo", UID: "u1",
			Annotations: map[string]string{"kubernetes.io/change-cause": "VERSION=v2"}},
		Spec: jkev1alpha1.EnhancedStatefulSetSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "img:v2"}}},
		}},
	}
	cr, err := newRevision(set, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cr.Annotations["kubernetes.io/change-cause"]; got != "VERSION=v2" {
		t.Fatalf("revision annotation kubernetes.io/change-cause = %q, want %q (annotations %v)", got, "VERSION=v2", cr.Annotations)
	}
	set.Annotations["kubernetes.io/change-cause"] = "changed later"
	if cr.Annotations["kubernetes.io/change-cause"] != "VERSION=v2" {
		t.Fatal("the revision shares its annotation map with the set")
	}
}
