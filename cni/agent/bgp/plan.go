// Package bgp is the node agent's BGP speaker (issue 36): it announces the IPRanges its node
// holds — the ones it serves and the draining ones it still holds addresses of — with the node's
// own address as next hop, to the routers the BGPPeers name, and rejects every route it
// receives. It embeds GoBGP v4 (github.com/osrg/gobgp/v4), as Kube-OVN and Cilium do.
//
// The decisions are pure functions of this file (table-tested in plan_test.go): which prefixes
// the node announces (Advertised), which peers it talks to and with what settings
// (SelectPeers), and what to change in the running speaker (DiffPrefixes, DiffPeers: desired
// against announced, Cilium's reconcile pattern). speaker.go is the thin I/O around GoBGP.
package bgp

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/staticip/staticip/apis/bgppeerspec"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// DefaultPeerPort is a BGPPeer's port unless it sets one (the timers' defaults: apis/bgppeerspec).
const DefaultPeerPort = 179

// Range is one IPRange the node holds, as the agent decided it this pass: it serves it, or it
// drains it (still holds addresses of it at the range's current generation). Export is false
// when the range (its pool) says disableBGPExport.
type Range struct {
	Name     string
	CIDR     netip.Prefix
	Export   bool
	Draining bool
}

// Advertised are the prefixes the node announces: every held range that is exported, each
// prefix once, sorted (IPv4 first).
func Advertised(held []Range) []netip.Prefix {
	var out []netip.Prefix
	for _, r := range held {
		if r.Export && r.CIDR.IsValid() {
			out = append(out, r.CIDR.Masked())
		}
	}
	slices.SortFunc(out, comparePrefix)
	return slices.Compact(out)
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return cmp.Compare(a.Bits(), b.Bits())
}

// Peer is one session's settings, resolved from the BGPConfiguration and a BGPPeer.
type Peer struct {
	// Name of the BGPPeer.
	Name     string
	Address  netip.Addr
	Port     uint16
	ASN      uint32
	Password string
	// HoldTime and Keepalive in effect (the peer's override, else the configuration's, else
	// the defaults).
	HoldTime, Keepalive time.Duration
	// Multihop is the eBGP multihop TTL; 0 = directly connected.
	Multihop uint8
	// GracefulRestart: the speaker offers RFC 4724 graceful restart with RestartTime.
	GracefulRestart bool
	RestartTime     time.Duration
}

// Problem is a peer this node cannot talk to as configured, and why (reported as an Event on
// the BGPPeer; the other peers go on).
type Problem struct {
	Peer    string
	Reason  string
	Message string
}

// Reasons of Problems (and of the Events the agent records on a BGPPeer).
const (
	ReasonPasswordUnavailable = "PasswordUnavailable"
	ReasonInvalidPeer         = "InvalidPeer"
	ReasonNoLocalAddress      = "NoLocalAddress"
)

// SecretKey is where a password is: the key of a Secret in the release namespace.
type SecretKey struct{ Name, Key string }

// Global is the speaker's own settings.
type Global struct {
	ASN        uint32
	RouterID   netip.Addr
	ListenPort int32
}

// Desired is everything the speaker should be doing. The zero value (Enabled false) means: no
// speaker at all.
type Desired struct {
	Enabled bool
	Global  Global
	// Peers by BGPPeer name.
	Peers map[string]Peer
	// Prefixes to announce (Advertised), with NextHop of their family.
	Prefixes []netip.Prefix
	// NextHop4 and NextHop6 are the node's own addresses, one per family (invalid: none).
	NextHop4, NextHop6 netip.Addr
}

// NextHop is the next hop of a prefix: the node's address of the prefix's family.
func (d Desired) NextHop(p netip.Prefix) netip.Addr {
	if p.Addr().Is4() {
		return d.NextHop4
	}
	return d.NextHop6
}

// Plan decides what the speaker of node nodeName (its labels, its addresses) does: nothing
// without a BGPConfiguration "default" or without a peer that selects the node; else a session
// to every selected peer whose password is available and whose family the node has an address
// of, announcing the exported held ranges of a family the node has a next hop for. password
// returns a Secret key's value (an error: it cannot be read). Problems are per peer; a peer
// with a problem gets no session, the others are untouched.
func Plan(cfg *jkev1.BGPConfiguration, peers []*jkev1.BGPPeer, nodeLabels map[string]string, nodeAddrs []netip.Addr,
	held []Range, password func(SecretKey) (string, error)) (Desired, []Problem) {
	if cfg == nil || cfg.Name != jkev1.BGPConfigurationName {
		return Desired{}, nil
	}
	var d Desired
	d.Global = Global{ASN: uint32(cfg.Spec.ASNumber), ListenPort: cfg.Spec.ListenPort}
	if d.Global.ListenPort == 0 {
		d.Global.ListenPort = -1 // GoBGP: accept no sessions, only connect out
	}
	for _, a := range nodeAddrs {
		switch {
		case a.Is4() && !d.NextHop4.IsValid():
			d.NextHop4 = a
		case a.Is6() && !a.Is4In6() && !d.NextHop6.IsValid():
			d.NextHop6 = a
		}
	}
	// The router ID is a 32-bit number, written as an IPv4 address: the node's IPv4 address,
	// else one made of the node's IPv6 address's last four bytes (unique enough per network).
	if d.NextHop4.IsValid() {
		d.Global.RouterID = d.NextHop4
	} else if d.NextHop6.IsValid() {
		b := d.NextHop6.As16()
		d.Global.RouterID = netip.AddrFrom4([4]byte(b[12:]))
	}
	var problems []Problem
	d.Peers = map[string]Peer{}
	for _, bp := range peers {
		if !selects(bp.Spec.NodeSelector, nodeLabels) {
			continue
		}
		p, prob := resolvePeer(&cfg.Spec, bp, password)
		if prob == nil && ((p.Address.Is4() && !d.NextHop4.IsValid()) || (p.Address.Is6() && !d.NextHop6.IsValid())) {
			prob = &Problem{Peer: bp.Name, Reason: ReasonNoLocalAddress,
				Message: fmt.Sprintf("the node has no address of the family of peer %s: no session", p.Address)}
		}
		if prob != nil {
			problems = append(problems, *prob)
			continue
		}
		d.Peers[bp.Name] = p
	}
	if len(d.Peers) == 0 && len(problems) == 0 {
		return Desired{}, nil // no peer selects this node: no speaker
	}
	d.Enabled = d.Global.RouterID.IsValid()
	for _, p := range Advertised(held) {
		if d.NextHop(p).IsValid() {
			d.Prefixes = append(d.Prefixes, p)
		}
	}
	return d, problems
}

// selects reports whether a BGPPeer's node selector (nil or empty: every node) matches.
func selects(sel *metav1.LabelSelector, nodeLabels map[string]string) bool {
	if sel == nil {
		return true
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false // an invalid selector selects nothing (the API server validates it)
	}
	return s.Matches(labels.Set(nodeLabels))
}

// resolvePeer turns a BGPPeer into a session's settings.
func resolvePeer(cfg *jkev1.BGPConfigurationSpec, bp *jkev1.BGPPeer, password func(SecretKey) (string, error)) (Peer, *Problem) {
	addr, err := bgppeerspec.Usable(&bp.Spec)
	if err != nil {
		return Peer{}, &Problem{Peer: bp.Name, Reason: ReasonInvalidPeer, Message: err.Error() + ": no session"}
	}
	p := Peer{Name: bp.Name, Address: addr, Port: DefaultPeerPort, ASN: uint32(bp.Spec.ASNumber),
		HoldTime: bgppeerspec.HoldTime(cfg, &bp.Spec), Keepalive: bgppeerspec.DefaultKeepalive}
	if bp.Spec.Port != nil {
		p.Port = uint16(*bp.Spec.Port)
	}
	switch {
	case bp.Spec.KeepaliveTime != nil:
		p.Keepalive = bp.Spec.KeepaliveTime.Duration
	case cfg.KeepaliveTime != nil:
		p.Keepalive = cfg.KeepaliveTime.Duration
	}
	if p.Keepalive*3 > p.HoldTime { // a peer's hold time with the configuration's keepalive
		p.Keepalive = p.HoldTime / 3
	}
	if bp.Spec.EBGPMultihop != nil {
		p.Multihop = uint8(*bp.Spec.EBGPMultihop)
	}
	p.GracefulRestart, p.RestartTime = bgppeerspec.GracefulRestart(cfg, &bp.Spec)
	if bp.Spec.Password != nil {
		ref := SecretKey{Name: bp.Spec.Password.SecretKeyRef.Name, Key: bp.Spec.Password.SecretKeyRef.Key}
		pw, err := password(ref)
		if err != nil {
			return Peer{}, &Problem{Peer: bp.Name, Reason: ReasonPasswordUnavailable,
				Message: fmt.Sprintf("password of peer %s from Secret key %s/%s: %v; no session until it can be read", addr, ref.Name, ref.Key, err)}
		}
		p.Password = pw
	}
	return p, nil
}

// DiffPrefixes is what to change so that announced becomes desired: prefixes to announce
// (new, or whose next hop changed: in nextHopChanged) and prefixes to withdraw.
func DiffPrefixes(desired []netip.Prefix, announced map[netip.Prefix]netip.Addr, nextHop func(netip.Prefix) netip.Addr) (announce, withdraw []netip.Prefix) {
	want := map[netip.Prefix]bool{}
	for _, p := range desired {
		want[p] = true
		if nh, ok := announced[p]; !ok || nh != nextHop(p) {
			announce = append(announce, p)
		}
	}
	for p := range announced {
		if !want[p] {
			withdraw = append(withdraw, p)
		}
	}
	slices.SortFunc(announce, comparePrefix)
	slices.SortFunc(withdraw, comparePrefix)
	return announce, withdraw
}

// DiffPeers is what to change so that the running sessions become the desired ones: peers to
// add, peer names to delete, and peers whose settings changed (deleted and added again: GoBGP
// cannot change a session's password or AS in place).
func DiffPeers(desired, running map[string]Peer) (add []Peer, remove []string) {
	for name, p := range running {
		if want, ok := desired[name]; !ok || want != p {
			remove = append(remove, name)
		}
	}
	for name, p := range desired {
		if have, ok := running[name]; !ok || have != p {
			add = append(add, p)
		}
	}
	slices.Sort(remove)
	slices.SortFunc(add, func(a, b Peer) int { return cmp.Compare(a.Name, b.Name) })
	return add, remove
}
