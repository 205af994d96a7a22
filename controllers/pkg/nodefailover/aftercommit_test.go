package nodefailover

import (
	"slices"
	"testing"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
)

// TestCommitStepsFollowThePhases: the steps after the commit reach, in the API's order, every
// phase after TargetReserved exactly once, and end at Completed.
func TestCommitStepsFollowThePhases(t *testing.T) {
	var got []jkev1alpha1.NodeFailoverPhase
	for _, s := range commitSteps {
		if s.run == nil {
			t.Errorf("step %q has no run", s.phase)
		}
		if s.phase != "" {
			got = append(got, s.phase)
		}
	}
	all := jkev1alpha1.NodeFailoverPhases
	want := all[slices.Index(all, jkev1alpha1.FailoverTargetReserved)+1:]
	if !slices.Equal(got, want) {
		t.Errorf("commit steps reach %v; want %v (the phases after TargetReserved, in order)", got, want)
	}
	if got[len(got)-1] != jkev1alpha1.FailoverCompleted {
		t.Errorf("last step reaches %q, want Completed", got[len(got)-1])
	}
}
