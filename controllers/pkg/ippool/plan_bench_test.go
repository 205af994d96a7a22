package ippool

import (
	"fmt"
	"net/netip"
	"testing"
)

// benchInput: 1,000 nodes, a pool of 1,024 /24 blocks; half the nodes already hold a block,
// the other 500 join at once.
func benchInput() Input {
	p := pool("bench", 1, "10.0.0.0/14") // 1,024 blocks
	in := Input{Pools: []Pool{p}, Now: t0, Held: nothingHeld}
	for i := range 1000 {
		n := fmt.Sprintf("node-%04d", i)
		in.Nodes = append(in.Nodes, Node{Name: n})
		if i%2 == 0 {
			b := blockAt(p.CIDRs[0], 24, uint64(i))
			in.Ranges = append(in.Ranges, Range{Name: RangeName("bench", b), CIDR: b, Node: n, Pool: "bench"})
		}
	}
	return in
}

// BenchmarkCompute is one allocator pass: 500 assignments among 1,000 nodes and 1,024 blocks.
func BenchmarkCompute(b *testing.B) {
	in := benchInput()
	b.ReportAllocs()
	for b.Loop() {
		if p := Compute(in); len(p.Assign) != 500 {
			b.Fatalf("%d assignments", len(p.Assign))
		}
	}
	b.ReportMetric(float64(500*b.N)/b.Elapsed().Seconds(), "assignments/s")
}

// BenchmarkNaiveFirstFit is the baseline a straightforward allocator would use: for each
// waiting node, try blocks in order and test each against every IPRange (O(nodes x blocks x
// ranges)).
func BenchmarkNaiveFirstFit(b *testing.B) {
	in := benchInput()
	c := in.Pools[0].CIDRs[0]
	b.ReportAllocs()
	for b.Loop() {
		used := make([]netip.Prefix, 0, len(in.Ranges)+500)
		owns := map[string]bool{}
		for _, r := range in.Ranges {
			used = append(used, r.CIDR)
			owns[r.Node] = true
		}
		n := 0
		for _, node := range in.Nodes {
			if owns[node.Name] {
				continue
			}
			for i := uint64(0); i < 1024; i++ {
				blk := blockAt(c, 24, i)
				if _, ok := overlapping(blk, used); !ok {
					used = append(used, blk)
					n++
					break
				}
			}
		}
		if n != 500 {
			b.Fatalf("%d", n)
		}
	}
	b.ReportMetric(float64(500*b.N)/b.Elapsed().Seconds(), "assignments/s")
}
