// Package poolchoiceapi converts IPPools for apis/poolchoice, which does not import the API
// types (the CNI plugin decides with it and decodes the few fields it reads itself).
package poolchoiceapi

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/poolchoice"
)

// FromIPPool converts an IPPool; a namespaceSelector that does not parse is an error.
func FromIPPool(p *jkev1.IPPool) (poolchoice.Pool, error) {
	return poolchoice.NewPool(p.Name, p.CreationTimestamp.Time, p.DeletionTimestamp != nil, p.Spec.CIDRs, Selector(p.Spec.NamespaceSelector))
}

// Pools converts every IPPool that converts, by name (a corrupt one is left out: it selects
// nothing).
func Pools(ps []*jkev1.IPPool) map[string]poolchoice.Pool {
	out := make(map[string]poolchoice.Pool, len(ps))
	for _, p := range ps {
		if cp, err := FromIPPool(p); err == nil {
			out[p.Name] = cp
		}
	}
	return out
}

// ForNamespaces: the pool's namespaceSelector is non-empty, so it is address space of the
// namespaces it selects and never a node's pool (the range allocator gives no node a block of it
// by default); absent or empty, it selects every namespace and may be a node's pool.
func ForNamespaces(p *jkev1.IPPool) bool {
	return !Selector(p.Spec.NamespaceSelector).Empty()
}

// Selector is s in poolchoice's form (nil for nil).
func Selector(s *metav1.LabelSelector) *poolchoice.LabelSelector {
	if s == nil {
		return nil
	}
	out := &poolchoice.LabelSelector{MatchLabels: s.MatchLabels}
	for _, e := range s.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions,
			poolchoice.LabelSelectorRequirement{Key: e.Key, Operator: string(e.Operator), Values: e.Values})
	}
	return out
}
