package ordinal

import "testing"

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		parent, name string
		want         int
	}{
		{"web", "web-0", 0},
		{"web", "web-12", 12},
		{"web", "web-2147483647", 2147483647}, // MaxInt32, upstream's ParseInt(s, 10, 32) bound
		{"web", "web-2147483648", -1},         // overflow
		{"web", "web-99999999999999999999", -1},
		{"web", "web-01", -1}, // leading zero: not how a controller names pod 1
		{"web", "web-00", -1},
		{"web", "web--1", -1}, // negative (upstream: parent "web-", ordinal 1)
		{"web", "web-+1", -1},
		{"web", "web- 1", -1},
		{"web", "web-", -1},
		{"web", "web", -1}, // no dash
		{"web", "web0", -1},
		{"web", "webx-1", -1},
		{"web", "web-x", -1},
		{"web", "web-1x", -1},
		{"web", "web-1-2", -1},
		{"web", "web-web-1", -1}, // another set's pod
		{"web-web", "web-web-1", 1},
		{"", "-1", 1},
		{"ssg-zone-a", "ssg-zone-a-3", 3}, // a StatefulSetGrid unit's StatefulSet {grid}-{unit}
		{"ssg", "ssg-zone-a-3", -1},       // the grid itself owns no pod
		{"ssg-zone-a", "ssg-zone-ab-3", -1},
		{"web", "web-٣", -1}, // non-ASCII digit
	} {
		if got := Of(tc.parent, tc.name); got != tc.want {
			t.Errorf("Of(%q, %q) = %d, want %d", tc.parent, tc.name, got, tc.want)
		}
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, parent string
		n            int
		ok           bool
	}{
		{"web-0", "web", 0, true},
		{"web-web-1", "web-web", 1, true},
		{"ssg-zone-a-3", "ssg-zone-a", 3, true}, // a StatefulSetGrid unit's pod
		{"web-2147483647", "web", 2147483647, true},
		{"web--1", "web-", 1, true}, // as upstream: the parent ends in a dash
		{"web-2147483648", "", -1, false},
		{"web-01", "", -1, false},
		{"web-", "", -1, false},
		{"web-x", "", -1, false},
		{"-1", "", -1, false}, // no parent
		{"web", "", -1, false},
		{"", "", -1, false},
	} {
		parent, n, ok := Parse(tc.name)
		if parent != tc.parent || n != tc.n || ok != tc.ok {
			t.Errorf("Parse(%q) = %q, %d, %v; want %q, %d, %v", tc.name, parent, n, ok, tc.parent, tc.n, tc.ok)
		}
		if ok && Of(parent, tc.name) != n {
			t.Errorf("Of(%q, %q) = %d, Parse says %d", parent, tc.name, Of(parent, tc.name), n)
		}
	}
}

func TestNameRoundTrips(t *testing.T) {
	for _, parent := range []string{"web", "web-web", "ssg-zone-a"} {
		for _, n := range []int{0, 1, 10, 2147483647} {
			name := Name(parent, n)
			if got := Of(parent, name); got != n {
				t.Errorf("Of(%q, Name(%q, %d)=%q) = %d", parent, parent, n, name, got)
			}
			if p, got, ok := Parse(name); !ok || p != parent || got != n {
				t.Errorf("Parse(%q) = %q, %d, %v", name, p, got, ok)
			}
		}
	}
}
