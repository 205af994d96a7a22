package ippool

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// Reasons of the ExportedWithNAT condition.
const (
	ReasonExportedWithNAT = "ExportedWithNAT"
	ReasonNotExported     = "NotExported"
	ReasonNoNAT           = "NATOutgoingOff"
	ReasonNoBGPPeer       = "NoBGPPeer"
)

// ExportedWithNAT is the pool's ExportedWithNAT condition: True (a warning) when its blocks are
// announced over BGP (disableBGPExport unset or false, and at least one BGPPeer exists) while
// natOutgoing is on (unset means on, the API's default), so the outside reaches its pods but
// sees their node's address as their source, not their static IP. Otherwise False, with the
// reason; the condition is always present (False with NoBGPPeer when there is no BGP at all),
// so that `kubectl get` shows the warning's absence as plainly as its presence.
func ExportedWithNAT(spec *jkev1.IPPoolSpec, bgpPeers int) metav1.Condition {
	c := metav1.Condition{Type: jkev1.IPPoolExportedWithNAT, Status: metav1.ConditionFalse}
	switch {
	case spec.DisableBGPExport != nil && *spec.DisableBGPExport:
		c.Reason, c.Message = ReasonNotExported, "disableBGPExport: no node announces the pool's blocks"
	case spec.NATOutgoing != nil && !*spec.NATOutgoing:
		c.Reason, c.Message = ReasonNoNAT, "natOutgoing is off: the pods' static IPs are their source outside the cluster"
	case bgpPeers == 0:
		c.Reason, c.Message = ReasonNoBGPPeer, "no BGPPeer exists: the pool's blocks are announced to no one"
	default:
		c.Status, c.Reason = metav1.ConditionTrue, ReasonExportedWithNAT
		c.Message = "the pool's blocks are announced over BGP but natOutgoing is on: the outside reaches its pods, yet sees their node's address as their source, not their static IP; set natOutgoing: false (the network routes the pool's CIDRs to the nodes) or disableBGPExport: true"
	}
	return c
}
