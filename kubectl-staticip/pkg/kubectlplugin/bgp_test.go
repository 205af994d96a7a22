package kubectlplugin

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// TestPrintBGP: one line per node and peer, with the node's prefixes, the session's state and
// age, and the reasons it is down or unsafe.
func TestPrintBGP(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	since := metav1.NewTime(now.Add(-90 * time.Second))
	items := []jkev1.BGPNodeStatus{
		{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}, Status: jkev1.BGPNodeStatusStatus{Advertised: []string{"10.0.1.0/24"},
			Peers: []jkev1.BGPNodePeerStatus{{Name: "tor", PeerIP: "192.0.2.1", State: jkev1.BGPSessionActive, Conditions: []metav1.Condition{
				{Type: jkev1.BGPNodePeerEstablished, Status: metav1.ConditionFalse, Reason: "BadPeerAS"},
				{Type: jkev1.BGPPeerHoldTimeSafe, Status: metav1.ConditionFalse, Reason: "HoldTimeNotShorterThanFailoverWindow"}}}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: jkev1.BGPNodeStatusStatus{Advertised: []string{"10.0.0.0/24", "10.0.2.0/24"},
			Peers: []jkev1.BGPNodePeerStatus{{Name: "tor", PeerIP: "192.0.2.1", State: jkev1.BGPSessionEstablished, Since: &since,
				Conditions: []metav1.Condition{{Type: jkev1.BGPNodePeerEstablished, Status: metav1.ConditionTrue, Reason: "Established"}}}}}},
	}
	var b bytes.Buffer
	if err := PrintBGP(&b, items, now); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := [][]string{
		{"NODE", "ADVERTISED", "PEER", "PEER-IP", "STATE", "SINCE", "PROBLEM"},
		{"node-a", "10.0.0.0/24,10.0.2.0/24", "tor", "192.0.2.1", "Established", "90s", "<none>"},
		{"node-b", "10.0.1.0/24", "tor", "192.0.2.1", "Active", "<unknown>", "BadPeerAS,HoldTimeNotShorterThanFailoverWindow"},
	}
	if len(lines) != len(want) {
		t.Fatalf("output:\n%s", b.String())
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("line %d: %q, want %q", i, got, w)
		}
	}
	b.Reset()
	_ = PrintBGP(&b, nil, now)
	if !strings.Contains(b.String(), "No node speaks BGP") {
		t.Errorf("empty: %q", b.String())
	}
}
