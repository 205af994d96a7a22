package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/staticip/staticip/tools/images/imagebuilder"
)

// Names in manifests/edge.
const (
	gridWrapperDaemonSet     = "application-grid-wrapper"
	gridWrapperManifestImage = "staticip/application-grid-wrapper"
	// gridWrapperKubeProxyConfigMap holds kube-proxy's kubeconfig through the wrapper.
	gridWrapperKubeProxyConfigMap = "kube-proxy-via-application-grid-wrapper"
)

// gridWrapperKubeconfig reads kubeconfig.conf of the ConfigMap
// kube-proxy-via-application-grid-wrapper in manifests/edge/kubeconfig.yaml: the kubeconfig
// kube-proxy uses to talk plain HTTP to the wrapper on its node's loopback. The shipped
// manifest is the one source (tools/kind/kind.sh reads the same ConfigMap from the cluster).
func gridWrapperKubeconfig(repoRoot string) ([]byte, error) {
	path := filepath.Join(repoRoot, "manifests", "edge", "kubeconfig.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for _, doc := range strings.Split(string(raw), "\n---") {
		var cm struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Data map[string]string `json:"data"`
		}
		if err := yaml.Unmarshal([]byte(doc), &cm); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if cm.Kind == "ConfigMap" && cm.Metadata.Name == gridWrapperKubeProxyConfigMap {
			if kc := cm.Data["kubeconfig.conf"]; kc != "" {
				return []byte(kc), nil
			}
		}
	}
	return nil, fmt.Errorf("%s: no ConfigMap %s with kubeconfig.conf", path, gridWrapperKubeProxyConfigMap)
}

// gridWrapperOverlay is what differs here from manifests/edge: the locally built image
// (never pulled) and the API server's real address (the wrapper cannot use the
// kubernetes Service's ClusterIP: kube-proxy gets its rules through the wrapper).
func (l *layout) gridWrapperOverlay() string {
	name, tag, _ := strings.Cut(imagebuilder.GridWrapperImage, ":")
	daemonImages, daemonPatches := l.ssgDaemonOverlay()
	return fmt.Sprintf(`images:
- name: %s
  newName: %s
  newTag: %s
`+daemonImages+`patches:
`+daemonPatches+`- patch: |-
    apiVersion: apps/v1
    kind: DaemonSet
    metadata:
      name: %s
      namespace: kube-system
    spec:
      template:
        spec:
          containers:
          - name: wrapper
            imagePullPolicy: Never
- patch: |-
    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: application-grid-wrapper-apiserver
      namespace: kube-system
    data:
      KUBERNETES_SERVICE_HOST: %q
      KUBERNETES_SERVICE_PORT: "%d"
`, gridWrapperManifestImage, name, tag, gridWrapperDaemonSet, l.apiserverIP, apiserverPort)
}

// installGridWrapper runs application-grid-wrapper on every node from the shipped
// manifests (unless --kube-proxy-direct) and waits until every node's wrapper has synced
// its caches (readiness), so kube-proxy's requests go through.
func (l *layout) installGridWrapper() error {
	if l.KubeProxyDirect {
		l.Logf("addons: kube-proxy talks to the API server directly (--kube-proxy-direct)")
		return nil
	}
	l.Logf("addons: application-grid-wrapper from manifests/edge (kube-proxy's API proxy on every node)")
	if err := l.applyOverlay("edge", "manifests/edge", l.gridWrapperOverlay()); err != nil {
		return err
	}
	if _, err := l.kubectl("", "-n", "kube-system", "rollout", "status", "daemonset/"+gridWrapperDaemonSet, "--timeout=180s"); err != nil {
		return fmt.Errorf("application-grid-wrapper not ready on every node (kubectl -n kube-system get pods -l app.kubernetes.io/name=%s; its logs): %w", gridWrapperDaemonSet, err)
	}
	return nil
}
