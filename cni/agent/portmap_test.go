package agent

import (
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// TestConflistChainsPortMap: with PortMap (staticip-agent --portmap, the default) the conflist
// chains portmap after staticip with the portMappings capability, so the runtime passes a
// pod's hostPorts to it; without it staticip is the only plugin. Found by the upstream
// conformance spec "[sig-network] HostPort validates that there is no conflict between pods
// with same hostPort but different hostIP and protocol" (tools/conformance): no hostPort
// reached its pod.
func TestConflistChainsPortMap(t *testing.T) {
	ranges := []*jkev1.IPRange{{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Spec: jkev1.IPRangeSpec{CIDR: "10.9.0.0/24"}}}
	type plugin struct {
		Type         string          `json:"type"`
		Capabilities map[string]bool `json:"capabilities"`
	}
	for _, tc := range []struct {
		portMap bool
		want    []string
	}{{true, []string{"staticip", "portmap"}}, {false, []string{"staticip"}}} {
		a := New(Config{NodeName: "n", PortMap: tc.portMap}, nil, nil, nil)
		b, err := a.Conflist(ranges)
		if err != nil {
			t.Fatal(err)
		}
		var conf struct {
			Plugins []plugin `json:"plugins"`
		}
		if err := json.Unmarshal(b, &conf); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range conf.Plugins {
			got = append(got, p.Type)
		}
		if len(got) != len(tc.want) || got[0] != tc.want[0] || (len(got) == 2 && got[1] != tc.want[1]) {
			t.Fatalf("PortMap=%v: plugins %v, want %v\n%s", tc.portMap, got, tc.want, b)
		}
		if tc.portMap && !conf.Plugins[1].Capabilities["portMappings"] {
			t.Errorf("portmap without the portMappings capability: the runtime would not pass hostPorts\n%s", b)
		}
	}
}
