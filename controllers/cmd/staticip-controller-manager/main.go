// staticip-controller-manager runs the staticip controllers (EnhancedStatefulSet, StaticIP,
// node failover, the IP pool range allocator, the SuperEdge grids) with Lease leader election.
// See controllers/README.md.
package main

import (
	"github.com/staticip/staticip/controllers/pkg/manager"
	"github.com/staticip/staticip/internal/app"
)

func main() { app.Main(manager.ComponentName, manager.NewOptions(), manager.RunConfig) }
