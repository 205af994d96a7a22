package iprangeaddr

import (
	"math"
	"net/netip"
	"testing"
)

// rangeCases are the edge cases of the rule (package comment); want is what the CNI ADD can
// hand out and so what the scheduler must count.
var rangeCases = []struct {
	name string
	in   Fields
	want want
}{
	{"v4 /24", Fields{CIDR: "10.1.2.0/24"}, want{first: "10.1.2.1", last: "10.1.2.254", count: 254, notUsable: []string{"10.1.2.0", "10.1.2.255"}}},
	{"v4 /30", Fields{CIDR: "10.1.2.0/30"}, want{first: "10.1.2.1", last: "10.1.2.2", count: 2}},
	{"v4 /30 rangeStart at network address", Fields{CIDR: "10.1.2.0/30", RangeStart: "10.1.2.0"}, want{first: "10.1.2.0", last: "10.1.2.2", count: 3, usable: []string{"10.1.2.0"}}},
	{"v4 /30 rangeEnd at broadcast", Fields{CIDR: "10.1.2.0/30", RangeEnd: "10.1.2.3"}, want{first: "10.1.2.1", last: "10.1.2.3", count: 3, usable: []string{"10.1.2.3"}}},
	{"v4 /31", Fields{CIDR: "10.1.2.0/31"}, want{first: "10.1.2.0", last: "10.1.2.1", count: 2}},
	{"v4 /31 rangeStart at the second", Fields{CIDR: "10.1.2.0/31", RangeStart: "10.1.2.1"}, want{first: "10.1.2.1", last: "10.1.2.1", count: 1, notUsable: []string{"10.1.2.0"}}},
	{"v4 /32", Fields{CIDR: "10.1.2.7/32"}, want{first: "10.1.2.7", last: "10.1.2.7", count: 1}},
	{"v4 /32 that is its gateway", Fields{CIDR: "10.1.2.7/32", Gateway: "10.1.2.7"}, want{first: "10.1.2.7", last: "10.1.2.7", count: 0, notUsable: []string{"10.1.2.7"}}},
	{"gateway inside", Fields{CIDR: "10.1.2.0/24", Gateway: "10.1.2.1"}, want{first: "10.1.2.1", last: "10.1.2.254", count: 253, notUsable: []string{"10.1.2.1"}}},
	{"gateway outside the bounds", Fields{CIDR: "10.1.2.0/24", RangeStart: "10.1.2.10", RangeEnd: "10.1.2.19", Gateway: "10.1.2.1"}, want{first: "10.1.2.10", last: "10.1.2.19", count: 10}},
	{"gateway at the network address", Fields{CIDR: "10.1.2.0/24", Gateway: "10.1.2.0"}, want{first: "10.1.2.1", last: "10.1.2.254", count: 254}},
	{"excludes duplicated and equal to the gateway", Fields{CIDR: "10.1.2.0/24", Gateway: "10.1.2.1", Exclude: []string{"10.1.2.2", "10.1.2.2", "10.1.2.1"}}, want{first: "10.1.2.1", last: "10.1.2.254", count: 252, notUsable: []string{"10.1.2.2"}}},
	{"excludes outside the bounds", Fields{CIDR: "10.1.2.0/24", RangeStart: "10.1.2.10", RangeEnd: "10.1.2.19", Exclude: []string{"10.1.2.100", "10.1.2.255"}}, want{first: "10.1.2.10", last: "10.1.2.19", count: 10}},
	{"excludes at both bounds", Fields{CIDR: "10.1.2.0/24", RangeStart: "10.1.2.10", RangeEnd: "10.1.2.19", Exclude: []string{"10.1.2.10", "10.1.2.19"}}, want{first: "10.1.2.10", last: "10.1.2.19", count: 8, usable: []string{"10.1.2.11", "10.1.2.18"}, notUsable: []string{"10.1.2.10", "10.1.2.19", "10.1.2.20"}}},
	{"everything excluded", Fields{CIDR: "10.1.2.0/30", Exclude: []string{"10.1.2.1", "10.1.2.2"}}, want{first: "10.1.2.1", last: "10.1.2.2", count: 0}},
	{"rangeStart after rangeEnd", Fields{CIDR: "10.1.2.0/24", RangeStart: "10.1.2.20", RangeEnd: "10.1.2.10"}, want{err: true}},
	{"rangeStart outside the cidr", Fields{CIDR: "10.1.2.0/24", RangeStart: "10.1.3.1"}, want{err: true}},
	{"gateway outside the cidr", Fields{CIDR: "10.1.2.0/24", Gateway: "10.1.3.1"}, want{err: true}},
	{"exclude outside the cidr", Fields{CIDR: "10.1.2.0/24", Exclude: []string{"10.1.3.1"}}, want{err: true}},
	{"host bits set", Fields{CIDR: "10.1.2.1/24"}, want{err: true}},
	{"not a cidr", Fields{CIDR: "10.1.2.0/33"}, want{err: true}},
	{"rangeEnd of the other family", Fields{CIDR: "10.1.2.0/24", RangeEnd: "fd00::1"}, want{err: true}},
	{"v6 /120", Fields{CIDR: "fd00::/120"}, want{first: "fd00::1", last: "fd00::ff", count: 255, notUsable: []string{"fd00::"}}},
	{"v6 /120 gateway", Fields{CIDR: "fd00::/120", Gateway: "fd00::1"}, want{first: "fd00::1", last: "fd00::ff", count: 254}},
	{"v6 /120 rangeStart at the anycast address", Fields{CIDR: "fd00::/120", RangeStart: "fd00::"}, want{first: "fd00::", last: "fd00::ff", count: 256, usable: []string{"fd00::"}}},
	{"v6 /126", Fields{CIDR: "fd00::/126"}, want{first: "fd00::1", last: "fd00::3", count: 3}},
	{"v6 /127", Fields{CIDR: "fd00::/127"}, want{first: "fd00::", last: "fd00::1", count: 2, usable: []string{"fd00::", "fd00::1"}}},
	{"v6 /127 rangeStart at the second", Fields{CIDR: "fd00::/127", RangeStart: "fd00::1"}, want{first: "fd00::1", last: "fd00::1", count: 1}},
	{"v6 /128", Fields{CIDR: "fd00::5/128"}, want{first: "fd00::5", last: "fd00::5", count: 1}},
	{"v6 excludes and gateway", Fields{CIDR: "fd00::/124", Gateway: "fd00::2", Exclude: []string{"fd00::1", "fd00::1", "fd00::f"}}, want{first: "fd00::1", last: "fd00::f", count: 12}},
}

type want struct {
	err         bool
	first, last string
	count       int64
	usable      []string
	notUsable   []string
}

func TestParse(t *testing.T) {
	for _, tc := range rangeCases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Parse(tc.in)
			if (err != nil) != tc.want.err {
				t.Fatalf("err = %v, want error %v", err, tc.want.err)
			}
			if err != nil {
				return
			}
			if r.RangeStart.String() != tc.want.first || r.RangeEnd.String() != tc.want.last || r.Size() != tc.want.count {
				t.Errorf("first %s last %s size %d, want %s %s %d", r.RangeStart, r.RangeEnd, r.Size(), tc.want.first, tc.want.last, tc.want.count)
			}
			// Size counts exactly the addresses Usable accepts (small ranges: walk them all).
			if r.Subnet.Bits() >= r.Subnet.Addr().BitLen()-12 {
				var n int64
				for a := r.Subnet.Addr(); r.Subnet.Contains(a); a = a.Next() {
					if r.Usable(a) {
						n++
					}
				}
				if n != r.Size() {
					t.Errorf("%d addresses are Usable, Size says %d", n, r.Size())
				}
			}
			for _, u := range tc.want.usable {
				if !r.Usable(netip.MustParseAddr(u)) {
					t.Errorf("%s is not usable, want usable", u)
				}
			}
			for _, u := range tc.want.notUsable {
				if r.Usable(netip.MustParseAddr(u)) {
					t.Errorf("%s is usable, want not usable", u)
				}
			}
		})
	}
}

func TestSizeSaturates(t *testing.T) {
	r, err := Parse(Fields{CIDR: "fd00::/64"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Size() != math.MaxInt64 {
		t.Fatalf("size of a /64 = %d, want MaxInt64", r.Size())
	}
	r, err = Parse(Fields{CIDR: "fd00::/66"})
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(1)<<62 - 1; r.Size() != want { // 2^62 minus the anycast address
		t.Fatalf("size of a /66 = %d, want %d", r.Size(), want)
	}
}

func TestErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		in   Fields
		want string
	}{
		{Fields{}, "subnet is required"},
		{Fields{CIDR: "10.1.2.0/33"}, `subnet "10.1.2.0/33" is not a CIDR`},
		{Fields{CIDR: "10.1.2.1/24"}, "subnet 10.1.2.1/24 has host bits set (did you mean 10.1.2.0/24?)"},
		{Fields{CIDR: "10.1.2.0/24", RangeStart: "x"}, `rangeStart "x" is not an IP address`},
		{Fields{CIDR: "10.1.2.0/24", Gateway: "10.1.3.1"}, "gateway 10.1.3.1 is outside subnet 10.1.2.0/24"},
		{Fields{CIDR: "10.1.2.0/24", Exclude: []string{"10.1.2.9", "y"}}, `exclude "y" is not an IP address`},
		{Fields{CIDR: "10.1.2.0/24", RangeStart: "10.1.2.20", RangeEnd: "10.1.2.10"}, "rangeStart 10.1.2.20 is after rangeEnd 10.1.2.10 in 10.1.2.0/24"},
	} {
		if _, err := Parse(tc.in); err == nil || err.Error() != tc.want {
			t.Errorf("Parse(%+v) = %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestCanonicalDoesNotModifyItsInput(t *testing.T) {
	ex := []netip.Addr{netip.MustParseAddr("10.1.2.9"), netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("10.1.2.9")}
	r := Range{Subnet: netip.MustParsePrefix("10.1.2.0/24"), Exclude: ex}
	c, err := r.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Exclude) != 2 || ex[0] != netip.MustParseAddr("10.1.2.9") || r.RangeStart.IsValid() {
		t.Fatalf("canonical %+v, input %+v", c, r)
	}
}
