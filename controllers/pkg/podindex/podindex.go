// Package podindex indexes pods by node and by the IP block of their status.podIPs, so a
// controller finds the pods that may hold an address of a CIDR without listing every pod.
// Several controllers of one manager share the pod informer and so these indexes.
package podindex

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// Index names on the pod informer.
const (
	ByNode    = "podindex.spec.nodeName"
	ByIPBlock = "podindex.status.podIPs.block"
	// ByAwaitingIP holds, under the one key AwaitingIP, the pods bound to a node that have no
	// IP yet (not host network, not finished, not being deleted): the range allocator gives
	// their node a block of their pool when none of its addresses is left there.
	ByAwaitingIP = "podindex.awaitingIP"
	AwaitingIP   = "awaiting"
	// MaxBlocks bounds the index lookups for one CIDR (a /16 of IPv4); a wider CIDR is checked
	// against the list of all pods.
	MaxBlocks = 256
)

func indexByNode(obj any) ([]string, error) {
	if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
		return []string{p.Spec.NodeName}, nil
	}
	return nil, nil
}

// Awaiting: the pod is bound to a node and still waits for its pod IP.
func Awaiting(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && !p.Spec.HostNetwork && len(p.Status.PodIPs) == 0 && p.DeletionTimestamp == nil &&
		p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

func indexByAwaitingIP(obj any) ([]string, error) {
	if p, ok := obj.(*corev1.Pod); ok && Awaiting(p) {
		return []string{AwaitingIP}, nil
	}
	return nil, nil
}

func indexByIPBlock(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	var keys []string
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil && !slices.Contains(keys, BlockKey(a)) {
			keys = append(keys, BlockKey(a))
		}
	}
	return keys, nil
}

// Pods answers "which pods are on this node" and "which pods may hold an IP of these CIDRs"
// from a pod informer's indexes.
type Pods struct {
	indexer cache.Indexer
	lister  corelisters.PodLister
}

// New adds the indexes to the pod informer (once: a second controller sharing the informer
// reuses them) and returns the lookups. Call it before the informer starts.
func New(inf cache.SharedIndexInformer, lister corelisters.PodLister) (*Pods, error) {
	have := inf.GetIndexer().GetIndexers()
	add := cache.Indexers{}
	if _, ok := have[ByNode]; !ok {
		add[ByNode] = indexByNode
	}
	if _, ok := have[ByIPBlock]; !ok {
		add[ByIPBlock] = indexByIPBlock
	}
	if _, ok := have[ByAwaitingIP]; !ok {
		add[ByAwaitingIP] = indexByAwaitingIP
	}
	if len(add) > 0 {
		if err := inf.AddIndexers(add); err != nil {
			return nil, err
		}
	}
	return &Pods{indexer: inf.GetIndexer(), lister: lister}, nil
}

// On lists the pods bound to node.
func (x *Pods) On(node string) ([]*corev1.Pod, error) {
	return x.byIndex(ByNode, node, nil, nil)
}

func (x *Pods) byIndex(index, key string, out []*corev1.Pod, seen map[types.UID]bool) ([]*corev1.Pod, error) {
	objs, err := x.indexer.ByIndex(index, key)
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok && (seen == nil || !seen[p.UID]) {
			if seen != nil {
				seen[p.UID] = true
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// Get is the pod namespace/name from the informer.
func (x *Pods) Get(namespace, name string) (*corev1.Pod, error) {
	return x.lister.Pods(namespace).Get(name)
}

// AwaitingIP lists the pods bound to a node that have no IP yet (Awaiting).
func (x *Pods) AwaitingIP() ([]*corev1.Pod, error) {
	return x.byIndex(ByAwaitingIP, AwaitingIP, nil, nil)
}

// Candidates returns the pods bound to node (none when node is empty) and the pods with an
// IP in one of the index blocks the prefixes overlap: a superset of the pods holding an IP of
// the prefixes (callers decide exactly, e.g. with HoldsIPIn).
func (x *Pods) Candidates(node string, prefixes []netip.Prefix) ([]*corev1.Pod, error) {
	seen := map[types.UID]bool{}
	var out []*corev1.Pod
	var err error
	if node != "" {
		if out, err = x.byIndex(ByNode, node, out, seen); err != nil {
			return nil, err
		}
	}
	for _, r := range prefixes {
		blocks, ok := Blocks(r, MaxBlocks)
		if !ok {
			return x.lister.List(labels.Everything())
		}
		for _, b := range blocks {
			if out, err = x.byIndex(ByIPBlock, b, out, seen); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// HoldsIPIn names the first IP of pod that lies in prefix, or "".
func HoldsIPIn(p *corev1.Pod, prefix netip.Prefix) string {
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil && prefix.Contains(a.Unmap()) {
			return ip.IP
		}
	}
	return ""
}

// Block sizes of the pod IP index: a node's range is usually a /24 (IPv4) or a /64 (IPv6) or
// smaller, so it falls in one block.
const (
	ipv4BlockBits = 24
	ipv6BlockBits = 64
)

// BlockKey is the index key of an address: its /24 (IPv4) or /64 (IPv6) block.
func BlockKey(a netip.Addr) string {
	a = a.Unmap()
	bits := ipv6BlockBits
	if a.Is4() {
		bits = ipv4BlockBits
	}
	p, _ := a.Prefix(bits)
	return p.String()
}

// Blocks lists the index keys of the blocks prefix p overlaps, or false when there are more
// than max of them.
func Blocks(p netip.Prefix, max int) ([]string, bool) {
	p = p.Masked()
	bits := ipv6BlockBits
	if p.Addr().Is4() {
		bits = ipv4BlockBits
	}
	if p.Bits() >= bits {
		return []string{BlockKey(p.Addr())}, true
	}
	if bits-p.Bits() > 30 || 1<<(bits-p.Bits()) > max {
		return nil, false
	}
	n := 1 << (bits - p.Bits())
	out := make([]string, 0, n)
	b := p.Addr().As16()
	for i := 0; i < n; i++ {
		// Add i at the block's lowest bit: byte (bits-1)/8 of the 16-byte form, plus carry.
		c := b
		carry := uint(i) << ((8 - uint(bits)%8) % 8)
		pos := (bits - 1) / 8
		if p.Addr().Is4() {
			pos += 12
		}
		for ; carry > 0 && pos >= 0; pos-- {
			sum := uint(c[pos]) + carry&0xff
			c[pos] = byte(sum)
			carry = carry>>8 + sum>>8
		}
		a := netip.AddrFrom16(c)
		if p.Addr().Is4() {
			a = a.Unmap()
		}
		out = append(out, BlockKey(a))
	}
	return out, true
}
