package bench

import (
	"context"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
)

// Names of the workloads the benchmark rolls, also the names of their objects.
const (
	WorkloadStatefulSet = "statefulset"
	// WorkloadStatefulSetMaxUnavailable is the native StatefulSet with the same
	// maxUnavailable as the EnhancedStatefulSets (feature gate MaxUnavailableStatefulSet on
	// kube-apiserver and kube-controller-manager: localcluster up --feature-gates).
	WorkloadStatefulSetMaxUnavailable = "statefulset-maxunavailable"
	WorkloadESTS                      = "ests"
	WorkloadESTSInPlace               = "ests-inplace"
)

// setLabel selects the pods of one benchmark workload.
const setLabel = "estsbench.staticip.io/set"

// ServiceName is the headless Service both kinds of set name as their serviceName.
const ServiceName = "estsbench"

// TemplateOptions are the pod template knobs both kinds share.
type TemplateOptions struct {
	Port            int32
	CPURequest      resource.Quantity
	GracePeriod     int64
	ProbePeriod     int32
	PodManagement   appsv1.PodManagementPolicyType
	MaxUnavailable  int
	RevisionHistory int32
	// SpreadOverNodes: a soft topology spread (maxSkew 1 over kubernetes.io/hostname) of the
	// set's pods. kube-scheduler spreads a native StatefulSet's pods by default but knows no
	// EnhancedStatefulSet (its default spreading selects by Service, ReplicaSet and
	// StatefulSet only), so without it the restart measurement once had all three static-IP
	// pods on one node and the StatefulSet's on three: both get it, so both are placed alike.
	SpreadOverNodes bool
}

// workloadStatus is what both kinds report about a rollout.
type workloadStatus struct {
	ObservedGeneration int64
	Replicas           int32
	ReadyReplicas      int32
	UpdatedReplicas    int32
}

// workload is one set the benchmark creates, rolls and deletes.
type workload interface {
	Name() string
	Create(ctx context.Context, replicas int32, image string) error
	// SetImage changes the container image of the template and returns the new generation.
	SetImage(ctx context.Context, image string) (int64, error)
	Status(ctx context.Context) (generation int64, st workloadStatus, err error)
	Delete(ctx context.Context) error
}

// podTemplate is the same for both kinds: one testserver container, a readiness probe on
// its HTTP port, a small CPU request, a short grace period.
func podTemplate(name, image string, o TemplateOptions) corev1.PodTemplateSpec {
	grace := o.GracePeriod
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{setLabel: name}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  new(bool),
			EnableServiceLinks:            new(bool),
			Containers: []corev1.Container{{
				Name:            "testserver",
				Image:           image,
				ImagePullPolicy: corev1.PullNever,
				Args:            []string{"serve", "--listen", fmt.Sprintf(":%d", o.Port)},
				Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: o.Port}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: o.CPURequest},
				},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(o.Port)}},
					PeriodSeconds:    o.ProbePeriod,
					TimeoutSeconds:   1,
					SuccessThreshold: 1,
					FailureThreshold: 3,
				},
			}},
			TopologySpreadConstraints: spreadOverNodes(name, o.SpreadOverNodes),
		},
	}
}

func spreadOverNodes(name string, on bool) []corev1.TopologySpreadConstraint {
	if !on {
		return nil
	}
	return []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname,
		WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{setLabel: name}}}}
}

// imagePatch is a JSON patch that sets the first container's image, the same request for
// both kinds.
func imagePatch(image string) ([]byte, error) {
	return json.Marshal([]map[string]any{{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": image}})
}

type statefulSet struct {
	client    kubernetes.Interface
	namespace string
	opts      TemplateOptions
	// maxUnavailable: opts.MaxUnavailable as the StatefulSet's budget (else 1).
	maxUnavailable bool
}

func (s *statefulSet) Name() string {
	if s.maxUnavailable {
		return WorkloadStatefulSetMaxUnavailable
	}
	return WorkloadStatefulSet
}

func (s *statefulSet) Create(ctx context.Context, replicas int32, image string) error {
	name := s.Name()
	set := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            &replicas,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{setLabel: name}},
			Template:            podTemplate(name, image, s.opts),
			ServiceName:         ServiceName,
			PodManagementPolicy: s.opts.PodManagement,
			// The default rolling update: kube-controller-manager replaces one pod at a time
			// (maxUnavailable is behind the MaxUnavailableStatefulSet gate, off by default).
			UpdateStrategy:       appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType},
			RevisionHistoryLimit: &s.opts.RevisionHistory,
		},
	}
	if s.maxUnavailable {
		budget := intstr.FromInt(s.opts.MaxUnavailable)
		set.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{MaxUnavailable: &budget}
	}
	created, err := s.client.AppsV1().StatefulSets(s.namespace).Create(ctx, set, metav1.CreateOptions{})
	if err == nil && s.maxUnavailable && (created.Spec.UpdateStrategy.RollingUpdate == nil || created.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable == nil) {
		// The API server drops the field with the gate off: this would be the budget-1 run.
		return fmt.Errorf("%s: the API server dropped spec.updateStrategy.rollingUpdate.maxUnavailable: "+
			"turn on the MaxUnavailableStatefulSet feature gate (localcluster up --feature-gates=MaxUnavailableStatefulSet=true)", name)
	}
	return err
}

func (s *statefulSet) SetImage(ctx context.Context, image string) (int64, error) {
	patch, err := imagePatch(image)
	if err != nil {
		return 0, err
	}
	set, err := s.client.AppsV1().StatefulSets(s.namespace).Patch(ctx, s.Name(), types.JSONPatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return 0, err
	}
	return set.Generation, nil
}

func (s *statefulSet) Status(ctx context.Context) (int64, workloadStatus, error) {
	set, err := s.client.AppsV1().StatefulSets(s.namespace).Get(ctx, s.Name(), metav1.GetOptions{})
	if err != nil {
		return 0, workloadStatus{}, err
	}
	return set.Generation, workloadStatus{
		ObservedGeneration: set.Status.ObservedGeneration,
		Replicas:           set.Status.Replicas,
		ReadyReplicas:      set.Status.ReadyReplicas,
		UpdatedReplicas:    set.Status.UpdatedReplicas,
	}, nil
}

func (s *statefulSet) Delete(ctx context.Context) error {
	return s.client.AppsV1().StatefulSets(s.namespace).Delete(ctx, s.Name(), metav1.DeleteOptions{})
}

type enhancedStatefulSet struct {
	client    versioned.Interface
	namespace string
	opts      TemplateOptions
	name      string
	policy    jkev1alpha1.PodUpdatePolicyType
}

func (e *enhancedStatefulSet) Name() string { return e.name }

func (e *enhancedStatefulSet) Create(ctx context.Context, replicas int32, image string) error {
	maxUnavailable := intstr.FromInt(e.opts.MaxUnavailable)
	partition := int32(0)
	set := &jkev1alpha1.EnhancedStatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: e.name},
		Spec: jkev1alpha1.EnhancedStatefulSetSpec{
			Replicas:            &replicas,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{setLabel: e.name}},
			Template:            podTemplate(e.name, image, e.opts),
			ServiceName:         ServiceName,
			PodManagementPolicy: e.opts.PodManagement,
			UpdateStrategy: jkev1alpha1.EnhancedStatefulSetUpdateStrategy{
				Type: appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &jkev1alpha1.RollingUpdateEnhancedStatefulSetStrategy{
					Partition:       &partition,
					MaxUnavailable:  &maxUnavailable,
					PodUpdatePolicy: e.policy,
				},
			},
			RevisionHistoryLimit: &e.opts.RevisionHistory,
		},
	}
	_, err := e.client.JkeV1alpha1().EnhancedStatefulSets(e.namespace).Create(ctx, set, metav1.CreateOptions{})
	return err
}

func (e *enhancedStatefulSet) SetImage(ctx context.Context, image string) (int64, error) {
	patch, err := imagePatch(image)
	if err != nil {
		return 0, err
	}
	set, err := e.client.JkeV1alpha1().EnhancedStatefulSets(e.namespace).Patch(ctx, e.name, types.JSONPatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return 0, err
	}
	return set.Generation, nil
}

func (e *enhancedStatefulSet) Status(ctx context.Context) (int64, workloadStatus, error) {
	set, err := e.client.JkeV1alpha1().EnhancedStatefulSets(e.namespace).Get(ctx, e.name, metav1.GetOptions{})
	if err != nil {
		return 0, workloadStatus{}, err
	}
	return set.Generation, workloadStatus{
		ObservedGeneration: set.Status.ObservedGeneration,
		Replicas:           set.Status.Replicas,
		ReadyReplicas:      set.Status.ReadyReplicas,
		UpdatedReplicas:    set.Status.UpdatedReplicas,
	}, nil
}

func (e *enhancedStatefulSet) Delete(ctx context.Context) error {
	return e.client.JkeV1alpha1().EnhancedStatefulSets(e.namespace).Delete(ctx, e.name, metav1.DeleteOptions{})
}
