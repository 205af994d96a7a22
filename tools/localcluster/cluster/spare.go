package cluster

import "fmt"

// Failover spares (--spare-nodes): nodes after the workers that carry the spare label and
// NoSchedule taint node failover looks for (controllers/README.md, "Node failover"), so no
// ordinary pod lands there and a failed node's static pods can be moved onto one. DaemonSets
// (the CNI agent, application-grid-wrapper) tolerate every taint and run there as everywhere.
const (
	// SpareLabel marks a node as a failover spare; SpareTaint keeps ordinary pods off it
	// until failover claims it.
	SpareLabel = "staticip.jke.jdcloud.com/spare"
	SpareTaint = "staticip.jke.jdcloud.com/spare"
)

func (o *Options) validateSpares() error {
	if o.SpareNodes < 0 || o.Nodes+o.SpareNodes > 200 {
		return fmt.Errorf("--spare-nodes must be between 0 and %d (at most 200 nodes in all), got %d", 200-o.Nodes, o.SpareNodes)
	}
	return nil
}

// spareZone is the zone of spare node i (1-based over all nodes, i > workers): spare j backs
// the j-th worker from the end, and gets that worker's zone (node failover only moves a node
// to a spare of its own zone). With 3 workers and 1 spare, node-4 backs node-3 (zone-0).
func spareZone(workers, i int) string {
	backed := workers - (i - workers - 1)
	if backed < 1 {
		backed = 1
	}
	return fmt.Sprintf("zone-%d", (backed-1)%2)
}

// spareLabels are the extra kubelet --node-labels of a spare.
func spareLabels(n nodeLayout) []string {
	if !n.spare {
		return nil
	}
	return []string{SpareLabel + "=true"}
}

// spareKubeletArgs registers a spare with its taint (only at registration: the taint that
// node failover removes from a claimed spare does not come back on a kubelet restart).
func spareKubeletArgs(n nodeLayout) []string {
	if !n.spare {
		return nil
	}
	return []string{"--register-with-taints=" + SpareTaint + "=true:NoSchedule"}
}

// failoverArgs are staticip-controller-manager's extra flags for --failover-window.
func (l *layout) failoverArgs() []string {
	if l.FailoverWindow == "" {
		return nil
	}
	return []string{"--node-failover-window=" + l.FailoverWindow}
}
