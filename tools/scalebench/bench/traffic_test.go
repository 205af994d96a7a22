package bench

import "testing"

func TestRecipients(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ev       WatchEvent
		own      string
		everyone bool
	}{
		{"a labelled Node: only its own agent", WatchEvent{Kind: WatchNode, Node: "n1"}, "n1", false},
		{"a Node of the previous release: every agent (and its own)", WatchEvent{Kind: WatchNode, Node: "n1", Legacy: true}, "n1", true},
		{"an IPRange: every agent", WatchEvent{Kind: WatchIPRange}, "", true},
		{"a StaticIP: every agent", WatchEvent{Kind: WatchStaticIP}, "", true},
		{"anything else: nobody", WatchEvent{Kind: "Pod"}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			own, everyone := Recipients(tc.ev)
			if own != tc.own || everyone != tc.everyone {
				t.Errorf("Recipients(%+v) = %q, %v; want %q, %v", tc.ev, own, everyone, tc.own, tc.everyone)
			}
		})
	}
}

func TestTrafficSummary(t *testing.T) {
	tr := NewTraffic()
	tr.Wrote("spare", 1000) // the new owner's claim
	tr.Wrote("spare", 300)  // its route report
	tr.Wrote("b", 200)
	tr.Watched(WatchEvent{Kind: WatchIPRange, Bytes: 2000})
	tr.Watched(WatchEvent{Kind: WatchIPRange, Bytes: 2100})
	tr.Watched(WatchEvent{Kind: WatchNode, Node: "spare", Bytes: 5000})
	tr.Watched(WatchEvent{Kind: WatchNode, Node: "old", Legacy: true, Bytes: 700})
	tr.Watched(WatchEvent{Kind: WatchNode, Node: "off", Bytes: 9999}) // its agent is off: counted for nobody
	s := tr.Summary([]string{"a", "b", "spare"})
	want := TrafficSummary{Agents: 3, WrittenMedian: 200, WrittenMax: 1300, WritesMax: 2,
		WatchedMedian: 4800, WatchedMax: 9800, WrittenTotal: 1500, DeliveredTotal: 3*4800 + 5000}
	if s.Agents != want.Agents || s.WrittenMedian != want.WrittenMedian || s.WrittenMax != want.WrittenMax || s.WritesMax != want.WritesMax ||
		s.WatchedMedian != want.WatchedMedian || s.WatchedMax != want.WatchedMax || s.WrittenTotal != want.WrittenTotal || s.DeliveredTotal != want.DeliveredTotal {
		t.Errorf("Summary = %+v\nwant     %+v", s, want)
	}
	if s.Everyone[WatchIPRange] != 4100 || s.Everyone[WatchNode] != 700 {
		t.Errorf("to every agent by kind = %v, want IPRange 4100, Node 700", s.Everyone)
	}
	if empty := NewTraffic().Summary(nil); empty.WatchedMax != 0 || empty.Agents != 0 {
		t.Errorf("empty summary = %+v", empty)
	}
}
