package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
	"github.com/staticip/staticip/tools/images/imagebuilder"
)

// The edge DNS (manifests/edge/coredns): one CoreDNS per node unit, a DeploymentGrid keyed
// on the nodes' zone label, reading the hosts file statefulset-grid-daemon (manifests/edge)
// writes on its node, behind kube-dns with topologyKeys ["zone","*"]. It is the local
// cluster's DNS unless --central-dns, --kube-proxy-direct (no wrapper, so no topology) or no
// staticip CRDs (no grid controller).
const (
	edgeDNSGrid              = "edge-coredns"
	ssgDaemonSet             = "statefulset-grid-daemon"
	ssgDaemonManifestImage   = "staticip/statefulset-grid-daemon"
	edgeCoreDNSManifestImage = "staticip/coredns"
)

// edgeDNS reports whether this cluster runs the edge DNS.
func (l *layout) edgeDNS() bool { return !l.CentralDNS && !l.KubeProxyDirect && l.CRDDir != "" }

// edgeHostsDir is the daemon's host directory (one subdirectory per node: all nodes share
// this machine's filesystem); under the state dir so that `down` removes it.
func (l *layout) edgeHostsDir() string { return filepath.Join(l.StateDir, "edge-dns") }

// ssgDaemonOverlay is what differs here from manifests/edge's statefulset-grid-daemon: the
// local image (an entry of the overlay's images) and the host directory (one of its patches).
// The manifests/edge overlay (gridWrapperOverlay) includes both.
func (l *layout) ssgDaemonOverlay() (images, patches string) {
	name, tag, _ := strings.Cut(imagebuilder.StatefulSetGridDaemonImage, ":")
	images = fmt.Sprintf(`- name: %s
  newName: %s
  newTag: %s
`, ssgDaemonManifestImage, name, tag)
	patches = fmt.Sprintf(`- patch: |-
    apiVersion: apps/v1
    kind: DaemonSet
    metadata:
      name: %s
      namespace: kube-system
    spec:
      template:
        spec:
          containers:
          - name: daemon
            imagePullPolicy: Never
          volumes:
          - name: hosts
            hostPath:
              path: %s
`, ssgDaemonSet, l.edgeHostsDir())
	return images, patches
}

// edgeDNSOverlay: manifests/edge/coredns with the local CoreDNS image, the host directory and
// the cluster's DNS address.
func (l *layout) edgeDNSOverlay() string {
	name, tag, _ := strings.Cut(imagebuilder.CoreDNSImage, ":")
	return fmt.Sprintf(`images:
- name: %s
  newName: %s
  newTag: %s
patches:
- target: {group: superedge.io, kind: DeploymentGrid, name: %s}
  patch: |-
    - op: replace
      path: /spec/template/template/spec/containers/0/imagePullPolicy
      value: Never
    - op: replace
      path: /spec/template/template/spec/volumes/1/hostPath/path
      value: %s
- target: {kind: Service, name: kube-dns}
  patch: |-
    - op: add
      path: /spec/clusterIP
      value: %s
`, edgeCoreDNSManifestImage, name, tag, edgeDNSGrid, l.edgeHostsDir(), l.dnsServiceIP)
}

// installDNS runs the cluster's DNS: the edge DNS from manifests/edge/coredns, or one CoreDNS
// Deployment (coreDNSManifest).
func (l *layout) installDNS() error {
	if !l.edgeDNS() {
		l.Logf("addons: CoreDNS (Service %s)", l.dnsServiceIP)
		_, err := l.kubectl(l.coreDNSManifest(), "apply", "-f", "-")
		return err
	}
	l.Logf("addons: edge DNS from manifests/edge/coredns (CoreDNS DeploymentGrid per zone, kube-dns %s with topologyKeys [zone, *]; hosts from statefulset-grid-daemon)", l.dnsServiceIP)
	return l.applyOverlay("edge-coredns", "manifests/edge/coredns", l.edgeDNSOverlay())
}

// dnsReady: the DNS answers somewhere — the CoreDNS Deployment is available, or (edge DNS)
// every zone's CoreDNS is and the daemon is ready on every node.
func (l *layout) dnsReady(ctx context.Context, client kubernetes.Interface) (bool, error) {
	if !l.edgeDNS() {
		d, err := client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		return err == nil && d.Status.AvailableReplicas >= 1, nil
	}
	zones := map[string]bool{}
	for _, n := range l.nodes {
		zones[n.zone] = true
	}
	deps, err := client.AppsV1().Deployments("kube-system").List(ctx, metav1.ListOptions{LabelSelector: superedgev1.LabelGridSelector + "=" + edgeDNSGrid})
	if err != nil {
		return false, nil
	}
	for _, d := range deps.Items {
		if d.Status.AvailableReplicas >= 1 {
			delete(zones, d.Labels[superedgev1.LabelGridUnit])
		}
	}
	ds, err := client.AppsV1().DaemonSets("kube-system").Get(ctx, ssgDaemonSet, metav1.GetOptions{})
	if err != nil {
		return false, nil
	}
	return len(zones) == 0 && ds.Status.DesiredNumberScheduled == int32(len(l.nodes)) && ds.Status.NumberReady == ds.Status.DesiredNumberScheduled, nil
}
