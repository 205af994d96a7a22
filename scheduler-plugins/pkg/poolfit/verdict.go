// Package poolfit decides, for a pod whose address must come from chosen IPPools
// (apis/poolchoice: the pod's or its namespace's staticip.jke.jdcloud.com/ippools annotation,
// or the pools whose namespaceSelector selects its namespace), whether a node can give it one:
// a free address of one of its pools on the node, or a block of one of them the range allocator
// can still give the node. A node that has neither is not feasible, the reason naming the pools
// (issue 39 item 1). verdict.go is the pure decision; view.go its informers.
package poolfit

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
)

// Pool is what the verdict needs of one IPPool.
type Pool struct {
	Name     string
	Deleting bool
	// NodePodCIDR: the pool mirrors Node.spec.podCIDR; it gives no block on demand.
	NodePodCIDR bool
	// NodeSelector selects the nodes the pool may give blocks (nil: every node).
	NodeSelector labels.Selector
	// FreeBlocks are blocks the allocator can still give a node: status.blocksFree (blocks
	// overlapping no IPRange) plus the pool's released blocks (IPRanges of it no node holds).
	FreeBlocks int64
	// V6: the pool's addresses are IPv6 (a pool is one family).
	V6 bool
}

// Node is what the verdict needs of one node: its labels and, per pool, the free addresses
// of that pool's blocks it holds (as its agent last counted them).
type Node struct {
	Name   string
	Labels map[string]string
	Free   map[string]int64
}

// Verdict says whether node can give the pod an address of one of pools (in the pod's order of
// preference), and if not, why, naming each pool. An unknown pool is named as such (the pod's
// choice outlived the pool admission checked it against).
//
// A dual-stack pod names pools of both families and takes an address of each (the CNI gives one
// per family or none): the node must serve every family of its pools, each judged on its own.
func Verdict(pools []string, node Node, known map[string]Pool) (bool, string) {
	var why []string
	for _, group := range byFamily(pools, known) {
		if ok, w := verdictOfFamily(group, node, known); !ok {
			why = append(why, w)
		}
	}
	if len(why) > 0 {
		return false, strings.Join(why, "; ")
	}
	return true, ""
}

// ServesEveryNode reports whether Verdict admits every node for pools, whatever the node's
// labels and free addresses: each family of pools has a pool that can give any node a block
// (known, not being deleted, not NodePodCIDR, no nodeSelector or one selecting everything, a
// block left). Verdict then returns true at that pool at the latest, on every node, so the
// scheduler need not ask it per node (issue 39 Measure: with four namespace pools Filter ran on
// every node for every pod, where the one-pool cluster skips it).
func ServesEveryNode(pools []string, known map[string]Pool) bool {
	if len(pools) == 0 {
		return false
	}
	for _, group := range byFamily(pools, known) {
		if !slices.ContainsFunc(group, func(name string) bool {
			p, ok := known[name]
			return ok && servesAnyNode(p)
		}) {
			return false
		}
	}
	return true
}

// servesAnyNode: verdictOfFamily's last case holds for p on every node.
func servesAnyNode(p Pool) bool {
	return !p.Deleting && !p.NodePodCIDR && p.FreeBlocks > 0 && (p.NodeSelector == nil || p.NodeSelector.Empty())
}

// byFamily splits pools by IP family, keeping their order: one list when they are of one family,
// two for a dual-stack pod. An unknown pool goes with every family (it serves none, and is named).
func byFamily(pools []string, known map[string]Pool) [][]string {
	var v4, v6, unknown []string
	for _, name := range pools {
		switch p, ok := known[name]; {
		case !ok:
			unknown = append(unknown, name)
		case p.V6:
			v6 = append(v6, name)
		default:
			v4 = append(v4, name)
		}
	}
	if len(v4) == 0 || len(v6) == 0 {
		return [][]string{pools}
	}
	return [][]string{append(v4, unknown...), append(v6, unknown...)}
}

// verdictOfFamily is Verdict for pools of one family: one of them serves the node.
func verdictOfFamily(pools []string, node Node, known map[string]Pool) (bool, string) {
	var why []string
	for _, name := range pools {
		if node.Free[name] > 0 {
			return true, ""
		}
		p, ok := known[name]
		switch {
		case !ok:
			why = append(why, fmt.Sprintf("IPPool %q does not exist", name))
		case p.Deleting:
			why = append(why, fmt.Sprintf("IPPool %q is being deleted and has no free address on the node", name))
		case p.NodePodCIDR:
			why = append(why, fmt.Sprintf("IPPool %q (mode NodePodCIDR) has no free address on the node", name))
		case p.NodeSelector != nil && !p.NodeSelector.Matches(labels.Set(node.Labels)):
			why = append(why, fmt.Sprintf("IPPool %q has no free address on the node and its nodeSelector does not select it", name))
		case p.FreeBlocks <= 0:
			why = append(why, fmt.Sprintf("IPPool %q is exhausted: no free address on the node and no free block to give it", name))
		default:
			return true, "" // the range allocator gives the node a block once the pod is bound there
		}
	}
	return false, strings.Join(why, "; ")
}

// Block is one block of a pool that a node holds: its prefix, how many addresses pods may get
// from it (apis/iprangeaddr, the rule the node's IPAM allocates by) and how many its agent last
// counted reserved for absent static-IP pods.
type Block struct {
	Prefix             netip.Prefix
	Capacity, Reserved int64
}

// Free is how many addresses of blocks are left for a new pod: their capacity, less the
// reservations, the pods of the node holding an address in them (podIPs: the addresses of the
// node's pods), and the pods bound to the node that wait for an address of the pool (waiting).
// Counted from the scheduler's own pods, not the agent's status counts, which lag a pass behind
// the pods just started.
func Free(blocks []Block, podIPs []netip.Addr, waiting int64) int64 {
	var free int64
	for _, b := range blocks {
		free += b.Capacity - b.Reserved
	}
	for _, ip := range podIPs {
		for _, b := range blocks {
			if b.Prefix.Contains(ip) {
				free--
				break
			}
		}
	}
	return free - waiting
}
