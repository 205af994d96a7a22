package staticipnode

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// BenchmarkNodeLookup is what Filter pays per pod and node to find the node's view: one op
// is one lookup of each of 1,000 node names (kwok's names), on one goroutine.
func BenchmarkNodeLookup(b *testing.B) {
	c := NewEmpty()
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("kwok-%05d", i)
		c.OnIPRangeUpdate(nil, &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: names[i], Generation: 1},
			Spec: jkev1.IPRangeSpec{CIDR: fmt.Sprintf("10.%d.%d.0/24", 64+i/256, i%256), Node: names[i]}})
	}
	c.MarkSynced()
	b.ResetTimer()
	for range b.N {
		for _, name := range names {
			if !c.Node(name).HasRanges {
				b.Fatal(name)
			}
		}
	}
}
