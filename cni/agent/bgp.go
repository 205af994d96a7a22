package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/staticip/staticip/apis/bgppeerspec"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/cni/agent/bgp"
)

// BGP advertisement (issue 36; cni/README.md, "BGP advertisement"): the node announces the
// IPRanges it holds — the ones it serves and the draining ones it still holds addresses of,
// both from this pass's plan, the same view that writes its claims in status.holders — minus
// the ranges with spec.disableBGPExport, with its own InternalIP as next hop, to the BGPPeers
// that select its Node. The speaker (cni/agent/bgp) starts only when a BGPConfiguration
// "default" and a BGPPeer selecting the node exist; it connects out only (no listener unless
// the BGPConfiguration sets listenPort) and rejects every route it receives.

// BlackholeProtocol marks the agent's blackhole routes, one per announced prefix (Calico
// does the same): traffic the network sends for an address of the node's ranges that no pod
// holds is dropped on the node instead of following the node's default route back out (a
// loop between the node and the router). The pods' /32 routes are more specific and win; the
// routes to other nodes' ranges (RouteProtocol) are never to a range the node holds itself.
const BlackholeProtocol netlink.RouteProtocol = 0x5b

// BGPConfig is the agent's BGP settings (flags of the same names).
type BGPConfig struct {
	// Enabled: read BGPConfiguration and BGPPeers (informers) and speak BGP when they say so
	// (--bgp). False: no BGP informers, no speaker, whatever the API holds.
	Enabled bool
	// PasswordSecretNamespace/Name: the one Secret the agents read session passwords from
	// (--bgp-password-secret); a BGPPeer naming another Secret gets no session
	// (PasswordUnavailable).
	PasswordSecretNamespace, PasswordSecretName string
	// NodeFailoverWindow is the controller-manager's --node-failover-window: a peer whose hold
	// time (plus graceful restart time) is not shorter gets the HoldTimeSafe=False warning.
	NodeFailoverWindow time.Duration
}

// Reasons of a node's session conditions (and of the Events on the BGPPeer).
const (
	ReasonBGPEstablished          = "Established"
	ReasonBGPConnecting           = "Connecting"
	ReasonBGPPeerNotAnswering     = "PeerNotAnswering"
	ReasonBGPBadPeerAS            = "BadPeerAS"
	ReasonBGPNotificationReceived = "NotificationReceived"
	ReasonBGPNotificationSent     = "NotificationSent"
	ReasonBGPHoldTimerExpired     = "HoldTimerExpired"
	ReasonHoldTimeSafe            = "HoldTimeShorterThanFailoverWindow"
	ReasonHoldTimeUnsafe          = "HoldTimeNotShorterThanFailoverWindow"
)

// notAnsweringAfter is how long a session may stay without an answer before it is reported
// as PeerNotAnswering (an Event) rather than Connecting: a first connection takes a moment.
const notAnsweringAfter = 20 * time.Second

// bgpHeld are the ranges the node holds this pass, for the speaker: those it serves (mine)
// and those it drains (draining, by name, from byName); Export is false for a range with
// spec.disableBGPExport.
func bgpHeld(mine []*jkev1.IPRange, draining map[string]int64, byName map[string]*jkev1.IPRange) []bgp.Range {
	var out []bgp.Range
	add := func(r *jkev1.IPRange, drains bool) {
		p, err := netip.ParsePrefix(r.Spec.CIDR)
		if err != nil {
			return
		}
		out = append(out, bgp.Range{Name: r.Name, CIDR: p.Masked(), Draining: drains,
			Export: r.Spec.DisableBGPExport == nil || !*r.Spec.DisableBGPExport})
	}
	for _, r := range mine {
		add(r, false)
	}
	names := make([]string, 0, len(draining))
	for n := range draining {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if r := byName[n]; r != nil {
			add(r, true)
		}
	}
	return out
}

// establishedCondition says whether a session is up and, if not, why, from its state and the
// last error GoBGP reported (a NOTIFICATION, a hold timer). down is how long the peer has been
// configured without being Established.
func establishedCondition(s bgp.Session, down time.Duration) metav1.Condition {
	c := metav1.Condition{Type: jkev1.BGPNodePeerEstablished, Status: metav1.ConditionFalse}
	e := strings.ToLower(s.LastError)
	switch {
	case s.State == jkev1.BGPSessionEstablished:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonBGPEstablished, fmt.Sprintf("session to %s is Established", s.Peer.Address)
	case strings.Contains(e, "bad peer as") || strings.Contains(e, "bad-peer-as"):
		c.Reason = ReasonBGPBadPeerAS
		c.Message = fmt.Sprintf("the session to %s fails on the AS numbers (%s): the BGPPeer's asNumber %d must be the router's AS, and the router must expect this cluster's AS (BGPConfiguration asNumber)", s.Peer.Address, s.LastError, s.Peer.ASN)
	case strings.HasPrefix(e, "notification-received"):
		c.Reason, c.Message = ReasonBGPNotificationReceived, fmt.Sprintf("peer %s closed the session: %s", s.Peer.Address, s.LastError)
	case strings.HasPrefix(e, "notification-sent"):
		c.Reason, c.Message = ReasonBGPNotificationSent, fmt.Sprintf("this node closed the session to %s: %s", s.Peer.Address, s.LastError)
	case strings.Contains(e, "hold-timer-expired") && down >= notAnsweringAfter:
		c.Reason, c.Message = ReasonBGPHoldTimerExpired, fmt.Sprintf("peer %s stopped answering (hold timer expired); reconnecting", s.Peer.Address)
	case down < notAnsweringAfter:
		c.Reason, c.Message = ReasonBGPConnecting, fmt.Sprintf("connecting to %s port %d (%s)", s.Peer.Address, s.Peer.Port, s.State)
	default:
		c.Reason = ReasonBGPPeerNotAnswering
		// No duration in the message: the status is written only when it changes.
		c.Message = fmt.Sprintf("no BGP session to %s port %d for more than %s (%s): the peer is unreachable, not listening, not configured for this node's address, or its TCP MD5 password differs (a peer's kernel silently drops segments whose signature does not match)",
			s.Peer.Address, s.Peer.Port, notAnsweringAfter, s.State)
	}
	return c
}

// holdTimeCondition is the HoldTimeSafe condition of a peer's settings against the node-failover
// window (bgppeerspec.HoldTimeSafe); no condition when the window is not known (0).
func holdTimeCondition(p bgp.Peer, window time.Duration) *metav1.Condition {
	if window <= 0 {
		return nil
	}
	ok, msg := bgppeerspec.HoldTimeSafe(p.HoldTime, p.GracefulRestart, p.RestartTime, window)
	c := metav1.Condition{Type: jkev1.BGPPeerHoldTimeSafe, Status: metav1.ConditionTrue, Reason: ReasonHoldTimeSafe, Message: msg}
	if !ok {
		c.Status, c.Reason = metav1.ConditionFalse, ReasonHoldTimeUnsafe
	}
	return &c
}

// bgpPeerStatuses are the node's entries per BGPPeer that selects it: the running sessions
// (sessions), and the peers with a problem (no session: Established False with the problem's
// reason), sorted by name. peerIP names each BGPPeer's spec.peerIP; down how long each peer has
// been without an Established session. Conditions keep their transition time from old.
func bgpPeerStatuses(d bgp.Desired, problems []bgp.Problem, peerIP map[string]string, sessions map[string]bgp.Session,
	down map[string]time.Duration, window time.Duration, old []jkev1.BGPNodePeerStatus, now time.Time) []jkev1.BGPNodePeerStatus {
	prev := map[string]jkev1.BGPNodePeerStatus{}
	for _, o := range old {
		prev[o.Name] = o
	}
	var out []jkev1.BGPNodePeerStatus
	setConds := func(e *jkev1.BGPNodePeerStatus, conds ...*metav1.Condition) {
		e.Conditions = slices.Clone(prev[e.Name].Conditions)
		for _, c := range conds {
			if c != nil {
				c.LastTransitionTime = metav1.NewTime(now)
				meta.SetStatusCondition(&e.Conditions, *c)
			}
		}
		if len(conds) < 2 || conds[1] == nil {
			meta.RemoveStatusCondition(&e.Conditions, jkev1.BGPPeerHoldTimeSafe)
		}
	}
	for name, p := range d.Peers {
		s, ok := sessions[name]
		if !ok {
			s = bgp.Session{Peer: p, State: jkev1.BGPSessionIdle}
		}
		e := jkev1.BGPNodePeerStatus{Name: name, PeerIP: p.Address.String(), State: s.State, LastError: truncate(s.LastError, 1024),
			Advertised: int32(s.Advertised)}
		if !s.Since.IsZero() {
			t := metav1.NewTime(s.Since.Truncate(time.Second))
			e.Since = &t
		}
		est := establishedCondition(s, down[name])
		setConds(&e, &est, holdTimeCondition(p, window))
		out = append(out, e)
	}
	for _, pr := range problems {
		e := jkev1.BGPNodePeerStatus{Name: pr.Peer, PeerIP: peerIP[pr.Peer], State: jkev1.BGPSessionIdle, LastError: truncate(pr.Message, 1024)}
		setConds(&e, &metav1.Condition{Type: jkev1.BGPNodePeerEstablished, Status: metav1.ConditionFalse, Reason: pr.Reason, Message: truncate(pr.Message, 32768)})
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// sameBGPStatus compares two statuses without their write time.
func sameBGPStatus(a, b jkev1.BGPNodeStatusStatus) bool {
	a.UpdatedAt, b.UpdatedAt = nil, nil
	return reflect.DeepEqual(a, b)
}

// bgpState is what the agent remembers of its speaker between passes.
type bgpState struct {
	speaker *bgp.Speaker
	// published is speaker for readers outside the sync loop (the tests' RIB dump).
	published atomic.Pointer[bgp.Speaker]
	// status is the node's BGPNodeStatus as last read or written (nil: none exists);
	// statusKnown says whether status reflects the API.
	status      *jkev1.BGPNodeStatus
	statusKnown bool
	// upSince: when each peer (by name) was last seen Established, or first desired.
	upSince map[string]time.Time
	// reported: the Events last recorded per BGPPeer and condition, so that a standing
	// problem is one Event.
	reported map[string]string
	// described is the plan last logged (describeBGP).
	described string
}

// bgpReport is the last pass's BGP picture, for the metrics.
type bgpReport struct {
	enabled    bool
	advertised int
	peers      []jkev1.BGPNodePeerStatus
}

// syncBGP makes the speaker, the blackhole routes and the node's BGPNodeStatus follow the
// BGPConfiguration, the BGPPeers that select this node and the ranges it holds (held). It runs
// right after the pass decided what the node holds and before anything else the pass does, so
// that a range the node no longer holds (a fenced node that came back, a range that moved
// away) is withdrawn first (bgp.Speaker.Apply withdraws before it announces).
func (a *Agent) syncBGP(ctx context.Context, snap *snapshot, held []bgp.Range) error {
	if !a.cfg.BGP.Enabled || a.view.bgpConfigs == nil {
		return nil
	}
	st := &a.bgp
	if st.speaker == nil {
		var logger *slog.Logger
		if a.log != nil {
			logger = slog.New(slog.NewTextHandler(a.log, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
		st.speaker = bgp.NewSpeaker(logger)
		st.speaker.OnSessionChange(a.trigger)
		st.published.Store(st.speaker)
		st.upSince, st.reported = map[string]time.Time{}, map[string]string{}
	}
	cfg, err := a.view.bgpConfigs.Get(jkev1.BGPConfigurationName)
	if err != nil {
		cfg = nil
	}
	peers, _ := a.view.bgpPeers.List(labels.Everything())
	sort.Slice(peers, func(i, j int) bool { return peers[i].Name < peers[j].Name })
	d, problems := bgp.Plan(cfg, peers, snap.selfLabels, snap.selfAddrs, held, a.bgpPassword)
	var errs []error
	if msg := describeBGP(d, problems); msg != st.described {
		a.logf("BGP: %s", msg)
		st.described = msg
	}
	if err := st.speaker.Apply(ctx, d); err != nil {
		errs = append(errs, fmt.Errorf("BGP: %w", err))
	}
	var blackholes []netip.Prefix
	if d.Enabled {
		blackholes = d.Prefixes
	}
	if err := syncBlackholes(blackholes); err != nil {
		errs = append(errs, err)
	}
	now := time.Now()
	var want *jkev1.BGPNodeStatusStatus
	if d.Enabled || len(problems) > 0 {
		sessions := st.speaker.Sessions(ctx)
		down := map[string]time.Duration{}
		for name := range d.Peers {
			if s, ok := sessions[name]; ok && s.State == jkev1.BGPSessionEstablished {
				st.upSince[name] = now
			} else if _, ok := st.upSince[name]; !ok {
				st.upSince[name] = now
			}
			down[name] = now.Sub(st.upSince[name])
		}
		for name := range st.upSince {
			if _, ok := d.Peers[name]; !ok {
				delete(st.upSince, name)
			}
		}
		peerIP := map[string]string{}
		for _, p := range peers {
			peerIP[p.Name] = p.Spec.PeerIP
		}
		var old []jkev1.BGPNodePeerStatus
		if st.status != nil {
			old = st.status.Status.Peers
		}
		want = &jkev1.BGPNodeStatusStatus{Peers: bgpPeerStatuses(d, problems, peerIP, sessions, down, a.cfg.BGP.NodeFailoverWindow, old, now)}
		for _, p := range st.speaker.Announced() {
			want.Advertised = append(want.Advertised, p.String())
		}
		a.reportBGP(peers, want.Peers)
	} else {
		st.upSince = map[string]time.Time{}
	}
	report := &bgpReport{enabled: d.Enabled}
	if want != nil {
		report.advertised, report.peers = len(want.Advertised), want.Peers
	}
	a.bgpReport.Store(report)
	apiCtx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	if err := a.writeBGPStatus(apiCtx, want, now); err != nil {
		a.apiErrors.Add(1)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// describeBGP says in one line what the speaker does (logged when it changes).
func describeBGP(d bgp.Desired, problems []bgp.Problem) string {
	if !d.Enabled {
		if len(problems) == 0 {
			return "off (no BGPConfiguration \"default\" or no BGPPeer selects this node)"
		}
	}
	var peers []string
	for name, p := range d.Peers {
		peers = append(peers, fmt.Sprintf("%s (%s AS %d)", name, p.Address, p.ASN))
	}
	for _, p := range problems {
		peers = append(peers, fmt.Sprintf("%s (no session: %s)", p.Peer, p.Reason))
	}
	sort.Strings(peers)
	return fmt.Sprintf("AS %d, router ID %s, announcing %v to %s", d.Global.ASN, d.Global.RouterID, d.Prefixes, strings.Join(peers, ", "))
}

// bgpPassword reads a session password from the one Secret the agents may read.
func (a *Agent) bgpPassword(ref bgp.SecretKey) (string, error) {
	c := a.cfg.BGP
	if c.PasswordSecretName == "" || ref.Name != c.PasswordSecretName {
		return "", fmt.Errorf("the agents read passwords only from Secret %s/%s (staticip-agent --bgp-password-secret; its RBAC names that Secret alone): put the password under a key of it", c.PasswordSecretNamespace, c.PasswordSecretName)
	}
	if a.view.secrets == nil {
		return "", errors.New("no password Secret configured")
	}
	s, err := a.view.secrets.Secrets(c.PasswordSecretNamespace).Get(ref.Name)
	if err != nil {
		return "", fmt.Errorf("Secret %s/%s: %w", c.PasswordSecretNamespace, ref.Name, err)
	}
	v, ok := s.Data[ref.Key]
	if !ok || len(v) == 0 {
		return "", fmt.Errorf("Secret %s/%s has no key %q", c.PasswordSecretNamespace, ref.Name, ref.Key)
	}
	return string(v), nil
}

// reportBGP records a Warning Event on a BGPPeer for each condition of this node's session to
// it that turned bad (Established False other than Connecting, HoldTimeSafe False), and a
// Normal one when a session comes up after having been reported down: once per change.
func (a *Agent) reportBGP(peers []*jkev1.BGPPeer, entries []jkev1.BGPNodePeerStatus) {
	byName := map[string]*jkev1.BGPPeer{}
	for _, p := range peers {
		byName[p.Name] = p
	}
	now := map[string]string{}
	for _, e := range entries {
		bp := byName[e.Name]
		for _, c := range e.Conditions {
			key := e.Name + "/" + c.Type
			bad := c.Status == metav1.ConditionFalse && c.Reason != ReasonBGPConnecting
			prev := a.bgp.reported[key]
			switch {
			case bad:
				now[key] = c.Reason
				if prev != c.Reason {
					a.logf("BGPPeer %s: %s", e.Name, c.Message)
					if a.recorder != nil && bp != nil {
						a.recorder.Event(bp, corev1.EventTypeWarning, c.Reason, fmt.Sprintf("node %s: %s", a.cfg.NodeName, c.Message))
					}
				}
			case c.Status == metav1.ConditionTrue && prev != "" && c.Type == jkev1.BGPNodePeerEstablished:
				if a.recorder != nil && bp != nil {
					a.recorder.Event(bp, corev1.EventTypeNormal, ReasonBGPEstablished, fmt.Sprintf("node %s: %s", a.cfg.NodeName, c.Message))
				}
			case c.Status == metav1.ConditionFalse:
				now[key] = prev // still connecting: keep what was reported
			}
		}
	}
	a.bgp.reported = now
}

// writeBGPStatus makes this node's BGPNodeStatus say want (nil: the node speaks no BGP and
// has no BGPNodeStatus), writing only when it changed. The first pass reads the object once;
// after that the agent knows it from its own writes (no watch).
func (a *Agent) writeBGPStatus(ctx context.Context, want *jkev1.BGPNodeStatusStatus, now time.Time) error {
	st := &a.bgp
	api := a.sip.JkeV1().BGPNodeStatuses()
	if !st.statusKnown {
		cur, err := api.Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			st.status = nil
		case err != nil:
			return fmt.Errorf("BGPNodeStatus %s: %w", a.cfg.NodeName, err)
		default:
			st.status = cur
		}
		st.statusKnown = true
	}
	if want == nil {
		if st.status == nil {
			return nil
		}
		err := api.Delete(ctx, a.cfg.NodeName, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete BGPNodeStatus %s: %w", a.cfg.NodeName, err)
		}
		st.status = nil
		return nil
	}
	if st.status != nil && sameBGPStatus(st.status.Status, *want) {
		return nil
	}
	if st.status == nil {
		created, err := api.Create(ctx, &jkev1.BGPNodeStatus{ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			created, err = api.Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
		}
		if err != nil {
			st.statusKnown = false
			return fmt.Errorf("create BGPNodeStatus %s: %w", a.cfg.NodeName, err)
		}
		st.status = created
	}
	upd := st.status.DeepCopy()
	upd.Status = *want
	t := metav1.NewTime(now)
	upd.Status.UpdatedAt = &t
	written, err := api.UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		st.statusKnown = false // read it again next pass (a conflict, or deleted meanwhile)
		a.trigger()
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("BGPNodeStatus %s status: %w", a.cfg.NodeName, err)
	}
	st.status = written
	return nil
}

// syncBlackholes makes the blackhole routes with BlackholeProtocol exactly want, in the
// agent's network namespace.
func syncBlackholes(want []netip.Prefix) error {
	wanted := map[string]netip.Prefix{}
	for _, p := range want {
		wanted[p.Masked().String()] = p.Masked()
	}
	existing, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: BlackholeProtocol}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return fmt.Errorf("list blackhole routes: %w", err)
	}
	var errs []error
	for _, r := range existing {
		if r.Dst != nil {
			if _, ok := wanted[r.Dst.String()]; ok && r.Type == unix.RTN_BLACKHOLE {
				delete(wanted, r.Dst.String())
				continue
			}
		}
		if err := netlink.RouteDel(&r); err != nil {
			errs = append(errs, fmt.Errorf("delete blackhole route %s: %w", r.Dst, err))
		}
	}
	for _, p := range wanted {
		dst := &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
		r := &netlink.Route{Dst: dst, Type: unix.RTN_BLACKHOLE, Protocol: BlackholeProtocol}
		if err := netlink.RouteReplace(r); err != nil {
			errs = append(errs, fmt.Errorf("blackhole route %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// stopBGP is the speaker's end when the agent shuts down. Without graceful restart it stops
// the speaker: every session closes with a Cease and the peers withdraw the node's routes at
// once. With graceful restart on for a session it leaves the sessions to the process's exit: a
// Cease would end the peer's graceful restart too, while a connection that just closes is a
// restarting speaker, whose routes the peer keeps (stale) for the restart time — a rolling
// update of the agents then costs no route.
func (a *Agent) stopBGP() {
	sp := a.bgp.speaker
	if sp == nil {
		return
	}
	if sp.GracefulRestart() {
		a.logf("BGP: exiting without closing the sessions: graceful restart is on, the peers keep this node's routes until the agent is back")
		return
	}
	sp.Stop()
}
