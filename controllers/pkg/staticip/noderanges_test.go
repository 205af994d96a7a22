package staticip

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

func TestOutsideNodeRanges(t *testing.T) {
	ipr := func(name, cidr, node string) *jkev1.IPRange {
		return &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: jkev1.IPRangeSpec{CIDR: cidr, Node: node}}
	}
	deleting := ipr("going", "10.9.0.0/24", "a")
	deleting.DeletionTimestamp = &metav1.Time{}
	ranges := []*jkev1.IPRange{
		ipr("pool-10-0-1-0-24", "10.0.1.0/24", "a"),     // a pool block
		ipr("node-b", "10.0.2.0/24", "b"),               // hand-written, another node
		ipr("free", "10.0.3.0/24", ""),                  // unassigned (draining or released)
		ipr("kind-10-244-1-0-24", "10.244.1.0/24", "a"), // NodePodCIDR mirror
		ipr("v6", "fd00::/120", "a"),
		deleting,
	}
	for _, tc := range []struct {
		name, ip, node string
		want           []string // "" : allowed; else substrings of the reason
	}{
		{"in the node's pool block", "10.0.1.7", "a", nil},
		{"in the node's NodePodCIDR range", "10.244.1.9", "a", nil},
		{"IPv6 in the node's range", "fd00::9", "a", nil},
		{"IPv4-mapped IPv6 form of the node's address", "::ffff:10.0.1.7", "a", nil},
		{"in another node's range: a node pinning someone else's address", "10.0.2.5", "a", []string{"10.0.2.5", "node-b", "belongs to b", "not to a"}},
		{"in an unassigned range", "10.0.3.5", "a", []string{"free", "unassigned"}},
		{"in no range at all (a node without staticip)", "192.168.9.9", "a", []string{"192.168.9.9", "no IPRange", "node a"}},
		{"in a range being deleted", "10.9.0.5", "a", []string{"no IPRange"}},
		{"garbage", "not-an-ip", "a", []string{"does not parse"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := OutsideNodeRanges(ranges, tc.ip, tc.node)
			if (got == "") != (tc.want == nil) {
				t.Fatalf("OutsideNodeRanges = %q, want allowed=%v", got, tc.want == nil)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q does not name %q", got, w)
				}
			}
		})
	}
}
