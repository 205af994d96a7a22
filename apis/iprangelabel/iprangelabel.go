// Package iprangelabel is the one rule for the label that scopes a StaticIP to the IPRange its
// address lies in, so that a node agent watches only the StaticIPs of the ranges its node holds
// (a label selector per range) instead of every StaticIP of the cluster — every record's update
// used to reach every agent (issue 37: 1.2–1.7 MiB per agent for one 110-address range move,
// at any cluster size). The StaticIP controller sets the label (For), the agent selects by it
// (Value), and tools/scalebench accounts what each agent receives by it.
//
// The label never moves with a failover: a range keeps its name when node failover moves it,
// so its records keep their label and the new holder's agent watches them from the moment it
// holds the range. A record without the label (no IP yet, written before this release, or not
// yet labelled) is watched by every agent (selector "!Key"), so nothing is ever out of sight.
package iprangelabel

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"

	"k8s.io/apimachinery/pkg/util/validation"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// Key is the StaticIP label naming (Value) the IPRange its spec.ip lies in.
const Key = "staticip.jke.jdcloud.com/iprange"

// hashPrefix marks a Value that is the digest of a name too long (or otherwise not allowed) for a
// label value; no IPRange name can clash with one by accident (it would have to be that digest).
const hashPrefix = "h."

// Value is the label value for the IPRange named name: the name itself when it is a valid label
// value (63 characters at most), else a fixed-length digest of it.
func Value(name string) string {
	if len(validation.IsValidLabelValue(name)) == 0 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return hashPrefix + hex.EncodeToString(sum[:16])
}

// For is the label value a StaticIP with address ip must carry: Value of the IPRange ip lies in
// — when ranges overlap, the oldest (creation time, then name), the one the agents serve — or ""
// (no label) when ip is empty, does not parse or lies in no IPRange.
func For(ranges []*jkev1.IPRange, ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ""
	}
	a = a.Unmap()
	var best *jkev1.IPRange
	for _, r := range ranges {
		p, err := netip.ParsePrefix(r.Spec.CIDR)
		if err != nil || r.DeletionTimestamp != nil || !p.Contains(a) {
			continue
		}
		if best == nil || older(r, best) {
			best = r
		}
	}
	if best == nil {
		return ""
	}
	return Value(best.Name)
}

func older(a, b *jkev1.IPRange) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}
