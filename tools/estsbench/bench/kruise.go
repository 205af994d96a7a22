package bench

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// Workloads of the third peer: OpenKruise's Advanced StatefulSet (apps.kruise.io/v1beta1),
// run by tools/kruise (its controller alone, no webhook).
const (
	WorkloadKruise        = "kruise"
	WorkloadKruiseInPlace = "kruise-inplace"
)

// KruiseStatefulSets is the resource of the Advanced StatefulSet.
var KruiseStatefulSets = schema.GroupVersionResource{Group: "apps.kruise.io", Version: "v1beta1", Resource: "statefulsets"}

// kruiseInPlaceReadyGate is the readiness gate Kruise's pod webhook injects; without the
// webhook the template carries it, so the controller can hold a pod unready during its
// in-place update as it does with the webhook.
const kruiseInPlaceReadyGate = "InPlaceUpdateReady"

type kruiseStatefulSet struct {
	client    dynamic.Interface
	namespace string
	opts      TemplateOptions
	name      string
	// podUpdatePolicy: ReCreate or InPlaceIfPossible.
	podUpdatePolicy string
}

func (k *kruiseStatefulSet) Name() string { return k.name }

func (k *kruiseStatefulSet) resource() dynamic.ResourceInterface {
	return k.client.Resource(KruiseStatefulSets).Namespace(k.namespace)
}

// object is the Advanced StatefulSet with every field its controller reads written out:
// without Kruise's webhook nothing defaults them.
func (k *kruiseStatefulSet) object(replicas int32, image string) (*unstructured.Unstructured, error) {
	tmpl := podTemplate(k.name, image, k.opts)
	tmpl.Spec.ReadinessGates = append(tmpl.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: kruiseInPlaceReadyGate})
	template, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&tmpl)
	if err != nil {
		return nil, err
	}
	delete(template, "metadata")
	template["metadata"] = map[string]any{"labels": map[string]any{setLabel: k.name}}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": KruiseStatefulSets.GroupVersion().String(),
		"kind":       "StatefulSet",
		"metadata":   map[string]any{"name": k.name},
		"spec": map[string]any{
			"replicas":             int64(replicas),
			"selector":             map[string]any{"matchLabels": map[string]any{setLabel: k.name}},
			"serviceName":          ServiceName,
			"podManagementPolicy":  string(k.opts.PodManagement),
			"revisionHistoryLimit": int64(k.opts.RevisionHistory),
			"template":             template,
			"updateStrategy": map[string]any{
				"type": "RollingUpdate",
				"rollingUpdate": map[string]any{
					"partition":       int64(0),
					"maxUnavailable":  int64(k.opts.MaxUnavailable),
					"podUpdatePolicy": k.podUpdatePolicy,
					"paused":          false,
				},
			},
		},
	}}, nil
}

func (k *kruiseStatefulSet) Create(ctx context.Context, replicas int32, image string) error {
	obj, err := k.object(replicas, image)
	if err != nil {
		return err
	}
	_, err = k.resource().Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("%s: %w (is the Advanced StatefulSet CRD installed and tools/kruise running?)", k.name, err)
	}
	return nil
}

func (k *kruiseStatefulSet) SetImage(ctx context.Context, image string) (int64, error) {
	patch, err := imagePatch(image)
	if err != nil {
		return 0, err
	}
	set, err := k.resource().Patch(ctx, k.name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return 0, err
	}
	return set.GetGeneration(), nil
}

func (k *kruiseStatefulSet) Status(ctx context.Context) (int64, workloadStatus, error) {
	set, err := k.resource().Get(ctx, k.name, metav1.GetOptions{})
	if err != nil {
		return 0, workloadStatus{}, err
	}
	num := func(field string) int64 {
		n, _, _ := unstructured.NestedInt64(set.Object, "status", field)
		return n
	}
	return set.GetGeneration(), workloadStatus{
		ObservedGeneration: num("observedGeneration"),
		Replicas:           int32(num("replicas")),
		ReadyReplicas:      int32(num("readyReplicas")),
		UpdatedReplicas:    int32(num("updatedReplicas")),
	}, nil
}

func (k *kruiseStatefulSet) Delete(ctx context.Context) error {
	return k.resource().Delete(ctx, k.name, metav1.DeleteOptions{})
}
