package agent

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/cni/agent/bgp"
	"github.com/staticip/staticip/internal/serving"
)

// TestBGPHeld: what the node holds for the speaker — the ranges it serves and those it drains,
// with Export false for disableBGPExport; a draining range the API no longer has, or a CIDR
// that does not parse, is left out.
func TestBGPHeld(t *testing.T) {
	yes, no := true, false
	rng := func(name, cidr string, noExport *bool) *jkev1.IPRange {
		return &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: jkev1.IPRangeSpec{CIDR: cidr, DisableBGPExport: noExport}}
	}
	served, private, explicit, draining, bad := rng("served", "10.1.0.0/24", nil), rng("private", "10.1.1.0/24", &yes),
		rng("explicit", "10.1.2.1/24", &no), rng("draining", "10.1.3.0/24", nil), rng("bad", "nope", nil)
	byName := map[string]*jkev1.IPRange{"draining": draining}
	got := bgpHeld([]*jkev1.IPRange{served, private, explicit, bad}, map[string]int64{"draining": 3, "gone": 1}, byName)
	want := []bgp.Range{
		{Name: "served", CIDR: netip.MustParsePrefix("10.1.0.0/24"), Export: true},
		{Name: "private", CIDR: netip.MustParsePrefix("10.1.1.0/24")},
		{Name: "explicit", CIDR: netip.MustParsePrefix("10.1.2.0/24"), Export: true},
		{Name: "draining", CIDR: netip.MustParsePrefix("10.1.3.0/24"), Export: true, Draining: true},
	}
	if len(got) != len(want) {
		t.Fatalf("bgpHeld: %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("bgpHeld[%d]: %+v, want %+v", i, got[i], want[i])
		}
	}
	if adv := bgp.Advertised(got); len(adv) != 3 {
		t.Errorf("advertised %v: want the served, explicit and draining ranges", adv)
	}
}

// TestEstablishedCondition: why a session is down, from its state and GoBGP's last reason.
func TestEstablishedCondition(t *testing.T) {
	peer := bgp.Peer{Name: "tor", Address: netip.MustParseAddr("192.0.2.1"), Port: 179, ASN: 65000}
	for _, tc := range []struct {
		state        jkev1.BGPSessionState
		lastError    string
		down         time.Duration
		status       metav1.ConditionStatus
		reason, text string
	}{
		{jkev1.BGPSessionEstablished, "", time.Hour, metav1.ConditionTrue, ReasonBGPEstablished, "Established"},
		{jkev1.BGPSessionActive, "notification-sent code 2(open) subcode 2(bad peer as)", 0, metav1.ConditionFalse, ReasonBGPBadPeerAS, "asNumber 65000"},
		{jkev1.BGPSessionIdle, "bad-peer-as", 0, metav1.ConditionFalse, ReasonBGPBadPeerAS, "AS numbers"},
		{jkev1.BGPSessionActive, "notification-received code 6(cease) subcode 2(admin shutdown)", 0, metav1.ConditionFalse, ReasonBGPNotificationReceived, "closed the session"},
		{jkev1.BGPSessionActive, "notification-sent code 3(update) subcode 1", 0, metav1.ConditionFalse, ReasonBGPNotificationSent, "this node closed"},
		{jkev1.BGPSessionActive, "hold-timer-expired", time.Minute, metav1.ConditionFalse, ReasonBGPHoldTimerExpired, "stopped answering"},
		// A hold timer right at the start is no verdict yet.
		{jkev1.BGPSessionActive, "hold-timer-expired", time.Second, metav1.ConditionFalse, ReasonBGPConnecting, "connecting"},
		{jkev1.BGPSessionActive, "", 5 * time.Second, metav1.ConditionFalse, ReasonBGPConnecting, "connecting to 192.0.2.1 port 179"},
		{jkev1.BGPSessionActive, "", time.Minute, metav1.ConditionFalse, ReasonBGPPeerNotAnswering, "TCP MD5 password"},
	} {
		c := establishedCondition(bgp.Session{Peer: peer, State: tc.state, LastError: tc.lastError}, tc.down)
		if c.Type != jkev1.BGPNodePeerEstablished || c.Status != tc.status || c.Reason != tc.reason || !strings.Contains(c.Message, tc.text) {
			t.Errorf("%s %q after %s: %s %s %q, want %s %s containing %q", tc.state, tc.lastError, tc.down, c.Status, c.Reason, c.Message, tc.status, tc.reason, tc.text)
		}
	}
}

// TestBGPPeerStatuses: one entry per selected peer — running sessions with both conditions,
// peers with a problem with Established False and the problem's reason — sorted by name; a
// condition that did not change keeps its transition time; no HoldTimeSafe without a window.
func TestBGPPeerStatuses(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Hour)
	d := bgp.Desired{Enabled: true, Peers: map[string]bgp.Peer{
		"b-ok":   {Name: "b-ok", Address: netip.MustParseAddr("192.0.2.2"), HoldTime: 9 * time.Second},
		"a-slow": {Name: "a-slow", Address: netip.MustParseAddr("192.0.2.1"), HoldTime: 180 * time.Second},
	}}
	sessions := map[string]bgp.Session{"b-ok": {Peer: d.Peers["b-ok"], State: jkev1.BGPSessionEstablished, Since: t0, Advertised: 2}}
	problems := []bgp.Problem{{Peer: "c-nopw", Reason: bgp.ReasonPasswordUnavailable, Message: "no Secret"}}
	peerIP := map[string]string{"c-nopw": "192.0.2.3"}
	first := bgpPeerStatuses(d, problems, peerIP, sessions, map[string]time.Duration{"a-slow": time.Minute}, 2*time.Minute, nil, t0)
	if len(first) != 3 || first[0].Name != "a-slow" || first[1].Name != "b-ok" || first[2].Name != "c-nopw" {
		t.Fatalf("entries %+v", first)
	}
	cond := func(e jkev1.BGPNodePeerStatus, typ string) *metav1.Condition {
		for i := range e.Conditions {
			if e.Conditions[i].Type == typ {
				return &e.Conditions[i]
			}
		}
		return nil
	}
	if c := cond(first[0], jkev1.BGPPeerHoldTimeSafe); c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonHoldTimeUnsafe {
		t.Errorf("a-slow (hold 180s, window 2m): HoldTimeSafe %+v", c)
	}
	if c := cond(first[0], jkev1.BGPNodePeerEstablished); c == nil || c.Reason != ReasonBGPPeerNotAnswering || first[0].State != jkev1.BGPSessionIdle {
		t.Errorf("a-slow without a session: %+v", first[0])
	}
	if c := cond(first[1], jkev1.BGPNodePeerEstablished); c == nil || c.Status != metav1.ConditionTrue || first[1].Advertised != 2 || first[1].Since == nil {
		t.Errorf("b-ok: %+v", first[1])
	}
	if c := cond(first[2], jkev1.BGPNodePeerEstablished); c == nil || c.Reason != bgp.ReasonPasswordUnavailable || first[2].PeerIP != "192.0.2.3" {
		t.Errorf("c-nopw: %+v", first[2])
	}
	again := bgpPeerStatuses(d, problems, peerIP, sessions, map[string]time.Duration{"a-slow": 2 * time.Minute}, 2*time.Minute, first, t1)
	if c := cond(again[1], jkev1.BGPNodePeerEstablished); c == nil || !c.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("an unchanged condition's transition time moved: %+v", c)
	}
	if !sameBGPStatus(jkev1.BGPNodeStatusStatus{Peers: first}, jkev1.BGPNodeStatusStatus{Peers: again}) {
		t.Errorf("nothing changed, yet the status differs:\n%+v\n%+v", first, again)
	}
	none := bgpPeerStatuses(d, nil, nil, sessions, nil, 0, nil, t0)
	for _, e := range none {
		if cond(e, jkev1.BGPPeerHoldTimeSafe) != nil {
			t.Errorf("HoldTimeSafe without a failover window: %+v", e)
		}
	}
}

// TestAgentWritesOnlyItsOwnBGPNodeStatus: the agent of node A (the DaemonSet's service account,
// its token bound to its pod on A; manifests/cni RBAC and staticip-agent-bgp-status) creates,
// updates and deletes the BGPNodeStatus named A, and none named B; it reads the password
// Secret and no other Secret.
func TestAgentWritesOnlyItsOwnBGPNodeStatus(t *testing.T) {
	f := newCredFixture(t)
	ctx := f.ctx
	admin := versioned.NewForConfigOrDie(f.env.Config).JkeV1().BGPNodeStatuses()
	agent := versioned.NewForConfigOrDie(f.agentCfg).JkeV1().BGPNodeStatuses()
	t.Cleanup(func() {
		for _, n := range []string{f.nodeA, f.nodeB} {
			_ = admin.Delete(ctx, n, metav1.DeleteOptions{})
		}
	})
	obj := func(name string) *jkev1.BGPNodeStatus {
		return &jkev1.BGPNodeStatus{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	// The policy takes effect a moment after it is created.
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		_, err = agent.Create(ctx, obj(f.nodeB), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "staticip-agent-bgp-status") {
			break
		}
	}
	if err == nil || !strings.Contains(err.Error(), "staticip-agent-bgp-status") {
		t.Fatalf("node A's agent created node B's BGPNodeStatus: %v", err)
	}
	mine, err := agent.Create(ctx, obj(f.nodeA), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("node A's agent cannot create its own BGPNodeStatus: %v", err)
	}
	mine.Status.Advertised = []string{"10.0.0.0/24"}
	if _, err := agent.UpdateStatus(ctx, mine, metav1.UpdateOptions{}); err != nil {
		t.Errorf("node A's agent cannot write its own status: %v", err)
	}
	theirs, err := admin.Create(ctx, obj(f.nodeB), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	theirs.Status.Advertised = []string{"10.9.9.0/24"}
	if _, err := agent.UpdateStatus(ctx, theirs, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "staticip-agent-bgp-status") {
		t.Errorf("node A's agent wrote node B's status: %v", err)
	}
	if err := agent.Delete(ctx, f.nodeB, metav1.DeleteOptions{}); err == nil || !strings.Contains(err.Error(), "staticip-agent-bgp-status") {
		t.Errorf("node A's agent deleted node B's BGPNodeStatus: %v", err)
	}
	if err := agent.Delete(ctx, f.nodeA, metav1.DeleteOptions{}); err != nil {
		t.Errorf("node A's agent cannot delete its own BGPNodeStatus: %v", err)
	}
	// Secrets: the password Secret by name, nothing else.
	secrets := f.agentKube.CoreV1().Secrets("kube-system")
	if _, err := secrets.Get(ctx, "staticip-bgp-password", metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("the agent cannot read the password Secret: %v", err)
	}
	if _, err := secrets.Get(ctx, "some-other-secret", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the agent may read another Secret of kube-system: %v", err)
	}
	if _, err := secrets.List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the agent may list kube-system's Secrets: %v", err)
	}
	if _, err := secrets.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=staticip-bgp-password"}); err != nil {
		t.Errorf("the agent cannot list (watch) the password Secret by name: %v", err)
	}
}

// TestBGPMetrics: the session and advertisement series from the last pass's picture; none while
// the node speaks no BGP.
func TestBGPMetrics(t *testing.T) {
	a := New(Config{NodeName: "n"}, nil, nil, nil)
	scrape := func() string {
		w := httptest.NewRecorder()
		serving.Handler(a.Endpoints(time.Minute)).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return w.Body.String()
	}
	if m := scrape(); strings.Contains(m, "staticip_agent_bgp_") {
		t.Errorf("BGP series without BGP:\n%s", m)
	}
	a.bgpReport.Store(&bgpReport{enabled: true, advertised: 2, peers: []jkev1.BGPNodePeerStatus{
		{Name: "tor-a", PeerIP: "192.0.2.1", State: jkev1.BGPSessionEstablished},
		{Name: "tor-b", PeerIP: "192.0.2.2", State: jkev1.BGPSessionActive}}})
	m := scrape()
	for _, want := range []string{
		`staticip_agent_bgp_advertised_prefixes 2`,
		`staticip_agent_bgp_session_established{peer="tor-a",peer_ip="192.0.2.1"} 1`,
		`staticip_agent_bgp_session_established{peer="tor-b",peer_ip="192.0.2.2"} 0`,
		`staticip_agent_bgp_session_state{peer="tor-b",state="Active"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
