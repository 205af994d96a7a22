package nodegone

import (
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	bound := 10 * time.Minute
	cases := []struct {
		name    string
		e       Evidence
		gone    bool
		reason  string
		recheck time.Duration
	}{
		{"a Node that exists is never gone here (its fence is the taint)",
			Evidence{NodeExists: true, OperatorSaysOff: true, GoneSince: now.Add(-time.Hour)}, false, ReasonNodeExists, 0},
		{"deleted but its Lease renewed 10s ago: the kubelet runs (partitioned from nothing, Node deleted by automation)",
			Evidence{GoneSince: now.Add(-time.Hour), LeaseRenewed: now.Add(-10 * time.Second)}, false, ReasonLeaseRenewed, 30 * time.Second},
		{"a renewed Lease beats the operator's statement",
			Evidence{OperatorSaysOff: true, LeaseRenewed: now.Add(-time.Second), LeaseDuration: 40 * time.Second}, false, ReasonLeaseRenewed, 39 * time.Second},
		{"the agent still claims a block", Evidence{GoneSince: now.Add(-time.Hour), ClaimsHeld: []string{"p-10-0-0-0-24"}}, false, ReasonClaimsHeld, 0},
		{"a pod object holds an IP", Evidence{GoneSince: now.Add(-time.Hour), HoldingPods: []string{"ns/web-0"}}, false, ReasonPodsRemain, 0},
		{"the operator's statement is a fence: pod objects are then the fence's business (failover's SourceEmpty, the allocator's holders)",
			Evidence{OperatorSaysOff: true, HoldingPods: []string{"ns/web-0"}}, true, ReasonOperatorSaysOff, 0},
		{"the operator says off: gone at once", Evidence{GoneSince: now, OperatorSaysOff: true}, true, ReasonOperatorSaysOff, 0},
		{"just deleted, Lease gone with it (owner reference): wait the whole bound",
			Evidence{GoneSince: now.Add(-time.Minute)}, false, ReasonWaiting, 9 * time.Minute},
		{"not seen gone before: the bound starts now", Evidence{}, false, ReasonWaiting, bound},
		{"partitioned for an hour, deleted a minute ago: the deletion is the last sign (the old Lease proves nothing more)",
			Evidence{GoneSince: now.Add(-time.Minute), LeaseRenewed: now.Add(-time.Hour)}, false, ReasonWaiting, 9 * time.Minute},
		{"a Lease renewed after the deletion (then silent) restarts the bound",
			Evidence{GoneSince: now.Add(-time.Hour), LeaseRenewed: now.Add(-5 * time.Minute)}, false, ReasonWaiting, 5 * time.Minute},
		{"silent past the bound, nothing holds it: gone", Evidence{GoneSince: now.Add(-bound - time.Second)}, true, ReasonLeaseExpired, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.e.Node, tc.e.Now, tc.e.GoneAfter = "node-3", now, bound
			v := Decide(tc.e)
			if v.Gone != tc.gone || v.Reason != tc.reason || v.RecheckAfter != tc.recheck || v.Message == "" {
				t.Errorf("Decide = %+v, want gone=%v reason=%s recheck=%v", v, tc.gone, tc.reason, tc.recheck)
			}
		})
	}
}
