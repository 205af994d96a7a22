// statefulset-grid-daemon keeps, on each node, a CoreDNS hosts file in which
// {ssg}-{ordinal}.{service}.{ns}.svc.{domain} resolves to the pod of this node's unit, for
// every StatefulSetGrid. The unit's CoreDNS (a DeploymentGrid) reads the file's directory.
// See edge/README.md.
package main

import (
	"github.com/staticip/staticip/edge/pkg/ssgdaemon"
	"github.com/staticip/staticip/internal/app"
)

func main() { app.Main(ssgdaemon.ComponentName, ssgdaemon.NewOptions(), ssgdaemon.Run) }
