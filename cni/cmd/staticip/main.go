// Command staticip is the staticip CNI plugin (installed as /opt/cni/bin/staticip). Run by
// hand without CNI_COMMAND (or with --version) it prints its release (internal/version).
package main

import (
	"fmt"
	"os"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/staticip/staticip/cni/plugin"
	"github.com/staticip/staticip/internal/version"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		version.Print(os.Stdout, "staticip")
		return
	}
	skel.PluginMainFuncs(plugin.New().Funcs(), plugin.VersionInfo(), About())
}

// About is the line skel prints when the plugin runs without CNI_COMMAND.
func About() string {
	return fmt.Sprintf("CNI staticip plugin %s: fixed pod IPs from node-local IP ranges", version.Version)
}
