package kubetest

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/ipam"
)

// The pick of a pod's pool is decided from the API server at ADD, not from the agent's copy in
// the store (which the agent writes on its next pass): the race the local cluster showed
// ('tenant-7q4vg/p1 got 10.244.0.36, want an address of IPPool e2e-tenant-b4pz4'). Here the
// store never learns the namespace's pools at all; the pods must still get their pool's
// addresses — by the pool's namespaceSelector, by the namespace's annotation — and a pod of
// another namespace never one of them.
func TestNamespacePoolDecidedFromTheAPIServer(t *testing.T) {
	f := newFixture(t, "10.149.0.0/28")
	pool := strings.ReplaceAll(f.ns, "cni-", "pool-")
	named := pool + "-named"
	mk := func(name, cidr string, sel map[string]string) {
		if _, err := f.sip.JkeV1().IPPools().Create(f.ctx, &jkev1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: jkev1.IPPoolSpec{CIDRs: []string{cidr}, NamespaceSelector: &metav1.LabelSelector{MatchLabels: sel}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.sip.JkeV1().IPPools().Delete(f.ctx, name, metav1.DeleteOptions{}) })
	}
	mk(pool, "10.150.0.0/29", map[string]string{"tenant": f.ns})
	mk(named, "10.151.0.0/29", map[string]string{"named": f.ns})

	// The agent manages the store: the node pool's block and one block of each namespace pool,
	// and no namespace's pools recorded (its next pass has not come yet).
	conf := map[string]any{}
	_ = json.Unmarshal(f.conf, &conf)
	delete(conf, "ranges")
	f.conf, _ = json.Marshal(conf)
	db, err := ipam.Open(ipam.ForNetwork(f.dataDir, "staticip"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.SetNodeRanges([]ipam.Range{
		{Subnet: netip.MustParsePrefix("10.149.0.0/28"), Pool: "default"},
		{Subnet: netip.MustParsePrefix("10.150.0.0/29"), Pool: pool, Restricted: true},
		{Subnet: netip.MustParsePrefix("10.151.0.0/29"), Pool: named, Restricted: true},
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	// The pool selects the pod's namespace by label.
	setNS := func(labels, annotations map[string]string) {
		n, err := f.kube.CoreV1().Namespaces().Get(f.ctx, f.ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Labels, n.Annotations = labels, annotations
		if _, err := f.kube.CoreV1().Namespaces().Update(f.ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setNS(map[string]string{"tenant": f.ns, "named": f.ns}, nil)
	if ip := f.mustAdd(f.args(f.createPod("p1", nil), f.podNS(), "ctr-p1")); !strings.HasPrefix(ip, "10.150.0.") {
		t.Fatalf("pod of a namespace IPPool %s selects got %s, want an address of that pool (10.150.0.0/29)", pool, ip)
	}
	// The namespace's annotation names the other pool (which selects it too): it wins.
	setNS(map[string]string{"tenant": f.ns, "named": f.ns}, map[string]string{jkev1.AnnotationIPPools: `["` + named + `"]`})
	if ip := f.mustAdd(f.args(f.createPod("p2", nil), f.podNS(), "ctr-p2")); !strings.HasPrefix(ip, "10.151.0.") {
		t.Fatalf("pod of a namespace whose annotation names IPPool %s got %s, want an address of that pool (10.151.0.0/29)", named, ip)
	}
	// Neither selects nor is named any more: the node pool's address, never a namespace pool's.
	setNS(nil, nil)
	if ip := f.mustAdd(f.args(f.createPod("p3", nil), f.podNS(), "ctr-p3")); !strings.HasPrefix(ip, "10.149.0.") {
		t.Fatalf("pod of a namespace no pool selects got %s, want an address of the node pool (10.149.0.0/28)", ip)
	}
}
