// Package bgppeer is the controller-manager's BGPPeer status controller (issue 36): it sets the
// conditions Accepted, HoldTimeSafe and SessionsEstablished of every BGPPeer from what the
// manager can see — the peer's own fields, the BGPConfiguration "default" and the nodes'
// BGPNodeStatuses (which each node's agent writes). It reads no Secret: whether a peer's
// password can be read is the agent's to say (its BGPNodeStatus carries it).
//
// Conditions is the pure decision (table-tested in plan_test.go); controller.go is the thin I/O.
package bgppeer

import (
	"fmt"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/staticip/staticip/apis/bgppeerspec"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// Reasons of the conditions.
const (
	ReasonValid              = "Valid"
	ReasonInvalidPeer        = "InvalidPeer"
	ReasonNoBGPConfiguration = "NoBGPConfiguration"
	ReasonHoldTimeSafe       = "ShorterThanFailoverWindow"
	ReasonHoldTimeUnsafe     = "NotShorterThanFailoverWindow"
	ReasonAllEstablished     = "AllEstablished"
	ReasonNotAllEstablished  = "NotAllEstablished"
	ReasonNoNodeReportsPeer  = "NoNodeReports"
)

// Conditions are the conditions a peer's status should carry, given the BGPConfiguration
// "default" (nil: none exists), the nodes' BGPNodeStatuses and the manager's node-failover window.
func Conditions(peer *jkev1.BGPPeer, cfg *jkev1.BGPConfiguration, nodes []*jkev1.BGPNodeStatus, failoverWindow time.Duration) []metav1.Condition {
	var cfgSpec *jkev1.BGPConfigurationSpec
	if cfg != nil {
		cfgSpec = &cfg.Spec
	}
	return []metav1.Condition{accepted(peer, cfg), holdTimeSafe(peer, cfgSpec, failoverWindow), sessions(peer, nodes)}
}

func accepted(peer *jkev1.BGPPeer, cfg *jkev1.BGPConfiguration) metav1.Condition {
	c := metav1.Condition{Type: jkev1.BGPPeerAccepted, Status: metav1.ConditionFalse}
	_, err := bgppeerspec.Usable(&peer.Spec)
	switch {
	case err != nil:
		c.Reason, c.Message = ReasonInvalidPeer, err.Error()
	case cfg == nil:
		c.Reason, c.Message = ReasonNoBGPConfiguration, fmt.Sprintf("no BGPConfiguration %q: the agents run no BGP speaker until it exists", jkev1.BGPConfigurationName)
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonValid, "the nodes the peer selects open a session to it"
	}
	return c
}

func holdTimeSafe(peer *jkev1.BGPPeer, cfg *jkev1.BGPConfigurationSpec, window time.Duration) metav1.Condition {
	on, restart := bgppeerspec.GracefulRestart(cfg, &peer.Spec)
	safe, msg := bgppeerspec.HoldTimeSafe(bgppeerspec.HoldTime(cfg, &peer.Spec), on, restart, window)
	if safe {
		return metav1.Condition{Type: jkev1.BGPPeerHoldTimeSafe, Status: metav1.ConditionTrue, Reason: ReasonHoldTimeSafe, Message: msg}
	}
	return metav1.Condition{Type: jkev1.BGPPeerHoldTimeSafe, Status: metav1.ConditionFalse, Reason: ReasonHoldTimeUnsafe, Message: msg}
}

// notEstablished names a node whose session is not Established, with its FSM state and the
// reason its agent gives (its Established condition: BadPeerAS, PeerNotAnswering,
// PasswordUnavailable, ...): "b (Active: PeerNotAnswering)"; the state alone when the agent
// gives none.
func notEstablished(node string, p jkev1.BGPNodePeerStatus) string {
	for _, c := range p.Conditions {
		if c.Type == jkev1.BGPNodePeerEstablished && c.Status != metav1.ConditionTrue && c.Reason != "" {
			return fmt.Sprintf("%s (%s: %s)", node, p.State, c.Reason)
		}
	}
	return fmt.Sprintf("%s (%s)", node, p.State)
}

func sessions(peer *jkev1.BGPPeer, nodes []*jkev1.BGPNodeStatus) metav1.Condition {
	var down []string
	total := 0
	for _, n := range nodes {
		for _, p := range n.Status.Peers {
			if p.Name != peer.Name {
				continue
			}
			total++
			if p.State != jkev1.BGPSessionEstablished {
				down = append(down, notEstablished(n.Name, p))
			}
		}
	}
	c := metav1.Condition{Type: jkev1.BGPPeerSessionsEstablished, Status: metav1.ConditionFalse}
	switch {
	case total == 0:
		c.Reason, c.Message = ReasonNoNodeReportsPeer, "no node's BGPNodeStatus lists this peer"
	case len(down) == 0:
		c.Status, c.Reason = metav1.ConditionTrue, ReasonAllEstablished
		c.Message = fmt.Sprintf("%d of %d selected nodes Established", total, total)
	default:
		sort.Strings(down)
		c.Reason = ReasonNotAllEstablished
		c.Message = fmt.Sprintf("%d of %d selected nodes Established; not: %s", total-len(down), total, strings.Join(down, ", "))
	}
	return c
}
