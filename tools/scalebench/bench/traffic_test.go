package bench

import (
	"slices"
	"testing"
	"time"
)

func TestRecipients(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ev       WatchEvent
		own      []string
		everyone bool
	}{
		{"a labelled Node: only its own agent", WatchEvent{Kind: WatchNode, Node: "n1"}, []string{"n1"}, false},
		{"a Node of the previous release: every agent (and its own)", WatchEvent{Kind: WatchNode, Node: "n1", Legacy: true}, []string{"n1"}, true},
		{"an IPRange: every agent", WatchEvent{Kind: WatchIPRange}, nil, true},
		{"an unlabelled StaticIP: every agent", WatchEvent{Kind: WatchStaticIP}, nil, true},
		{"a StaticIP of a range: the agents that hold it", WatchEvent{Kind: WatchStaticIP, Scoped: true, Watchers: []string{"a", "spare"}}, []string{"a", "spare"}, false},
		{"a StaticIP of a range nobody holds: nobody", WatchEvent{Kind: WatchStaticIP, Scoped: true}, nil, false},
		{"anything else: nobody", WatchEvent{Kind: "Pod"}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			own, everyone := Recipients(tc.ev)
			if !slices.Equal(own, tc.own) || everyone != tc.everyone {
				t.Errorf("Recipients(%+v) = %q, %v; want %q, %v", tc.ev, own, everyone, tc.own, tc.everyone)
			}
		})
	}
}

func TestTrafficSummary(t *testing.T) {
	tr := NewTraffic()
	t0 := time.Unix(1e9, 0)
	tr.Wrote("spare", 1000, t0.Add(time.Second), 10*time.Millisecond)  // the new owner's claim
	tr.Wrote("spare", 300, t0.Add(3*time.Second), 30*time.Millisecond) // its route report
	tr.Wrote("b", 200, t0.Add(2*time.Second), 20*time.Millisecond)
	tr.Watched(WatchEvent{Kind: WatchIPRange, Bytes: 2000})
	tr.Watched(WatchEvent{Kind: WatchIPRange, Bytes: 2100})
	tr.Watched(WatchEvent{Kind: WatchNode, Node: "spare", Bytes: 5000})
	tr.Watched(WatchEvent{Kind: WatchNode, Node: "old", Legacy: true, Bytes: 700})
	tr.Watched(WatchEvent{Kind: WatchNode, Node: "off", Bytes: 9999}) // its agent is off: counted for nobody
	tr.Watched(WatchEvent{Kind: WatchStaticIP, Scoped: true, Watchers: []string{"spare"}, Bytes: 3000})
	s := tr.Summary([]string{"a", "b", "spare"})
	want := TrafficSummary{Agents: 3, WrittenMedian: 200, WrittenMax: 1300, WritesMax: 2,
		WatchedMedian: 4800, WatchedMax: 12800, WrittenTotal: 1500, DeliveredTotal: 3*4800 + 5000 + 3000}
	if s.Agents != want.Agents || s.WrittenMedian != want.WrittenMedian || s.WrittenMax != want.WrittenMax || s.WritesMax != want.WritesMax ||
		s.WatchedMedian != want.WatchedMedian || s.WatchedMax != want.WatchedMax || s.WrittenTotal != want.WrittenTotal || s.DeliveredTotal != want.DeliveredTotal {
		t.Errorf("Summary = %+v\nwant     %+v", s, want)
	}
	if s.Everyone[WatchIPRange] != 4100 || s.Everyone[WatchNode] != 700 || s.Everyone[WatchStaticIP] != 0 {
		t.Errorf("to every agent by kind = %v, want IPRange 4100, Node 700, no StaticIP", s.Everyone)
	}
	if s.Some[WatchStaticIP] != 3000 || s.Some[WatchNode] != 5000 {
		t.Errorf("to some agents by kind = %v, want StaticIP 3000, Node 5000 (the agent of node off is off)", s.Some)
	}
	if first, last, med, mx := tr.Writes(); !first.Equal(t0.Add(time.Second)) || !last.Equal(t0.Add(3*time.Second)) || med != 20*time.Millisecond || mx != 30*time.Millisecond {
		t.Errorf("Writes = %v %v %v %v, want the first at +1s, the last at +3s, median 20ms, max 30ms", first, last, med, mx)
	}
	if empty := NewTraffic().Summary(nil); empty.WatchedMax != 0 || empty.Agents != 0 {
		t.Errorf("empty summary = %+v", empty)
	}
}
