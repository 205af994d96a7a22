package enhancedstatefulset

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
)

// ActionType is what the sync loop must do to one pod.
type ActionType string

const (
	// ActionCreate creates the pod of Ordinal from the template of Revision.
	ActionCreate ActionType = "Create"
	// ActionDelete deletes Pod; why is in Reason.
	ActionDelete ActionType = "Delete"
	// ActionInPlaceUpdate patches the container images of Pod to Images and labels it with Revision.
	ActionInPlaceUpdate ActionType = "InPlaceUpdate"
)

// DeleteReason says why a pod is deleted.
type DeleteReason string

const (
	// ReasonFailed: the pod failed or succeeded; it is replaced like a StatefulSet replaces it.
	ReasonFailed DeleteReason = "Failed"
	// ReasonCondemned: the ordinal is at or above spec.replicas.
	ReasonCondemned DeleteReason = "Condemned"
	// ReasonUpdate: the pod runs an old revision and is recreated from the update revision.
	ReasonUpdate DeleteReason = "Update"
)

// Action is one step of a Plan.
type Action struct {
	Type     ActionType
	Ordinal  int
	Pod      string
	Revision string
	Reason   DeleteReason
	// Images maps container name to the new image, for ActionInPlaceUpdate.
	Images map[string]string
}

func (a Action) String() string {
	switch a.Type {
	case ActionCreate:
		return fmt.Sprintf("create %d@%s", a.Ordinal, a.Revision)
	case ActionDelete:
		return fmt.Sprintf("delete %d (%s)", a.Ordinal, a.Reason)
	default:
		return fmt.Sprintf("inplace %d@%s", a.Ordinal, a.Revision)
	}
}

// PlanInput is everything the planner looks at. It holds no clients: the planner is a pure
// function, so every rollout decision can be table-tested.
type PlanInput struct {
	// Spec is the set's spec (replicas, policy, strategy, minReadySeconds).
	Spec *jkev1alpha1.EnhancedStatefulSetSpec
	// SetName names the pods: {SetName}-{ordinal}.
	SetName string
	// Pods are the pods the set owns, in any order; pods whose name carries no ordinal of the
	// set are ignored.
	Pods []*corev1.Pod
	// CurrentRevision is the revision of the pods below the partition; UpdateRevision the
	// revision of the current template.
	CurrentRevision string
	UpdateRevision  string
	// Templates maps revision name to its pod template. The planner uses it to decide whether
	// an update can be done in place; a revision missing here is always recreated.
	Templates map[string]*corev1.PodTemplateSpec
	// Now is the clock for minReadySeconds.
	Now time.Time
}

// Plan is what the sync loop executes, plus the status it observed.
type Plan struct {
	Actions []Action
	// RequeueAfter > 0 asks for another sync when a ready pod becomes available.
	RequeueAfter time.Duration
	// MaxUnavailable is the resolved budget; Unavailable the pods counted against it.
	MaxUnavailable int
	Unavailable    int
	// Status counts (revisions and generation are filled in by the caller).
	Replicas, ReadyReplicas, AvailableReplicas, CurrentReplicas, UpdatedReplicas int32
}

// Labels the controller puts on pods.
const (
	// PodNameLabel and PodIndexLabel are the labels a StatefulSet gives its pods.
	PodNameLabel  = appsv1.StatefulSetPodNameLabel
	PodIndexLabel = appsv1.PodIndexLabel
	// RevisionLabel is the ControllerRevision a pod was made from.
	RevisionLabel = appsv1.ControllerRevisionHashLabelKey
	// AnnotationInPlaceOldImages on a pod records, as JSON {container: image in status}, what
	// the kubelet reported before an in-place update. While a container still reports that
	// image, the update has not reached the node and the pod counts as unavailable.
	AnnotationInPlaceOldImages = "enhancedstatefulset.jke.jdcloud.com/inplace-old-images"
)

// PodName is the name of the pod of ordinal in set.
func PodName(setName string, ordinal int) string { return fmt.Sprintf("%s-%d", setName, ordinal) }

// ParseOrdinal returns the ordinal of a pod named {setName}-{n}, or -1.
func ParseOrdinal(setName, podName string) int {
	prefix := setName + "-"
	if len(podName) <= len(prefix) || podName[:len(prefix)] != prefix {
		return -1
	}
	n := 0
	for _, c := range podName[len(prefix):] {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
		if n > 1<<30 {
			return -1
		}
	}
	if s := podName[len(prefix):]; len(s) > 1 && s[0] == '0' {
		return -1 // "web-01" is not ordinal 1
	}
	return n
}

// PodRevision is the revision label of pod.
func PodRevision(pod *corev1.Pod) string { return pod.Labels[RevisionLabel] }

// ResolveMaxUnavailable turns maxUnavailable into a number of pods: a percentage of replicas
// rounded down, never less than 1; default 1.
func ResolveMaxUnavailable(maxUnavailable *intstr.IntOrString, replicas int) (int, error) {
	n, err := intstr.GetScaledValueFromIntOrPercent(intstr.ValueOrDefault(maxUnavailable, intstr.FromInt32(1)), replicas, false)
	if err != nil {
		return 0, err
	}
	if n < 1 {
		n = 1
	}
	return n, nil
}

func isTerminating(pod *corev1.Pod) bool { return pod.DeletionTimestamp != nil }

func isFailedOrSucceeded(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded
}

// InPlaceUpdatePending says the controller patched pod's images but the kubelet still reports
// at least one old image.
func InPlaceUpdatePending(pod *corev1.Pod) bool {
	raw, ok := pod.Annotations[AnnotationInPlaceOldImages]
	if !ok {
		return false
	}
	old := map[string]string{}
	if err := json.Unmarshal([]byte(raw), &old); err != nil {
		return false
	}
	for _, st := range pod.Status.ContainerStatuses {
		if img, ok := old[st.Name]; ok && img != "" && st.Image == img {
			return true
		}
	}
	return false
}

// isRunningAndReady mirrors the StatefulSet controller's helper.
func isRunningAndReady(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodRunning && podutil.IsPodReady(pod)
}

// isAvailable: running, ready for minReadySeconds, not terminating, no in-place update in flight.
func isAvailable(pod *corev1.Pod, minReadySeconds int32, now time.Time) bool {
	return pod.Status.Phase == corev1.PodRunning && !isTerminating(pod) && !InPlaceUpdatePending(pod) &&
		podutil.IsPodAvailable(pod, minReadySeconds, metav1.NewTime(now))
}

// ImageOnlyChange returns the container images of to when from and to differ in nothing
// but container images (so the pod can be patched in place), or ok=false.
func ImageOnlyChange(from, to *corev1.PodTemplateSpec) (images map[string]string, ok bool) {
	if from == nil || to == nil || len(from.Spec.Containers) != len(to.Spec.Containers) {
		return nil, false
	}
	a, b := from.DeepCopy(), to.DeepCopy()
	images = map[string]string{}
	for i := range a.Spec.Containers {
		if a.Spec.Containers[i].Name != b.Spec.Containers[i].Name {
			return nil, false
		}
		if a.Spec.Containers[i].Image != b.Spec.Containers[i].Image {
			images[b.Spec.Containers[i].Name] = b.Spec.Containers[i].Image
		}
		a.Spec.Containers[i].Image, b.Spec.Containers[i].Image = "", ""
	}
	if !apiequality.Semantic.DeepEqual(a, b) {
		return nil, false
	}
	return images, true
}

// ComputePlan is the update planner: from the set's spec, its pods and its revisions it
// decides which pods to create, delete or patch now. It follows the StatefulSet controller
// (pkg/controller/statefulset, updateStatefulSet):
//
//   - ordinals [0, replicas) must exist; ordinals >= replicas are condemned, highest first;
//   - pods below the partition are created at CurrentRevision, the others at UpdateRevision;
//   - OrderedReady creates and deletes one pod at a time and waits for every lower ordinal
//     to be running and available; Parallel does all of it at once;
//   - RollingUpdate moves pods at ordinals >= partition to UpdateRevision, highest ordinal
//     first, while the pods that are unavailable (missing, not ready for minReadySeconds,
//     terminating, or mid in-place update) stay within maxUnavailable: budget =
//     maxUnavailable - unavailable; if pods are already down the budget shrinks, and at zero
//     no available pod is taken down. A pod already down on an abandoned revision (neither
//     current nor update) is replaced without budget. Paused starts no update; OnDelete
//     never updates a live pod.
func ComputePlan(in PlanInput) (*Plan, error) {
	spec := in.Spec
	replicas := 1
	if spec.Replicas != nil {
		replicas = int(*spec.Replicas)
	}
	parallel := spec.PodManagementPolicy == appsv1.ParallelPodManagement
	rollingUpdate := spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType
	ru := spec.UpdateStrategy.RollingUpdate
	if ru == nil {
		ru = &jkev1alpha1.RollingUpdateEnhancedStatefulSetStrategy{}
	}
	partition := 0
	if rollingUpdate && ru.Partition != nil {
		partition = int(*ru.Partition)
	}
	maxUnavailable, err := ResolveMaxUnavailable(ru.MaxUnavailable, replicas)
	if err != nil {
		return nil, fmt.Errorf("spec.updateStrategy.rollingUpdate.maxUnavailable: %w", err)
	}
	plan := &Plan{MaxUnavailable: maxUnavailable}
	minReady := spec.MinReadySeconds

	// Split pods into replicas (by ordinal) and condemned.
	slots := make([]*corev1.Pod, replicas)
	var condemned []*corev1.Pod
	for _, pod := range in.Pods {
		ord := ParseOrdinal(in.SetName, pod.Name)
		if ord < 0 {
			continue
		}
		if ord < replicas {
			slots[ord] = pod
		} else {
			condemned = append(condemned, pod)
		}
	}
	sort.Slice(condemned, func(i, j int) bool {
		return ParseOrdinal(in.SetName, condemned[i].Name) > ParseOrdinal(in.SetName, condemned[j].Name)
	})

	// Status counts over every pod the set has (like the StatefulSet controller).
	for _, pod := range in.Pods {
		if ParseOrdinal(in.SetName, pod.Name) < 0 {
			continue
		}
		plan.Replicas++
		if isRunningAndReady(pod) {
			plan.ReadyReplicas++
			if isAvailable(pod, minReady, in.Now) {
				plan.AvailableReplicas++
			} else if minReady > 0 {
				plan.requeueForAvailability(pod, minReady, in.Now)
			}
		}
		if !isTerminating(pod) {
			switch PodRevision(pod) {
			case in.CurrentRevision:
				plan.CurrentReplicas++
				if in.CurrentRevision == in.UpdateRevision {
					plan.UpdatedReplicas++
				}
			case in.UpdateRevision:
				plan.UpdatedReplicas++
			}
		}
	}

	revisionFor := func(ordinal int) string {
		if rollingUpdate && ordinal < partition {
			return in.CurrentRevision
		}
		return in.UpdateRevision
	}

	// 1. Replicas: replace failed pods, create missing ones. OrderedReady stops at the first
	//    pod that is not there or not available yet (monotonic), like the StatefulSet.
	unavailable := 0
	blocked := false
	for ord := 0; ord < replicas; ord++ {
		pod := slots[ord]
		if pod == nil || isTerminating(pod) || !isAvailable(pod, minReady, in.Now) {
			unavailable++
		}
		if blocked {
			continue
		}
		switch {
		case pod == nil:
			plan.Actions = append(plan.Actions, Action{Type: ActionCreate, Ordinal: ord, Pod: PodName(in.SetName, ord), Revision: revisionFor(ord)})
			blocked = !parallel
		case isFailedOrSucceeded(pod) && !isTerminating(pod):
			plan.Actions = append(plan.Actions, Action{Type: ActionDelete, Ordinal: ord, Pod: pod.Name, Reason: ReasonFailed})
			blocked = !parallel
		case isTerminating(pod):
			// Wait for it to go before recreating the same name.
			blocked = !parallel
		case !isAvailable(pod, minReady, in.Now):
			blocked = !parallel
		}
	}
	plan.Unavailable = unavailable

	// 2. Condemned pods, highest ordinal first. OrderedReady deletes one at a time and only
	//    when every replica is available; Parallel deletes all of them.
	for _, pod := range condemned {
		if blocked {
			break
		}
		if isTerminating(pod) {
			blocked = !parallel
			continue
		}
		plan.Actions = append(plan.Actions, Action{Type: ActionDelete, Ordinal: ParseOrdinal(in.SetName, pod.Name), Pod: pod.Name, Reason: ReasonCondemned})
		blocked = !parallel
	}

	// 3. Rolling update under the budget.
	if !rollingUpdate || ru.Paused || blocked || in.CurrentRevision == "" && in.UpdateRevision == "" {
		return plan, nil
	}
	budget := maxUnavailable - unavailable
	for ord := replicas - 1; ord >= partition; ord-- {
		pod := slots[ord]
		if pod == nil || isTerminating(pod) || PodRevision(pod) == in.UpdateRevision || isFailedOrSucceeded(pod) {
			continue
		}
		// A pod that is down on an abandoned revision (neither current nor update: left by a
		// rollout that was replaced, e.g. a broken image rolled back) is already counted as
		// unavailable, and replacing it takes nothing else down, so it costs no budget.
		// Without this a broken rollout that used up the budget could never be rolled back.
		// Pods of the current revision that are down wait: they may recover by themselves.
		free := PodRevision(pod) != in.CurrentRevision && !isAvailable(pod, minReady, in.Now)
		if !free && budget <= 0 {
			continue
		}
		if !free {
			budget--
		}
		if ru.PodUpdatePolicy == jkev1alpha1.InPlaceIfPossiblePodUpdatePolicy {
			if images, ok := ImageOnlyChange(in.Templates[PodRevision(pod)], in.Templates[in.UpdateRevision]); ok {
				plan.Actions = append(plan.Actions, Action{Type: ActionInPlaceUpdate, Ordinal: ord, Pod: pod.Name, Revision: in.UpdateRevision, Images: images})
				continue
			}
		}
		plan.Actions = append(plan.Actions, Action{Type: ActionDelete, Ordinal: ord, Pod: pod.Name, Reason: ReasonUpdate})
	}
	return plan, nil
}

// requeueForAvailability asks for a sync when pod has been ready for minReady seconds.
func (p *Plan) requeueForAvailability(pod *corev1.Pod, minReady int32, now time.Time) {
	c := podutil.GetPodReadyCondition(pod.Status)
	if c == nil {
		return
	}
	wait := c.LastTransitionTime.Add(time.Duration(minReady)*time.Second).Sub(now) + 100*time.Millisecond
	if wait > 0 && (p.RequeueAfter == 0 || wait < p.RequeueAfter) {
		p.RequeueAfter = wait
	}
}
