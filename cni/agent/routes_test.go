package agent

import (
	"os"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// TestIPv6RangeOfAnIPv4HolderIsReported: an IPv6 block whose holder is known by its IPv4
// address only (its Node has no IPv6 InternalIP, or its agent predates the claims' address per
// family) cannot be routed — Linux takes no IPv4 next hop for an IPv6 route (RTA_VIA: "IPv6
// does not support RTA_VIA attribute"; nexthop objects: "IPv6 routes can not use an IPv4
// nexthop") — and was skipped without a word; it is reported unroutable, naming the reason,
// while the node's IPv4 range is routed as before.
func TestIPv6RangeOfAnIPv4HolderIsReported(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	n := nodeNetns(t, "v6r", "192.168.78.1/24") // an uplink with an IPv4 address only
	route := func(name, cidr string) rangeRoute {
		return rangeRoute{r: &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: jkev1.IPRangeSpec{CIDR: cidr, Node: "b"}}, via: "b"}
	}
	var unroutable []string
	var programmed map[string]bool
	if err := n.Do(func(ns.NetNS) error {
		var err error
		_, unroutable, programmed, err = (&Agent{}).syncRoutes([]rangeRoute{route("b-v6", "fd00:78:b::/120"), route("b-v4", "10.178.0.0/24")},
			map[string]familyAddrs{"b": {"192.168.78.2", ""}})
		return err
	}); err != nil {
		t.Fatalf("syncRoutes: %v", err)
	}
	if !programmed["b-v4"] || programmed["b-v6"] {
		t.Fatalf("programmed %v: want the IPv4 range only", programmed)
	}
	if want := "b-v6 (node b: it claims no IPv6 address, only 192.168.78.2, which is not of the range's IP family)"; len(unroutable) != 1 || unroutable[0] != want {
		t.Fatalf("unroutable %q, want [%q]", unroutable, want)
	}
}
