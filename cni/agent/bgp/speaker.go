package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// Speaker is the node's BGP speaker: an embedded GoBGP server, driven only through Apply.
// It starts with nothing announced, so a restarted agent (or a fenced node that came back)
// announces nothing until its first Apply — which the agent calls only once it has decided
// what the node serves.
type Speaker struct {
	log *slog.Logger

	mu        sync.Mutex
	srv       *server.BgpServer
	global    Global
	peers     map[string]Peer
	announced map[netip.Prefix]netip.Addr
	// states are the sessions' last state change, by peer address (OnPeerUpdate).
	states map[netip.Addr]sessionEvent
	cancel context.CancelFunc
	// onChange is called (without the lock) after every session state change.
	onChange func()
}

// OnSessionChange sets a function called after every session state change (the agent
// triggers a pass, so that its status and metrics follow the session at once).
func (sp *Speaker) OnSessionChange(f func()) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.onChange = f
}

type sessionEvent struct {
	state  jkev1.BGPSessionState
	since  time.Time
	reason string
}

// NewSpeaker returns a stopped speaker; log may be nil.
func NewSpeaker(log *slog.Logger) *Speaker {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Speaker{log: log, states: map[netip.Addr]sessionEvent{}}
}

// Apply makes the speaker do what d says: stop it (d.Enabled false), (re)start it when its own
// settings changed (ASN, router ID, listen port: GoBGP cannot change them on a running
// server), then the peers (DiffPeers) and the announced prefixes (DiffPrefixes). Withdrawals go
// before announcements. An error leaves what succeeded in place; the next Apply retries the rest.
func (sp *Speaker) Apply(ctx context.Context, d Desired) error {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if !d.Enabled {
		sp.stopLocked()
		return nil
	}
	if sp.srv != nil && sp.global != d.Global {
		sp.stopLocked()
	}
	if sp.srv == nil {
		if err := sp.startLocked(ctx, d.Global); err != nil {
			return err
		}
	}
	var errs []error
	// Withdrawals first, before any session changes: a range the node no longer holds (a
	// fenced node that came back, a range that moved away) leaves every peer before anything
	// else the pass does.
	announce, withdraw := DiffPrefixes(d.Prefixes, sp.announced, d.NextHop)
	for _, p := range withdraw {
		path, err := localPath(p, sp.announced[p])
		if err == nil {
			err = sp.srv.DeletePath(apiutil.DeletePathRequest{Paths: []*apiutil.Path{path}})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("withdraw %s: %w", p, err))
			continue
		}
		delete(sp.announced, p)
	}
	add, remove := DiffPeers(d.Peers, sp.peers)
	for _, name := range remove {
		p := sp.peers[name]
		if err := sp.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: p.Address.String()}); err != nil {
			errs = append(errs, fmt.Errorf("delete BGP peer %s (%s): %w", name, p.Address, err))
			continue
		}
		delete(sp.peers, name)
		delete(sp.states, p.Address)
	}
	for _, p := range add {
		if err := sp.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: apiPeer(p)}); err != nil {
			errs = append(errs, fmt.Errorf("add BGP peer %s (%s): %w", p.Name, p.Address, err))
			continue
		}
		sp.peers[p.Name] = p
	}
	for _, p := range announce {
		path, err := localPath(p, d.NextHop(p))
		if err == nil {
			_, err = sp.srv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{path}})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("announce %s: %w", p, err))
			continue
		}
		sp.announced[p] = d.NextHop(p)
	}
	return errors.Join(errs...)
}

// Stop closes every session (the peers withdraw the node's routes, or keep them as stale for
// the restart time when graceful restart is on) and stops the server.
func (sp *Speaker) Stop() {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.stopLocked()
}

func (sp *Speaker) stopLocked() {
	if sp.srv == nil {
		return
	}
	_ = sp.srv.StopBgp(context.Background(), &api.StopBgpRequest{})
	sp.cancel()
	sp.srv, sp.peers, sp.announced, sp.cancel = nil, nil, nil, nil
	sp.states = map[netip.Addr]sessionEvent{}
}

// startLocked starts GoBGP with an import policy that rejects every route: staticip announces
// only, and no route a peer sends may reach the node's tables (GoBGP installs none anyway:
// no zebra).
func (sp *Speaker) startLocked(ctx context.Context, g Global) error {
	srv := server.NewBgpServer(server.LoggerOption(sp.log, nil))
	go srv.Serve()
	if err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: g.ASN, RouterId: g.RouterID.String(), ListenPort: g.ListenPort,
	}}); err != nil {
		srv.Stop()
		return fmt.Errorf("start BGP speaker (AS %d, router ID %s): %w", g.ASN, g.RouterID, err)
	}
	// GoBGP passes the paths the speaker originates itself (AddPath) through the global
	// import policy too: accept those (route type local), reject everything else.
	own := &api.Policy{Name: "staticip-own-paths-only", Statements: []*api.Statement{{Name: "accept-local",
		Conditions: &api.Conditions{RouteType: api.Conditions_ROUTE_TYPE_LOCAL},
		Actions:    &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_ACCEPT}}}}
	err := srv.AddPolicy(ctx, &api.AddPolicyRequest{Policy: own})
	if err == nil {
		err = srv.SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
			Name: "global", Direction: api.PolicyDirection_POLICY_DIRECTION_IMPORT,
			Policies: []*api.Policy{{Name: own.Name}}, DefaultAction: api.RouteAction_ROUTE_ACTION_REJECT,
		}})
	}
	if err != nil {
		_ = srv.StopBgp(ctx, &api.StopBgpRequest{})
		srv.Stop()
		return fmt.Errorf("BGP import policy (reject every received route): %w", err)
	}
	watchCtx, cancel := context.WithCancel(context.Background())
	if err := srv.WatchEvent(watchCtx, server.WatchEventMessageCallbacks{OnPeerUpdate: sp.onPeerUpdate},
		server.WatchPeer()); err != nil {
		cancel()
		_ = srv.StopBgp(ctx, &api.StopBgpRequest{})
		return fmt.Errorf("watch BGP sessions: %w", err)
	}
	sp.srv, sp.global, sp.cancel = srv, g, cancel
	sp.peers, sp.announced = map[string]Peer{}, map[netip.Prefix]netip.Addr{}
	return nil
}

func (sp *Speaker) onPeerUpdate(ev *apiutil.WatchEventMessage_PeerEvent, t time.Time) {
	if ev == nil || ev.Type != apiutil.PEER_EVENT_STATE {
		return
	}
	addr := ev.Peer.State.NeighborAddress
	reason := ""
	if ev.Peer.State.DisconnectMessage != "" {
		reason = ev.Peer.State.DisconnectMessage
	}
	sp.mu.Lock()
	old := sp.states[addr]
	st := sessionState(ev.Peer.State.SessionState)
	if reason == "" && st != jkev1.BGPSessionEstablished {
		reason = old.reason // keep why it last failed while it retries
	}
	sp.states[addr] = sessionEvent{state: st, since: t, reason: reason}
	notify := sp.onChange
	sp.mu.Unlock()
	if notify != nil {
		notify()
	}
}

// Session is one session's state as the status and metrics report it.
type Session struct {
	Peer       Peer
	State      jkev1.BGPSessionState
	Since      time.Time
	LastError  string
	Advertised int
}

// Sessions are the running sessions, by BGPPeer name.
func (sp *Speaker) Sessions(ctx context.Context) map[string]Session {
	sp.mu.Lock()
	srv, peers := sp.srv, map[string]Peer{}
	for n, p := range sp.peers {
		peers[n] = p
	}
	events := map[netip.Addr]sessionEvent{}
	for a, e := range sp.states {
		events[a] = e
	}
	announced := len(sp.announced)
	sp.mu.Unlock()
	out := map[string]Session{}
	if srv == nil {
		return out
	}
	live := map[string]*api.Peer{}
	_ = srv.ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
		if p.Conf != nil {
			live[p.Conf.NeighborAddress] = p
		}
	})
	for name, p := range peers {
		s := Session{Peer: p, State: jkev1.BGPSessionUnknown}
		if lp, ok := live[p.Address.String()]; ok && lp.State != nil {
			s.State = sessionStateAPI(lp.State.SessionState)
		}
		if e, ok := events[p.Address]; ok {
			s.Since, s.LastError = e.since, e.reason
			if s.State == jkev1.BGPSessionUnknown {
				s.State = e.state
			}
		}
		if s.State == jkev1.BGPSessionEstablished {
			s.Advertised = announced
			s.LastError = ""
		}
		out[name] = s
	}
	return out
}

// Announced are the prefixes the speaker announces now.
func (sp *Speaker) Announced() []netip.Prefix {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	var out []netip.Prefix
	for p := range sp.announced {
		out = append(out, p)
	}
	return Advertised(rangesOf(out))
}

func rangesOf(ps []netip.Prefix) []Range {
	out := make([]Range, len(ps))
	for i, p := range ps {
		out[i] = Range{CIDR: p, Export: true}
	}
	return out
}

func sessionState(s bgp.FSMState) jkev1.BGPSessionState {
	switch s {
	case bgp.BGP_FSM_IDLE:
		return jkev1.BGPSessionIdle
	case bgp.BGP_FSM_CONNECT:
		return jkev1.BGPSessionConnect
	case bgp.BGP_FSM_ACTIVE:
		return jkev1.BGPSessionActive
	case bgp.BGP_FSM_OPENSENT:
		return jkev1.BGPSessionOpenSent
	case bgp.BGP_FSM_OPENCONFIRM:
		return jkev1.BGPSessionOpenConfirm
	case bgp.BGP_FSM_ESTABLISHED:
		return jkev1.BGPSessionEstablished
	}
	return jkev1.BGPSessionUnknown
}

func sessionStateAPI(s api.PeerState_SessionState) jkev1.BGPSessionState {
	switch s {
	case api.PeerState_SESSION_STATE_IDLE:
		return jkev1.BGPSessionIdle
	case api.PeerState_SESSION_STATE_CONNECT:
		return jkev1.BGPSessionConnect
	case api.PeerState_SESSION_STATE_ACTIVE:
		return jkev1.BGPSessionActive
	case api.PeerState_SESSION_STATE_OPENSENT:
		return jkev1.BGPSessionOpenSent
	case api.PeerState_SESSION_STATE_OPENCONFIRM:
		return jkev1.BGPSessionOpenConfirm
	case api.PeerState_SESSION_STATE_ESTABLISHED:
		return jkev1.BGPSessionEstablished
	}
	return jkev1.BGPSessionUnknown
}

// apiPeer is GoBGP's form of a session: IPv4 and IPv6 unicast, timers, password, multihop and
// graceful restart as resolved.
func apiPeer(p Peer) *api.Peer {
	ap := &api.Peer{
		Conf: &api.PeerConf{NeighborAddress: p.Address.String(), PeerAsn: p.ASN, AuthPassword: p.Password,
			Description: "BGPPeer " + p.Name},
		Transport: &api.Transport{RemotePort: uint32(p.Port)},
		Timers: &api.Timers{Config: &api.TimersConfig{
			HoldTime: uint64(p.HoldTime / time.Second), KeepaliveInterval: uint64(p.Keepalive / time.Second),
			ConnectRetry: 5,
		}},
	}
	if p.Multihop > 0 {
		ap.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: uint32(p.Multihop)}
	}
	families := []*api.Family{{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}}
	if p.Address.Is6() {
		families = []*api.Family{{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}}
	}
	for _, f := range families {
		as := &api.AfiSafi{Config: &api.AfiSafiConfig{Family: f, Enabled: true}}
		if p.GracefulRestart {
			as.MpGracefulRestart = &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}
		}
		ap.AfiSafis = append(ap.AfiSafis, as)
	}
	if p.GracefulRestart {
		ap.GracefulRestart = &api.GracefulRestart{Enabled: true, RestartTime: uint32(p.RestartTime / time.Second)}
	}
	return ap
}

// localPath is the announcement of prefix p via nextHop (origin IGP).
func localPath(p netip.Prefix, nextHop netip.Addr) (*apiutil.Path, error) {
	nlri, err := bgp.NewIPAddrPrefix(p)
	if err != nil {
		return nil, err
	}
	origin := bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP)
	if p.Addr().Is4() {
		nh, err := bgp.NewPathAttributeNextHop(nextHop)
		if err != nil {
			return nil, err
		}
		return &apiutil.Path{Family: bgp.RF_IPv4_UC, Nlri: nlri, Attrs: []bgp.PathAttributeInterface{origin, nh}}, nil
	}
	mp, err := bgp.NewPathAttributeMpReachNLRI(bgp.RF_IPv6_UC, []bgp.PathNLRI{{NLRI: nlri}}, nextHop)
	if err != nil {
		return nil, err
	}
	return &apiutil.Path{Family: bgp.RF_IPv6_UC, Nlri: nlri, Attrs: []bgp.PathAttributeInterface{origin, mp}}, nil
}

// RIB is what the speaker's tables hold of the routes its peers sent, IPv4 and IPv6 unicast:
// received are the prefixes in the peers' adj-RIB-in (before the import policy), accepted
// those of the global RIB that came from a peer. With the import policy that rejects every
// route, accepted stays empty whatever the peers send (the node installs nothing either: the
// speaker has no route to install anything through).
func (sp *Speaker) RIB() (received, accepted []netip.Prefix, err error) {
	sp.mu.Lock()
	srv := sp.srv
	var peers []netip.Addr
	for _, p := range sp.peers {
		peers = append(peers, p.Address)
	}
	sp.mu.Unlock()
	if srv == nil {
		return nil, nil, nil
	}
	collect := func(out *[]netip.Prefix, fromPeer bool) func(bgp.NLRI, []*apiutil.Path) {
		return func(n bgp.NLRI, paths []*apiutil.Path) {
			for _, p := range paths {
				if !fromPeer || p.PeerAddress.IsValid() && !p.PeerAddress.IsUnspecified() {
					if pfx, err := netip.ParsePrefix(n.String()); err == nil {
						*out = append(*out, pfx)
					}
					return
				}
			}
		}
	}
	for _, fam := range []bgp.Family{bgp.RF_IPv4_UC, bgp.RF_IPv6_UC} {
		for _, peer := range peers {
			if e := srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_ADJ_IN, Name: peer.String(), Family: fam, EnableFiltered: true},
				collect(&received, false)); e != nil {
				err = errors.Join(err, e)
			}
		}
		if e := srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: fam}, collect(&accepted, true)); e != nil {
			err = errors.Join(err, e)
		}
	}
	return received, accepted, err
}
