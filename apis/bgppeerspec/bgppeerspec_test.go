package bgppeerspec

import (
	"net/netip"
	"strings"
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

// TestUsable: which peers a session can be opened to; the agent and the controller-manager's
// Accepted condition both decide by it.
func TestUsable(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec jkev1.BGPPeerSpec
		want string // the address, or a part of the error (not an IP address)
	}{
		{name: "IPv4", spec: jkev1.BGPPeerSpec{PeerIP: "192.168.1.1", ASNumber: 65000}, want: "192.168.1.1"},
		{name: "IPv6", spec: jkev1.BGPPeerSpec{PeerIP: "fd00:1::1", ASNumber: 4294967295}, want: "fd00:1::1"},
		{name: "IPv4-mapped IPv6 is the IPv4 peer", spec: jkev1.BGPPeerSpec{PeerIP: "::ffff:192.168.1.1", ASNumber: 1}, want: "192.168.1.1"},
		{name: "a name", spec: jkev1.BGPPeerSpec{PeerIP: "router1", ASNumber: 65000}, want: `peerIP "router1"`},
		{name: "unspecified", spec: jkev1.BGPPeerSpec{PeerIP: "0.0.0.0", ASNumber: 65000}, want: `peerIP "0.0.0.0"`},
		{name: "AS 0", spec: jkev1.BGPPeerSpec{PeerIP: "192.168.1.1"}, want: "asNumber 0"},
		{name: "AS beyond 32 bits", spec: jkev1.BGPPeerSpec{PeerIP: "192.168.1.1", ASNumber: 1 << 32}, want: "asNumber 4294967296"},
		{name: "a password without a key", spec: jkev1.BGPPeerSpec{PeerIP: "192.168.1.1", ASNumber: 65000,
			Password: &jkev1.BGPPassword{SecretKeyRef: jkev1.BGPSecretKeyRef{Name: "s"}}}, want: "secretKeyRef"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, err := Usable(&tc.spec)
			got := addr.String()
			if err != nil {
				got = err.Error()
			}
			_, wantAddr := netip.ParseAddr(tc.want)
			if !strings.Contains(got, tc.want) || (err == nil) != (wantAddr == nil) {
				t.Errorf("Usable = %q, want %q", got, tc.want)
			}
		})
	}
}
