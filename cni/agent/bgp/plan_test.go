package bgp

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

func pfx(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range s {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}

func TestAdvertised(t *testing.T) {
	for _, tc := range []struct {
		name string
		held []Range
		want []netip.Prefix
	}{
		{name: "nothing held, nothing announced"},
		{name: "served and draining ranges, sorted, IPv4 first",
			held: []Range{{Name: "b", CIDR: netip.MustParsePrefix("fd00::/120"), Export: true},
				{Name: "a", CIDR: netip.MustParsePrefix("10.244.2.0/24"), Export: true, Draining: true},
				{Name: "c", CIDR: netip.MustParsePrefix("10.244.1.0/24"), Export: true}},
			want: pfx("10.244.1.0/24", "10.244.2.0/24", "fd00::/120")},
		{name: "disableBGPExport keeps a range private",
			held: []Range{{Name: "a", CIDR: netip.MustParsePrefix("10.244.1.0/24"), Export: false},
				{Name: "b", CIDR: netip.MustParsePrefix("10.245.1.0/24"), Export: true}},
			want: pfx("10.245.1.0/24")},
		{name: "one prefix once; host bits masked",
			held: []Range{{Name: "a", CIDR: netip.MustParsePrefix("10.244.1.7/24"), Export: true},
				{Name: "b", CIDR: netip.MustParsePrefix("10.244.1.0/24"), Export: true}},
			want: pfx("10.244.1.0/24")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Advertised(tc.held); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Advertised = %v, want %v", got, tc.want)
			}
		})
	}
}

func bgpPeer(name, ip string, asn int64, mod ...func(*jkev1.BGPPeerSpec)) *jkev1.BGPPeer {
	p := &jkev1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: jkev1.BGPPeerSpec{PeerIP: ip, ASNumber: asn}}
	for _, m := range mod {
		m(&p.Spec)
	}
	return p
}

func TestPlan(t *testing.T) {
	cfg := &jkev1.BGPConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: jkev1.BGPConfigurationSpec{ASNumber: 64512}}
	node4 := []netip.Addr{netip.MustParseAddr("192.168.1.11")}
	held := []Range{{Name: "r1", CIDR: netip.MustParsePrefix("10.244.1.0/24"), Export: true},
		{Name: "r6", CIDR: netip.MustParsePrefix("fd00::/120"), Export: true}}
	secrets := func(k SecretKey) (string, error) {
		if k.Name == "bgp" && k.Key == "router1" {
			return "s3cret", nil
		}
		return "", errors.New(`secret "` + k.Name + `" not found`)
	}
	rack := func(s *jkev1.BGPPeerSpec) {
		s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "r1"}}
	}
	for _, tc := range []struct {
		name         string
		cfg          *jkev1.BGPConfiguration
		peers        []*jkev1.BGPPeer
		labels       map[string]string
		addrs        []netip.Addr
		wantEnabled  bool
		wantPeers    map[string]Peer
		wantPrefixes []netip.Prefix
		wantProblems []string // "peer reason"
	}{
		{name: "no BGPConfiguration: no speaker", peers: []*jkev1.BGPPeer{bgpPeer("r", "192.168.1.1", 65000)}, addrs: node4},
		{name: "a configuration named otherwise is not read",
			cfg:   &jkev1.BGPConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: cfg.Spec},
			peers: []*jkev1.BGPPeer{bgpPeer("r", "192.168.1.1", 65000)}, addrs: node4},
		{name: "no peer: no speaker", cfg: cfg, addrs: node4},
		{name: "no peer selects the node: no speaker", cfg: cfg, addrs: node4,
			peers: []*jkev1.BGPPeer{bgpPeer("r", "192.168.1.1", 65000, rack)}, labels: map[string]string{"rack": "r2"}},
		{name: "a selected peer with defaults; the IPv4 ranges with the node's address, IPv6 without an IPv6 address not",
			cfg: cfg, addrs: node4, labels: map[string]string{"rack": "r1"},
			peers: []*jkev1.BGPPeer{bgpPeer("r", "192.168.1.1", 65000, rack), bgpPeer("other-rack", "192.168.2.1", 65000, func(s *jkev1.BGPPeerSpec) {
				s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"rack": "r2"}}
			})},
			wantEnabled: true,
			wantPeers: map[string]Peer{"r": {Name: "r", Address: netip.MustParseAddr("192.168.1.1"), Port: 179, ASN: 65000,
				HoldTime: 9 * time.Second, Keepalive: 3 * time.Second, RestartTime: 120 * time.Second}},
			wantPrefixes: pfx("10.244.1.0/24")},
		{name: "peer overrides: hold time, keepalive clamped to a third, multihop, port, graceful restart, password",
			cfg: &jkev1.BGPConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: jkev1.BGPConfigurationSpec{ASNumber: 64512,
				KeepaliveTime: &metav1.Duration{Duration: 10 * time.Second}, GracefulRestart: &jkev1.BGPGracefulRestart{Enabled: ptr.To(true)}}},
			addrs: node4,
			peers: []*jkev1.BGPPeer{bgpPeer("r", "192.168.1.1", 65000, func(s *jkev1.BGPPeerSpec) {
				s.HoldTime = &metav1.Duration{Duration: 6 * time.Second}
				s.EBGPMultihop = ptr.To[int32](3)
				s.Port = ptr.To[int32](1790)
				s.GracefulRestart = &jkev1.BGPGracefulRestart{Enabled: ptr.To(false)}
				s.Password = &jkev1.BGPPassword{SecretKeyRef: jkev1.BGPSecretKeyRef{Name: "bgp", Key: "router1"}}
			}), bgpPeer("gr", "192.168.1.2", 65000)},
			wantEnabled: true,
			wantPeers: map[string]Peer{
				"r": {Name: "r", Address: netip.MustParseAddr("192.168.1.1"), Port: 1790, ASN: 65000, Password: "s3cret",
					HoldTime: 6 * time.Second, Keepalive: 2 * time.Second, Multihop: 3, RestartTime: 120 * time.Second},
				"gr": {Name: "gr", Address: netip.MustParseAddr("192.168.1.2"), Port: 179, ASN: 65000,
					HoldTime: 9 * time.Second, Keepalive: 3 * time.Second, GracefulRestart: true, RestartTime: 120 * time.Second}},
			wantPrefixes: pfx("10.244.1.0/24")},
		{name: "a password that cannot be read: that peer has no session and a problem, the other is untouched",
			cfg: cfg, addrs: node4,
			peers: []*jkev1.BGPPeer{bgpPeer("bad", "192.168.1.1", 65000, func(s *jkev1.BGPPeerSpec) {
				s.Password = &jkev1.BGPPassword{SecretKeyRef: jkev1.BGPSecretKeyRef{Name: "missing", Key: "k"}}
			}), bgpPeer("good", "192.168.1.2", 65000)},
			wantEnabled: true,
			wantPeers: map[string]Peer{"good": {Name: "good", Address: netip.MustParseAddr("192.168.1.2"), Port: 179, ASN: 65000,
				HoldTime: 9 * time.Second, Keepalive: 3 * time.Second, RestartTime: 120 * time.Second}},
			wantPrefixes: pfx("10.244.1.0/24"),
			wantProblems: []string{"bad PasswordUnavailable"}},
		{name: "peers the controller-manager does not accept (bgppeerspec.Usable): no session, a problem each",
			cfg: cfg, addrs: node4,
			peers: []*jkev1.BGPPeer{bgpPeer("unspecified", "0.0.0.0", 65000), bgpPeer("no-ip", "router1", 65000),
				bgpPeer("asn0", "192.168.1.3", 0), bgpPeer("no-key", "192.168.1.4", 65000, func(s *jkev1.BGPPeerSpec) {
					s.Password = &jkev1.BGPPassword{SecretKeyRef: jkev1.BGPSecretKeyRef{Name: "bgp"}}
				}), bgpPeer("good", "192.168.1.2", 65000)},
			wantEnabled: true,
			wantPeers: map[string]Peer{"good": {Name: "good", Address: netip.MustParseAddr("192.168.1.2"), Port: 179, ASN: 65000,
				HoldTime: 9 * time.Second, Keepalive: 3 * time.Second, RestartTime: 120 * time.Second}},
			wantPrefixes: pfx("10.244.1.0/24"),
			wantProblems: []string{"unspecified InvalidPeer", "no-ip InvalidPeer", "asn0 InvalidPeer", "no-key InvalidPeer"}},
		{name: "an IPv6 peer on a node without an IPv6 address: a problem",
			cfg: cfg, addrs: node4, peers: []*jkev1.BGPPeer{bgpPeer("v6", "fd00:1::1", 65000)},
			wantEnabled: true, wantPeers: map[string]Peer{}, wantPrefixes: pfx("10.244.1.0/24"),
			wantProblems: []string{"v6 NoLocalAddress"}},
		{name: "dual-stack node: both families announced, IPv6 with its IPv6 next hop",
			cfg: cfg, addrs: []netip.Addr{netip.MustParseAddr("192.168.1.11"), netip.MustParseAddr("fd00:1::11")},
			peers:       []*jkev1.BGPPeer{bgpPeer("v6", "fd00:1::1", 65000)},
			wantEnabled: true,
			wantPeers: map[string]Peer{"v6": {Name: "v6", Address: netip.MustParseAddr("fd00:1::1"), Port: 179, ASN: 65000,
				HoldTime: 9 * time.Second, Keepalive: 3 * time.Second, RestartTime: 120 * time.Second}},
			wantPrefixes: pfx("10.244.1.0/24", "fd00::/120")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, problems := Plan(tc.cfg, tc.peers, tc.labels, tc.addrs, held, secrets)
			if d.Enabled != tc.wantEnabled {
				t.Fatalf("Enabled = %v, want %v (problems %v)", d.Enabled, tc.wantEnabled, problems)
			}
			var got []string
			for _, p := range problems {
				got = append(got, p.Peer+" "+p.Reason)
				if p.Message == "" {
					t.Errorf("problem without a message: %+v", p)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.wantProblems, ",") {
				t.Errorf("problems %v, want %v", got, tc.wantProblems)
			}
			if !tc.wantEnabled {
				return
			}
			if !reflect.DeepEqual(d.Peers, tc.wantPeers) {
				t.Errorf("peers\n%+v\nwant\n%+v", d.Peers, tc.wantPeers)
			}
			if !reflect.DeepEqual(d.Prefixes, tc.wantPrefixes) {
				t.Errorf("prefixes %v, want %v", d.Prefixes, tc.wantPrefixes)
			}
			if d.Global.ASN != 64512 || d.Global.ListenPort != -1 || d.Global.RouterID != netip.MustParseAddr("192.168.1.11") {
				t.Errorf("global %+v: want AS 64512, no listener (-1), router ID = the node's IPv4 address", d.Global)
			}
		})
	}
}

func TestDiffPrefixes(t *testing.T) {
	nh := netip.MustParseAddr("192.168.1.11")
	nextHop := func(netip.Prefix) netip.Addr { return nh }
	announced := map[netip.Prefix]netip.Addr{
		netip.MustParsePrefix("10.244.1.0/24"): nh,
		netip.MustParsePrefix("10.244.2.0/24"): nh,
		netip.MustParsePrefix("10.244.3.0/24"): netip.MustParseAddr("192.168.1.99"), // next hop changed
	}
	add, del := DiffPrefixes(pfx("10.244.1.0/24", "10.244.3.0/24", "10.244.4.0/24"), announced, nextHop)
	if !reflect.DeepEqual(add, pfx("10.244.3.0/24", "10.244.4.0/24")) || !reflect.DeepEqual(del, pfx("10.244.2.0/24")) {
		t.Errorf("announce %v withdraw %v; want announce [10.244.3.0/24 10.244.4.0/24] withdraw [10.244.2.0/24]", add, del)
	}
	add, del = DiffPrefixes(nil, nil, nextHop)
	if add != nil || del != nil {
		t.Errorf("nothing to do, got %v %v", add, del)
	}
}

func TestDiffPeers(t *testing.T) {
	a := Peer{Name: "a", Address: netip.MustParseAddr("192.168.1.1"), ASN: 65000}
	b := Peer{Name: "b", Address: netip.MustParseAddr("192.168.1.2"), ASN: 65000}
	b2 := b
	b2.Password = "new"
	c := Peer{Name: "c", Address: netip.MustParseAddr("192.168.1.3"), ASN: 65000}
	add, remove := DiffPeers(map[string]Peer{"a": a, "b": b2, "c": c}, map[string]Peer{"a": a, "b": b, "d": {Name: "d"}})
	var names []string
	for _, p := range add {
		names = append(names, p.Name)
	}
	if !reflect.DeepEqual(names, []string{"b", "c"}) || !reflect.DeepEqual(remove, []string{"b", "d"}) {
		t.Errorf("add %v remove %v; want add [b c] (b changed: re-added) remove [b d]", names, remove)
	}
}
