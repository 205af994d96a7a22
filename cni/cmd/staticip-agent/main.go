// Command staticip-agent runs on every node (DaemonSet, host network): it installs the
// staticip CNI plugin and conflist, syncs the node's IPRanges and StaticIP reservations into
// the plugin's database, garbage-collects IPs of gone pods, and routes to other nodes' ranges.
// See cni/README.md.
package main

import (
	"github.com/staticip/staticip/cni/agent"
	"github.com/staticip/staticip/internal/app"
)

func main() { app.Main(agent.ComponentName, agent.NewOptions(), agent.Run) }
