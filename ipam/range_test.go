package ipam

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/staticip/staticip/apis/iprangeaddr"
)

// TestAllocatesExactlyTheRangeRule: ADD hands out exactly the addresses iprangeaddr says a
// range has — the rule the scheduler counts with — no more, no fewer (the full table of edge
// cases is apis/iprangeaddr's). The cases are the ones where the IPAM and the scheduler
// disagreed before the rule had one home.
func TestAllocatesExactlyTheRangeRule(t *testing.T) {
	for _, tc := range []struct {
		in   iprangeaddr.Fields
		want []string
	}{
		{iprangeaddr.Fields{CIDR: "fd00::/127"}, []string{"fd00::", "fd00::1"}},
		{iprangeaddr.Fields{CIDR: "10.1.2.0/30", RangeStart: "10.1.2.0"}, []string{"10.1.2.0", "10.1.2.1", "10.1.2.2"}},
		{iprangeaddr.Fields{CIDR: "10.1.2.0/31", Gateway: "10.1.2.0"}, []string{"10.1.2.1"}},
		{iprangeaddr.Fields{CIDR: "fd00::/126", Exclude: []string{"fd00::2", "fd00::2"}}, []string{"fd00::1", "fd00::3"}},
	} {
		t.Run(tc.in.CIDR+" "+tc.in.RangeStart, func(t *testing.T) {
			d := openTest(t, "", nil)
			r, err := ParseRange(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			mustRange(t, d, r)
			var got []string
			for i := 0; ; i++ {
				a, _, err := d.Allocate(req(fmt.Sprint("c", i), pod("ns", fmt.Sprint("p", i))))
				var ex *ExhaustedError
				if errors.As(err, &ex) {
					break
				}
				if err != nil || i > 10 {
					t.Fatalf("allocation %d: %v", i, err)
				}
				got = append(got, a.IP.String())
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("allocated %v, want %v", got, tc.want)
			}
			want, _ := iprangeaddr.Parse(tc.in)
			u, err := d.Usage()
			if err != nil || len(u) != 1 || int64(u[0].Total) != want.Size() || int64(len(got)) != want.Size() {
				t.Fatalf("usage %+v (%v), iprangeaddr size %d, allocated %d", u, err, want.Size(), len(got))
			}
		})
	}
}
