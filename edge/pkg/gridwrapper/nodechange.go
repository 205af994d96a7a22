package gridwrapper

import superedgev1 "github.com/staticip/staticip/apis/superedge/v1"

// changedLabels returns the label keys whose value differs between old and cur (a key present
// in only one counts; nil is a node that does not exist, for which every label of the other
// version counts: an endpoint on an unknown node matches no key).
func changedLabels(old, cur map[string]string) map[string]bool {
	out := map[string]bool{}
	for k, v := range old {
		if w, ok := cur[k]; !ok || w != v {
			out[k] = true
		}
	}
	for k := range cur {
		if _, ok := old[k]; !ok {
			out[k] = true
		}
	}
	return out
}

// nodeChange is what affectedByNode decides from: the wrapper's own informer state.
type nodeChange struct {
	// self is this node's name, selfLabels its labels now.
	self       string
	selfLabels map[string]string
	// node changed its labels from old to cur (nil: absent, for an add or a delete).
	node     string
	old, cur map[string]string
	// keysOf returns the valid topologyKeys of a Service ("namespace/name"), false without.
	keysOf func(service string) ([]string, bool)
	// annotated lists the Services with topologyKeys (only read for a change of this node).
	annotated func() []string
	// onNode lists the Services with an endpoint on a node (from the EndpointSlice cache).
	onNode func(node string) []string
}

// affectedByNode returns the Services whose selection for this node a node change can move,
// and nothing else:
//   - this node's labels decide which keys apply and which value they select: every Service
//     with a topologyKeys key among the changed labels;
//   - another node's labels only decide whether that node's endpoints match: the Services with
//     an endpoint on it and a key among its changed labels that this node carries (a key this
//     node lacks never applies). A node that hosts no endpoint changes nothing.
//
// "*" selects every endpoint whatever the labels: never a reason.
func affectedByNode(c nodeChange) map[string]bool {
	changed := changedLabels(c.old, c.cur)
	out := map[string]bool{}
	if len(changed) == 0 {
		return out
	}
	uses := func(svc string, applies func(key string) bool) bool {
		keys, ok := c.keysOf(svc)
		if !ok {
			return false
		}
		for _, k := range keys {
			if k != superedgev1.TopologyKeyAny && changed[k] && applies(k) {
				return true
			}
		}
		return false
	}
	if c.node == c.self {
		for _, svc := range c.annotated() {
			if uses(svc, func(string) bool { return true }) {
				out[svc] = true
			}
		}
		return out
	}
	for _, svc := range c.onNode(c.node) {
		if out[svc] {
			continue
		}
		if uses(svc, func(k string) bool { _, ok := c.selfLabels[k]; return ok }) {
			out[svc] = true
		}
	}
	return out
}
