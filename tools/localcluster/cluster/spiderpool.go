package cluster

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/staticip/staticip/tools/images/imagebuilder"
)

// spiderpoolCNI is Spiderpool v1.2.2 (tools/spiderpool, a benchmark peer of tools/podburst,
// never shipped) in its published underlay setup: macvlan on the node's uplink (Debian's
// containernetworking-plugins), Spiderpool's IPAM plugin and its coordinator, installed from
// Spiderpool's own Helm chart (the module zip's charts/spiderpool) rendered with local images.
// Multus is left out: every pod gets the one macvlan network, written as each node's CNI
// conflist — the configuration a macvlan SpiderMultusConfig generates for Multus
// (tools/spiderpool/README.md, "Without Multus"). What differs from a cluster of machines is
// that all nodes share one filesystem: the agent's CNI bin dir and unix socket are per node
// (subPathExpr in a kustomize overlay), and the coordinator, whose socket path is hard-coded,
// runs through tools/spiderpool/coordinatorns.
type spiderpoolCNI struct{}

// Spiderpool's names and the local images the chart is rendered with.
const (
	spiderpoolNamespace       = "kube-system"
	spiderpoolVersion         = "v1.2.2"
	spiderpoolAgentImage      = "localhost/spiderpool/spiderpool-agent:" + spiderpoolVersion
	spiderpoolControllerImage = "localhost/spiderpool/spiderpool-controller:" + spiderpoolVersion
	spiderpoolPool            = "default-v4-ippool"
	// spiderpoolMultusName is the cluster default network's name as the published macvlan
	// setup gives it (helm --set multus.multusCNI.defaultCniCRName=macvlan-conf): the agent's
	// MULTUS_CLUSTER_NETWORK, without which it matches no pool; no Multus reads it here.
	spiderpoolMultusName = "macvlan-conf"
	// spiderpoolOutputDir (under the repo root) holds `make spiderpool`'s binaries (bin/) and
	// the images built from them (images/): apart from _output/images, so that clusters of
	// other CNIs do not import them.
	spiderpoolOutputDir = "_output/spiderpool"
	// spiderpoolUplink is the node's interface on the cluster bridge, macvlan's master.
	spiderpoolUplink = "eth0"
)

func (spiderpoolCNI) routesBetweenNodes() bool { return false } // one L2 segment: no routes
func (spiderpoolCNI) ownsAddressSpace() bool   { return false }

// spiderpoolPoolRange is the macvlan pool: part of the node subnet (the underlay: pods sit on
// the nodes' L2 segment, as the published setup's pool lies in eth0's subnet), above every
// node address (.11 and up) and outside kube-proxy's cluster CIDR, so that kube-proxy
// masquerades pod → Service traffic and replies come back through the node.
func spiderpoolPoolRange(nodeSubnet string) (subnet, first, last, gateway string, err error) {
	p, err := slash24(nodeSubnet)
	if err != nil {
		return "", "", "", "", err
	}
	return nodeSubnet, p + ".64", p + ".254", p + ".1", nil
}

func slash24(cidr string) (string, error) {
	parts := strings.Split(cidr, ".")
	if len(parts) != 4 || parts[3] != "0/24" {
		return "", fmt.Errorf("node subnet %s: want a /24 like 172.30.0.0/24", cidr)
	}
	return strings.Join(parts[:3], "."), nil
}

// spiderpoolNodeDirs are one node's Spiderpool directories below its CNI dir.
type spiderpoolNodeDirs struct {
	plugins string // the agent copies spiderpool and coordinator here (the chart's /host/opt/cni/bin)
	socket  string // the agent's unix socket directory (the chart's /var/run/spidernet)
	logs    string // the plugins' log files (default /var/log/spidernet, machine-global)
}

func spiderpoolDirs(n nodeLayout) spiderpoolNodeDirs {
	return spiderpoolNodeDirs{
		plugins: filepath.Join(n.cniDir, "spiderpool"),
		socket:  filepath.Join(n.cniDir, "spidernet"),
		logs:    filepath.Join(n.cniDir, "log"),
	}
}

func (spiderpoolCNI) installNode(l *layout, n nodeLayout) error {
	d := spiderpoolDirs(n)
	for _, dir := range []string{d.plugins, d.socket, d.logs} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if err := linkSystemPlugins(n, "macvlan", "loopback"); err != nil {
		return err
	}
	// The IPAM plugin is the agent's copy; its conflist names the node's socket.
	if err := os.Symlink(filepath.Join(d.plugins, "spiderpool"), filepath.Join(n.cniBinDir, "spiderpool")); err != nil {
		return err
	}
	// coordinatorns finds its node from its own path, so it is copied, not linked.
	shim := filepath.Join(l.RepoRoot, spiderpoolOutputDir, "bin", "coordinatorns")
	if err := copyFile(shim, filepath.Join(n.cniBinDir, "coordinator"), 0o755); err != nil {
		return fmt.Errorf("%w (build it: make spiderpool)", err)
	}
	conf, err := spiderpoolConflist(l.cniNetworkName(), spiderpoolUplink, d)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(n.cniConfDir, "10-spiderpool.conflist"), conf, 0o644)
}

// spiderpoolConflist is the node's CNI configuration: what Spiderpool's controller generates
// for a macvlan SpiderMultusConfig (pkg/multuscniconfig: macvlan in bridge mode on the master,
// IPAM spiderpool, then coordinator with the SpiderCoordinator's settings, CNI 0.3.1), with
// the node's own socket and log paths. No log level is set: each plugin logs at its own
// default, as staticip's plugin does (an earlier version forced the coordinator to debug, which
// made every Spiderpool pod start write more than the peers').
func spiderpoolConflist(network, master string, d spiderpoolNodeDirs) ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "0.3.1",
		"name":       network,
		"plugins": []any{
			map[string]any{
				"type":   "macvlan",
				"master": master,
				"mode":   "bridge",
				"ipam": map[string]any{
					"type":                  "spiderpool",
					"ipam_unix_socket_path": filepath.Join(d.socket, "spiderpool.sock"),
					"log_file_path":         filepath.Join(d.logs, "spiderpool.log"),
				},
			},
			map[string]any{
				"type":       "coordinator",
				"logOptions": map[string]any{"logFile": filepath.Join(d.logs, "coordinator.log")},
			},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// spiderpoolValues are the chart values for this machine (tools/spiderpool/README.md,
// "Values"): local images never pulled, IPv4 only, no Multus and no extra plugin images,
// no machine-wide sysctl tuning, helm-generated webhook TLS, the default SpiderCoordinator
// (mode auto) and a default IPv4 pool (and SpiderSubnet) created by spiderpool-init, no
// pre-delete cleanup hook (`down` removes the cluster).
func spiderpoolValues(stateDir, nodeSubnet string) (string, error) {
	subnet, first, last, gw, err := spiderpoolPoolRange(nodeSubnet)
	if err != nil {
		return "", err
	}
	agentRepo, agentTag, _ := strings.Cut(strings.TrimPrefix(spiderpoolAgentImage, "localhost/"), ":")
	ctrlRepo, ctrlTag, _ := strings.Cut(strings.TrimPrefix(spiderpoolControllerImage, "localhost/"), ":")
	return fmt.Sprintf(`global:
  # All nodes share this machine's filesystem: nothing of Spiderpool's goes to /etc/cni/net.d.
  cniConfHostPath: %[1]s
ipam:
  enableIPv4: true
  enableIPv6: false
multus:
  enableMultusConfig: false
  multusCNI:
    install: false
    # The agent matches pools against the pod's Multus network and refuses every pool
    # without one; the published macvlan setup names its default network so.
    defaultCniCRName: %[11]s
plugins:
  installCNI: false
  installRdmaCNI: false
  installOvsCNI: false
  installSriovCNI: false
  installibSriovCNI: false
  installIpoibCNI: false
  installVlanCNI: false
clusterDefaultPool:
  installIPv4IPPool: true
  ipv4IPPoolName: %[2]s
  ipv4Subnet: %[3]s
  ipv4IPRanges: ["%[4]s-%[5]s"]
  ipv4Gateway: %[6]s
spiderpoolAgent:
  image: {registry: localhost, repository: %[7]s, tag: %[8]s, pullPolicy: Never}
  # Would write machine-wide neighbour-table sysctls (gc_thresh3) from a node netns.
  tuneSysctlConfig: false
spiderpoolController:
  image: {registry: localhost, repository: %[9]s, tag: %[10]s, pullPolicy: Never}
  tls: {method: auto}
  cleanup: {enable: false}
spiderpoolInit:
  image: {registry: localhost, repository: %[9]s, tag: %[10]s, pullPolicy: Never}
`, filepath.Join(stateDir, "spiderpool", "net.d"), spiderpoolPool, subnet, first, last, gw, agentRepo, agentTag, ctrlRepo, ctrlTag, spiderpoolMultusName), nil
}

// spiderpoolOverlay is the kustomization body (after `resources`) that changes only what
// this machine needs of the rendered chart: the agent's CNI bin dir and socket dir are the
// node's own (subPathExpr on <state>/cni, by node name, as staticip's agent mounts it), and
// its /var/run/netns and /var/run/docker/netns mounts lose their Bidirectional propagation:
// the container runtime refuses it unless / is a shared mount, which it is not on this
// machine, and only the agent's RDMA metrics (off) read those directories.
func spiderpoolOverlay(cniRoot string) string {
	return fmt.Sprintf(`patches:
- target: {kind: DaemonSet, name: spiderpool-agent}
  patch: |
    - op: replace
      path: /spec/template/spec/volumes
      value:
      - {name: config-path, configMap: {defaultMode: 256, name: spiderpool-conf}}
      - {name: node-cni, hostPath: {path: %[1]s, type: Directory}}
      - {name: host-netns, hostPath: {path: /var/run/netns, type: DirectoryOrCreate}}
      - {name: host-docker-netns, hostPath: {path: /var/run/docker/netns, type: DirectoryOrCreate}}
    - op: replace
      path: /spec/template/spec/containers/0/volumeMounts
      value:
      - {name: host-netns, mountPath: /var/run/netns}
      - {name: host-docker-netns, mountPath: /var/run/docker/netns}
      - {name: config-path, mountPath: /tmp/spiderpool/config-map, readOnly: true}
      - {name: node-cni, mountPath: /host/opt/cni/bin, subPathExpr: $(SPIDERPOOL_NODE_NAME)/spiderpool}
      - {name: node-cni, mountPath: /var/run/spidernet, subPathExpr: $(SPIDERPOOL_NODE_NAME)/spidernet}
`, cniRoot)
}

// spiderpoolImages are the agent and controller images, from `make spiderpool`'s binaries in
// binDir (the published images are Ubuntu with the binaries in /usr/bin): the agent's
// postStart hook runs /bin/sh with cp, mv and rm to install its plugins on the node, so the
// agent image also carries Debian's dash and coreutils with their shared libraries.
func spiderpoolImages(binDir string) ([]imagebuilder.Image, error) {
	shell, err := hostFilesWithLibraries(map[string]string{
		"/bin/sh": "/bin/dash", "/bin/cp": "/bin/cp", "/bin/mv": "/bin/mv", "/bin/rm": "/bin/rm",
	})
	if err != nil {
		return nil, err
	}
	agentExtra := map[string]string{
		"/usr/bin/spiderpool":  filepath.Join(binDir, "spiderpool"),
		"/usr/bin/coordinator": filepath.Join(binDir, "coordinator"),
	}
	for k, v := range shell {
		agentExtra[k] = v
	}
	env := []string{"PATH=/usr/bin:/bin"}
	return []imagebuilder.Image{
		{Ref: spiderpoolAgentImage, Binary: filepath.Join(binDir, "spiderpool-agent"), Path: "/usr/bin/spiderpool-agent",
			Extra: agentExtra, Env: env, Tarball: "spiderpool-agent.tar"},
		{Ref: spiderpoolControllerImage, Binary: filepath.Join(binDir, "spiderpool-controller"), Path: "/usr/bin/spiderpool-controller",
			Extra: map[string]string{"/usr/bin/spiderpool-init": filepath.Join(binDir, "spiderpool-init")}, Env: env, Tarball: "spiderpool-controller.tar"},
	}, nil
}

// hostFilesWithLibraries adds to files (path in the image → host file) the ELF interpreter
// and every shared library the host files need, transitively, at their host paths.
func hostFilesWithLibraries(files map[string]string) (map[string]string, error) {
	out := map[string]string{}
	var add func(host string) error
	add = func(host string) error {
		f, err := elf.Open(host)
		if err != nil {
			return fmt.Errorf("%s: %w", host, err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				b, _ := io.ReadAll(p.Open())
				interp := strings.TrimRight(string(b), "\x00")
				if _, ok := out[interp]; !ok {
					out[interp] = interp
				}
			}
		}
		libs, _ := f.ImportedLibraries()
		for _, lib := range libs {
			found := ""
			for _, dir := range []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib"} {
				if _, err := os.Stat(filepath.Join(dir, lib)); err == nil {
					found = filepath.Join(dir, lib)
					break
				}
			}
			if found == "" {
				return fmt.Errorf("%s needs %s: not found on this machine", host, lib)
			}
			if _, ok := out[found]; ok {
				continue
			}
			out[found] = found
			if err := add(found); err != nil {
				return err
			}
		}
		return nil
	}
	for inImage, host := range files {
		out[inImage] = host
		if err := add(host); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// install renders and applies the chart and waits until Spiderpool serves: the agents are
// ready on every node, the controller (webhook) is available, spiderpool-init has created
// the SpiderCoordinator and the default pool, and the coordinator is Synced.
func (spiderpoolCNI) install(l *layout) error {
	root := filepath.Join(l.RepoRoot, spiderpoolOutputDir)
	images, err := spiderpoolImages(filepath.Join(root, "bin"))
	if err != nil {
		return err
	}
	imageDir := filepath.Join(root, "images")
	var tarballs []string
	for _, im := range images {
		if im.Stale(imageDir) {
			l.Logf("spiderpool: building image %s", im.Ref)
			if _, err := imagebuilder.Build(l.RepoRoot, imageDir, im); err != nil {
				return fmt.Errorf("image %s (binaries: make spiderpool): %w", im.Ref, err)
			}
		}
		tarballs = append(tarballs, filepath.Join(imageDir, im.File()))
	}
	if err := l.importImages(tarballs); err != nil {
		return err
	}
	// Spiderpool reads the Service and pod CIDRs from kubeadm's ConfigMap (or a static
	// kube-controller-manager pod); this cluster has neither, so it gets the ConfigMap.
	kubeadm := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kubeadm-config\n  namespace: kube-system\ndata:\n  ClusterConfiguration: |\n    networking:\n      podSubnet: %s\n      serviceSubnet: %s\n", l.clusterCIDR, l.serviceCIDR)
	if _, err := l.kubectl(kubeadm, "apply", "-f", "-"); err != nil {
		return err
	}
	// The API server calls Spiderpool's webhook by its Service's ClusterIP; the control plane
	// netns has no kube-proxy, so that traffic goes through node-1's (its rules masquerade
	// it: the control plane is outside the cluster CIDR). Gone with the netns at `down`.
	if err := run("ip", "-n", l.cpNetns, "route", "replace", l.serviceCIDR, "via", l.nodes[0].ip); err != nil {
		return err
	}
	dir := filepath.Join(l.StateDir, "addons", "spiderpool")
	if err := os.MkdirAll(filepath.Join(l.StateDir, "spiderpool", "net.d"), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	values, err := spiderpoolValues(l.StateDir, l.NodeSubnet)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "values.yaml"), []byte(values), 0o644); err != nil {
		return err
	}
	chart, err := spiderpoolChartDir(l.RepoRoot)
	if err != nil {
		return err
	}
	l.Logf("spiderpool: helm template %s (values %s)", chart, filepath.Join(dir, "values.yaml"))
	rendered, err := exec.Command(l.bin("helm"), "template", "spiderpool", chart, "--namespace", spiderpoolNamespace,
		"--include-crds", "--values", filepath.Join(dir, "values.yaml")).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return fmt.Errorf("helm template: %w: %s", err, ee.Stderr)
		}
		return fmt.Errorf("helm template (make helm): %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "spiderpool.yaml"), rendered, 0o644); err != nil {
		return err
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- spiderpool.yaml\n" + spiderpoolOverlay(filepath.Join(l.StateDir, "cni"))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		return err
	}
	if _, err := l.kubectl("", "apply", "--server-side", "--force-conflicts", "-k", dir); err != nil {
		return err
	}
	waits := [][]string{
		{"-n", spiderpoolNamespace, "rollout", "status", "daemonset/spiderpool-agent", "--timeout=300s"},
		{"-n", spiderpoolNamespace, "rollout", "status", "deployment/spiderpool-controller", "--timeout=300s"},
		{"-n", spiderpoolNamespace, "wait", "--for=condition=Complete", "job/spiderpool-init", "--timeout=300s"},
		{"wait", "--for=jsonpath={.status.phase}=Synced", "spidercoordinator/default", "--timeout=120s"},
		{"get", "spiderippool", spiderpoolPool},
	}
	for _, w := range waits {
		l.Logf("spiderpool: kubectl %s", strings.Join(w, " "))
		if _, err := l.kubectl("", w...); err != nil {
			return err
		}
	}
	return nil
}

// spiderpoolChartDir is charts/spiderpool in the module cache, at the version
// tools/spiderpool/go.mod requires.
func spiderpoolChartDir(repoRoot string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/spidernet-io/spiderpool")
	cmd.Dir = filepath.Join(repoRoot, "tools", "spiderpool")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locating Spiderpool's module (make spiderpool): %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "charts", "spiderpool"), nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode)
}
