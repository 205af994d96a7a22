package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// cniProvider installs a pod network on a node: plugin binaries into the node's CNI bin
// directory and a network config into its conf directory, before containerd starts. A
// provider that runs as pods (staticip's agent DaemonSet) can install its files itself and
// return only the manifests to apply.
type cniProvider interface {
	// installNode prepares one node's CNI bin and conf directories.
	installNode(l *layout, n nodeLayout) error
	// manifests returns objects to apply once the API server is up (none for bridge).
	manifests(l *layout) []string
}

// cniProviders are the values of --cni. `staticip` joins them when the CNI issue lands.
var cniProviders = map[string]cniProvider{
	"bridge": bridgeCNI{},
}

// cniNetworkName names the network in libcni's cache (/var/lib/cni/results), which is
// machine-global; `down` removes that network's entries.
func (l *layout) cniNetworkName() string { return l.Prefix + "-localcluster" }

// systemCNIDir holds Debian's containernetworking-plugins.
const systemCNIDir = "/usr/lib/cni"

// bridgeCNI is containernetworking's bridge + host-local: one bridge per node, a /24 per
// node, and routes between nodes set up by setupNetwork.
type bridgeCNI struct{}

func (bridgeCNI) installNode(l *layout, n nodeLayout) error {
	for _, p := range []string{"bridge", "host-local", "loopback", "portmap"} {
		src := filepath.Join(systemCNIDir, p)
		if _, err := os.Stat(src); err != nil {
			return fmt.Errorf("CNI plugin %s missing (install containernetworking-plugins: tools/install-deps.sh): %w", src, err)
		}
		if err := os.Symlink(src, filepath.Join(n.cniBinDir, p)); err != nil {
			return err
		}
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       l.cniNetworkName(),
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      "cni0",
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": n.podCIDR, "gateway": n.gateway}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": filepath.Join(n.dir, "cni", "ipam"),
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(n.cniConfDir, "10-bridge.conflist"), b, 0o644)
}

func (bridgeCNI) manifests(*layout) []string { return nil }

// schedulers are the values of --scheduler: the binary in BinDir that runs as the
// default-scheduler. staticip-scheduler (make build) serves the default-scheduler profile
// with the staticip plugins enabled (schedulerConfig).
var schedulers = map[string]string{
	"kube-scheduler":     "kube-scheduler",
	"staticip-scheduler": "staticip-scheduler",
}
