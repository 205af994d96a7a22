package bgppeer

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

func TestConditions(t *testing.T) {
	dur := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	on := true
	peer := func(mut func(*jkev1.BGPPeer)) *jkev1.BGPPeer {
		p := &jkev1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "tor"}, Spec: jkev1.BGPPeerSpec{PeerIP: "10.0.0.1", ASNumber: 65000}}
		if mut != nil {
			mut(p)
		}
		return p
	}
	cfg := &jkev1.BGPConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: jkev1.BGPConfigurationSpec{ASNumber: 64512}}
	node := func(name string, states ...jkev1.BGPSessionState) *jkev1.BGPNodeStatus {
		n := &jkev1.BGPNodeStatus{ObjectMeta: metav1.ObjectMeta{Name: name}}
		for _, s := range states {
			n.Status.Peers = append(n.Status.Peers, jkev1.BGPNodePeerStatus{Name: "tor", State: s})
		}
		n.Status.Peers = append(n.Status.Peers, jkev1.BGPNodePeerStatus{Name: "other", State: jkev1.BGPSessionIdle})
		return n
	}
	type want struct {
		status      metav1.ConditionStatus
		reason, msg string
	}
	cases := []struct {
		name                     string
		peer                     *jkev1.BGPPeer
		cfg                      *jkev1.BGPConfiguration
		nodes                    []*jkev1.BGPNodeStatus
		window                   time.Duration
		accepted, hold, sessions want
	}{
		{name: "valid, default hold 9s < 40s, all established", peer: peer(nil), cfg: cfg, window: 40 * time.Second,
			nodes:    []*jkev1.BGPNodeStatus{node("a", jkev1.BGPSessionEstablished), node("b", jkev1.BGPSessionEstablished)},
			accepted: want{metav1.ConditionTrue, ReasonValid, ""}, hold: want{metav1.ConditionTrue, ReasonHoldTimeSafe, "within 9s"},
			sessions: want{metav1.ConditionTrue, ReasonAllEstablished, "2 of 2 selected nodes Established"}},
		{name: "no BGPConfiguration; one node Active", peer: peer(nil), window: 40 * time.Second,
			nodes:    []*jkev1.BGPNodeStatus{node("b", jkev1.BGPSessionActive), node("a", jkev1.BGPSessionEstablished), node("c")},
			accepted: want{metav1.ConditionFalse, ReasonNoBGPConfiguration, "no BGPConfiguration"}, hold: want{metav1.ConditionTrue, ReasonHoldTimeSafe, ""},
			sessions: want{metav1.ConditionFalse, ReasonNotAllEstablished, "1 of 2 selected nodes Established; not: b (Active)"}},
		{name: "bad IP, no node reports it", peer: peer(func(p *jkev1.BGPPeer) { p.Spec.PeerIP = "10.0.0.300" }), cfg: cfg, window: 40 * time.Second,
			accepted: want{metav1.ConditionFalse, ReasonInvalidPeer, "peerIP"}, hold: want{metav1.ConditionTrue, ReasonHoldTimeSafe, ""},
			sessions: want{metav1.ConditionFalse, ReasonNoNodeReportsPeer, ""}},
		{name: "bad ASN", peer: peer(func(p *jkev1.BGPPeer) { p.Spec.ASNumber = 0 }), cfg: cfg, window: 40 * time.Second,
			accepted: want{metav1.ConditionFalse, ReasonInvalidPeer, "asNumber 0"}, hold: want{metav1.ConditionTrue, "", ""},
			sessions: want{metav1.ConditionFalse, ReasonNoNodeReportsPeer, ""}},
		{name: "password ref without key", peer: peer(func(p *jkev1.BGPPeer) {
			p.Spec.Password = &jkev1.BGPPassword{SecretKeyRef: jkev1.BGPSecretKeyRef{Name: "s"}}
		}), cfg: cfg, window: 40 * time.Second,
			accepted: want{metav1.ConditionFalse, ReasonInvalidPeer, "secretKeyRef"}, hold: want{metav1.ConditionTrue, "", ""},
			sessions: want{metav1.ConditionFalse, "", ""}},
		{name: "configuration's hold 60s not shorter than 40s", peer: peer(nil), window: 40 * time.Second,
			cfg:      &jkev1.BGPConfiguration{Spec: jkev1.BGPConfigurationSpec{ASNumber: 1, HoldTime: dur(60 * time.Second)}},
			accepted: want{metav1.ConditionTrue, "", ""}, hold: want{metav1.ConditionFalse, ReasonHoldTimeUnsafe, "hold time 1m0s"},
			sessions: want{metav1.ConditionFalse, "", ""}},
		{name: "peer's own hold 30s wins over configuration's 60s", peer: peer(func(p *jkev1.BGPPeer) { p.Spec.HoldTime = dur(30 * time.Second) }), window: 40 * time.Second,
			cfg:      &jkev1.BGPConfiguration{Spec: jkev1.BGPConfigurationSpec{ASNumber: 1, HoldTime: dur(60 * time.Second)}},
			accepted: want{metav1.ConditionTrue, "", ""}, hold: want{metav1.ConditionTrue, ReasonHoldTimeSafe, "within 30s"},
			sessions: want{metav1.ConditionFalse, "", ""}},
		{name: "graceful restart on at the configuration adds its default 120s", peer: peer(nil), window: 40 * time.Second,
			cfg:      &jkev1.BGPConfiguration{Spec: jkev1.BGPConfigurationSpec{ASNumber: 1, GracefulRestart: &jkev1.BGPGracefulRestart{Enabled: &on}}},
			accepted: want{metav1.ConditionTrue, "", ""}, hold: want{metav1.ConditionFalse, ReasonHoldTimeUnsafe, "graceful restart time 2m0s"},
			sessions: want{metav1.ConditionFalse, "", ""}},
		{name: "peer's graceful restart with a short restart time", peer: peer(func(p *jkev1.BGPPeer) {
			p.Spec.GracefulRestart = &jkev1.BGPGracefulRestart{Enabled: &on, RestartTime: dur(10 * time.Second)}
		}), cfg: cfg, window: 40 * time.Second,
			accepted: want{metav1.ConditionTrue, "", ""}, hold: want{metav1.ConditionTrue, ReasonHoldTimeSafe, "within 19s"},
			sessions: want{metav1.ConditionFalse, "", ""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Conditions(tc.peer, tc.cfg, tc.nodes, tc.window)
			if len(got) != 3 {
				t.Fatalf("got %d conditions, want 3", len(got))
			}
			for i, w := range []struct {
				typ string
				want
			}{{jkev1.BGPPeerAccepted, tc.accepted}, {jkev1.BGPPeerHoldTimeSafe, tc.hold}, {jkev1.BGPPeerSessionsEstablished, tc.sessions}} {
				c := got[i]
				if c.Type != w.typ || c.Status != w.status || (w.reason != "" && c.Reason != w.reason) || !strings.Contains(c.Message, w.msg) || c.Reason == "" {
					t.Errorf("%s: got %s/%s %q, want %s/%s containing %q", w.typ, c.Type, c.Status, c.Reason+": "+c.Message, w.status, w.reason, w.msg)
				}
			}
		})
	}
}

// TestSessionsEstablishedNamesEachNodesReason: the SessionsEstablished message names every node
// whose session is not Established with its state and the reason from its BGPNodeStatus.
func TestSessionsEstablishedNamesEachNodesReason(t *testing.T) {
	peer := &jkev1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "tor"}, Spec: jkev1.BGPPeerSpec{PeerIP: "10.0.0.1", ASNumber: 65000}}
	node := func(name string, state jkev1.BGPSessionState, status metav1.ConditionStatus, reason string) *jkev1.BGPNodeStatus {
		p := jkev1.BGPNodePeerStatus{Name: "tor", State: state}
		if reason != "" {
			p.Conditions = []metav1.Condition{{Type: jkev1.BGPPeerHoldTimeSafe, Status: metav1.ConditionFalse, Reason: "NotTheOneAsked"},
				{Type: jkev1.BGPNodePeerEstablished, Status: status, Reason: reason}}
		}
		return &jkev1.BGPNodeStatus{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: jkev1.BGPNodeStatusStatus{Peers: []jkev1.BGPNodePeerStatus{p}}}
	}
	for _, tc := range []struct {
		name  string
		nodes []*jkev1.BGPNodeStatus
		want  string
	}{
		{"each node's reason, nodes by name", []*jkev1.BGPNodeStatus{
			node("c", jkev1.BGPSessionActive, metav1.ConditionFalse, "PeerNotAnswering"),
			node("a", jkev1.BGPSessionEstablished, metav1.ConditionTrue, "Established"),
			node("b", jkev1.BGPSessionIdle, metav1.ConditionFalse, "BadPeerAS")},
			"1 of 3 selected nodes Established; not: b (Idle: BadPeerAS), c (Active: PeerNotAnswering)"},
		{"a node without conditions (an older agent): its state alone", []*jkev1.BGPNodeStatus{
			node("a", jkev1.BGPSessionConnect, "", "")},
			"0 of 1 selected nodes Established; not: a (Connect)"},
		{"a password the agent cannot read", []*jkev1.BGPNodeStatus{
			node("a", jkev1.BGPSessionIdle, metav1.ConditionFalse, "PasswordUnavailable")},
			"0 of 1 selected nodes Established; not: a (Idle: PasswordUnavailable)"},
		{"a state behind the condition (not yet Established, condition still True): the state alone", []*jkev1.BGPNodeStatus{
			node("a", jkev1.BGPSessionOpenConfirm, metav1.ConditionTrue, "Established")},
			"0 of 1 selected nodes Established; not: a (OpenConfirm)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Conditions(peer, nil, tc.nodes, time.Minute)[2]
			if got.Reason != ReasonNotAllEstablished || got.Message != tc.want {
				t.Errorf("got %s: %q\nwant %s: %q", got.Reason, got.Message, ReasonNotAllEstablished, tc.want)
			}
		})
	}
}
