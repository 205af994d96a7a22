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
	// Terminating are the pods of ordinals below spec.replicas that are being deleted: each
	// ordinal is created again once its pod is gone (the caller claims their StaticIPs
	// meanwhile: preclaim.go).
	Terminating []*corev1.Pod
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
	return conditionStatus(pod, t) == corev1.ConditionTrue
}

// conditionFalse: the pod has condition t and it is False (a missing one is not).
func conditionFalse(pod *corev1.Pod, t corev1.PodConditionType) bool {
	return conditionStatus(pod, t) == corev1.ConditionFalse
}

func conditionStatus(pod *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
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
//
// The phases run in this order over one planner: status counts, 0. repairs, 1. replicas,
// 2. condemned pods, 3. the rolling update.
func ComputePlan(in PlanInput) (*Plan, error) {
	p, err := newPlanner(in)
	if err != nil {
		return nil, err
	}
	p.countStatus()
	p.repair()
	p.ensureReplicas()
	p.deleteCondemned()
	p.rollUpdate()
	return p.plan, nil
}

// planner is one ComputePlan: the resolved spec, the set's pods by ordinal, and what the
// phases decided so far.
type planner struct {
	in   PlanInput
	plan *Plan

	replicas, partition int
	minReady            int32
	parallel            bool // podManagementPolicy Parallel
	rollingUpdate       bool // updateStrategy RollingUpdate (not OnDelete)
	paused              bool
	updating            bool // rolling update, not paused, revisions known
	inPlace             bool // podUpdatePolicy InPlaceIfPossible

	slots     []*corev1.Pod // by ordinal < replicas; nil = missing
	condemned []*corev1.Pod // ordinals >= replicas, highest first

	// acted: ordinals phase 0 moved already (no other phase touches them).
	acted map[int]bool
	// blocked: OrderedReady waits (on waitFor, named waitName; nil when it is missing).
	blocked  bool
	waitFor  *corev1.Pod
	waitName string
}

func newPlanner(in PlanInput) (*planner, error) {
	spec := in.Spec
	p := &planner{in: in, replicas: 1, minReady: spec.MinReadySeconds, acted: map[int]bool{}}
	if spec.Replicas != nil {
		p.replicas = int(*spec.Replicas)
	}
	p.parallel = spec.PodManagementPolicy == appsv1.ParallelPodManagement
	p.rollingUpdate = spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType
	ru := spec.UpdateStrategy.RollingUpdate
	if ru == nil {
		ru = &jkev1alpha1.RollingUpdateEnhancedStatefulSetStrategy{}
	}
	if p.rollingUpdate && ru.Partition != nil {
		p.partition = int(*ru.Partition)
	}
	maxUnavailable, err := ResolveMaxUnavailable(ru.MaxUnavailable, p.replicas)
	if err != nil {
		return nil, fmt.Errorf("spec.updateStrategy.rollingUpdate.maxUnavailable: %w", err)
	}
	p.plan = &Plan{MaxUnavailable: maxUnavailable}
	p.paused = ru.Paused
	p.updating = p.rollingUpdate && !ru.Paused && (in.CurrentRevision != "" || in.UpdateRevision != "")
	p.inPlace = ru.PodUpdatePolicy == jkev1alpha1.InPlaceIfPossiblePodUpdatePolicy

	// Split pods into replicas (by ordinal) and condemned.
	p.slots = make([]*corev1.Pod, p.replicas)
	for _, pod := range in.Pods {
		ord := ordinal.Of(in.SetName, pod.Name)
		if ord < 0 {
			continue
		}
		if ord < p.replicas {
			p.slots[ord] = pod
		} else {
			p.condemned = append(p.condemned, pod)
		}
	}
	sort.Slice(p.condemned, func(i, j int) bool {
		return ordinal.Of(in.SetName, p.condemned[i].Name) > ordinal.Of(in.SetName, p.condemned[j].Name)
	})
	return p, nil
}

// available says whether pod is there, not terminating and available for minReadySeconds.
func (p *planner) available(pod *corev1.Pod) bool {
	return pod != nil && !isTerminating(pod) && isAvailable(pod, p.minReady, p.in.Now)
}

func (p *planner) act(a Action) { p.plan.Actions = append(p.plan.Actions, a) }

// countStatus counts over every pod the set has (like the StatefulSet controller). A pod whose
// in-place update the kubelet has not carried out is neither ready nor at any revision yet.
func (p *planner) countStatus() {
	in, plan := p.in, p.plan
	for _, pod := range in.Pods {
		if ordinal.Of(in.SetName, pod.Name) < 0 {
			continue
		}
		plan.Replicas++
		pending := InPlaceUpdatePending(pod)
		if isRunningAndReady(pod) && !pending {
			plan.ReadyReplicas++
			if isAvailable(pod, p.minReady, in.Now) {
				plan.AvailableReplicas++
			} else if p.minReady > 0 {
				plan.requeueForAvailability(pod, p.minReady, in.Now)
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
}

// revisionFor is the revision a new pod of ordinal is created at.
func (p *planner) revisionFor(ord int) string {
	if p.rollingUpdate && ord < p.partition {
		return p.in.CurrentRevision
	}
	return p.in.UpdateRevision
}

// update moves pod to the update revision: in place when only images differ, else by
// deleting it (it is recreated at the update revision).
func (p *planner) update(ord int, pod *corev1.Pod, reason DeleteReason) Action {
	if p.inPlace {
		if images, ok := ImageOnlyChange(p.in.Templates[PodRevision(pod)], p.in.Templates[p.in.UpdateRevision]); ok {
			return Action{Type: ActionInPlaceUpdate, Ordinal: ord, Pod: pod.Name, Revision: p.in.UpdateRevision, Images: images}
		}
	}
	return Action{Type: ActionDelete, Ordinal: ord, Pod: pod.Name, Reason: reason}
}

// repair is phase 0, the repairs that wait for nothing, under both policies:
//   - an in-place update the kubelet has carried out is finished (InPlaceUpdateReady True);
//     one that did not reach the kubelet within the timeout is replaced by a new pod;
//   - a pod that is unavailable and not at the update revision (ordinals >= partition,
//     rolling update not paused) is moved to the update revision without waiting for lower
//     ordinals and without budget: it is down already, replacing it takes nothing else
//     down. This is the StatefulSet's manual "forced rollback" (a pod stuck on a broken
//     image after the template was rolled back), done for the user.
func (p *planner) repair() {
	in := p.in
	for ord := p.replicas - 1; ord >= 0; ord-- {
		pod := p.slots[ord]
		if pod == nil || isTerminating(pod) || isFailedOrSucceeded(pod) {
			continue
		}
		st := InPlaceState(pod)
		inFlight := st != nil && !inPlaceDone(pod, st)
		if inFlight && in.InPlaceUpdateTimeout > 0 {
			deadline := st.UpdateTimestamp.Add(in.InPlaceUpdateTimeout)
			if !in.Now.Before(deadline) {
				p.act(Action{Type: ActionDelete, Ordinal: ord, Pod: pod.Name, Reason: ReasonInPlaceTimeout})
				p.acted[ord] = true
				continue
			}
			p.plan.requeueAt(deadline.Sub(in.Now) + 100*time.Millisecond)
		}
		// An unavailable pod behind the update is updated again (it takes nothing down that is
		// not down already). It is not readied first: the update sets its gate False again, and
		// both writes of one plan go out at once — a pod whose gate went False but whose image
		// patch did not land (it conflicted with the kubelet's status write) had its gate flip
		// True and False within 100 ms, and the kubelet reported it Ready for a second while
		// its container was about to restart.
		if p.updating && ord >= p.partition && PodRevision(pod) != in.UpdateRevision && !isAvailable(pod, p.minReady, in.Now) {
			p.act(p.update(ord, pod, ReasonUnavailable))
			p.acted[ord] = true
			continue
		}
		if !inFlight && (st != nil || (hasReadinessGate(pod) && !conditionTrue(pod, InPlaceUpdateReady))) {
			p.act(Action{Type: ActionInPlaceReady, Ordinal: ord, Pod: pod.Name})
		}
	}
}

// ensureReplicas is phase 1: replace failed pods, create missing ones. OrderedReady stops at
// the first pod that is not there or not available yet (monotonic), like the StatefulSet. It
// also counts the unavailable pods against the budget (condemned ones too, as upstream).
func (p *planner) ensureReplicas() {
	unavailable := 0
	for ord := 0; ord < p.replicas; ord++ {
		pod := p.slots[ord]
		if !p.available(pod) {
			unavailable++
		}
		if pod != nil && isTerminating(pod) {
			p.plan.Terminating = append(p.plan.Terminating, pod)
		}
		if p.blocked {
			continue
		}
		switch {
		case pod == nil:
			p.act(Action{Type: ActionCreate, Ordinal: ord, Pod: PodName(p.in.SetName, ord), Revision: p.revisionFor(ord)})
			p.blocked = !p.parallel
		case p.acted[ord]:
			p.blocked = !p.parallel
		case isFailedOrSucceeded(pod) && !isTerminating(pod):
			p.act(Action{Type: ActionDelete, Ordinal: ord, Pod: pod.Name, Reason: ReasonFailed})
			p.blocked = !p.parallel
		case isTerminating(pod):
			// Wait for it to go before recreating the same name.
			p.blocked = !p.parallel
		case !isAvailable(pod, p.minReady, p.in.Now):
			p.blocked = !p.parallel
		}
		if p.blocked {
			p.waitFor, p.waitName = pod, PodName(p.in.SetName, ord)
		}
	}
	for _, pod := range p.condemned {
		if !p.available(pod) {
			unavailable++
		}
	}
	p.plan.Unavailable = unavailable
}

// deleteCondemned is phase 2: condemned pods, highest ordinal first. OrderedReady deletes one
// at a time and only when every replica is available; Parallel deletes all of them.
func (p *planner) deleteCondemned() {
	for _, pod := range p.condemned {
		if p.blocked {
			break
		}
		if isTerminating(pod) {
			p.blocked = !p.parallel
			if p.blocked {
				p.waitFor, p.waitName = pod, pod.Name
			}
			continue
		}
		p.act(Action{Type: ActionDelete, Ordinal: ordinal.Of(p.in.SetName, pod.Name), Pod: pod.Name, Reason: ReasonCondemned})
		p.blocked = !p.parallel
	}
}

// toUpdate are the ordinals the rolling update still has to move, highest first.
func (p *planner) toUpdate() []int {
	var out []int
	if !p.rollingUpdate {
		return nil
	}
	for ord := p.replicas - 1; ord >= p.partition; ord-- {
		if pod := p.slots[ord]; pod != nil && !isTerminating(pod) && !isFailedOrSucceeded(pod) && !p.acted[ord] && PodRevision(pod) != p.in.UpdateRevision {
			out = append(out, ord)
		}
	}
	return out
}

// unavailablePods describes the pods that use up the budget.
func (p *planner) unavailablePods() (names []string, anyStuck bool) {
	note := func(name string, pod *corev1.Pod) {
		names = append(names, name+" ("+podProblem(pod, p.minReady, p.in.Now)+")")
		anyStuck = anyStuck || stuck(pod)
	}
	for ord := 0; ord < p.replicas; ord++ {
		if pod := p.slots[ord]; !p.available(pod) {
			note(PodName(p.in.SetName, ord), pod)
		}
	}
	for _, pod := range p.condemned {
		if !p.available(pod) {
			note(pod.Name, pod)
		}
	}
	return names, anyStuck
}

// rollUpdate is phase 3: the rolling update under the budget, unless OrderedReady waits, the
// update is paused or the strategy is OnDelete.
func (p *planner) rollUpdate() {
	in, plan := p.in, p.plan
	toUpdate := p.toUpdate()
	switch {
	case !p.rollingUpdate || in.CurrentRevision == "" && in.UpdateRevision == "":
		return
	case p.blocked && p.waitName != "" && (len(toUpdate) > 0 || len(plan.Actions) == 0):
		plan.Waiting = &Wait{Reason: WaitPod, Pods: []string{p.waitName}, Stuck: stuck(p.waitFor),
			Message: fmt.Sprintf("OrderedReady: waiting for pod %s (%s)", p.waitName, podProblem(p.waitFor, p.minReady, in.Now))}
		return
	case p.blocked:
		return
	case p.paused:
		if len(toUpdate) > 0 {
			names := make([]string, len(toUpdate))
			for i, ord := range toUpdate {
				names[i] = PodName(in.SetName, ord)
			}
			plan.Waiting = &Wait{Reason: WaitPaused, Pods: names,
				Message: fmt.Sprintf("paused: %d pods not at revision %s: %s", len(names), in.UpdateRevision, strings.Join(names, ", "))}
		}
		return
	}
	budget := plan.MaxUnavailable - plan.Unavailable
	for _, ord := range toUpdate {
		if budget <= 0 {
			names, anyStuck := p.unavailablePods()
			plan.Waiting = &Wait{Reason: WaitBudget, Pods: names, Stuck: anyStuck,
				Message: fmt.Sprintf("maxUnavailable %d reached, %d pods left to update; unavailable: %s", plan.MaxUnavailable, len(toUpdate), strings.Join(names, ", "))}
			break
		}
		budget--
		p.act(p.update(ord, p.slots[ord], ReasonUpdate))
	}
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
