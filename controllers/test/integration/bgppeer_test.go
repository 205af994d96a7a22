package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/controllers/pkg/bgppeer"
	"github.com/staticip/staticip/controllers/pkg/ippool"
	"github.com/staticip/staticip/controllers/pkg/manager"
)

// TestBGPPeerStatusAndPoolExportedWithNAT: with only the manager's RBAC, the bgppeer controller
// sets a peer's Accepted (False until the BGPConfiguration "default" exists), HoldTimeSafe
// (False for a hold time not shorter than --node-failover-window) and SessionsEstablished
// (following the nodes' BGPNodeStatuses), and the range allocator turns a NATed, exported
// pool's ExportedWithNAT True when the first BGPPeer is created and False when it goes.
func TestBGPPeerStatusAndPoolExportedWithNAT(t *testing.T) {
	f := newFixture(t)
	f.startAllocatorAsServiceAccount(func(o *manager.Options) {
		o.Controllers = []string{ippool.Name, bgppeer.Name}
		o.NodeFailoverWindow = 30 * time.Second
	})
	pool := f.createPool("bgp", []string{"10.231.0.0/24"}, nil) // natOutgoing defaults to true, exported
	private := f.createPool("bgp-private", []string{"10.231.1.0/24"}, func(p *jkev1.IPPool) {
		yes := true
		p.Spec.DisableBGPExport = &yes
	})
	poolCond := func(name string) *metav1.Condition {
		p, err := f.client.JkeV1().IPPools().Get(f.ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return meta.FindStatusCondition(p.Status.Conditions, jkev1.IPPoolExportedWithNAT)
	}
	wantPool := func(name string, status metav1.ConditionStatus, reason string) {
		f.eventually(20*time.Second, name+" ExportedWithNAT="+string(status)+" ("+reason+")", func() (bool, error) {
			c := poolCond(name)
			return c != nil && c.Status == status && c.Reason == reason, nil
		})
	}
	wantPool(pool.Name, metav1.ConditionFalse, ippool.ReasonNoBGPPeer)
	wantPool(private.Name, metav1.ConditionFalse, ippool.ReasonNotExported)

	peerName := f.ns + "-tor"
	peer, err := f.client.JkeV1().BGPPeers().Create(f.ctx, &jkev1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: peerName},
		Spec: jkev1.BGPPeerSpec{PeerIP: "192.0.2.1", ASNumber: 65000, HoldTime: &metav1.Duration{Duration: 90 * time.Second}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.client.JkeV1().BGPPeers().Delete(context.Background(), peerName, metav1.DeleteOptions{}) })
	wantPool(pool.Name, metav1.ConditionTrue, ippool.ReasonExportedWithNAT)
	wantPool(private.Name, metav1.ConditionFalse, ippool.ReasonNotExported)

	type want struct {
		typ    string
		status metav1.ConditionStatus
		reason string
		msg    string
	}
	wantPeer := func(ws ...want) {
		t.Helper()
		f.eventually(20*time.Second, "peer conditions", func() (bool, error) {
			p, err := f.client.JkeV1().BGPPeers().Get(f.ctx, peerName, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, w := range ws {
				c := meta.FindStatusCondition(p.Status.Conditions, w.typ)
				if c == nil || c.Status != w.status || c.Reason != w.reason || !strings.Contains(c.Message, w.msg) {
					t.Logf("%s: %+v", w.typ, c)
					return false, nil
				}
			}
			return true, nil
		})
	}
	wantPeer(want{jkev1.BGPPeerAccepted, metav1.ConditionFalse, bgppeer.ReasonNoBGPConfiguration, ""},
		want{jkev1.BGPPeerHoldTimeSafe, metav1.ConditionFalse, bgppeer.ReasonHoldTimeUnsafe, "window 30s"},
		want{jkev1.BGPPeerSessionsEstablished, metav1.ConditionFalse, bgppeer.ReasonNoNodeReportsPeer, ""})

	// The BGPConfiguration is cluster-wide ("default"): create it only if no other test did.
	if _, err := f.client.JkeV1().BGPConfigurations().Create(f.ctx, &jkev1.BGPConfiguration{ObjectMeta: metav1.ObjectMeta{Name: jkev1.BGPConfigurationName},
		Spec: jkev1.BGPConfigurationSpec{ASNumber: 64512}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.client.JkeV1().BGPConfigurations().Delete(context.Background(), jkev1.BGPConfigurationName, metav1.DeleteOptions{})
	})
	// The controller writes the peer's status meanwhile: retry the spec update on a conflict.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		peer, err = f.client.JkeV1().BGPPeers().Get(f.ctx, peerName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		peer.Spec.HoldTime = &metav1.Duration{Duration: 9 * time.Second}
		_, err = f.client.JkeV1().BGPPeers().Update(f.ctx, peer, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}

	// Two nodes' agents report the peer: one Established, one Active.
	nodeStatus := func(node string, state jkev1.BGPSessionState) {
		t.Helper()
		ns, err := f.client.JkeV1().BGPNodeStatuses().Get(f.ctx, node, metav1.GetOptions{})
		if err != nil {
			ns, err = f.client.JkeV1().BGPNodeStatuses().Create(f.ctx, &jkev1.BGPNodeStatus{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = f.client.JkeV1().BGPNodeStatuses().Delete(context.Background(), node, metav1.DeleteOptions{})
			})
		}
		ns.Status.Peers = []jkev1.BGPNodePeerStatus{{Name: peerName, PeerIP: "192.0.2.1", State: state}}
		if _, err := f.client.JkeV1().BGPNodeStatuses().UpdateStatus(f.ctx, ns, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	nodeA, nodeB := f.ns+"-a", f.ns+"-b"
	nodeStatus(nodeA, jkev1.BGPSessionEstablished)
	nodeStatus(nodeB, jkev1.BGPSessionActive)
	wantPeer(want{jkev1.BGPPeerAccepted, metav1.ConditionTrue, bgppeer.ReasonValid, ""},
		want{jkev1.BGPPeerHoldTimeSafe, metav1.ConditionTrue, bgppeer.ReasonHoldTimeSafe, "within 9s"},
		want{jkev1.BGPPeerSessionsEstablished, metav1.ConditionFalse, bgppeer.ReasonNotAllEstablished, "1 of 2 selected nodes Established; not: " + nodeB + " (Active)"})

	nodeStatus(nodeB, jkev1.BGPSessionEstablished)
	wantPeer(want{jkev1.BGPPeerSessionsEstablished, metav1.ConditionTrue, bgppeer.ReasonAllEstablished, "2 of 2 selected nodes Established"})

	// The last peer gone: no BGP, no warning.
	if err := f.client.JkeV1().BGPPeers().Delete(f.ctx, peerName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wantPool(pool.Name, metav1.ConditionFalse, ippool.ReasonNoBGPPeer)
}
