package ippool

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/staticip/staticip/apis/generated/clientset/versioned/fake"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/controllers/pkg/ownwrites"
)

// TestAssignReadsTheNodeLive: the Node cache can lag the IPRange cache (e2e flake of cae6342:
// the allocator gave a just-deleted node a fresh block). A block goes only to a node the API
// server has now.
func TestAssignReadsTheNodeLive(t *testing.T) {
	kube := kubefake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "live"}})
	client := fake.NewSimpleClientset() // no apply configurations needed: Create only
	c := &Controller{kube: kube, client: client, Now: time.Now, written: ownwrites.New[*jkev1.IPRange](0, nil), told: map[string]string{}}
	ctx := context.Background()
	gone := Assign{Pool: "p", Node: "gone", Name: "p-10-0-0-0-24", CIDR: netip.MustParsePrefix("10.0.0.0/24")}
	if err := c.assign(ctx, gone); !errors.Is(err, errNodeGone) {
		t.Errorf("assign to a node the API server does not have: %v, want errNodeGone", err)
	}
	if l, _ := client.JkeV1().IPRanges().List(ctx, metav1.ListOptions{}); len(l.Items) != 0 {
		t.Fatalf("a block was created for a deleted node: %+v", l.Items)
	}
	live := Assign{Pool: "p", Node: "live", Name: "p-10-0-1-0-24", CIDR: netip.MustParsePrefix("10.0.1.0/24")}
	if err := c.assign(ctx, live); err != nil {
		t.Fatal(err)
	}
	if r, err := client.JkeV1().IPRanges().Get(ctx, live.Name, metav1.GetOptions{}); err != nil || r.Spec.Node != "live" {
		t.Errorf("block of the live node: %v %+v", err, r)
	}
}
