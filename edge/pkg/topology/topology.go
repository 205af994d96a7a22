// Package topology decides which endpoints of a Service a node keeps, from the Service's
// `topologyKeys` annotation (an ordered JSON list of node label keys, "*" last meaning
// "any endpoint"), the labels of this node and the labels of the endpoints' nodes.
//
// The functions here are pure: the wrapper feeds them what its informers hold. The keys are
// parsed by superedgev1.ParseTopologyKeys, the one parser the grid controller uses too.
package topology

import (
	discoveryv1 "k8s.io/api/discovery/v1"

	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
)

// NodeLabels returns the labels of a node, false when the node is unknown.
type NodeLabels func(node string) (map[string]string, bool)

// Decision says which endpoints of one Service this node keeps.
type Decision struct {
	// All keeps every endpoint (the "*" key won).
	All bool
	// Key and Value: keep the endpoints whose node has label Key=Value. Key == "" with
	// All false means no key selected a ready endpoint: keep none.
	Key, Value string
}

// None reports whether the decision keeps no endpoint.
func (d Decision) None() bool { return !d.All && d.Key == "" }

func (d Decision) String() string {
	switch {
	case d.All:
		return superedgev1.TopologyKeyAny
	case d.None():
		return "none"
	default:
		return d.Key + "=" + d.Value
	}
}

// Decide walks keys in order. A key applies only if this node carries that label; it
// selects the endpoints whose node has the same value; the first key that selects at
// least one ready endpoint (over all the Service's slices) wins. "*" selects every
// endpoint, ready or not. No winner: no endpoint for this node.
func Decide(keys []string, self map[string]string, slices []*discoveryv1.EndpointSlice, nodeLabels NodeLabels) Decision {
	for _, key := range keys {
		if key == superedgev1.TopologyKeyAny {
			return Decision{All: true}
		}
		value, ok := self[key]
		if !ok {
			continue
		}
		d := Decision{Key: key, Value: value}
		for _, s := range slices {
			for i := range s.Endpoints {
				if Ready(&s.Endpoints[i]) && d.Keeps(&s.Endpoints[i], nodeLabels) {
					return d
				}
			}
		}
	}
	return Decision{}
}

// Keeps reports whether the decision keeps one endpoint. An endpoint without a node name,
// or on a node the wrapper does not know, matches no key (only "*").
func (d Decision) Keeps(ep *discoveryv1.Endpoint, nodeLabels NodeLabels) bool {
	if d.All {
		return true
	}
	if d.None() || ep.NodeName == nil {
		return false
	}
	labels, ok := nodeLabels(*ep.NodeName)
	if !ok {
		return false
	}
	v, ok := labels[d.Key]
	return ok && v == d.Value
}

// Ready follows the API: a nil ready condition means ready.
func Ready(ep *discoveryv1.Endpoint) bool {
	return ep.Conditions.Ready == nil || *ep.Conditions.Ready
}

// Filter returns the slice with only the endpoints d keeps, and how many it dropped. The
// slice itself is never dropped (an empty slice still tells kube-proxy the Service has no
// endpoint here). The input is not modified: when something is dropped the result is a
// copy.
func Filter(s *discoveryv1.EndpointSlice, d Decision, nodeLabels NodeLabels) (*discoveryv1.EndpointSlice, int) {
	if d.All {
		return s, 0
	}
	kept := make([]discoveryv1.Endpoint, 0, len(s.Endpoints))
	for i := range s.Endpoints {
		if d.Keeps(&s.Endpoints[i], nodeLabels) {
			kept = append(kept, s.Endpoints[i])
		}
	}
	dropped := len(s.Endpoints) - len(kept)
	if dropped == 0 {
		return s, 0
	}
	out := s.DeepCopy()
	out.Endpoints = make([]discoveryv1.Endpoint, len(kept))
	for i := range kept {
		kept[i].DeepCopyInto(&out.Endpoints[i])
	}
	return out, dropped
}
