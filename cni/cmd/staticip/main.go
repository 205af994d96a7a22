// Command staticip is the staticip CNI plugin (installed as /opt/cni/bin/staticip).
package main

import (
	"github.com/containernetworking/cni/pkg/skel"

	"github.com/staticip/staticip/cni/plugin"
)

func main() {
	skel.PluginMainFuncs(plugin.New().Funcs(), plugin.VersionInfo(), "CNI staticip plugin: fixed pod IPs from node-local IP ranges")
}
