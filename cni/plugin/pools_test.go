package plugin

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/apis/poolchoice"
	"github.com/staticip/staticip/ipam"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

func TestAnnotationKeysAgreeInPlugin(t *testing.T) {
	if AnnotationIPPools != jkev1.AnnotationIPPools {
		t.Errorf("plugin reads %q, the API defines %q", AnnotationIPPools, jkev1.AnnotationIPPools)
	}
}

// The pick of an address by pool, through ADD into real network namespaces, on a node whose
// store the agent manages: a pod naming a pool gets an address of that pool's range; a pod
// naming none never one of a restricted range; a pod naming a pool with no range here waits
// (bounded) and gets one of the block that arrives meanwhile, or fails with code 104 naming the
// pool when none comes; a static IP keeps its pool.
func TestAddPicksFromThePodsPool(t *testing.T) {
	h := newHarness(t)
	h.agentSetsRanges(
		ipam.Range{Subnet: netip.MustParsePrefix("10.123.0.0/28"), Pool: "default"},
		ipam.Range{Subnet: netip.MustParsePrefix("10.124.0.0/30"), Pool: "blue", Restricted: true},
	)
	withPools := func(pools string, extra map[string]string) []byte {
		ann := map[string]string{}
		if pools != "" {
			ann[AnnotationIPPools] = pools
		}
		for k, v := range extra {
			ann[k] = v
		}
		return h.conf(map[string]any{"poolWait": "1s", "runtimeConfig": map[string]any{PodAnnotationsCapability: ann}})
	}
	ipOf := func(name string, conf []byte) (string, error) {
		pod := newNS(t, name)
		r, err := h.add(podArgs(pod, "ctr-"+name, "K8S_POD_NAMESPACE=ns;K8S_POD_NAME="+name, conf))
		if err != nil {
			return "", err
		}
		return r.IPs[0].Address.IP.String(), nil
	}

	if got, err := ipOf("blue1", withPools(`["blue"]`, nil)); err != nil || !strings.HasPrefix(got, "10.124.0.") {
		t.Fatalf("pod naming blue: %s, %v; want an address of 10.124.0.0/30", got, err)
	}
	for _, name := range []string{"plain1", "plain2", "plain3"} {
		if got, err := ipOf(name, withPools("", nil)); err != nil || !strings.HasPrefix(got, "10.123.0.") {
			t.Fatalf("pod naming no pool: %s, %v; want an address of the node pool's 10.123.0.0/28, never blue's", got, err)
		}
	}
	if got, err := ipOf("static", withPools(`["blue"]`, map[string]string{podip.AnnotationIPAddress: "10.123.0.9"})); err != nil || got != "10.123.0.9" {
		t.Fatalf("static pod naming blue with an IP of the node pool: %s, %v; want 10.123.0.9 (a static IP keeps its pool)", got, err)
	}

	// blue's last address, then a pod for whom a block arrives while it waits.
	if got, err := ipOf("blue2", withPools(`["blue"]`, nil)); err != nil || !strings.HasPrefix(got, "10.124.0.") {
		t.Fatalf("second blue pod: %s, %v", got, err)
	}
	go func() {
		time.Sleep(400 * time.Millisecond)
		h.agentSetsRanges(
			ipam.Range{Subnet: netip.MustParsePrefix("10.123.0.0/28"), Pool: "default"},
			ipam.Range{Subnet: netip.MustParsePrefix("10.124.0.0/30"), Pool: "blue", Restricted: true},
			ipam.Range{Subnet: netip.MustParsePrefix("10.124.0.4/30"), Pool: "blue", Restricted: true},
		)
	}()
	if got, err := ipOf("blue3", withPools(`["blue"]`, nil)); err != nil || !strings.HasPrefix(got, "10.124.0.") {
		t.Fatalf("pod waiting for a blue block: %s, %v; want an address of the block that arrived", got, err)
	}

	// A pool with no range here and none coming: a clear error after poolWait, nothing left.
	began := time.Now()
	_, err := ipOf("red", withPools(`["red"]`, nil))
	code, msg := cniCode(err)
	if code != ErrCodeExhausted || !strings.Contains(msg, "IPPool(s) red") || !strings.Contains(msg, "waited 1s") {
		t.Errorf("pod naming red: code %d %q; want %d naming IPPool red and the wait", code, msg, ErrCodeExhausted)
	}
	if took := time.Since(began); took < time.Second || took > 5*time.Second {
		t.Errorf("the failing ADD took %s; want about poolWait (1s)", took)
	}
	// A malformed list is the pod's error, not an address of another pool.
	_, err = ipOf("bad", withPools(`blue`, nil))
	if code, msg := cniCode(err); code != ErrCodeBadAnnotation || !strings.Contains(msg, AnnotationIPPools) {
		t.Errorf("malformed ippools: code %d %q; want %d naming the annotation", code, msg, ErrCodeBadAnnotation)
	}
	for _, a := range h.allocations() {
		if a.Pod.Name == "red" || a.Pod.Name == "bad" {
			t.Errorf("a refused pod holds %s", a.IP)
		}
	}
}

// poolsOf: the API server's view decides; only when it cannot be read does the store's copy
// (fromStore), and a pod naming its pools itself needs neither.
func TestPoolsOf(t *testing.T) {
	blue, err := poolchoice.NewPool("blue", time.Unix(1, 0), false, []string{"10.2.0.0/24"},
		&poolchoice.LabelSelector{MatchLabels: map[string]string{"tenant": "blue"}})
	if err != nil {
		t.Fatal(err)
	}
	online := func(labels map[string]string) poolView {
		return poolView{ns: poolchoice.Namespace{Name: "ns", Labels: labels}, pools: map[string]poolchoice.Pool{"blue": blue}}
	}
	offline := poolView{err: errors.New("connection refused")}
	pod := ipam.PodRef{Namespace: "ns", Name: "p"}
	names := func(v string) map[string]string { return map[string]string{AnnotationIPPools: v} }
	for _, tc := range []struct {
		name      string
		ann       map[string]string
		view      poolView
		want      string
		fromStore bool
		errCode   uint
	}{
		{name: "selected by the pool's namespaceSelector", view: online(map[string]string{"tenant": "blue"}), want: "blue"},
		{name: "not selected: the node pool", view: online(nil), want: ""},
		{name: "the pod names a pool that does not select its namespace", ann: names(`["blue"]`), view: online(nil), errCode: ErrCodeBadAnnotation},
		{name: "the pod names a pool that does not exist", ann: names(`["red"]`), view: online(nil), errCode: ErrCodeBadAnnotation},
		{name: "offline, the pod names its pool", ann: names(`["red"]`), view: offline, want: "red"},
		{name: "offline, the pod names none: the store's copy", view: offline, fromStore: true},
		{name: "malformed, offline or not", ann: names(`red`), view: offline, errCode: ErrCodeBadAnnotation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Plugin{Log: io.Discard}
			got, fromStore, err := p.poolsOf(pod, tc.ann, tc.view)
			if tc.errCode != 0 {
				if code, msg := cniCode(err); code != tc.errCode {
					t.Fatalf("poolsOf = %v, %v; want code %d (%s)", got, err, tc.errCode, msg)
				}
				return
			}
			if err != nil || strings.Join(got, ",") != tc.want || fromStore != tc.fromStore {
				t.Fatalf("poolsOf = %v, %v, %v; want %q, fromStore %v", got, fromStore, err, tc.want, tc.fromStore)
			}
		})
	}
}

// The families of a pod's pools, IPv4 first, from the API server's view; none offline.
func TestPoolFamilies(t *testing.T) {
	view := poolView{pools: map[string]poolchoice.Pool{"default": {Name: "default", V4: true}, "default-v6": {Name: "default-v6"}, "blue": {Name: "blue", V4: true}}}
	for _, c := range []struct {
		pools []string
		view  poolView
		want  string
	}{
		{[]string{"default-v6", "default"}, view, "[4 6]"},
		{[]string{"default", "blue"}, view, "[4]"},
		{[]string{"default-v6", "gone"}, view, "[6]"},
		{nil, view, "[]"},
		{[]string{"default", "default-v6"}, poolView{err: errors.New("offline")}, "[]"},
	} {
		if got := fmt.Sprint(poolFamilies(c.pools, c.view)); got != c.want {
			t.Errorf("poolFamilies(%v) = %s, want %s", c.pools, got, c.want)
		}
	}
}
