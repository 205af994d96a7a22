package cluster

import (
	"fmt"
	"strings"

	"github.com/staticip/staticip/tools/images/imagebuilder"
)

// Names in manifests/edge.
const (
	gridWrapperDaemonSet     = "application-grid-wrapper"
	gridWrapperManifestImage = "staticip/application-grid-wrapper"
	gridWrapperAddress       = "127.0.0.1:10266"
)

// gridWrapperKubeconfig is manifests/edge/kubeconfig.yaml's kubeconfig.conf: kube-proxy
// talks plain HTTP to the wrapper on its node's loopback.
var gridWrapperKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: application-grid-wrapper
  cluster:
    server: http://` + gridWrapperAddress + `
contexts:
- name: default
  context:
    cluster: application-grid-wrapper
    user: kube-proxy
current-context: default
users:
- name: kube-proxy
  user: {}
`

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
