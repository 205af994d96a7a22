package cluster

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/staticip/staticip/tools/images/imagebuilder"
)

// Names in manifests/controller-manager.
const (
	controllerManagerNamespace  = "staticip-system"
	controllerManagerDeployment = "staticip-controller-manager"
	// controllerManagerManifestImage is the image name the shipped Deployment uses.
	controllerManagerManifestImage = "staticip/staticip-controller-manager"
)

// controllerManagerArgs are the shipped Deployment's flags with a shorter lease: on one
// machine a standby should take over in seconds (the e2e suite kills the leader and
// waits at most the lease duration plus a little). The shipped 15s/10s/2s are the usual
// Kubernetes values for real clusters.
var controllerManagerArgs = []string{
	"--controllers=*",
	"--workers=4",
	"--leader-elect=true",
	"--leader-elect-lease-duration=8s",
	"--leader-elect-renew-deadline=6s",
	"--leader-elect-retry-period=1s",
	"--metrics-bind-address=:10260",
	"--health-bind-address=:10261",
}

// controllerManagerOverlay is what differs here from manifests/controller-manager: the
// image is the one localcluster builds from _output/bin and imports into every node (there
// is no registry, so never pull), and the lease is shorter.
func controllerManagerOverlay(extraArgs ...string) string {
	name, tag, _ := strings.Cut(imagebuilder.ControllerManagerImage, ":")
	return fmt.Sprintf(`images:
- name: %s
  newName: %s
  newTag: %s
patches:
- patch: |-
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: %s
      namespace: %s
    spec:
      template:
        spec:
          containers:
          - name: manager
            imagePullPolicy: Never
            args: [%s]
`, controllerManagerManifestImage, name, tag, controllerManagerDeployment, controllerManagerNamespace,
		strings.Join(append(append([]string(nil), controllerManagerArgs...), extraArgs...), ", "))
}

// installControllerManager runs staticip-controller-manager (two replicas, Lease leader
// election) from the shipped manifests and waits until both replicas are available, so
// that EnhancedStatefulSets and StaticIPs work as soon as `up` returns.
func (l *layout) installControllerManager() error {
	if l.CRDDir == "" {
		// Without the staticip CRDs the manager could only fail to list its objects.
		l.Logf("addons: staticip-controller-manager skipped (no --crd-dir, no staticip CRDs)")
		return nil
	}
	// The nodes have registered but are not Ready yet with the staticip CNI: a node turns Ready
	// when its agent serves an IPRange, which the manager's IPPool allocator gives it. The
	// manager runs on the host network and tolerates not-ready nodes for that reason; its
	// required anti-affinity puts the two replicas on different nodes, as in a real cluster (the
	// failover e2e kills a leader whose standby runs elsewhere).
	if err := l.applyOverlay("controller-manager", "manifests/controller-manager", controllerManagerOverlay(l.failoverArgs()...)); err != nil {
		return err
	}
	if l.Nodes < 2 {
		// Both replicas listen on the host's ports: a one-worker cluster runs one, as
		// cni/README.md tells users of one-node clusters (spares do not take it: their taint).
		if _, err := l.kubectl("", "-n", controllerManagerNamespace, "scale", "deployment/"+controllerManagerDeployment, "--replicas=1"); err != nil {
			return err
		}
	}
	_, err := l.kubectl("", "-n", controllerManagerNamespace, "rollout", "status",
		"deployment/"+controllerManagerDeployment, "--timeout=180s")
	if err != nil {
		return fmt.Errorf("staticip-controller-manager not available (kubectl -n %s get pods; logs of its pods): %w", controllerManagerNamespace, err)
	}
	return nil
}

// installAdmission applies the shipped manifests/admission and manifests/user-roles unchanged
// (who may set the ip-address annotation, and what the built-in admin/edit/view roles allow
// with staticip's kinds; cni/README.md, "Trust model" and "App teams"), before any workload
// exists, as a cluster running staticip should have them. Tests that create pods asking for an
// IP themselves label their namespace staticip.jke.jdcloud.com/allow-ip-request=true.
func (l *layout) installAdmission() error {
	for _, dir := range []string{"admission", "user-roles"} {
		if _, err := l.kubectl("", "apply", "--server-side", "--force-conflicts", "-k", filepath.Join(l.RepoRoot, "manifests", dir)); err != nil {
			return err
		}
	}
	return nil
}
