package podindex

import (
	"net/netip"
	"slices"
	"testing"
)

func TestBlocks(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		want   []string
		ok     bool
	}{
		{"10.1.3.0/24", []string{"10.1.3.0/24"}, true},
		{"10.1.3.64/26", []string{"10.1.3.0/24"}, true},
		{"10.1.2.0/23", []string{"10.1.2.0/24", "10.1.3.0/24"}, true},
		{"10.1.255.0/23", []string{"10.1.254.0/24", "10.1.255.0/24"}, true}, // masked to 10.1.254.0/23
		{"10.1.0.0/22", []string{"10.1.0.0/24", "10.1.1.0/24", "10.1.2.0/24", "10.1.3.0/24"}, true},
		{"10.0.0.0/15", nil, false}, // 512 blocks > 256
		{"fd00:1:2:3::/64", []string{"fd00:1:2:3::/64"}, true},
		{"fd00:1:2:3:4::/80", []string{"fd00:1:2:3::/64"}, true},
		{"fd00:1:2:2::/63", []string{"fd00:1:2:2::/64", "fd00:1:2:3::/64"}, true},
		{"fd00:1:2:ff00::/56", nil, true}, // 256 blocks: counted below
		{"fd00::/48", nil, false},
	} {
		got, ok := Blocks(netip.MustParsePrefix(tc.prefix), 256)
		if ok != tc.ok {
			t.Errorf("%s: ok %v, want %v", tc.prefix, ok, tc.ok)
			continue
		}
		if tc.want == nil && ok {
			if len(got) != 256 || got[0] != "fd00:1:2:ff00::/64" || got[255] != "fd00:1:2:ffff::/64" {
				t.Errorf("%s: %d blocks %v..%v", tc.prefix, len(got), got[0], got[len(got)-1])
			}
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.prefix, got, tc.want)
		}
	}
	// Every address of a range falls in one of its blocks.
	p := netip.MustParsePrefix("10.7.4.0/22")
	blocks, _ := Blocks(p, 256)
	for a := p.Addr(); p.Contains(a); a = a.Next() {
		if !slices.Contains(blocks, BlockKey(a)) {
			t.Fatalf("%s of %s in block %s, not among %v", a, p, BlockKey(a), blocks)
		}
	}
	if k := BlockKey(netip.MustParseAddr("::ffff:10.1.3.9")); k != "10.1.3.0/24" {
		t.Errorf("a v4-mapped address: %s", k)
	}
}
