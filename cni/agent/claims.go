package agent

import (
	"encoding/json"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/ipam"
)

// Who holds a range, and where its traffic goes (cni/README.md, "Moving a range by hand").
//
// A node claims a range with its own entry of the IPRange's status.holders — {node, address,
// generation, Serving|Draining} — for the ranges it serves and the ranges it drains (moved away
// while its pods hold addresses of it). A claim is a node's word about itself only — admission
// (staticip-agent-range-status) lets an agent write the entry naming its own node and no other —
// and it never takes a range away from the node that serves it (waitForPreviousOwners).
// Traffic to a range goes to the address of the node that holds addresses of it, for as long as
// it holds any: a range that moved away stays routed via the node that drains it until it is
// drained, whoever it is assigned to meanwhile. Every agent reads the claims from the IPRanges
// it watches anyway: nothing it reads or writes grows with the number of nodes.
//
// During an upgrade, nodes whose agent predates status.holders claim in their Node's
// ObservedAnnotation ("<range>": "<itself>/<generation>"); their Nodes lack
// jkev1.LabelClaimsInStatus, and the agents read the claims of such Nodes too (legacyClaims).

// heldBy is one node's claim that it holds addresses of a range (it serves or drains it) at an
// ownership generation.
type heldBy struct {
	node       string
	generation int64
}

// parseReport decodes one ObservedAnnotation value (nil when it does not parse: no agent
// writes such a value).
func parseReport(v string) map[string]string {
	if v == "" {
		return nil
	}
	m := map[string]string{}
	if json.Unmarshal([]byte(v), &m) != nil {
		return nil
	}
	return m
}

// claimOf reads one report entry as a claim of node: "<node>/<generation>". An entry naming
// another node is a route, not a claim.
func claimOf(node, val string) (int64, bool) {
	i := strings.LastIndexByte(val, '/')
	if i < 0 || val[:i] != node {
		return 0, false
	}
	gen, err := strconv.ParseInt(val[i+1:], 10, 64)
	return gen, err == nil
}

// claims reads who else holds each range: range name -> the other nodes' claims, sorted by
// node. The IPRanges' status.holders first; legacy are the ObservedAnnotation values (node name
// -> value) of the nodes whose agent still claims there (no jkev1.LabelClaimsInStatus), read for the
// ranges where that node has no status entry. An annotation entry naming another node is a
// route, not a claim, and is skipped; so is a report that does not parse.
func claims(ranges []*jkev1.IPRange, legacy map[string]string, self string) map[string][]heldBy {
	out := map[string][]heldBy{}
	inStatus := map[string]map[string]bool{}
	for _, r := range ranges {
		for _, h := range r.Status.Holders {
			if h.Node == self || h.Node == "" {
				continue
			}
			out[r.Name] = append(out[r.Name], heldBy{node: h.Node, generation: h.Generation})
			if inStatus[r.Name] == nil {
				inStatus[r.Name] = map[string]bool{}
			}
			inStatus[r.Name][h.Node] = true
		}
	}
	for node, v := range legacy {
		if node == self {
			continue
		}
		for name, val := range parseReport(v) {
			if gen, ok := claimOf(node, val); ok && !inStatus[name][node] {
				out[name] = append(out[name], heldBy{node: node, generation: gen})
			}
		}
	}
	for _, hs := range out {
		sort.Slice(hs, func(i, j int) bool { return hs[i].node < hs[j].node })
	}
	return out
}

// ownClaims are the ranges this node claims for itself, by name, at their generation: its
// entries of status.holders, and for a range without one the claims of its own report (an
// agent that predates status.holders wrote them there).
func ownClaims(ranges []*jkev1.IPRange, report, self string) map[string]int64 {
	out := map[string]int64{}
	for _, r := range ranges {
		for _, h := range r.Status.Holders {
			if h.Node == self {
				out[r.Name] = h.Generation
			}
		}
	}
	for name, val := range parseReport(report) {
		if _, ok := out[name]; ok {
			continue
		}
		if gen, ok := claimOf(self, val); ok {
			out[name] = gen
		}
	}
	return out
}

// familyAddrs are a node's addresses by IP family: [0] IPv4, [1] IPv6 ("" when unknown).
type familyAddrs [2]string

// familyIndex is the familyAddrs index of an address's family.
func familyIndex(a netip.Addr) int {
	if a.Unmap().Is4() {
		return 0
	}
	return 1
}

// familyName names familyAddrs' index i in messages.
func familyName(i int) string { return [2]string{"IPv4", "IPv6"}[i] }

// rangeFamily is the familyAddrs index of an IPRange's CIDR, false when it does not parse.
func rangeFamily(r *jkev1.IPRange) (int, bool) {
	p, err := netip.ParsePrefix(r.Spec.CIDR)
	if err != nil {
		return 0, false
	}
	return familyIndex(p.Addr()), true
}

// addrsByFamily sorts addresses into their families; the first of each family wins (a Node's
// status lists its primary InternalIP of a family first).
func addrsByFamily(addrs []netip.Addr) familyAddrs {
	var out familyAddrs
	for _, a := range addrs {
		if i := familyIndex(a); out[i] == "" {
			out[i] = a.Unmap().String()
		}
	}
	return out
}

// holderAddresses are the nodes' addresses by IP family, the next hops of the routes (a range is
// routed via its holder's address of the range's family: Linux takes no IPv4 next hop for an
// IPv6 route): from every entry of the IPRanges' status.holders — an entry carries its node's
// address of its range's family, and a node's address is the node's whatever range or generation
// the entry is of — and legacy (the InternalIPs of the nodes whose agent predates
// status.holders) for a node and family without one. An entry's address counts for the family it
// is of, whatever its range's: an agent of the previous release wrote its IPv4 address into its
// IPv6 ranges' entries too.
func holderAddresses(ranges []*jkev1.IPRange, legacy map[string][]netip.Addr) map[string]familyAddrs {
	out := map[string]familyAddrs{}
	for _, r := range ranges {
		for _, h := range r.Status.Holders {
			if a, err := netip.ParseAddr(h.Address); err == nil {
				fa := out[h.Node]
				fa[familyIndex(a)] = a.Unmap().String()
				out[h.Node] = fa
			}
		}
	}
	for node, addrs := range legacy {
		fa, byLegacy := out[node], addrsByFamily(addrs)
		for i := range fa {
			if fa[i] == "" {
				fa[i] = byLegacy[i]
			}
		}
		if fa != (familyAddrs{}) {
			out[node] = fa
		}
	}
	return out
}

// ownHolders are the entries this node's claims should have in status.holders after this pass,
// by range name: Serving for each range it serves (at the range's generation), Draining for each
// range it drains (at the generation it served it at); each entry's address is the node's
// InternalIP of the range's family (byName: the ranges, to tell a draining range's family; ""
// when the node has no address of that family, or none known yet: the claim never waits for it,
// and a missing family is reported, missingFamilies).
func ownHolders(self string, addrs familyAddrs, mine []*jkev1.IPRange, draining map[string]int64, byName map[string]*jkev1.IPRange) map[string]jkev1.IPRangeHolder {
	address := func(r *jkev1.IPRange) string {
		if r == nil {
			return ""
		}
		if i, ok := rangeFamily(r); ok {
			return addrs[i]
		}
		return ""
	}
	out := map[string]jkev1.IPRangeHolder{}
	for name, gen := range draining {
		out[name] = jkev1.IPRangeHolder{Node: self, Address: address(byName[name]), Generation: gen, State: jkev1.HolderDraining}
	}
	for _, r := range mine {
		out[r.Name] = jkev1.IPRangeHolder{Node: self, Address: address(r), Generation: r.Spec.OwnerGeneration, State: jkev1.HolderServing}
	}
	return out
}

// missingFamilies are the ranges this node holds (serves or drains) of an IP family it has no
// InternalIP of, by name: the family's name. Their claims carry no address, so no other node
// routes them to this node (an IPv6 range cannot be routed via an IPv4 next hop): reported on
// the range (a condition and an Event), never a silent gap. A node with no InternalIP at all is
// not reported: its address is not known yet (the claims follow once the kubelet reports it).
func missingFamilies(addrs familyAddrs, mine []*jkev1.IPRange, draining map[string]int64, byName map[string]*jkev1.IPRange) map[string]string {
	if addrs == (familyAddrs{}) {
		return nil
	}
	out := map[string]string{}
	check := func(r *jkev1.IPRange) {
		if r == nil {
			return
		}
		if i, ok := rangeFamily(r); ok && addrs[i] == "" {
			out[r.Name] = familyName(i)
		}
	}
	for _, r := range mine {
		check(r)
	}
	for name := range draining {
		check(byName[name])
	}
	return out
}

// claimsInStatus says whether every range's status.holders already carries this node's
// entry exactly as own has it (and none where own has none).
func claimsInStatus(ranges []*jkev1.IPRange, self string, own map[string]jkev1.IPRangeHolder) bool {
	for _, r := range ranges {
		if _, changed := withHolder(r.Status.Holders, self, ownEntry(own, r.Name)); changed {
			return false
		}
	}
	return true
}

// ownEntry is own's entry for the range, nil when own has none.
func ownEntry(own map[string]jkev1.IPRangeHolder, name string) *jkev1.IPRangeHolder {
	if h, ok := own[name]; ok {
		return &h
	}
	return nil
}

// WithHolder is withHolder for the simulated agents of tools/scalebench.
func WithHolder(holders []jkev1.IPRangeHolder, node string, want *jkev1.IPRangeHolder) []jkev1.IPRangeHolder {
	out, _ := withHolder(holders, node, want)
	return out
}

// withHolder returns holders with node's entry set to want (removed when want is nil), every
// other entry as it was and in its place; changed says whether anything differs.
func withHolder(holders []jkev1.IPRangeHolder, node string, want *jkev1.IPRangeHolder) (out []jkev1.IPRangeHolder, changed bool) {
	found := false
	for _, h := range holders {
		if h.Node != node {
			out = append(out, h)
			continue
		}
		found = true
		if want == nil {
			changed = true
			continue
		}
		if h != *want {
			changed = true
		}
		out = append(out, *want)
	}
	if !found && want != nil {
		out = append(out, *want)
		changed = true
	}
	return out, changed
}

// rangeRoute is one range the node routes to another node.
type rangeRoute struct {
	r   *jkev1.IPRange
	via string
}

// routeVia is the node a range's traffic goes to: its owner once the owner claims it at the
// current generation (it serves it); else a node that still claims it at that generation (it
// drains it: a range unassigned, or assigned to a node that waits for it, while pods of the old
// node hold addresses of it); else its owner ("" for an unassigned range nobody holds). Claims
// at a lower generation hold nothing: node failover moved the range away from that node.
func routeVia(r *jkev1.IPRange, hs []heldBy) string {
	drainer := ""
	for _, h := range hs { // sorted by node
		if h.generation < r.Spec.OwnerGeneration {
			continue
		}
		if h.node == r.Spec.Node {
			return r.Spec.Node
		}
		if drainer == "" {
			drainer = h.node
		}
	}
	if drainer != "" {
		return drainer
	}
	return r.Spec.Node
}

// planRoutes are the routes of a node (self; "" for a host that holds no range, such as a
// control plane outside the nodes): every accepted range it does not hold itself, via routeVia.
func planRoutes(accepted []*jkev1.IPRange, self string, holdsItself func(name string) bool, held map[string][]heldBy) []rangeRoute {
	var out []rangeRoute
	for _, r := range accepted {
		if holdsItself != nil && holdsItself(r.Name) {
			continue
		}
		if via := routeVia(r, held[r.Name]); via != "" && via != self {
			out = append(out, rangeRoute{r: r, via: via})
		}
	}
	return out
}

// RouteTargets is where traffic to each IPRange goes for a host that holds no range (a control
// plane outside the nodes): CIDR -> node, by the agents' own rule, from the IPRanges (their
// status.holders) and, for nodes whose agent predates status.holders, their ObservedAnnotation
// values (node name -> value; a new agent's report holds only claims its status entries repeat).
func RouteTargets(ranges []*jkev1.IPRange, legacyReports map[string]string) map[string]string {
	p := planRanges(ranges, "")
	out := map[string]string{}
	for _, rt := range planRoutes(p.accepted, "", nil, claims(p.accepted, legacyReports, "")) {
		out[rt.r.Spec.CIDR] = rt.via
	}
	return out
}

// heldAtRebuild says which ranges a node held, for a database rebuilt after corruption, which
// has lost its records of them: every accepted range it does not serve now that holds an address
// found on the host (imported), at the generation the node's own last report claimed it at
// (ownReport: its claims in status.holders, which outlive the database). A range the report
// does not name is taken at the
// generation before the current one when another node owns it now — it is then revoked, its
// sandboxes withdrawn, which is safe whether failover moved it or an operator did — and at the
// current one otherwise (unassigned: it drains). A range the node's own report claims at an
// older generation than the API shows is recorded even without an address found, so that the
// revocation runs and withdraws what the host still has of it.
func heldAtRebuild(self string, accepted, mine []*jkev1.IPRange, imported []netip.Addr, ownReport map[string]int64) (map[string]ipam.ServedRange, []ipam.Range) {
	serving := map[string]bool{}
	for _, r := range mine {
		serving[r.Name] = true
	}
	served := map[string]ipam.ServedRange{}
	var ranges []ipam.Range
	for _, r := range accepted {
		if serving[r.Name] {
			continue
		}
		ir, err := toIPAMRange(r)
		if err != nil {
			continue
		}
		holds := false
		for _, ip := range imported {
			if ir.Subnet.Contains(ip) {
				holds = true
				break
			}
		}
		gen, reported := ownReport[r.Name]
		switch {
		case holds && reported:
		case holds && r.Spec.Node != "" && r.Spec.Node != self:
			gen = r.Spec.OwnerGeneration - 1
		case holds:
			gen = r.Spec.OwnerGeneration
		case reported && gen < r.Spec.OwnerGeneration:
		default:
			continue
		}
		served[r.Name] = ipam.ServedRange{Subnet: ir.Subnet, OwnerGeneration: gen}
		if holds {
			ranges = append(ranges, ir)
		}
	}
	return served, ranges
}
