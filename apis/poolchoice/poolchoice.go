// Package poolchoice is the one answer to "which IPPool may, and which must, this pod's address
// come from", for admission (refuse a pod naming a pool it may not use), the scheduler (is there
// an address of the pod's pool on this node), the range allocator (which pool a node needs a
// block of) and the CNI (which range to pick from). All of them call Choose, so they never
// disagree about a pod.
//
// The rules (Calico's, for IPPool.spec.namespaceSelector and cni.projectcalico.org/ipv4pools):
//   - A pool's namespaceSelector, empty or absent, selects every namespace.
//   - The annotation staticip.jke.jdcloud.com/ippools (a JSON list of pool names) on the pod
//     decides; else the same annotation on the pod's namespace; the pod's wins. Every named pool
//     must exist, not be being deleted, and select the pod's namespace, or the pod is refused
//     with the reason (Explicit: true).
//   - Without an annotation: the pools whose non-empty namespaceSelector selects the namespace,
//     oldest first (then by name); of two such pools of one IP family only the oldest serves
//     (the younger one carries the NamespaceSelectorOverlaps condition, Overlaps).
//   - Neither: no choice (Pools empty): the pod takes an address of the node's pool, exactly as
//     before pools had a namespaceSelector; pools with a non-empty namespaceSelector are not
//     node pools (NodePool).
//
// A pod whose StaticIP record already has an IP gets that IP whatever its annotation says now:
// the address names its range, and the range its pool (apis/podip decides first).
package poolchoice

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"
)

// AnnotationIPPools is apis/jke/v1.AnnotationIPPools. The package does not import the API types
// (nor metav1): the CNI plugin decides with it at ADD, and its binary stays small and starts
// fast (TestAnnotationKeysAgree keeps the two keys equal). poolchoiceapi converts IPPools.
const AnnotationIPPools = "staticip.jke.jdcloud.com/ippools"

// MaxPools bounds the list in one annotation: a pod needs one pool per IP family, a few for
// fallbacks; a longer list is a mistake, and every consumer walks it per pod.
const MaxPools = 8

// Source says where a pod's pool choice came from.
type Source string

const (
	SourceNone              Source = ""                  // no choice: the node's pool
	SourcePod               Source = "pod"               // the pod's annotation
	SourceNamespace         Source = "namespace"         // the namespace's annotation
	SourceNamespaceSelector Source = "namespaceSelector" // pools selecting the namespace
)

// Pool is what the choice needs of an IPPool.
type Pool struct {
	Name    string
	Created time.Time
	// V4 is the pool's IP family (all its CIDRs share one).
	V4 bool
	// Selector is the parsed namespaceSelector; nil when absent or empty (every namespace).
	Selector labels.Selector
	// Deleting: the pool has a deletionTimestamp; it gives nothing new.
	Deleting bool
}

// LabelSelector is a metav1.LabelSelector as JSON carries it (the same field names), so the
// CNI plugin decodes an IPPool's namespaceSelector into it without the API machinery's types.
type LabelSelector struct {
	MatchLabels      map[string]string          `json:"matchLabels,omitempty"`
	MatchExpressions []LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// LabelSelectorRequirement is a metav1.LabelSelectorRequirement.
type LabelSelectorRequirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values,omitempty"`
}

// Empty: nil or without terms — it selects every namespace.
func (s *LabelSelector) Empty() bool {
	return s == nil || (len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0)
}

// selector is metav1.LabelSelectorAsSelector for a non-empty selector: the same requirements
// (labels.NewRequirement validates keys and values), the same operators.
func (s *LabelSelector) selector() (labels.Selector, error) {
	sel := labels.NewSelector()
	for _, k := range slices.Sorted(maps.Keys(s.MatchLabels)) {
		r, err := labels.NewRequirement(k, selection.Equals, []string{s.MatchLabels[k]})
		if err != nil {
			return nil, err
		}
		sel = sel.Add(*r)
	}
	for _, e := range s.MatchExpressions {
		var op selection.Operator
		switch e.Operator {
		case "In":
			op = selection.In
		case "NotIn":
			op = selection.NotIn
		case "Exists":
			op = selection.Exists
		case "DoesNotExist":
			op = selection.DoesNotExist
		default:
			return nil, fmt.Errorf("%q is not a valid label selector operator", e.Operator)
		}
		r, err := labels.NewRequirement(e.Key, op, append([]string(nil), e.Values...))
		if err != nil {
			return nil, err
		}
		sel = sel.Add(*r)
	}
	return sel, nil
}

// NewPool is what the choice needs of an IPPool named name: created and deleting from its
// metadata, its spec.cidrs (the first names the family) and spec.namespaceSelector. A selector
// that does not parse is an error (the CRD admits only well-formed LabelSelectors, so this is a
// corrupt object).
func NewPool(name string, created time.Time, deleting bool, cidrs []string, namespaceSelector *LabelSelector) (Pool, error) {
	out := Pool{Name: name, Created: created, Deleting: deleting, V4: true}
	if len(cidrs) > 0 {
		if c, err := netip.ParsePrefix(cidrs[0]); err == nil {
			out.V4 = c.Addr().Is4()
		}
	}
	if !namespaceSelector.Empty() {
		sel, err := namespaceSelector.selector()
		if err != nil {
			return out, fmt.Errorf("IPPool %q: namespaceSelector: %w", name, err)
		}
		out.Selector = sel
	}
	return out, nil
}

// SelectsNamespace: the pool's namespaceSelector matches the namespace's labels (absent or
// empty matches every namespace).
func (p Pool) SelectsNamespace(nsLabels map[string]string) bool {
	return p.Selector == nil || p.Selector.Matches(labels.Set(nsLabels))
}

// NodePool: the pool may be a node's pool, the one pods without a choice take addresses of
// (its namespaceSelector is empty or absent).
func (p Pool) NodePool() bool { return p.Selector == nil }

// Parse reads the annotation's value: a JSON list of 1..MaxPools distinct pool names.
func Parse(value string) ([]string, error) {
	var names []string
	if err := json.Unmarshal([]byte(value), &names); err != nil {
		return nil, fmt.Errorf("%s must be a JSON list of IPPool names such as [\"db-pool\"]: %v", AnnotationIPPools, err)
	}
	if len(names) == 0 || len(names) > MaxPools {
		return nil, fmt.Errorf("%s must name 1 to %d IPPools, not %d", AnnotationIPPools, MaxPools, len(names))
	}
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			return nil, fmt.Errorf("%s: %q is not an IPPool name: %s", AnnotationIPPools, n, strings.Join(errs, "; "))
		}
		if seen[n] {
			return nil, fmt.Errorf("%s names IPPool %q twice", AnnotationIPPools, n)
		}
		seen[n] = true
	}
	return names, nil
}

// Namespace is what the choice needs of the pod's namespace.
type Namespace struct {
	Name        string
	Labels      map[string]string
	Annotations map[string]string
}

// Choice is the pools a pod's address must come from, in order of preference.
type Choice struct {
	Pools  []string
	Source Source
}

// Explicit: the pod or its namespace named the pools (refused if they are not usable).
func (c Choice) Explicit() bool { return c.Source == SourcePod || c.Source == SourceNamespace }

// Choose decides a pod's pools. pools is every IPPool by name. The error says why the pod may
// not run as written (admission's reason, the scheduler's and the CNI's message).
//
// Cost: with no annotation and no pool that has a namespaceSelector (nsPools empty), O(1).
// nsPools are the pools with a non-empty namespaceSelector, oldest first (SortOldestFirst):
// callers keep that list, so a cluster without such pools pays nothing per pod.
func Choose(podAnnotations map[string]string, ns Namespace, pools map[string]Pool, nsPools []Pool) (Choice, error) {
	value, src := podAnnotations[AnnotationIPPools], SourcePod
	if value == "" {
		value, src = ns.Annotations[AnnotationIPPools], SourceNamespace
	}
	if value != "" {
		names, err := Parse(value)
		if err != nil {
			if src == SourceNamespace {
				return Choice{}, fmt.Errorf("namespace %q: %w", ns.Name, err)
			}
			return Choice{}, err
		}
		var problems []string
		for _, n := range names {
			p, ok := pools[n]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("IPPool %q does not exist", n))
			case p.Deleting:
				problems = append(problems, fmt.Sprintf("IPPool %q is being deleted", n))
			case !p.SelectsNamespace(ns.Labels):
				problems = append(problems, fmt.Sprintf("IPPool %q does not select namespace %q (spec.namespaceSelector %s)", n, ns.Name, p.Selector))
			}
		}
		if len(problems) > 0 {
			where := "the pod's"
			if src == SourceNamespace {
				where = fmt.Sprintf("namespace %q's", ns.Name)
			}
			return Choice{}, fmt.Errorf("%s %s %s: %s", where, AnnotationIPPools, value, strings.Join(problems, "; "))
		}
		return Choice{Pools: names, Source: src}, nil
	}
	// No annotation: the oldest selecting pool of each family.
	var chosen []string
	var have4, have6 bool
	for _, p := range nsPools {
		if p.Deleting || !p.SelectsNamespace(ns.Labels) {
			continue
		}
		if (p.V4 && have4) || (!p.V4 && have6) {
			continue
		}
		have4, have6 = have4 || p.V4, have6 || !p.V4
		chosen = append(chosen, p.Name)
	}
	if len(chosen) == 0 {
		return Choice{}, nil
	}
	return Choice{Pools: chosen, Source: SourceNamespaceSelector}, nil
}

// SortOldestFirst orders pools by creation, then name: the order in which pools of one family
// win a namespace (and a node, for node pools).
func SortOldestFirst(ps []Pool) {
	sort.Slice(ps, func(i, j int) bool {
		if !ps[i].Created.Equal(ps[j].Created) {
			return ps[i].Created.Before(ps[j].Created)
		}
		return ps[i].Name < ps[j].Name
	})
}

// NamespacePools returns the pools with a non-empty namespaceSelector, oldest first: Choose's
// nsPools.
func NamespacePools(pools map[string]Pool) []Pool {
	var out []Pool
	for _, p := range pools {
		if !p.NodePool() {
			out = append(out, p)
		}
	}
	SortOldestFirst(out)
	return out
}

// Overlap is why a pool carries NamespaceSelectorOverlaps: an older pool of its family selects
// some of the same existing namespaces.
type Overlap struct {
	Older      string
	Namespaces []string // sorted, at most maxListed
}

const maxListed = 10

// Message is the condition's message.
func (o Overlap) Message(pool string) string {
	return fmt.Sprintf("namespaceSelector selects namespaces IPPool %q (older) selects too: %s; pods there without the %s annotation take addresses of %q",
		o.Older, strings.Join(o.Namespaces, ", "), AnnotationIPPools, o.Older)
}

// Overlaps finds, for each pool with a non-empty namespaceSelector, the oldest older pool of its
// family whose non-empty selector selects one of the same existing namespaces. Pools without a
// selector (node pools) never overlap: they are the fallback, not a claim on a namespace.
// Overlap is decided over the namespaces that exist (as Calico does not try to intersect label
// selectors in general): a namespace created later raises it on the next pass.
func Overlaps(pools map[string]Pool, namespaces []Namespace) map[string]Overlap {
	nsPools := NamespacePools(pools)
	out := map[string]Overlap{}
	for i, younger := range nsPools {
		for _, older := range nsPools[:i] {
			if older.V4 != younger.V4 || older.Deleting {
				continue
			}
			var shared []string
			for _, ns := range namespaces {
				if older.SelectsNamespace(ns.Labels) && younger.SelectsNamespace(ns.Labels) {
					shared = append(shared, ns.Name)
				}
			}
			if len(shared) == 0 {
				continue
			}
			sort.Strings(shared)
			if len(shared) > maxListed {
				shared = shared[:maxListed]
			}
			out[younger.Name] = Overlap{Older: older.Name, Namespaces: shared}
			break
		}
	}
	return out
}
