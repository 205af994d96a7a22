package topology

import (
	"reflect"
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// nodes: n0a,n0b in zone-0 / region r0; n1 in zone-1 / region r0; n2 in zone-2 / region r1;
// bare has no labels.
var nodes = map[string]map[string]string{
	"n0a":  {"zone": "zone-0", "region": "r0"},
	"n0b":  {"zone": "zone-0", "region": "r0"},
	"n1":   {"zone": "zone-1", "region": "r0"},
	"n2":   {"zone": "zone-2", "region": "r1"},
	"bare": {},
}

func lookup(n string) (map[string]string, bool) { l, ok := nodes[n]; return l, ok }

// ep is "ip@node" with an optional "!" suffix for not ready; "ip@" has no node name.
func ep(spec string) discoveryv1.Endpoint {
	notReady := strings.HasSuffix(spec, "!")
	spec = strings.TrimSuffix(spec, "!")
	ip, node, _ := strings.Cut(spec, "@")
	e := discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(!notReady)}}
	if node != "" {
		e.NodeName = ptr.To(node)
	}
	return e
}

func slice(name string, specs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	for _, sp := range specs {
		s.Endpoints = append(s.Endpoints, ep(sp))
	}
	return s
}

func ips(slices ...*discoveryv1.EndpointSlice) []string {
	out := []string{}
	for _, s := range slices {
		for _, e := range s.Endpoints {
			out = append(out, e.Addresses[0])
		}
	}
	return out
}

func TestDecideAndFilter(t *testing.T) {
	zone0 := nodes["n0a"]
	tests := []struct {
		name     string
		keys     []string
		self     map[string]string
		slices   []*discoveryv1.EndpointSlice
		decision string
		kept     []string
	}{
		{"first key selects own zone", []string{"zone"}, zone0,
			[]*discoveryv1.EndpointSlice{slice("a", "1@n0a", "2@n0b", "3@n1", "4@n2")}, "zone=zone-0", []string{"1", "2"}},
		{"keys in order: zone wins over region", []string{"zone", "region"}, zone0,
			[]*discoveryv1.EndpointSlice{slice("a", "1@n0a", "3@n1")}, "zone=zone-0", []string{"1"}},
		{"keys in order: region first keeps the region", []string{"region", "zone"}, zone0,
			[]*discoveryv1.EndpointSlice{slice("a", "1@n0a", "3@n1", "4@n2")}, "region=r0", []string{"1", "3"}},
		{"no ready endpoint in zone: falls to region", []string{"zone", "region"}, zone0,
			[]*discoveryv1.EndpointSlice{slice("a", "1@n0a!", "3@n1", "4@n2")}, "region=r0", []string{"1", "3"}},
		{"own node lacks the first label: key skipped", []string{"rack", "zone"}, zone0,
			[]*discoveryv1.EndpointSlice{slice("a", "1@n0a", "3@n1")}, "zone=zone-0", []string{"1"}},
		{"own node has no label at all, no star: none", []string{"zone"}, map[string]string{},
			[]*discoveryv1.EndpointSlice{slice("a", "1@n0a", "3@n1")}, "none", []string{}},
		{"star fallback when zone has nothing ready", []string{"zone", "*"}, zone0,
			[]*discoveryv1.EndpointSlice{slice("a", "1@n0a!", "3@n1", "4@n2!")}, "*", []string{"1", "3", "4"}},
		{"star not reached when zone selects", []string{"zone", "*"}, zone0,
			[]*discoveryv1.EndpointSlice{slice("a", "1@n0a", "3@n1")}, "zone=zone-0", []string{"1"}},
		{"star alone keeps everything", []string{"*"}, map[string]string{},
			[]*discoveryv1.EndpointSlice{slice("a", "1@n0a", "5@")}, "*", []string{"1", "5"}},
		{"no match without star: none", []string{"zone"}, zone0,
			[]*discoveryv1.EndpointSlice{slice("a", "3@n1", "4@n2")}, "none", []string{}},
		{"not-ready endpoints in the selected zone are kept (kube-proxy judges readiness)", []string{"zone"}, zone0,
			[]*discoveryv1.EndpointSlice{slice("a", "1@n0a", "2@n0b!", "3@n1")}, "zone=zone-0", []string{"1", "2"}},
		{"only not-ready endpoints in zone and no star: none", []string{"zone"}, zone0,
			[]*discoveryv1.EndpointSlice{slice("a", "1@n0a!", "3@n1")}, "none", []string{}},
		{"nil nodeName never matches a key", []string{"zone"}, zone0,
			[]*discoveryv1.EndpointSlice{slice("a", "5@", "1@n0a")}, "zone=zone-0", []string{"1"}},
		{"nil nodeName only: none", []string{"zone"}, zone0,
			[]*discoveryv1.EndpointSlice{slice("a", "5@")}, "none", []string{}},
		{"unknown node matches no key", []string{"zone"}, zone0,
			[]*discoveryv1.EndpointSlice{slice("a", "6@ghost", "1@n0a")}, "zone=zone-0", []string{"1"}},
		{"endpoint node lacking the label matches no key", []string{"zone"}, zone0,
			[]*discoveryv1.EndpointSlice{slice("a", "7@bare", "1@n0a")}, "zone=zone-0", []string{"1"}},
		{"decision spans slices: ready endpoint in another slice wins the key for both", []string{"zone", "*"}, zone0,
			[]*discoveryv1.EndpointSlice{slice("a", "3@n1"), slice("b", "1@n0a")}, "zone=zone-0", []string{"1"}},
		{"empty slices stay (and decide none)", []string{"zone"}, zone0,
			[]*discoveryv1.EndpointSlice{slice("a")}, "none", []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := make([]*discoveryv1.EndpointSlice, len(tt.slices))
			for i, s := range tt.slices {
				before[i] = s.DeepCopy()
			}
			d := Decide(tt.keys, tt.self, tt.slices, lookup)
			if d.String() != tt.decision {
				t.Fatalf("decision = %s, want %s", d, tt.decision)
			}
			var out []*discoveryv1.EndpointSlice
			for _, s := range tt.slices {
				f, dropped := Filter(s, d, lookup)
				if dropped != len(s.Endpoints)-len(f.Endpoints) {
					t.Errorf("dropped = %d, want %d", dropped, len(s.Endpoints)-len(f.Endpoints))
				}
				if f.Name != s.Name {
					t.Errorf("filter renamed slice %s to %s", s.Name, f.Name)
				}
				out = append(out, f)
			}
			if got := ips(out...); !reflect.DeepEqual(got, tt.kept) {
				t.Errorf("kept %v, want %v", got, tt.kept)
			}
			if !reflect.DeepEqual(before, tt.slices) {
				t.Errorf("Filter modified its input")
			}
		})
	}
}
