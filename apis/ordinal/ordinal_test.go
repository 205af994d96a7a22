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

func TestNameRoundTrips(t *testing.T) {
	for _, parent := range []string{"web", "web-web", "ssg-zone-a"} {
		for _, n := range []int{0, 1, 10, 2147483647} {
			name := Name(parent, n)
			if got := Of(parent, name); got != n {
				t.Errorf("Of(%q, Name(%q, %d)=%q) = %d", parent, parent, n, name, got)
			}
		}
	}
}
