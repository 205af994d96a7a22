package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/staticip/staticip/tools/images/imagebuilder"
)

// cniProvider installs a pod network: plugin binaries and a network config into each node's
// CNI directories before containerd starts, and/or, once the API server is up, whatever
// runs as pods (staticip's agent DaemonSet).
type cniProvider interface {
	// installNode prepares one node's CNI bin and conf directories.
	installNode(l *layout, n nodeLayout) error
	// install runs once the API server is up and the nodes have registered.
	install(l *layout) error
	// routesBetweenNodes: whether `up` routes every node's pod CIDR from every other node
	// (bridge), or the CNI programs those routes itself (staticip's agent).
	routesBetweenNodes() bool
	// ownsAddressSpace: whether the CNI gives the nodes their pod addresses itself (staticip's
	// IPPool allocator), so that `up` neither sets Node.spec.podCIDR nor routes the layout's
	// per-node CIDRs, and routes the ranges the nodes were given once they are Ready.
	ownsAddressSpace() bool
}

// cniProviders are the values of --cni.
var cniProviders = map[string]cniProvider{
	"bridge":     bridgeCNI{},
	"staticip":   staticipCNI{},
	"spiderpool": spiderpoolCNI{}, // a benchmark peer (spiderpool.go)
}

// cniNetworkName names the network in libcni's cache (/var/lib/cni/results), which is
// machine-global; `down` removes that network's entries.
func (l *layout) cniNetworkName() string { return l.Prefix + "-localcluster" }

// systemCNIDir holds Debian's containernetworking-plugins.
const systemCNIDir = "/usr/lib/cni"

// linkSystemPlugins symlinks Debian's containernetworking plugins into a node's bin dir.
func linkSystemPlugins(n nodeLayout, plugins ...string) error {
	for _, p := range plugins {
		src := filepath.Join(systemCNIDir, p)
		if _, err := os.Stat(src); err != nil {
			return fmt.Errorf("CNI plugin %s missing (install containernetworking-plugins: tools/install-deps.sh): %w", src, err)
		}
		if err := os.Symlink(src, filepath.Join(n.cniBinDir, p)); err != nil {
			return err
		}
	}
	return nil
}

// bridgeCNI is containernetworking's bridge + host-local: one bridge per node, a /24 per
// node, and routes between nodes set up by setupNetwork.
type bridgeCNI struct{}

func (bridgeCNI) installNode(l *layout, n nodeLayout) error {
	if err := linkSystemPlugins(n, "bridge", "host-local", "loopback", "portmap"); err != nil {
		return err
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
					"dataDir": filepath.Join(n.cniDir, "host-local"),
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

func (bridgeCNI) install(*layout) error    { return nil }
func (bridgeCNI) routesBetweenNodes() bool { return true }
func (bridgeCNI) ownsAddressSpace() bool   { return false }

// staticipCNI is staticip's own CNI, installed the way users install it: the shipped
// manifests/cni (agent DaemonSet + RBAC) with only the image and the host paths changed,
// and one IPPool (LocalClusterPool) over the cluster's pod CIDR, from which
// staticip-controller-manager's range allocator gives every node a /24 block as an IPRange
// (no IPRange is written here). Until its agent has written the conflist a node is NotReady;
// the agent, not `up`, routes each node's range from the other nodes.
type staticipCNI struct{}

// LocalClusterPool is the name of the IPPool `up` creates.
const LocalClusterPool = "default"

// LocalClusterPoolV6 is the IPv6 pool `up` creates beside it: a namespace pool (the default
// pool stays IPv4-only and every pod that asks for nothing stays single-stack), selecting the
// namespaces labelled LabelDualStack. A dual-stack pod names both pools (pod or namespace
// annotation staticip.jke.jdcloud.com/ippools: ["default","default-v6"]) and gets an address of
// each; the range allocator gives its node a block of the IPv6 pool when it lands there, and
// takes the empty block back after releaseAfter.
const LocalClusterPoolV6 = "default-v6"

// LabelDualStack on a namespace: the IPv6 pool LocalClusterPoolV6 selects it.
const LabelDualStack = "localcluster.staticip.io/dual-stack"

func (staticipCNI) ownsAddressSpace() bool { return true }

// installNode links the loopback plugin, which containerd needs for every sandbox's lo, and
// portmap, which the agent chains after staticip for hostPort (as a kubeadm or kind node has
// both in /opt/cni/bin); the agent installs the staticip binary and its conflist.
func (staticipCNI) installNode(_ *layout, n nodeLayout) error {
	return linkSystemPlugins(n, "loopback", "portmap")
}

func (staticipCNI) routesBetweenNodes() bool { return false }

func (staticipCNI) install(l *layout) error {
	pool := fmt.Sprintf("apiVersion: jke.jdcloud.com/v1\nkind: IPPool\nmetadata:\n  name: %s\nspec:\n  cidrs: [%s]\n  blockSize: 24\n", LocalClusterPool, l.clusterCIDR)
	pool += fmt.Sprintf("---\napiVersion: jke.jdcloud.com/v1\nkind: IPPool\nmetadata:\n  name: %s\nspec:\n  cidrs: [%s]\n  blockSize: 120\n  releaseAfter: 10s\n  namespaceSelector:\n    matchLabels: {%s: \"true\"}\n",
		LocalClusterPoolV6, l.podCIDR6, LabelDualStack)
	if _, err := l.kubectl(pool, "apply", "-f", "-"); err != nil {
		return err
	}
	// Every node's CNI state lives under <state>/cni/<node name>, mounted at the same path
	// in the agent, so the paths the agent writes into the conflist are the host's.
	cniRoot := filepath.Join(l.StateDir, "cni")
	nodeDir := cniRoot + "/$(NODE_NAME)"
	name, tag, _ := strings.Cut(imagebuilder.AgentImage, ":")
	overlay := fmt.Sprintf(`images:
- name: staticip/staticip-agent
  newName: %[1]s
  newTag: %[2]s
patches:
- target: {kind: DaemonSet, name: staticip-agent}
  patch: |
    - {op: replace, path: /spec/template/spec/containers/0/imagePullPolicy, value: Never}
    - op: replace
      path: /spec/template/spec/containers/0/args
      value:
      - --node-name=$(NODE_NAME)
      - --plugin-binary=/staticip
      - --cni-bin-dir=%[4]s/bin
      - --cni-conf-dir=%[4]s/net.d
      - --plugin-kubeconfig=%[4]s/net.d/staticip-kubeconfig
      - --data-dir=%[4]s/staticip
      - --quarantine=2s
      - --interval=10s
      - --metrics-bind-address=:9490
      - --health-bind-address=127.0.0.1:9489
      - --service-cidrs=%[5]s
    - op: replace
      path: /spec/template/spec/containers/0/volumeMounts
      value: [{name: cni, mountPath: %[3]s}]
    - op: replace
      path: /spec/template/spec/volumes
      value: [{name: cni, hostPath: {path: %[3]s, type: Directory}}]
`, name, tag, cniRoot, nodeDir, dualStack(l.serviceCIDR, l.serviceCIDR6))
	return l.applyOverlay("cni", "manifests/cni", overlay)
}

// schedulers are the values of --scheduler: the binary in BinDir that runs as the
// default-scheduler. staticip-scheduler (make build) serves the default-scheduler profile
// with the staticip plugins enabled (schedulerConfig).
var schedulers = map[string]string{
	"kube-scheduler":     "kube-scheduler",
	"staticip-scheduler": "staticip-scheduler",
}
