package ippool

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

func TestExportedWithNAT(t *testing.T) {
	yes, no := true, false
	cases := []struct {
		name      string
		nat, noEx *bool
		peers     int
		status    metav1.ConditionStatus
		reason    string
	}{
		{name: "defaults (NAT on, exported) with a peer", peers: 1, status: metav1.ConditionTrue, reason: ReasonExportedWithNAT},
		{name: "explicit NAT on, export on, two peers", nat: &yes, noEx: &no, peers: 2, status: metav1.ConditionTrue, reason: ReasonExportedWithNAT},
		{name: "defaults without any peer", peers: 0, status: metav1.ConditionFalse, reason: ReasonNoBGPPeer},
		{name: "NAT off, exported", nat: &no, peers: 1, status: metav1.ConditionFalse, reason: ReasonNoNAT},
		{name: "private pool with NAT", nat: &yes, noEx: &yes, peers: 1, status: metav1.ConditionFalse, reason: ReasonNotExported},
		{name: "private pool without NAT and no peer", nat: &no, noEx: &yes, status: metav1.ConditionFalse, reason: ReasonNotExported},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ExportedWithNAT(&jkev1.IPPoolSpec{NATOutgoing: tc.nat, DisableBGPExport: tc.noEx}, tc.peers)
			if c.Type != jkev1.IPPoolExportedWithNAT || c.Status != tc.status || c.Reason != tc.reason || c.Message == "" {
				t.Errorf("got %s=%s %s %q, want %s %s", c.Type, c.Status, c.Reason, c.Message, tc.status, tc.reason)
			}
		})
	}
}
