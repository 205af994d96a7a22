// Package bgppeerspec is the one reading of a BGPPeer's spec that both sides need: whether it
// names a usable peer (Usable), its timers — hold time, graceful restart — and the rule that a dead node's routes must leave a peer before node failover moves the
// node's ranges. The node agent's speaker (cni/agent/bgp) and the controller-manager's BGPPeer
// status (controllers/pkg/bgppeer) both use it; it imports no BGP implementation, so the
// controller-manager links none.
package bgppeerspec

import (
	"fmt"
	"net/netip"
	"time"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// The defaults of BGPConfiguration and BGPPeer (their field docs say the same).
const (
	DefaultHoldTime    = 9 * time.Second
	DefaultKeepalive   = 3 * time.Second
	DefaultRestartTime = 120 * time.Second
)

// HoldTime is a peer's hold time in effect: its own, else the configuration's, else 9s.
func HoldTime(cfg *jkev1.BGPConfigurationSpec, peer *jkev1.BGPPeerSpec) time.Duration {
	switch {
	case peer != nil && peer.HoldTime != nil:
		return peer.HoldTime.Duration
	case cfg != nil && cfg.HoldTime != nil:
		return cfg.HoldTime.Duration
	}
	return DefaultHoldTime
}

// GracefulRestart is a peer's graceful restart in effect: the peer's setting replaces the
// configuration's; off and 120s unless set.
func GracefulRestart(cfg *jkev1.BGPConfigurationSpec, peer *jkev1.BGPPeerSpec) (on bool, restartTime time.Duration) {
	var gr *jkev1.BGPGracefulRestart
	if cfg != nil {
		gr = cfg.GracefulRestart
	}
	if peer != nil && peer.GracefulRestart != nil {
		gr = peer.GracefulRestart
	}
	restartTime = DefaultRestartTime
	if gr != nil {
		on = gr.Enabled != nil && *gr.Enabled
		if gr.RestartTime != nil {
			restartTime = gr.RestartTime.Duration
		}
	}
	return on, restartTime
}

// HoldTimeSafe says whether a dead node's routes leave the peer (its hold timer expires)
// before node failover moves the node's ranges (the failover window): otherwise, between the
// move and the expiry, the peer still sends traffic for the moved ranges to the dead node.
// With graceful restart on, the routes stay restartTime longer.
func HoldTimeSafe(hold time.Duration, gracefulRestart bool, restartTime, failoverWindow time.Duration) (bool, string) {
	stay := hold
	if gracefulRestart {
		stay += restartTime
	}
	if stay < failoverWindow {
		return true, fmt.Sprintf("a dead node's routes leave the peer within %s, before node failover moves its ranges (window %s)", stay, failoverWindow)
	}
	how := "hold time " + hold.String()
	if gracefulRestart {
		how += " plus graceful restart time " + restartTime.String()
	}
	return false, fmt.Sprintf("%s is not shorter than the node-failover window %s: a dead node's routes stay at the peer after failover moved its ranges to a spare, and traffic to them is lost until they expire; shorten the hold time (or the restart time), or lengthen --node-failover-window", how, failoverWindow)
}

// Usable says whether spec names a peer a session can be opened to, and its address; if not,
// the error says why. The agent opens no session to such a peer and the controller-manager
// sets Accepted=False with reason InvalidPeer, for the same reasons.
func Usable(spec *jkev1.BGPPeerSpec) (netip.Addr, error) {
	addr, err := netip.ParseAddr(spec.PeerIP)
	switch {
	case err != nil || addr.IsUnspecified():
		return netip.Addr{}, fmt.Errorf("peerIP %q is not an IP address of a peer", spec.PeerIP)
	case spec.ASNumber < 1 || spec.ASNumber > 1<<32-1:
		return netip.Addr{}, fmt.Errorf("asNumber %d is outside 1-4294967295", spec.ASNumber)
	case spec.Password != nil && (spec.Password.SecretKeyRef.Name == "" || spec.Password.SecretKeyRef.Key == ""):
		return netip.Addr{}, fmt.Errorf("password.secretKeyRef needs a name and a key")
	}
	return addr.Unmap(), nil
}
