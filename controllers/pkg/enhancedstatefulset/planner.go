package enhancedstatefulset

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/distribution/reference"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/apis/ordinal"
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
	// ActionInPlaceReady ends an in-place update the kubelet has carried out (or marks a new
	// pod): the InPlaceUpdateReady condition becomes True and the update record is removed.
	ActionInPlaceReady ActionType = "InPlaceReady"
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
	// ReasonUnavailable: the pod is unavailable and not at the update revision (typically stuck
	// on a broken image after the template was rolled back). Replacing it takes nothing down
	// that is not down already, so it waits neither for lower ordinals nor for budget: this is
	// the StatefulSet's manual "forced rollback", done by the controller.
	ReasonUnavailable DeleteReason = "Unavailable"
	// ReasonInPlaceTimeout: an in-place update did not reach the kubelet in time; the pod is
	// recreated instead.
	ReasonInPlaceTimeout DeleteReason = "InPlaceUpdateTimeout"
)

// WaitReason says what a rollout waits on.
type WaitReason string

const (
	// WaitPod: OrderedReady waits for an ordinal to be created, to terminate or to become available.
	WaitPod WaitReason = "WaitingForPod"
	// WaitBudget: pods still need updating but maxUnavailable pods are unavailable.
	WaitBudget WaitReason = "WaitingForBudget"
	// WaitPaused: pods still need updating but the rollout is paused.
	WaitPaused WaitReason = "Paused"
)

// Wait names what the rollout waits on: the pods and why each one is not available.
type Wait struct {
	Reason  WaitReason
	Pods    []string
	Message string
	// Stuck: a pod waited on has a problem the kubelet reports (a container waiting with a
	// reason such as ErrImagePull or CrashLoopBackOff, or the pod failed): worth an Event.
	Stuck bool
}

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
	case ActionInPlaceReady:
		return fmt.Sprintf("ready %d", a.Ordinal)
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
	// Now is the clock for minReadySeconds and in-place update timeouts.
	Now time.Time
	// InPlaceUpdateTimeout is how long an in-place update may take to reach the kubelet (a new
	// container running the new image) before the pod is recreated; 0 means never.
	InPlaceUpdateTimeout time.Duration
}

// Plan is what the sync loop executes, plus the status it observed.
type Plan struct {
	Actions []Action
	// RequeueAfter > 0 asks for another sync when a ready pod becomes available.
	RequeueAfter time.Duration
	// MaxUnavailable is the resolved budget; Unavailable the pods counted against it.
	MaxUnavailable int
	Unavailable    int
	// Waiting says what the rollout waits on, nil when it waits on nothing.
	Waiting *Wait
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
	// AnnotationInPlaceUpdate on a pod records an in-place update in flight (InPlaceUpdateState
	// as JSON). While it is there and the kubelet has not started the new containers, the pod
	// counts as unavailable and is not counted ready, updated or current.
	AnnotationInPlaceUpdate = "enhancedstatefulset.jke.jdcloud.com/inplace-update"
	// InPlaceUpdateReady is the readiness gate of pods created for InPlaceIfPossible: the
	// controller sets it False before it patches a pod, so Services stop sending traffic before
	// the container restarts, and True once the kubelet runs the new containers.
	InPlaceUpdateReady corev1.PodConditionType = "InPlaceUpdateReady"
)

// InPlaceUpdateState is what the controller records on a pod it patches in place.
type InPlaceUpdateState struct {
	Revision string `json:"revision"`
	// UpdateTimestamp is when the pod was patched (for the timeout).
	UpdateTimestamp metav1.Time `json:"updateTimestamp"`
	// Containers maps each patched container to the container ID the kubelet reported before
	// the patch and the image it must run now. An image alone cannot tell a rollback (B back to
	// A while A still runs) from an update that happened: a new container ID can.
	Containers map[string]InPlaceContainer `json:"containers"`
}

// InPlaceContainer is one container of an InPlaceUpdateState.
type InPlaceContainer struct {
	OldContainerID string `json:"oldContainerID,omitempty"`
	Image          string `json:"image"`
}

// InPlaceState returns the in-place update recorded on pod, or nil.
func InPlaceState(pod *corev1.Pod) *InPlaceUpdateState {
	raw, ok := pod.Annotations[AnnotationInPlaceUpdate]
	if !ok {
		return nil
	}
	st := &InPlaceUpdateState{}
	if err := json.Unmarshal([]byte(raw), st); err != nil {
		return nil
	}
	return st
}

// PodName is the name of the pod of ordinal n in set (apis/ordinal.Name).
func PodName(setName string, n int) string { return ordinal.Name(setName, n) }

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

// InPlaceUpdatePending says the controller patched pod in place and the kubelet does not yet
// run, for every patched container, a new container (a container ID other than the one before
// the patch) started from the target image.
func InPlaceUpdatePending(pod *corev1.Pod) bool {
	st := InPlaceState(pod)
	return st != nil && !inPlaceDone(pod, st)
}

func inPlaceDone(pod *corev1.Pod, st *InPlaceUpdateState) bool {
	for name, c := range st.Containers {
		done := false
		for _, cs := range pod.Status.ContainerStatuses {
			if cs.Name == name {
				done = cs.ContainerID != "" && cs.ContainerID != c.OldContainerID && cs.State.Running != nil && SameImage(cs.Image, c.Image)
			}
		}
		if !done {
			return false
		}
	}
	return true
}

// SameImage compares an image as written in a pod spec with one a kubelet reports, which the
// runtime may have normalized ("nginx:1" is "docker.io/library/nginx:1").
func SameImage(a, b string) bool {
	if a == b {
		return true
	}
	na, errA := reference.ParseNormalizedNamed(a)
	nb, errB := reference.ParseNormalizedNamed(b)
	if errA != nil || errB != nil {
		return false
	}
	return reference.TagNameOnly(na).String() == reference.TagNameOnly(nb).String()
}

// hasReadinessGate says whether pod was created with the InPlaceUpdateReady readiness gate.
func hasReadinessGate(pod *corev1.Pod) bool {
	for _, g := range pod.Spec.ReadinessGates {
		if g.ConditionType == InPlaceUpdateReady {
			return true
		}
	}
	return false
}

func conditionTrue(pod *corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podProblem says in a few words why pod is not available (for conditions and Events).
func podProblem(pod *corev1.Pod, minReadySeconds int32, now time.Time) string {
	switch {
	case pod == nil:
		return "not created yet"
	case isTerminating(pod):
		return "terminating"
	case InPlaceUpdatePending(pod):
		return "in-place update pending" + containerProblems(pod)
	case isFailedOrSucceeded(pod):
		return string(pod.Status.Phase)
	case pod.Status.Phase != corev1.PodRunning:
		return string(pod.Status.Phase) + containerProblems(pod)
	case !podutil.IsPodReady(pod):
		return "not Ready" + containerProblems(pod)
	case !isAvailable(pod, minReadySeconds, now):
		return fmt.Sprintf("Ready for less than minReadySeconds (%ds)", minReadySeconds)
	}
	return "available"
}

// stuck says whether the kubelet reports a problem with pod (see Wait.Stuck).
func stuck(pod *corev1.Pod) bool {
	return pod != nil && !isTerminating(pod) && (isFailedOrSucceeded(pod) || containerProblems(pod) != "")
}

func containerProblems(pod *corev1.Pod) string {
	var out []string
	for _, cs := range append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			out = append(out, cs.Name+" "+w.Reason)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return ": " + strings.Join(out, ", ")
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
		ord := ordinal.Of(in.SetName, pod.Name)
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
		return ordinal.Of(in.SetName, condemned[i].Name) > ordinal.Of(in.SetName, condemned[j].Name)
	})

	// Status counts over every pod the set has (like the StatefulSet controller). A pod whose
	// in-place update the kubelet has not carried out is neither ready nor at any revision yet.
	for _, pod := range in.Pods {
		if ordinal.Of(in.SetName, pod.Name) < 0 {
			continue
		}
		plan.Replicas++
		pending := InPlaceUpdatePending(pod)
		if isRunningAndReady(pod) && !pending {
			plan.ReadyReplicas++
			if isAvailable(pod, minReady, in.Now) {
				plan.AvailableReplicas++
			} else if minReady > 0 {
				plan.requeueForAvailability(pod, minReady, in.Now)
			}
		}
		if !isTerminating(pod) && !pending {
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
	updating := rollingUpdate && !ru.Paused && (in.CurrentRevision != "" || in.UpdateRevision != "")
	inPlace := ru.PodUpdatePolicy == jkev1alpha1.InPlaceIfPossiblePodUpdatePolicy
	// update moves pod to the update revision: in place when only images differ, else by
	// deleting it (it is recreated at the update revision).
	update := func(ord int, pod *corev1.Pod, reason DeleteReason) Action {
		if inPlace {
			if images, ok := ImageOnlyChange(in.Templates[PodRevision(pod)], in.Templates[in.UpdateRevision]); ok {
				return Action{Type: ActionInPlaceUpdate, Ordinal: ord, Pod: pod.Name, Revision: in.UpdateRevision, Images: images}
			}
		}
		return Action{Type: ActionDelete, Ordinal: ord, Pod: pod.Name, Reason: reason}
	}

	// 0. Repairs that wait for nothing, under both policies:
	//   - an in-place update the kubelet has carried out is finished (InPlaceUpdateReady True);
	//     one that did not reach the kubelet within the timeout is replaced by a new pod;
	//   - a pod that is unavailable and not at the update revision (ordinals >= partition,
	//     rolling update not paused) is moved to the update revision without waiting for lower
	//     ordinals and without budget: it is down already, replacing it takes nothing else
	//     down. This is the StatefulSet's manual "forced rollback" (a pod stuck on a broken
	//     image after the template was rolled back), done for the user.
	acted := map[int]bool{}
	for ord := replicas - 1; ord >= 0; ord-- {
		pod := slots[ord]
		if pod == nil || isTerminating(pod) || isFailedOrSucceeded(pod) {
			continue
		}
		if st := InPlaceState(pod); st != nil && !inPlaceDone(pod, st) {
			if in.InPlaceUpdateTimeout > 0 {
				deadline := st.UpdateTimestamp.Add(in.InPlaceUpdateTimeout)
				if !in.Now.Before(deadline) {
					plan.Actions = append(plan.Actions, Action{Type: ActionDelete, Ordinal: ord, Pod: pod.Name, Reason: ReasonInPlaceTimeout})
					acted[ord] = true
					continue
				}
				plan.requeueAt(deadline.Sub(in.Now) + 100*time.Millisecond)
			}
		} else if st != nil || (hasReadinessGate(pod) && !conditionTrue(pod, InPlaceUpdateReady)) {
			plan.Actions = append(plan.Actions, Action{Type: ActionInPlaceReady, Ordinal: ord, Pod: pod.Name})
		}
		if updating && ord >= partition && PodRevision(pod) != in.UpdateRevision && !isAvailable(pod, minReady, in.Now) {
			plan.Actions = append(plan.Actions, update(ord, pod, ReasonUnavailable))
			acted[ord] = true
		}
	}

	// 1. Replicas: replace failed pods, create missing ones. OrderedReady stops at the first
	//    pod that is not there or not available yet (monotonic), like the StatefulSet.
	unavailable := 0
	blocked := false
	var waitFor *corev1.Pod
	waitName := ""
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
		case acted[ord]:
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
		if blocked {
			waitFor, waitName = pod, PodName(in.SetName, ord)
		}
	}
	// Condemned pods that are unavailable count against the budget too, as upstream.
	for _, pod := range condemned {
		if isTerminating(pod) || !isAvailable(pod, minReady, in.Now) {
			unavailable++
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
			if blocked {
				waitFor, waitName = pod, pod.Name
			}
			continue
		}
		plan.Actions = append(plan.Actions, Action{Type: ActionDelete, Ordinal: ordinal.Of(in.SetName, pod.Name), Pod: pod.Name, Reason: ReasonCondemned})
		blocked = !parallel
	}

	// Pods the rolling update still has to move.
	var toUpdate []int
	if rollingUpdate {
		for ord := replicas - 1; ord >= partition; ord-- {
			if pod := slots[ord]; pod != nil && !isTerminating(pod) && !isFailedOrSucceeded(pod) && !acted[ord] && PodRevision(pod) != in.UpdateRevision {
				toUpdate = append(toUpdate, ord)
			}
		}
	}
	// unavailablePods describes the pods that use up the budget.
	unavailablePods := func() (names []string, anyStuck bool) {
		for ord := 0; ord < replicas; ord++ {
			if pod := slots[ord]; pod == nil || isTerminating(pod) || !isAvailable(pod, minReady, in.Now) {
				names = append(names, PodName(in.SetName, ord)+" ("+podProblem(pod, minReady, in.Now)+")")
				anyStuck = anyStuck || stuck(pod)
			}
		}
		for _, pod := range condemned {
			if isTerminating(pod) || !isAvailable(pod, minReady, in.Now) {
				names = append(names, pod.Name+" ("+podProblem(pod, minReady, in.Now)+")")
				anyStuck = anyStuck || stuck(pod)
			}
		}
		return names, anyStuck
	}

	// 3. Rolling update under the budget.
	switch {
	case !rollingUpdate || in.CurrentRevision == "" && in.UpdateRevision == "":
		return plan, nil
	case blocked && waitName != "" && (len(toUpdate) > 0 || len(plan.Actions) == 0):
		plan.Waiting = &Wait{Reason: WaitPod, Pods: []string{waitName}, Stuck: stuck(waitFor),
			Message: fmt.Sprintf("OrderedReady: waiting for pod %s (%s)", waitName, podProblem(waitFor, minReady, in.Now))}
		return plan, nil
	case blocked:
		return plan, nil
	case ru.Paused:
		if len(toUpdate) > 0 {
			names := make([]string, len(toUpdate))
			for i, ord := range toUpdate {
				names[i] = PodName(in.SetName, ord)
			}
			plan.Waiting = &Wait{Reason: WaitPaused, Pods: names,
				Message: fmt.Sprintf("paused: %d pods not at revision %s: %s", len(names), in.UpdateRevision, strings.Join(names, ", "))}
		}
		return plan, nil
	}
	budget := maxUnavailable - unavailable
	for _, ord := range toUpdate {
		if budget <= 0 {
			names, anyStuck := unavailablePods()
			plan.Waiting = &Wait{Reason: WaitBudget, Pods: names, Stuck: anyStuck,
				Message: fmt.Sprintf("maxUnavailable %d reached, %d pods left to update; unavailable: %s", maxUnavailable, len(toUpdate), strings.Join(names, ", "))}
			break
		}
		budget--
		plan.Actions = append(plan.Actions, update(ord, slots[ord], ReasonUpdate))
	}
	return plan, nil
}

// requeueAt asks for a sync after d at the latest.
func (p *Plan) requeueAt(d time.Duration) {
	if d > 0 && (p.RequeueAfter == 0 || d < p.RequeueAfter) {
		p.RequeueAfter = d
	}
}

// requeueForAvailability asks for a sync when pod has been ready for minReady seconds.
func (p *Plan) requeueForAvailability(pod *corev1.Pod, minReady int32, now time.Time) {
	c := podutil.GetPodReadyCondition(pod.Status)
	if c == nil {
		return
	}
	p.requeueAt(c.LastTransitionTime.Add(time.Duration(minReady)*time.Second).Sub(now) + 100*time.Millisecond)
}
