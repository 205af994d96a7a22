package gridwrapper

import (
	"maps"
	"slices"
	"testing"
)

func TestAffectedByNode(t *testing.T) {
	keys := map[string][]string{
		"ns/zone":     {"zone"},
		"ns/zone-any": {"zone", "*"},
		"ns/rack":     {"rack", "zone"},
		"ns/any":      {"*"},
	}
	// Endpoints: ns/zone and ns/any on n1; ns/rack on n2; nothing on n3.
	onNode := map[string][]string{"n1": {"ns/zone", "ns/any", "ns/zone"}, "n2": {"ns/rack"}}
	self := map[string]string{"zone": "a"} // this node has no rack label
	for _, tt := range []struct {
		name     string
		node     string
		old, cur map[string]string
		want     []string
	}{
		{name: "other node, compared label changed", node: "n1", old: map[string]string{"zone": "a"}, cur: map[string]string{"zone": "b"}, want: []string{"ns/zone"}},
		{name: "other node, unrelated label", node: "n1", old: map[string]string{"zone": "a", "x": "1"}, cur: map[string]string{"zone": "a", "x": "2"}},
		{name: "node without endpoints", node: "n3", old: map[string]string{"zone": "a"}, cur: map[string]string{"zone": "b"}},
		{name: "other node added", node: "n1", cur: map[string]string{"zone": "a"}, want: []string{"ns/zone"}},
		{name: "other node deleted", node: "n1", old: map[string]string{"zone": "a"}, want: []string{"ns/zone"}},
		{name: "a key this node lacks never applies", node: "n2", old: map[string]string{"rack": "1", "zone": "a"}, cur: map[string]string{"rack": "2", "zone": "a"}},
		{name: "but the next key does", node: "n2", old: map[string]string{"rack": "1", "zone": "a"}, cur: map[string]string{"rack": "1", "zone": "b"}, want: []string{"ns/rack"}},
		{name: "this node: every Service comparing a changed key", node: "self", old: map[string]string{"zone": "a"}, cur: map[string]string{"zone": "b"}, want: []string{"ns/rack", "ns/zone", "ns/zone-any"}},
		{name: "this node gains rack", node: "self", old: map[string]string{"zone": "a"}, cur: map[string]string{"zone": "a", "rack": "1"}, want: []string{"ns/rack"}},
		{name: "this node, unrelated label", node: "self", old: map[string]string{"zone": "a"}, cur: map[string]string{"zone": "a", "x": "1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := affectedByNode(nodeChange{
				self: "self", selfLabels: self, node: tt.node, old: tt.old, cur: tt.cur,
				keysOf:    func(svc string) ([]string, bool) { k, ok := keys[svc]; return k, ok },
				annotated: func() []string { return slices.Sorted(maps.Keys(keys)) },
				onNode:    func(n string) []string { return onNode[n] },
			})
			if g := slices.Sorted(maps.Keys(got)); !slices.Equal(g, tt.want) {
				t.Errorf("affected %v, want %v", g, tt.want)
			}
		})
	}
}
