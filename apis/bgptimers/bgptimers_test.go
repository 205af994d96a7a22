package bgptimers

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

func TestHoldTimeSafe(t *testing.T) {
	for _, tc := range []struct {
		hold, restart time.Duration
		gr            bool
		window        time.Duration
		want          bool
	}{
		{hold: 9 * time.Second, window: 2 * time.Minute, want: true},
		{hold: 90 * time.Second, window: 2 * time.Minute, want: true},
		{hold: 180 * time.Second, window: 2 * time.Minute, want: false},
		{hold: 120 * time.Second, window: 2 * time.Minute, want: false}, // not shorter
		{hold: 9 * time.Second, gr: true, restart: 120 * time.Second, window: 2 * time.Minute, want: false},
		{hold: 9 * time.Second, gr: true, restart: 60 * time.Second, window: 2 * time.Minute, want: true},
	} {
		ok, msg := HoldTimeSafe(tc.hold, tc.gr, tc.restart, tc.window)
		if ok != tc.want || msg == "" {
			t.Errorf("HoldTimeSafe(%s, gr %v %s, window %s) = %v %q, want %v", tc.hold, tc.gr, tc.restart, tc.window, ok, msg, tc.want)
		}
	}
}

// The peer's timers replace the configuration's, which replace the defaults; a peer's
// graceful restart block replaces the configuration's whole (its restart time too).
func TestTimersInEffect(t *testing.T) {
	d := func(x time.Duration) *metav1.Duration { return &metav1.Duration{Duration: x} }
	yes := true
	cfg := &jkev1.BGPConfigurationSpec{HoldTime: d(6 * time.Second), GracefulRestart: &jkev1.BGPGracefulRestart{Enabled: &yes, RestartTime: d(30 * time.Second)}}
	if got := HoldTime(nil, nil); got != DefaultHoldTime {
		t.Errorf("HoldTime(nil, nil) = %s, want %s", got, DefaultHoldTime)
	}
	if got := HoldTime(cfg, &jkev1.BGPPeerSpec{}); got != 6*time.Second {
		t.Errorf("HoldTime from the configuration = %s, want 6s", got)
	}
	if got := HoldTime(cfg, &jkev1.BGPPeerSpec{HoldTime: d(3 * time.Second)}); got != 3*time.Second {
		t.Errorf("HoldTime of the peer = %s, want 3s", got)
	}
	if on, rt := GracefulRestart(nil, nil); on || rt != DefaultRestartTime {
		t.Errorf("GracefulRestart(nil, nil) = %v %s, want off %s", on, rt, DefaultRestartTime)
	}
	if on, rt := GracefulRestart(cfg, &jkev1.BGPPeerSpec{}); !on || rt != 30*time.Second {
		t.Errorf("GracefulRestart from the configuration = %v %s, want on 30s", on, rt)
	}
	if on, rt := GracefulRestart(cfg, &jkev1.BGPPeerSpec{GracefulRestart: &jkev1.BGPGracefulRestart{}}); on || rt != DefaultRestartTime {
		t.Errorf("the peer's empty block = %v %s, want off %s (it replaces the configuration's)", on, rt, DefaultRestartTime)
	}
}
