package bench

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// What an agent's watches deliver, by the kind of object (cni/agent/view.go's informers):
// its own Node (a field selector), the Nodes not labelled claims-in-status=true (agents of the
// previous release), every IPRange, the StaticIPs labelled with a range it holds
// (cni/agent.StaticIPScopes) and the unlabelled ones. Its own pods are not a range move's cost
// and are not counted.
const (
	WatchNode     = "Node"
	WatchIPRange  = "IPRange"
	WatchStaticIP = "StaticIP"
)

// WatchEvent is one object change as the API server sends it to its watchers.
type WatchEvent struct {
	Kind string
	// Node names the Node (Kind WatchNode).
	Node string
	// Legacy: the Node is not labelled claims-in-status=true, so every agent watches it.
	Legacy bool
	// Scoped: a StaticIP with the range label; Watchers are then the nodes whose agents watch it
	// (cni/agent.StaticIPWatchers). An unlabelled StaticIP goes to every agent.
	Scoped   bool
	Watchers []string
	// Bytes is the object's encoded size (what one watcher receives).
	Bytes int
}

// Recipients says which agents receive ev: the agents of the nodes own and, when everyone is
// true, every agent.
func Recipients(ev WatchEvent) (own []string, everyone bool) {
	switch ev.Kind {
	case WatchNode:
		return []string{ev.Node}, ev.Legacy
	case WatchStaticIP:
		if ev.Scoped {
			return ev.Watchers, false
		}
		return nil, true
	case WatchIPRange:
		return nil, true
	}
	return nil, false
}

// Traffic accounts what each agent writes and receives by its watches over a period (a
// failover: one range move). Safe for concurrent use.
type Traffic struct {
	mu sync.Mutex
	// written and own are per agent (node name): bytes it wrote, bytes only it received.
	written, own map[string]int64
	writes       map[string]int
	// first, last: when the first and the last write went out; took: how long each took.
	first, last time.Time
	took        []time.Duration
	// everyone: bytes every agent received, per kind; some: per agent, the bytes only some
	// agents received (its own Node, the StaticIPs of its ranges), per kind.
	everyone map[string]int64
	some     map[string]map[string]int64
}

// NewTraffic returns an empty ledger.
func NewTraffic() *Traffic {
	return &Traffic{written: map[string]int64{}, own: map[string]int64{}, writes: map[string]int{}, everyone: map[string]int64{}, some: map[string]map[string]int64{}}
}

// Wrote records a request body node's agent sent, answered at done after took.
func (t *Traffic) Wrote(node string, bytes int, done time.Time, took time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.written[node] += int64(bytes)
	t.writes[node]++
	if t.first.IsZero() || done.Before(t.first) {
		t.first = done
	}
	if done.After(t.last) {
		t.last = done
	}
	t.took = append(t.took, took)
}

// Writes says when the agents' first and last writes were answered, and how long a write took
// (median, max).
func (t *Traffic) Writes() (first, last time.Time, median, maximum time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.took) == 0 {
		return
	}
	took := slices.Clone(t.took)
	slices.Sort(took)
	return t.first, t.last, took[len(took)/2], took[len(took)-1]
}

// Watched records one watch event.
func (t *Traffic) Watched(ev WatchEvent) {
	own, everyone := Recipients(ev)
	t.mu.Lock()
	defer t.mu.Unlock()
	if everyone {
		t.everyone[ev.Kind] += int64(ev.Bytes)
		return
	}
	for _, n := range own {
		t.own[n] += int64(ev.Bytes)
		if t.some[n] == nil {
			t.some[n] = map[string]int64{}
		}
		t.some[n][ev.Kind] += int64(ev.Bytes)
	}
}

// TrafficSummary is the per-agent distribution over the agents that ran.
type TrafficSummary struct {
	Agents int
	// Written and Watched per agent: median and max, bytes.
	WrittenMedian, WrittenMax, WatchedMedian, WatchedMax int64
	// WritesMax is the most requests one agent sent.
	WritesMax int
	// WrittenTotal is every agent's writes together; DeliveredTotal every agent's watches.
	WrittenTotal, DeliveredTotal int64
	// Everyone is what every agent received, by kind; Some what only some agents received
	// (their own Node, the StaticIPs of their ranges), summed over those agents, by kind.
	Everyone, Some map[string]int64
}

// Summary is the distribution over agents (the Ready nodes' agents: one that is off neither
// writes nor watches).
func (t *Traffic) Summary(agents []string) TrafficSummary {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := TrafficSummary{Agents: len(agents), Everyone: map[string]int64{}, Some: map[string]int64{}}
	var all int64
	for k, b := range t.everyone {
		s.Everyone[k] = b
		all += b
	}
	written := make([]int64, 0, len(agents))
	watched := make([]int64, 0, len(agents))
	for _, a := range agents {
		written = append(written, t.written[a])
		watched = append(watched, all+t.own[a])
		s.WrittenTotal += t.written[a]
		s.DeliveredTotal += all + t.own[a]
		s.WritesMax = max(s.WritesMax, t.writes[a])
		for k, b := range t.some[a] {
			s.Some[k] += b
		}
	}
	s.WrittenMedian, s.WrittenMax = medianMax(written)
	s.WatchedMedian, s.WatchedMax = medianMax(watched)
	return s
}

func medianMax(v []int64) (median, maximum int64) {
	if len(v) == 0 {
		return 0, 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2], v[len(v)-1]
}

// String is the summary for a report's notes.
func (s TrafficSummary) String() string {
	return fmt.Sprintf("per agent (%d): written median %s max %s (max %d requests), watched median %s max %s "+
		"(to every agent: Node %s, IPRange %s, StaticIP %s; to some agents, summed: Node %s, StaticIP %s); all agents: written %s, delivered %s",
		s.Agents, kib(s.WrittenMedian), kib(s.WrittenMax), s.WritesMax, kib(s.WatchedMedian), kib(s.WatchedMax),
		kib(s.Everyone[WatchNode]), kib(s.Everyone[WatchIPRange]), kib(s.Everyone[WatchStaticIP]),
		kib(s.Some[WatchNode]), kib(s.Some[WatchStaticIP]),
		kib(s.WrittenTotal), kib(s.DeliveredTotal))
}

func kib(b int64) string { return fmt.Sprintf("%.1f KiB", float64(b)/1024) }
