package nodefailover

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
)

// TestOnlyProgressMessageChanged: only a new message of the same wait is held back.
func TestOnlyProgressMessageChanged(t *testing.T) {
	st := func(phase jkev1alpha1.NodeFailoverPhase, reason, msg string) jkev1alpha1.NodeFailoverStatus {
		return jkev1alpha1.NodeFailoverStatus{Phase: phase, Conditions: []metav1.Condition{
			{Type: jkev1alpha1.NodeFailoverConditionProgressing, Status: metav1.ConditionTrue, Reason: reason, Message: msg}}}
	}
	for _, tt := range []struct {
		name     string
		old, cur jkev1alpha1.NodeFailoverStatus
		want     bool
	}{
		{"fewer agents lagging", st("RangesMoved", ReasonWaitingForRoutes, "12 lag"), st("RangesMoved", ReasonWaitingForRoutes, "3 lag"), true},
		{"same", st("RangesMoved", ReasonWaitingForRoutes, "3 lag"), st("RangesMoved", ReasonWaitingForRoutes, "3 lag"), false},
		{"another wait", st("RangesMoved", ReasonWaitingForRoutes, "3 lag"), st("RangesMoved", ReasonWaitingForRouteTurn, "turn"), false},
		{"a phase reached", st("RangesMoved", ReasonWaitingForRoutes, "3 lag"), st("RoutesConverged", ReasonWaitingForRoutes, "1 lag"), false},
		{"no condition before", jkev1alpha1.NodeFailoverStatus{Phase: "RangesMoved"}, st("RangesMoved", ReasonWaitingForRoutes, "1 lag"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := OnlyProgressMessageChanged(tt.old, tt.cur); got != tt.want {
				t.Errorf("OnlyProgressMessageChanged = %v, want %v", got, tt.want)
			}
		})
	}
}
