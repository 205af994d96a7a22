package bench

import (
	"fmt"
	"time"

	"github.com/staticip/staticip/apis/ordinal"
)

// podLife is what the watch showed of one pod (one UID) during a rollout, as the times the
// benchmark saw each step. A zero time means the step was not seen.
type podLife struct {
	Name string
	// Old: the pod existed when the rollout started.
	Old bool
	// Created: first seen (new pods only).
	Created time.Time
	// Deleting: first seen with a deletionTimestamp.
	Deleting time.Time
	// Gone: its delete event.
	Gone time.Time
	// Patched: first seen with the new image in its spec while it had the old one before
	// (an in-place update).
	Patched time.Time
	// Scheduled: first seen with a node (new pods only); Addressed: first seen with a pod IP,
	// i.e. the sandbox and the CNI ADD are done (new pods only).
	Scheduled, Addressed time.Time
	// Running: first seen running the new image in every container (the kubelet's status
	// after the container started; for an in-place update, the restarted container).
	Running time.Time
	// Ready: first seen Ready and running the new image.
	Ready time.Time
}

// Phases is where the time of a rollout went, as medians over pods.
type Phases struct {
	// Recreated and InPlace count the ordinals updated each way.
	Recreated, InPlace int
	// DeleteToGone: old pod marked for deletion → its object gone (kubelet stops it, the API
	// server removes it).
	DeleteToGone time.Duration
	// GoneToCreate: old pod gone → the controller's new pod with that name appears.
	GoneToCreate time.Duration
	// CreateToReady: new pod appears → Ready with the new image (scheduling, sandbox,
	// container start, first successful probe).
	CreateToReady time.Duration
	// The steps of CreateToReady, as medians over the pods that showed every step:
	// created → scheduled (the scheduler's binding), scheduled → addressed (the kubelet's
	// sandbox and CNI ADD), addressed → running the new image, running → Ready (the first
	// successful readiness probe, then the kubelet's status write).
	CreateToScheduled, ScheduledToAddressed, AddressedToRunning, RunningToReady time.Duration
	// PatchToReady: in-place patch → Ready with the new image; PatchToRunning and
	// InPlaceRunningToReady split it where the restarted container is first seen running
	// (the rest is the readiness probe and the InPlaceUpdateReady gate's round trips).
	PatchToReady, PatchToRunning, InPlaceRunningToReady time.Duration
	// PerPod: the first step of an ordinal's update (deletion or patch) → its pod Ready with
	// the new image.
	PerPod time.Duration
	// ReadyToNextStart: a pod Ready with the new image → the next ordinal's update starts
	// (deletion or patch), median over the updates that started after some pod was Ready.
	// Under a budget this is the controller's reaction time: how long a freed slot stays idle.
	ReadyToNextStart time.Duration
	// Concurrency: the sum of all ordinals' update times divided by the rollout's time, i.e.
	// how many pods were being updated at once on average.
	Concurrency float64
}

// Breakdown computes the phases of a rollout of length rollout from the pods' lives.
func Breakdown(setName string, lives []podLife, rollout time.Duration) Phases {
	type ordinalLife struct{ old, new *podLife }
	byOrdinal := map[int]*ordinalLife{}
	for i := range lives {
		l := &lives[i]
		n := ordinal.Of(setName, l.Name)
		if n < 0 {
			continue
		}
		o := byOrdinal[n]
		if o == nil {
			o = &ordinalLife{}
			byOrdinal[n] = o
		}
		if l.Old {
			o.old = l
		} else {
			o.new = l
		}
	}
	var ph Phases
	var deleteToGone, goneToCreate, createToReady, patchToReady, perPod []time.Duration
	var toScheduled, toAddressed, toRunning, runningToReady, patchToRunning, inPlaceRunningToReady []time.Duration
	var total time.Duration
	var starts, readies []time.Time
	for _, o := range byOrdinal {
		switch {
		case o.old != nil && !o.old.Patched.IsZero():
			starts = append(starts, o.old.Patched)
		case o.old != nil && !o.old.Deleting.IsZero():
			starts = append(starts, o.old.Deleting)
		}
		switch {
		case o.new != nil && !o.new.Ready.IsZero():
			readies = append(readies, o.new.Ready)
		case o.old != nil && !o.old.Patched.IsZero() && !o.old.Ready.IsZero():
			readies = append(readies, o.old.Ready)
		}
	}
	ph.ReadyToNextStart = Median(reactionTimes(starts, readies))
	for _, o := range byOrdinal {
		switch {
		case o.old != nil && !o.old.Patched.IsZero() && !o.old.Ready.IsZero():
			ph.InPlace++
			patchToReady = append(patchToReady, o.old.Ready.Sub(o.old.Patched))
			if r := o.old.Running; !r.IsZero() && !r.Before(o.old.Patched) && !r.After(o.old.Ready) {
				patchToRunning = append(patchToRunning, r.Sub(o.old.Patched))
				inPlaceRunningToReady = append(inPlaceRunningToReady, o.old.Ready.Sub(r))
			}
			perPod = append(perPod, o.old.Ready.Sub(o.old.Patched))
			total += o.old.Ready.Sub(o.old.Patched)
		case o.old != nil && o.new != nil && !o.old.Deleting.IsZero() && !o.new.Ready.IsZero():
			ph.Recreated++
			if !o.old.Gone.IsZero() {
				deleteToGone = append(deleteToGone, o.old.Gone.Sub(o.old.Deleting))
				goneToCreate = append(goneToCreate, o.new.Created.Sub(o.old.Gone))
			}
			createToReady = append(createToReady, o.new.Ready.Sub(o.new.Created))
			if n := o.new; stepsInOrder(n.Created, n.Scheduled, n.Addressed, n.Running, n.Ready) {
				toScheduled = append(toScheduled, n.Scheduled.Sub(n.Created))
				toAddressed = append(toAddressed, n.Addressed.Sub(n.Scheduled))
				toRunning = append(toRunning, n.Running.Sub(n.Addressed))
				runningToReady = append(runningToReady, n.Ready.Sub(n.Running))
			}
			perPod = append(perPod, o.new.Ready.Sub(o.old.Deleting))
			total += o.new.Ready.Sub(o.old.Deleting)
		}
	}
	ph.DeleteToGone = Median(deleteToGone)
	ph.GoneToCreate = Median(goneToCreate)
	ph.CreateToReady = Median(createToReady)
	ph.PatchToReady = Median(patchToReady)
	ph.CreateToScheduled, ph.ScheduledToAddressed = Median(toScheduled), Median(toAddressed)
	ph.AddressedToRunning, ph.RunningToReady = Median(toRunning), Median(runningToReady)
	ph.PatchToRunning, ph.InPlaceRunningToReady = Median(patchToRunning), Median(inPlaceRunningToReady)
	ph.PerPod = Median(perPod)
	if rollout > 0 {
		ph.Concurrency = float64(total) / float64(rollout)
	}
	return ph
}

// stepsInOrder says whether every step was seen and none before the one ahead of it (the
// watch can show two steps in one event: equal times are in order).
func stepsInOrder(steps ...time.Time) bool {
	for i, t := range steps {
		if t.IsZero() || i > 0 && t.Before(steps[i-1]) {
			return false
		}
	}
	return true
}

// reactionTimes: for each start, the time since the latest ready before it (starts with no
// ready before them, the first wave, have none).
func reactionTimes(starts, readies []time.Time) []time.Duration {
	var out []time.Duration
	for _, s := range starts {
		var latest time.Time
		for _, r := range readies {
			if r.Before(s) && r.After(latest) {
				latest = r
			}
		}
		if !latest.IsZero() {
			out = append(out, s.Sub(latest))
		}
	}
	return out
}

func (ph Phases) String() string {
	ms := func(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
	s := fmt.Sprintf("per pod %s (median), %.1f pods in flight on average, ready→next start %s", ms(ph.PerPod), ph.Concurrency, ms(ph.ReadyToNextStart))
	if ph.Recreated > 0 {
		s += fmt.Sprintf("; %d recreated: delete→gone %s, gone→created %s, created→ready %s (→scheduled %s, →IP %s, →running %s, →ready %s)",
			ph.Recreated, ms(ph.DeleteToGone), ms(ph.GoneToCreate), ms(ph.CreateToReady),
			ms(ph.CreateToScheduled), ms(ph.ScheduledToAddressed), ms(ph.AddressedToRunning), ms(ph.RunningToReady))
	}
	if ph.InPlace > 0 {
		s += fmt.Sprintf("; %d in place: patch→ready %s (→running %s, →ready %s)", ph.InPlace, ms(ph.PatchToReady),
			ms(ph.PatchToRunning), ms(ph.InPlaceRunningToReady))
	}
	return s
}
