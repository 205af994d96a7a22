package kubectlplugin

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/staticip/staticip/internal/version"
)

// ComponentName is the plugin's name in its version string.
const ComponentName = "kubectl-staticip"

// VersionInfo is `version -o json|yaml`.
type VersionInfo struct {
	Version   string `json:"version"`
	Revision  string `json:"revision,omitempty"`
	GoVersion string `json:"goVersion"`
}

func newVersionCommand(o *Options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version (the staticip release it was built from)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if err := checkOutput(output, "json", "yaml"); err != nil {
				return err
			}
			if output != "" {
				return printStructured(o.Out, output, VersionInfo{Version: version.Version, Revision: version.Revision(), GoVersion: runtime.Version()})
			}
			_, err := fmt.Fprintln(o.Out, version.String(ComponentName))
			return err
		},
	}
	addOutput(cmd, &output, "json, yaml")
	return cmd
}
