package nodefailover

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/metrics"
	"github.com/staticip/staticip/controllers/pkg/staticip"
)

// commitStep is one step of a migration after its range moves are recorded. phase: the phase
// the step reaches (the runner records it once the step is done, and skips a step whose phase
// is reached); "" for a step that runs on every pass.
type commitStep struct {
	phase jkev1alpha1.NodeFailoverPhase
	// run does the step's work; done false means wait (requeue after requeue, 0: on the next
	// event) or stop on err.
	run func(m *migration, ctx context.Context) (done bool, requeue time.Duration, err error)
}

// commitSteps are the steps after the commit, in order: move the ranges and wait for the
// target agent, wait for the routes, re-point the StaticIPs, open the spare, wait for the pods,
// complete. TestCommitStepsFollowThePhases checks the order against the API's phase list.
var commitSteps = []commitStep{
	{jkev1alpha1.FailoverRangesMoved, (*migration).moveRanges},
	{jkev1alpha1.FailoverRoutesConverged, (*migration).waitForRoutes},
	{jkev1alpha1.FailoverStaticIPsRebound, (*migration).rebind},
	{"", (*migration).openSpare},
	{jkev1alpha1.FailoverPodsRunning, (*migration).waitForPods},
	{jkev1alpha1.FailoverCompleted, (*migration).dropClaimLabel},
}

// afterCommit runs the steps after the commit (commitSteps) as far as it can now.
func (m *migration) afterCommit(ctx context.Context) (time.Duration, error) {
	for _, s := range commitSteps {
		if s.phase != "" && Reached(m.st(), s.phase) {
			continue
		}
		done, requeue, err := s.run(m, ctx)
		if !done || err != nil {
			return requeue, err
		}
		if s.phase != "" {
			m.setPhase(s.phase)
		}
	}
	m.completed()
	return 0, nil
}

// moveRanges writes the recorded range moves (after re-checking the fence) and waits until the
// target's agent reports every moved range Synced.
func (m *migration) moveRanges(ctx context.Context) (bool, time.Duration, error) {
	st := m.st()
	if err := m.recordNewRanges(ctx); err != nil {
		return false, 0, err
	}
	current := make([]*jkev1.IPRange, len(st.MovedRanges))
	decisions := make([]RangeMove, len(st.MovedRanges))
	written, toWrite := false, false
	for i, mv := range st.MovedRanges {
		r, err := m.c.ranges.Get(mv.Name)
		if apierrors.IsNotFound(err) {
			r = nil
		} else if err != nil {
			return false, 0, err
		}
		current[i], decisions[i] = r, DecideRangeMove(mv, r)
		written = written || decisions[i] == RangeDone
		toWrite = toWrite || decisions[i] == RangeWrite
	}
	mark := ""
	if toWrite {
		// The fence is the statement "this machine runs nothing": re-read it before the
		// writes that commit the move, however long ago the move was recorded.
		if ok, requeue, err := m.fenceStillHolds(ctx, written); !ok || err != nil {
			return false, requeue, err
		}
		// The route report overlaps the move: when this migration has its turn under the cap
		// (RouteReportTurns), the write that moves a range marks it report-routes too, so
		// every agent routes the range to the target and reports it while the target's agent
		// is still reserving its addresses, instead of only after RangesMoved. RoutesConverged
		// still needs both (its step runs after this one), and the pods start only after it.
		// Safe because routing to the target before it serves the range reaches nothing that
		// should be reached elsewhere: the old node is fenced (its machine is off), no pod
		// object holds an address of the range any more (SourceEmpty), and nothing of the range
		// runs on the target until the spare taint goes (after RoutesConverged): traffic to the
		// range meanwhile ends at the target unanswered, as it would at the dead node. A range
		// written without the mark (no turn yet, or a restart) is marked by waitForRoutes.
		if ok, _ := m.routeReportTurn(m.existingMoves()); ok {
			mark = m.rec.Name
		}
	}
	unsynced, changed, err := m.writeRangeMoves(ctx, current, decisions, mark)
	if err != nil {
		return false, 0, err
	}
	if len(changed) > 0 {
		msg := "IPRanges changed by someone else during the migration; not overwritten: " + strings.Join(changed, ", ")
		if st.LastError != msg {
			m.c.recorder.Event(m.rec, corev1.EventTypeWarning, ReasonRangeChanged, msg)
		}
		st.LastError = msg
		m.waiting(ReasonRangeChanged, msg)
		return false, recheck, nil
	}
	if len(unsynced) > 0 {
		m.waiting(ReasonWaitingForAgent, fmt.Sprintf("waiting for the agent of %s to report Synced for the moved ranges (it reserves every static IP first): %s", st.Target, shortList(unsynced)))
		return false, 0, nil
	}
	return true, 0, nil
}

// recordNewRanges records the move of a range that still names the failed node and has no
// recorded move (it appeared, or a status write was lost); it is written on the next pass.
func (m *migration) recordNewRanges(ctx context.Context) error {
	st := m.st()
	recorded := len(st.MovedRanges)
	for _, r := range m.owned {
		if !slices.ContainsFunc(st.MovedRanges, func(mv jkev1alpha1.MovedRange) bool { return mv.Name == r.Name }) {
			st.MovedRanges = append(st.MovedRanges, jkev1alpha1.MovedRange{Name: r.Name, CIDR: r.Spec.CIDR, FromNode: m.failedName(),
				ToNode: st.Target, OwnerGeneration: r.Spec.OwnerGeneration + 1})
		}
	}
	if len(st.MovedRanges) == recorded {
		return nil
	}
	return m.writeStatus(ctx)
}

// writeRangeMoves carries out the decisions on the recorded moves (current: each IPRange as
// cached); mark ("" for none) is set as the range's report-routes mark in the same write.
// unsynced: moved ranges the target's agent has not reported Synced; changed: ranges someone
// else changed, described.
func (m *migration) writeRangeMoves(ctx context.Context, current []*jkev1.IPRange, decisions []RangeMove, mark string) (unsynced, changed []string, err error) {
	for i, mv := range m.st().MovedRanges {
		r := current[i]
		switch decisions[i] {
		case RangeWrite:
			moved := r.DeepCopy()
			moved.Spec.Node, moved.Spec.OwnerGeneration = mv.ToNode, mv.OwnerGeneration
			if mark != "" {
				if moved.Annotations == nil {
					moved.Annotations = map[string]string{}
				}
				moved.Annotations[jkev1.AnnotationReportRoutes] = mark
			}
			// The update carries the cached resourceVersion: a stale cache that still shows
			// the old owner makes it fail with a conflict instead of bumping twice.
			updated, err := m.c.client.JkeV1().IPRanges().Update(ctx, moved, metav1.UpdateOptions{})
			if err != nil {
				return nil, nil, fmt.Errorf("move IPRange %s to %s: %w", mv.Name, mv.ToNode, err)
			}
			m.c.rangeWrites.Remember(mv.Name, updated)
			m.c.recorder.Eventf(m.rec, corev1.EventTypeNormal, "RangeMoved", "IPRange %s (%s) moved from %s to %s at owner generation %d", mv.Name, mv.CIDR, mv.FromNode, mv.ToNode, mv.OwnerGeneration)
			unsynced = append(unsynced, mv.Name)
		case RangeDone:
			if !RangeSynced(r) {
				unsynced = append(unsynced, mv.Name)
			}
		case RangeGone:
		case RangeChanged:
			changed = append(changed, fmt.Sprintf("%s (now node %q generation %d, recorded move %s->%s at %d)", mv.Name, r.Spec.Node, r.Spec.OwnerGeneration, mv.FromNode, mv.ToNode, mv.OwnerGeneration))
		}
	}
	return unsynced, changed, nil
}

// existingMoves are the recorded range moves whose IPRange still exists.
func (m *migration) existingMoves() []jkev1alpha1.MovedRange {
	var moved []jkev1alpha1.MovedRange
	for _, mv := range m.st().MovedRanges {
		if _, err := m.c.ranges.Get(mv.Name); err == nil {
			moved = append(moved, mv)
		}
	}
	return moved
}

// waitForRoutes waits until the agents of every Ready node route the moved ranges to the target.
// While it waits, the moved ranges carry jkev1.AnnotationReportRoutes (this record's name): the
// agents report their routes to marked ranges only, so that their reports stay as small as the
// moves in flight; the mark goes once every route is in place. At most
// MaxRangesReportingRoutes ranges are marked at once over all migrations: a migration whose
// ranges do not fit waits for its turn (RouteReportTurns).
func (m *migration) waitForRoutes(ctx context.Context) (bool, time.Duration, error) {
	moved := m.existingMoves()
	if ok, holders := m.routeReportTurn(moved); !ok {
		m.waiting(ReasonWaitingForRouteTurn, fmt.Sprintf("waiting for its turn to mark its %d ranges %s: other migrations mark %d (at most %d at once): %s",
			len(moved), jkev1.AnnotationReportRoutes, holders.ranges, m.c.MaxRangesReportingRoutes, shortList(holders.records)))
		// Woken by the IPRange update that removes another migration's marks; recheck in
		// case that migration goes away without one.
		return false, recheck, nil
	}
	if err := m.markReportRoutes(ctx, moved, m.rec.Name); err != nil {
		return false, 0, err
	}
	nodes, err := m.c.nodes.List(labels.Everything())
	if err != nil {
		return false, 0, err
	}
	if lagging := RoutesLagging(nodes, m.c.routeReports.of, m.failedName(), moved); len(lagging) > 0 {
		m.waiting(ReasonWaitingForRoutes, fmt.Sprintf("waiting for the agents of %d Ready nodes to route the moved ranges to %s (their route-report Leases in %s; a node without one: its Node annotation %s): %s",
			len(lagging), m.st().Target, jkev1.NamespaceRouteReports, jkev1alpha1.AnnotationIPRangesObserved, shortList(lagging)))
		return false, 0, nil
	}
	if err := m.markReportRoutes(ctx, moved, ""); err != nil {
		return false, 0, err
	}
	return true, 0, nil
}

// routeReportTurn says whether this migration may mark its moved ranges now (RouteReportTurns
// over every running migration waiting for routes), and, if not, which migrations have the turn.
func (m *migration) routeReportTurn(moved []jkev1alpha1.MovedRange) (bool, routeTurnHolders) {
	self := RouteWait{Record: m.rec.Name, Ranges: len(moved), Marked: m.marked(moved, m.rec.Name)}
	if st := m.st(); st.PhaseTime != nil {
		self.Since = st.PhaseTime.Time
	}
	waiting := []RouteWait{self}
	for _, rec := range m.c.activeRecordsNow() {
		if rec.Name == m.rec.Name || Reached(&rec.Status, jkev1alpha1.FailoverRoutesConverged) {
			continue
		}
		w := RouteWait{Record: rec.Name}
		if rec.Status.PhaseTime != nil {
			w.Since = rec.Status.PhaseTime.Time
		}
		var theirs []jkev1alpha1.MovedRange
		for _, mv := range rec.Status.MovedRanges {
			if _, err := m.c.ranges.Get(mv.Name); err == nil {
				theirs = append(theirs, mv)
			}
		}
		w.Ranges, w.Marked = len(theirs), m.marked(theirs, rec.Name)
		// A migration still moving its ranges waits for routes once it marked them with the
		// move (moveRanges), before it reaches RangesMoved: its marks count against the cap.
		if !w.Marked && !Reached(&rec.Status, jkev1alpha1.FailoverRangesMoved) {
			continue
		}
		waiting = append(waiting, w)
	}
	turns := RouteReportTurns(waiting, m.c.MaxRangesReportingRoutes)
	var holders routeTurnHolders
	for _, w := range waiting[1:] {
		if turns[w.Record] {
			holders.ranges += w.Ranges
			holders.records = append(holders.records, w.Record)
		}
	}
	slices.Sort(holders.records)
	return turns[m.rec.Name], holders
}

// routeTurnHolders: the other migrations whose ranges are (or are about to be) marked, and
// how many ranges they mark.
type routeTurnHolders struct {
	ranges  int
	records []string
}

// marked says whether any of moved carries the report-routes mark of record.
func (m *migration) marked(moved []jkev1alpha1.MovedRange, record string) bool {
	return slices.ContainsFunc(moved, func(mv jkev1alpha1.MovedRange) bool {
		r, err := m.c.ranges.Get(mv.Name)
		return err == nil && r.Annotations[jkev1.AnnotationReportRoutes] == record
	})
}

// markReportRoutes sets (value: the record's name) or removes (value "") the mark
// jkev1.AnnotationReportRoutes on the moved ranges, patching only those that differ.
func (m *migration) markReportRoutes(ctx context.Context, moved []jkev1alpha1.MovedRange, value string) error {
	for _, mv := range moved {
		r, err := m.c.ranges.Get(mv.Name)
		if err != nil || r.Annotations[jkev1.AnnotationReportRoutes] == value {
			continue
		}
		var v any = value
		if value == "" {
			v = nil // a merge patch removes the key
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{jkev1.AnnotationReportRoutes: v}}})
		if err != nil {
			return err
		}
		updated, err := m.c.client.JkeV1().IPRanges().Patch(ctx, mv.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		switch {
		case apierrors.IsNotFound(err):
			m.c.rangeWrites.Forget(mv.Name)
		case err != nil:
			return fmt.Errorf("IPRange %s: mark %s: %w", mv.Name, jkev1.AnnotationReportRoutes, err)
		default:
			m.c.rangeWrites.Remember(mv.Name, updated)
		}
	}
	return nil
}

// rebind re-points the StaticIPs at the target (after re-checking the fence) and records it.
func (m *migration) rebind(ctx context.Context) (bool, time.Duration, error) {
	if ok, requeue, err := m.fenceStillHolds(ctx, true); !ok || err != nil {
		return false, requeue, err
	}
	if err := m.rebindStaticIPs(ctx, m.existingMoves()); err != nil {
		return false, 0, err
	}
	if err := m.writeStatus(ctx); err != nil {
		return false, 0, err
	}
	return true, 0, nil
}

// openSpare removes the spare taint from the target once ranges and routes are in place, so
// the moved pods may start there. It runs on every pass and keeps the target for dropClaimLabel.
func (m *migration) openSpare(ctx context.Context) (bool, time.Duration, error) {
	target := m.st().Target
	tn, err := m.c.nodes.Get(target)
	if err != nil {
		return false, 0, fmt.Errorf("target %s: %w", target, err)
	}
	m.target = tn
	if slices.ContainsFunc(tn.Spec.Taints, func(t corev1.Taint) bool { return t.Key == jkev1alpha1.TaintSpare }) {
		taints := slices.DeleteFunc(slices.Clone(tn.Spec.Taints), func(t corev1.Taint) bool { return t.Key == jkev1alpha1.TaintSpare })
		if err := m.c.patchNode(ctx, tn, nil, taints); err != nil {
			return false, 0, fmt.Errorf("remove the spare taint from %s: %w", target, err)
		}
		m.c.recorder.Eventf(tn, corev1.EventTypeNormal, ReasonSpareReleased, "ranges and routes of %s are in place: spare taint removed, its pods may start here", m.failedName())
	}
	return true, 0, nil
}

// waitForPods waits until the pod of every moved StaticIP runs on the target with its IP; a
// pod created meanwhile still pinned to the failed node is deleted (deleteIfPinnedToFailed).
func (m *migration) waitForPods(ctx context.Context) (bool, time.Duration, error) {
	target := m.st().Target
	var missing []string
	var running []*corev1.Pod
	for _, ms := range m.st().MovedStaticIPs {
		s, err := m.c.staticIPs.StaticIPs(ms.Namespace).Get(ms.Name)
		if apierrors.IsNotFound(err) {
			continue // released meanwhile: nothing to wait for
		} else if err != nil {
			return false, 0, err
		}
		pod, err := m.c.pods.Pods(s.Namespace).Get(podName(s))
		if err == nil {
			if err := m.deleteIfPinnedToFailed(ctx, pod); err != nil {
				return false, 0, err
			}
		}
		if err != nil || pod.DeletionTimestamp != nil || pod.Spec.NodeName != target || pod.Status.Phase != corev1.PodRunning ||
			!RunsWithItsAddresses(pod, s) {
			missing = append(missing, s.Namespace+"/"+podName(s))
			continue
		}
		running = append(running, pod)
	}
	if len(missing) > 0 {
		m.waiting(ReasonWaitingForPods, fmt.Sprintf("waiting for %d pods to run on %s with their IPs: %s", len(missing), target, shortList(missing)))
		return false, 0, nil
	}
	for _, p := range running {
		m.c.recorder.Eventf(p, corev1.EventTypeNormal, ReasonPodMoved, "moved from failed node %s to %s with its IP", m.failedName(), target)
	}
	return true, 0, nil
}

// dropClaimLabel: the spare is no longer one (its taint is gone); its claim label goes too, so
// an operator who returns it to the pool only puts the taint back.
func (m *migration) dropClaimLabel(ctx context.Context) (bool, time.Duration, error) {
	if m.target.Labels[jkev1alpha1.LabelFailoverFor] != "" {
		if err := m.c.patchNode(ctx, m.target, map[string]any{"labels": map[string]any{jkev1alpha1.LabelFailoverFor: nil}}, nil); err != nil {
			return false, 0, err
		}
	}
	return true, 0, nil
}

// completed records the end of the migration: completion time, condition, metrics, Event.
func (m *migration) completed() {
	st := m.st()
	now := metav1.NewTime(m.now)
	st.CompletionTime = &now
	m.setCondition(jkev1alpha1.NodeFailoverConditionProgressing, metav1.ConditionFalse, ReasonCompleted,
		fmt.Sprintf("%d ranges and %d static IPs moved from %s to %s", len(st.MovedRanges), len(st.MovedStaticIPs), m.failedName(), st.Target))
	metrics.NodeFailoverMigrations.WithLabelValues("completed").Inc()
	if st.StartTime != nil {
		metrics.NodeFailoverStepDuration.WithLabelValues("Total").Observe(m.now.Sub(st.StartTime.Time).Seconds())
	}
	if m.node != nil {
		m.c.recorder.Eventf(m.node, corev1.EventTypeNormal, ReasonCompleted, "failover to %s completed", st.Target)
	}
}

// fenceStillHolds re-checks the fence on the Node as the API server has it now (not the cache),
// right before writes that commit a move. written: a range move was written already. A node
// that is back and un-fenced before any range was written cancels the migration (nothing
// moved); otherwise nothing is written until the node is fenced again (condition Stopped,
// reason FenceWithdrawn, and a Warning Event).
func (m *migration) fenceStillHolds(ctx context.Context, written bool) (bool, time.Duration, error) {
	st := m.st()
	node, err := m.c.kube.CoreV1().Nodes().Get(ctx, m.failedName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node = nil
	} else if err != nil {
		return false, 0, fmt.Errorf("re-read node %s before committing the move: %w", m.failedName(), err)
	}
	var since time.Time
	if st.StartTime != nil {
		since = st.StartTime.Time
	}
	rules, err := m.fenceRules(ctx, node)
	if err != nil {
		return false, 0, err
	}
	fence := Fencing(node, since, m.now, rules)
	switch CheckCommit(fence, written) {
	case CommitProceed:
		if c := meta.FindStatusCondition(st.Conditions, jkev1alpha1.NodeFailoverConditionStopped); c != nil && c.Reason == ReasonFenceWithdrawn {
			m.setCondition(jkev1alpha1.NodeFailoverConditionStopped, metav1.ConditionFalse, ReasonFenced, fence.Message)
			m.setCondition(jkev1alpha1.NodeFailoverConditionFenced, metav1.ConditionTrue, ReasonFenced, fence.Message)
		}
		return true, 0, nil
	case CommitCancel:
		m.node = node
		m.c.recorder.Eventf(m.rec, corev1.EventTypeNormal, ReasonCancelled, "failover cancelled before any range was written: %s", fence.Message)
		return false, 0, m.cancel(ctx, fence.Message+" (re-checked before writing the recorded range moves; none had been written)")
	}
	what := "no recorded range move was written yet"
	if written {
		what = "some ranges were moved already"
	}
	msg := fmt.Sprintf("node %s is no longer fenced (%s) and %s: nothing more is written until it is fenced again. "+
		"Fence it again (out-of-service taint, machine off) to finish, or abandon the migration by hand (controllers/README.md, \"Recovering\")",
		m.failedName(), fence.Message, what)
	if m.became(jkev1alpha1.NodeFailoverConditionStopped, metav1.ConditionTrue, ReasonFenceWithdrawn) {
		m.c.recorder.Event(m.rec, corev1.EventTypeWarning, ReasonFenceWithdrawn, msg)
		if node != nil {
			m.c.recorder.Event(node, corev1.EventTypeWarning, ReasonFenceWithdrawn, msg)
		}
		m.logger.Info("Fence withdrawn mid-migration: holding", "written", written)
	}
	m.setCondition(jkev1alpha1.NodeFailoverConditionStopped, metav1.ConditionTrue, ReasonFenceWithdrawn, msg)
	m.setCondition(jkev1alpha1.NodeFailoverConditionFenced, metav1.ConditionFalse, fence.Reason, fence.Message)
	m.waiting(ReasonFenceWithdrawn, msg)
	requeue := fence.RecheckAfter
	if requeue <= 0 {
		requeue = recheck
	}
	return false, requeue, nil
}

// rebindStaticIPs points every moving StaticIP at the target, and deletes pods that the
// workload controllers created meanwhile pinned (node affinity, immutable) to the failed node:
// they are recreated pinned to the target.
func (m *migration) rebindStaticIPs(ctx context.Context, moved []jkev1alpha1.MovedRange) error {
	st := m.st()
	cidrs := make([]string, 0, len(moved))
	for _, mv := range moved {
		cidrs = append(cidrs, mv.CIDR)
	}
	current, err := m.c.staticIPsOf(m.failedName(), ParsePrefixes(cidrs))
	if err != nil {
		return err
	}
	for _, s := range current { // records that appeared after the target was reserved
		if !slices.ContainsFunc(st.MovedStaticIPs, func(ms jkev1alpha1.MovedStaticIP) bool { return ms.Namespace == s.Namespace && ms.Name == s.Name }) {
			st.MovedStaticIPs = append(st.MovedStaticIPs, jkev1alpha1.MovedStaticIP{Namespace: s.Namespace, Name: s.Name, IP: s.Spec.IP, FromNode: s.Spec.Node})
		}
	}
	// Each record is its own write (resourceVersion-guarded): they go out in parallel, each
	// goroutine touching only its own element of MovedStaticIPs.
	return forEachParallel(ctx, len(st.MovedStaticIPs), func(ctx context.Context, i int) error {
		ms := &st.MovedStaticIPs[i]
		s, err := m.c.staticIPs.StaticIPs(ms.Namespace).Get(ms.Name)
		if apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return err
		}
		if s.Spec.Node != st.Target {
			cp := s.DeepCopy()
			cp.Spec.Node = st.Target
			if _, err := m.c.client.JkeV1().StaticIPs(cp.Namespace).Update(ctx, cp, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("re-point StaticIP %s/%s to %s: %w", cp.Namespace, cp.Name, st.Target, err)
			}
		}
		ms.Rebound = true
		pod, err := m.c.pods.Pods(s.Namespace).Get(podName(s))
		if err != nil {
			return nil
		}
		return m.deleteIfPinnedToFailed(ctx, pod)
	})
}

// deleteIfPinnedToFailed deletes pod (UID precondition) when it is pending and pinned to the
// failed node by a required node affinity: it was created from its StaticIP before the record
// named the target, and can never run. Its workload recreates it pinned to the target. The
// rebind pass does it for the pods it finds; waitForPods for those created later by a workload
// controller whose StaticIP cache had not seen the rebind yet (else such a pod stays Pending
// and the failover waits for it forever).
func (m *migration) deleteIfPinnedToFailed(ctx context.Context, pod *corev1.Pod) error {
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || !staticip.NodeAffinityRequired(pod, m.failedName()) {
		return nil
	}
	uid := pod.UID
	err := m.c.kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("delete pending pod %s/%s pinned to %s: %w", pod.Namespace, pod.Name, m.failedName(), err)
	}
	m.c.recorder.Eventf(pod, corev1.EventTypeNormal, ReasonPodRecreate, "pending pod pinned to failed node %s deleted: its workload recreates it on %s", m.failedName(), m.st().Target)
	return nil
}

func podName(s *jkev1.StaticIP) string {
	if s.Spec.Pod != "" {
		return s.Spec.Pod
	}
	return s.Name
}
