package staticipnode

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// A ViewIndex answers what Cache.Node answers, for Node objects it has published and for new
// ones, across every change the cache's views and names go through: records and ranges added
// and removed (a name gets a slot, loses it, gets a new one), before and after the sync, with
// Publish between the steps or not; and its fact is computed once per Node object.
func TestViewIndexAgreesWithNode(t *testing.T) {
	c := NewEmpty()
	facts := map[*v1.Node]int{}
	x := c.NewViewIndex(func(n *v1.Node) uint8 {
		facts[n]++
		return uint8(len(n.Name))
	})
	nodes := map[string]*v1.Node{}
	for _, name := range []string{"n1", "n2", "node-3"} {
		nodes[name] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	check := func(step string) {
		t.Helper()
		for name, n := range nodes {
			ref, fact := x.View(n)
			if view, want := ref.View(), c.Node(name); view != want {
				t.Fatalf("%s: ViewIndex gives %s the view %+v, Cache.Node %+v", step, name, view, want)
			}
			if fact != uint8(len(name)) {
				t.Fatalf("%s: fact of %s = %d", step, name, fact)
			}
		}
	}
	r1 := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "r1"}, Spec: jkev1.IPRangeSpec{CIDR: "10.0.0.0/26", Node: "n1"}}
	a := sip("ns", "a", "n2", "1")
	steps := []struct {
		name   string
		change func()
	}{
		{"empty", func() {}},
		{"IPRange on n1", func() { c.OnIPRangeUpdate(nil, r1) }},
		{"StaticIP a on n2 (a new name)", func() { c.OnStaticIPUpdate(nil, a) }},
		{"synced", c.MarkSynced},
		{"StaticIP a moved to node-3 (n2 loses its slot)", func() {
			moved := a.DeepCopy()
			moved.Spec.Node = "node-3"
			c.OnStaticIPUpdate(a, moved)
			a = moved
		}},
		{"StaticIP a back on n2 (a new slot)", func() {
			back := a.DeepCopy()
			back.Spec.Node = "n2"
			c.OnStaticIPUpdate(a, back)
			a = back
		}},
		{"IPRange deleted (n1 loses its slot)", func() { c.OnIPRangeDelete(r1) }},
		{"IPRange again (n1 gets a new slot)", func() { c.OnIPRangeUpdate(nil, r1) }},
		{"n1 updated (a new Node object)", func() { nodes["n1"] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}} }},
	}
	for _, publish := range []bool{false, true} {
		for _, s := range steps {
			s.change()
			check(fmt.Sprintf("%s (publish %v)", s.name, publish))
			if publish {
				x.Publish(len(nodes))
				check(fmt.Sprintf("%s, published", s.name))
			}
		}
	}
	for n, count := range facts {
		// Once per Node object and names version it was resolved at, not per lookup.
		if count > 2*len(steps) {
			t.Errorf("fact of %s computed %d times", n.Name, count)
		}
	}
}

// The index forgets Node objects the scheduler no longer holds: past the nodes plus an eighth
// (and 64) it starts over with what was found since the last Publish.
func TestViewIndexStartsOver(t *testing.T) {
	c := NewEmpty()
	c.MarkSynced()
	x := c.NewViewIndex(nil)
	const nodes = 100
	for round := range 3 {
		for i := range nodes {
			// Every round brings new Node objects (each node updated).
			x.View(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d-%d", i, round)}})
		}
		x.Publish(nodes)
		if got := x.Len(); got > nodes+nodes/8+64 {
			t.Fatalf("round %d: %d entries for %d nodes", round, got, nodes)
		}
	}
}

// A node's memo lives in its slot: every Node object of the node sees it, a new view keeps it
// (the reader compares the view it kept), a node the cache knows nothing of keeps none, and a
// name that lost its slot and got a new one starts without.
func TestNodeRefMemo(t *testing.T) {
	c := NewEmpty()
	c.MarkSynced()
	x := c.NewViewIndex(nil)
	r1 := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "r1"}, Spec: jkev1.IPRangeSpec{CIDR: "10.0.0.0/26", Node: "n1"}}
	c.OnIPRangeUpdate(nil, r1)
	n1, n1Updated := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	ref, _ := x.View(n1)
	ref.SetMemo("derived from the first view")
	if got, _ := x.View(n1Updated); got.Memo() != "derived from the first view" {
		t.Fatalf("another Node object of n1: memo %v", got.Memo())
	}
	c.OnStaticIPUpdate(nil, sip("ns", "a", "n1", "1")) // a new view
	if got, _ := x.View(n1); got.Memo() != "derived from the first view" || len(got.View().Held) != 1 {
		t.Fatalf("after a new view: memo %v", got.Memo())
	}
	unknown, _ := x.View(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n9"}})
	unknown.SetMemo("ignored")
	if unknown.Memo() != nil {
		t.Fatalf("a node the cache does not know kept a memo: %v", unknown.Memo())
	}
	c.OnStaticIPDelete(sip("ns", "a", "n1", "1"))
	c.OnIPRangeDelete(r1) // n1 loses its slot
	c.OnIPRangeUpdate(nil, r1)
	if got, _ := x.View(n1); got.Memo() != nil {
		t.Fatalf("a new slot of n1 starts with memo %v", got.Memo())
	}
}

// Filter's goroutines look views up while the informers change the cache and PreFilter
// publishes: no data race (go test -race), and once the changes stop every Node object gets
// Cache.Node's view.
func TestViewIndexConcurrent(t *testing.T) {
	c := NewEmpty()
	c.MarkSynced()
	x := c.NewViewIndex(nil)
	const n = 50
	nodes := make([]*v1.Node, n)
	ranges := make([]*jkev1.IPRange, n)
	for i := range n {
		name := fmt.Sprintf("node-%02d", i)
		nodes[i] = &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		ranges[i] = &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: jkev1.IPRangeSpec{CIDR: fmt.Sprintf("10.9.%d.0/24", i), Node: name}}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, node := range nodes {
					ref, _ := x.View(node)
					ref.SetMemo(ref.View())
					_ = ref.Memo()
				}
			}
		}()
	}
	for round := range 20 {
		for i := range n {
			if (i+round)%3 == 0 {
				c.OnIPRangeDelete(ranges[i])
			} else {
				c.OnIPRangeUpdate(nil, ranges[i])
			}
		}
		x.Publish(n)
	}
	close(stop)
	for range 4 {
		<-done
	}
	x.Publish(n)
	for _, node := range nodes {
		if ref, _ := x.View(node); ref.View() != c.Node(node.Name) {
			t.Fatalf("%s: the index's view differs from Cache.Node's", node.Name)
		}
	}
}
