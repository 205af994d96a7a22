package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/knftables"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// Outgoing NAT (issue 36): a pod's traffic to a destination outside the cluster leaves with its
// node's address unless its range says natOutgoing: false; traffic inside the cluster keeps the
// pod's IP. The agent keeps this in its own nftables table, rewritten whole in one transaction on
// every pass (so a range that moves, a flipped natOutgoing or a rule deleted by hand is followed
// at the next pass: on every change that matters, and every --interval):
//
//	table inet staticip {
//		set cluster-v4 { type ipv4_addr; flags interval; ... }     # never masqueraded to
//		set nat-sources-v4 { type ipv4_addr; flags interval; ... } # masqueraded when leaving
//		(the same two for IPv6)
//		chain postrouting {
//			type nat hook postrouting priority srcnat; policy accept;
//			ip saddr @nat-sources-v4 ip daddr != @cluster-v4 masquerade
//			ip6 saddr @nat-sources-v6 ip6 daddr != @cluster-v6 masquerade  # only with IPv6 sources
//		}
//	}
//
// As Calico's natOutgoing (felix's cali-nat-outgoing rule over the all-ipam-blocks and
// masq-ipam-pools ipsets, with the hosts' addresses excluded: IPPoolsAndHostIPs) and
// ip-masq-agent (nonMasqueradeCIDRs).

// NATTable is the agent's nftables table (family inet).
const NATTable = "staticip"

// Names in the NAT table.
const (
	natChain         = "postrouting"
	natClusterSet    = "cluster"
	natSourcesSet    = "nat-sources"
	natTableComment  = "staticip-agent: outgoing NAT of pod traffic leaving the cluster (cni/README.md)"
	natRuleComment   = "pods of NAT-enabled ranges, to outside the cluster"
	natClusterDoc    = "the cluster's addresses (IPRanges, node addresses, Service CIDRs, non-masquerade CIDRs): never masqueraded to"
	natSourcesDoc    = "IPRanges whose pods leave the cluster with their node's address (natOutgoing)"
	natFamilySuffix4 = "-v4"
	natFamilySuffix6 = "-v6"
)

// NATConfig is what the agent's NAT needs beside the API's objects (flags).
type NATConfig struct {
	// Enabled: keep the NAT table. Off: the agent never touches nftables (another component
	// masquerades pod traffic, or the network routes every pool).
	Enabled bool
	// Default is the natOutgoing of an IPRange that does not set it (a hand-written one;
	// the range allocator sets it on every block from its pool).
	Default bool
	// NonMasqueradeCIDRs are destinations outside the IPRanges that pods reach with their own
	// IP (ip-masq-agent's nonMasqueradeCIDRs): a peered network that routes the pod space.
	NonMasqueradeCIDRs []netip.Prefix
	// ServiceCIDRs are the cluster's Service ranges: a ClusterIP that kube-proxy did not
	// translate (no endpoint) is no destination outside the cluster.
	ServiceCIDRs []netip.Prefix
}

// natPlan is the content of the NAT table: per family, the cluster's addresses and the
// NAT-enabled sources, each a sorted list of disjoint prefixes (a CIDR contained in another is
// left out: nftables refuses overlapping intervals in a set).
type natPlan struct {
	cluster, sources [2][]netip.Prefix // [0] IPv4, [1] IPv6
}

// planNAT decides which CIDRs go in which set: every IPRange's CIDR (served by a node or not,
// any node's: ranges move on failover), the addresses of every node, the Service CIDRs and the
// non-masquerade CIDRs are the cluster; the IPRanges some node may serve (accepted, not left
// out for overlapping an older one), assigned to a node or still held by one (a holder entry:
// it drains there), whose natOutgoing is on (unset: cfg.Default) are the sources. A range
// unassigned that no node holds (released by the range allocator: its pool deleted, its node
// gone) is no source any more: no pod has an address of it. Pure: table-tested.
func planNAT(cfg NATConfig, ranges, accepted []*jkev1.IPRange, nodeAddrs []netip.Addr) natPlan {
	var p natPlan
	add := func(sets *[2][]netip.Prefix, pfx netip.Prefix) {
		pfx = pfx.Masked()
		f := 0
		if pfx.Addr().Is6() && !pfx.Addr().Is4In6() {
			f = 1
		}
		sets[f] = append(sets[f], pfx)
	}
	for _, r := range ranges {
		if pfx, err := netip.ParsePrefix(r.Spec.CIDR); err == nil {
			add(&p.cluster, pfx)
		}
	}
	for _, a := range nodeAddrs {
		add(&p.cluster, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	for _, pfx := range append(slices.Clone(cfg.ServiceCIDRs), cfg.NonMasqueradeCIDRs...) {
		add(&p.cluster, pfx)
	}
	for _, r := range accepted {
		if r.Spec.Node == "" && len(r.Status.Holders) == 0 {
			continue
		}
		on := cfg.Default
		if r.Spec.NATOutgoing != nil {
			on = *r.Spec.NATOutgoing
		}
		if pfx, err := netip.ParsePrefix(r.Spec.CIDR); err == nil && on {
			add(&p.sources, pfx)
		}
	}
	for f := range 2 {
		p.cluster[f], p.sources[f] = disjoint(p.cluster[f]), disjoint(p.sources[f])
	}
	return p
}

// disjoint sorts prefixes and drops those contained in another (two CIDRs either nest or do not
// overlap at all) and duplicates.
func disjoint(in []netip.Prefix) []netip.Prefix {
	slices.SortFunc(in, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits() // the wider first
	})
	var out []netip.Prefix
	for _, p := range in {
		if n := len(out); n > 0 && out[n-1].Bits() <= p.Bits() && out[n-1].Contains(p.Addr()) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// natNodeAddresses are the node addresses outgoing NAT leaves alone, from what the agent
// watches anyway: the addresses the holders of every range wrote beside their claims
// (status.holders) and the InternalIP and ExternalIP addresses of the given nodes (this one and
// those whose agent predates status.holders).
func natNodeAddresses(ranges []*jkev1.IPRange, nodes ...[]*corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, r := range ranges {
		for _, h := range r.Status.Holders {
			if ip, err := netip.ParseAddr(h.Address); err == nil {
				out = append(out, ip.Unmap())
			}
		}
	}
	for _, n := range slices.Concat(nodes...) {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}

// write adds to tx everything that makes the table exactly p: the table, the sets (flushed,
// then filled) and the chain (flushed, then its rules). One transaction: nftables applies it
// whole or not at all, so packets never see a half-written table.
func (p natPlan) write(tx *knftables.Transaction) {
	tx.Add(&knftables.Table{Comment: knftables.PtrTo(natTableComment)})
	for f, fam := range []struct{ suffix, typ, match string }{
		{natFamilySuffix4, "ipv4_addr", "ip"}, {natFamilySuffix6, "ipv6_addr", "ip6"},
	} {
		for _, set := range []struct {
			name, doc string
			elems     []netip.Prefix
		}{{natClusterSet + fam.suffix, natClusterDoc, p.cluster[f]}, {natSourcesSet + fam.suffix, natSourcesDoc, p.sources[f]}} {
			tx.Add(&knftables.Set{Name: set.name, Type: fam.typ, Flags: []knftables.SetFlag{knftables.IntervalFlag}, Comment: knftables.PtrTo(set.doc)})
			tx.Flush(&knftables.Set{Name: set.name})
			for _, e := range set.elems {
				tx.Add(&knftables.Element{Set: set.name, Key: []string{e.String()}})
			}
		}
		if f == 0 {
			tx.Add(&knftables.Chain{Name: natChain, Type: knftables.PtrTo(knftables.NATType),
				Hook: knftables.PtrTo(knftables.PostroutingHook), Priority: knftables.PtrTo(knftables.SNATPriority)})
			tx.Flush(&knftables.Chain{Name: natChain})
		}
		if f == 1 && len(p.sources[1]) == 0 {
			// No IPv6 source: no IPv6 rule, so a node whose kernel has no IPv6 NAT (IPv6
			// disabled) takes the transaction. The chain was flushed: an old one goes.
			continue
		}
		tx.Add(&knftables.Rule{Chain: natChain, Comment: knftables.PtrTo(natRuleComment), Rule: knftables.Concat(
			fam.match, "saddr", "@"+natSourcesSet+fam.suffix, fam.match, "daddr", "!=", "@"+natClusterSet+fam.suffix, "masquerade")})
	}
}

// String is the plan for logs: "sources 10.244.0.0/24, ...; cluster ..." per family.
func (p natPlan) String() string {
	join := func(ps []netip.Prefix) string {
		s := make([]string, len(ps))
		for i, x := range ps {
			s[i] = x.String()
		}
		return strings.Join(s, ",")
	}
	return fmt.Sprintf("NAT sources [%s|%s], cluster [%s|%s]", join(p.sources[0]), join(p.sources[1]), join(p.cluster[0]), join(p.cluster[1]))
}

// newNFT opens the agent's NAT table through the nft binary (it must be on PATH: the agent's
// image carries it).
func newNFT() (knftables.Interface, error) {
	return knftables.New(knftables.InetFamily, NATTable)
}

// syncNAT makes the NAT table exactly p, in one transaction; the first call finds nft.
func (a *Agent) syncNAT(ctx context.Context, p natPlan) error {
	if a.nft == nil {
		nft, err := newNFT()
		if err != nil {
			a.natErrors.Add(1)
			return fmt.Errorf("outgoing NAT: nftables: %w", err)
		}
		a.nft = nft
	}
	tx := a.nft.NewTransaction()
	p.write(tx)
	if err := a.nft.Run(ctx, tx); err != nil {
		a.natErrors.Add(1)
		return fmt.Errorf("outgoing NAT: table inet %s: %w", NATTable, err)
	}
	if s := p.String(); s != a.lastNAT {
		a.logf("%s", s)
		a.lastNAT = s
	}
	return nil
}

// Events on the agent's Node about outgoing NAT.
const (
	// ReasonNATSyncFailed (Warning): the nftables table could not be written; pods of
	// NAT-enabled ranges may not reach the outside (or reach it with a stale rule set).
	ReasonNATSyncFailed = "NATSyncFailed"
	// ReasonNATSynced (Normal): the table is written again after a failure.
	ReasonNATSynced = "NATSynced"
)

// reportNAT records a Warning Event on the node when a NAT sync fails with an error the last
// report did not name (the same failure pass after pass is one Event; the metric
// staticip_agent_nat_sync_errors_total counts them all), and a Normal one when it recovers.
func (a *Agent) reportNAT(err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg == a.natFailure {
		return
	}
	was := a.natFailure
	a.natFailure = msg
	node := &corev1.ObjectReference{Kind: "Node", Name: a.cfg.NodeName, UID: types.UID(a.cfg.NodeName)}
	switch {
	case err != nil:
		a.logf("outgoing NAT not in place: %v", err)
		if a.recorder != nil {
			a.recorder.Event(node, corev1.EventTypeWarning, ReasonNATSyncFailed, "outgoing NAT rules could not be written; pods of natOutgoing ranges may not reach the outside: "+msg)
		}
	case was != "":
		if a.recorder != nil {
			a.recorder.Event(node, corev1.EventTypeNormal, ReasonNATSynced, "outgoing NAT rules written again")
		}
	}
}

// DeleteNATTable removes the agent's NAT table from the current network namespace (cleanup
// mode); a table that does not exist is no error.
func DeleteNATTable(ctx context.Context) (bool, error) {
	nft, err := newNFT()
	if err != nil {
		return false, fmt.Errorf("nftables: %w", err)
	}
	tx := nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	switch err := nft.Run(ctx, tx); {
	case knftables.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("delete table inet %s: %w", NATTable, err)
	}
	return true, nil
}
