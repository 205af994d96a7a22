// application-grid-wrapper sits between kube-proxy and the API server on an edge node and
// keeps, in the EndpointSlices kube-proxy sees, only the endpoints the Service's
// topologyKeys select for this node. See edge/README.md.
package main

import (
	"github.com/staticip/staticip/edge/pkg/gridwrapper"
	"github.com/staticip/staticip/internal/app"
)

func main() { app.Main(gridwrapper.ComponentName, gridwrapper.NewOptions(), gridwrapper.Run) }
