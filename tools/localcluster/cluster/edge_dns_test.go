package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/staticip/staticip/tools/images/imagebuilder"
)

// The overlays of manifests/edge and manifests/edge/coredns render (kubectl kustomize) with the
// local images, the host directory under the state dir and the cluster's DNS address.
func TestEdgeDNSOverlays(t *testing.T) {
	root, _ := filepath.Abs("../../..")
	kubectl := filepath.Join(root, "_output", "bin", "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Skipf("SKIP: %s missing (make k8s-bins)", kubectl)
	}
	o := DefaultOptions()
	o.StateDir, o.RepoRoot = t.TempDir(), root
	l := newLayout(o)
	for _, c := range []struct {
		dir, overlay string
		want         []string
	}{
		{"manifests/edge", l.gridWrapperOverlay(), []string{"image: " + imagebuilder.StatefulSetGridDaemonImage, "path: " + l.edgeHostsDir(),
			"image: " + imagebuilder.GridWrapperImage, "subPathExpr: $(NODE_NAME)"}},
		{"manifests/edge/coredns", l.edgeDNSOverlay(), []string{"image: " + imagebuilder.CoreDNSImage, "path: " + l.edgeHostsDir(),
			"clusterIP: " + l.dnsServiceIP, "imagePullPolicy: Never", `topologyKeys: '["zone","*"]'`, "subPathExpr: $(NODE_NAME)"}},
	} {
		dir := filepath.Join(o.StateDir, "addons", filepath.Base(c.dir))
		_ = os.MkdirAll(dir, 0o755)
		base, _ := filepath.Rel(dir, filepath.Join(root, c.dir))
		k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- " + base + "\n" + c.overlay
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(kubectl, "kustomize", dir).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.dir, err, out)
		}
		for _, w := range c.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s overlay: no %q in\n%s", c.dir, w, out)
			}
		}
		if strings.Contains(string(out), "/var/lib/statefulset-grid-daemon") {
			t.Errorf("%s overlay keeps the real host path", c.dir)
		}
	}
}

// kube-proxy's kubeconfig through the wrapper comes from the shipped manifest, the one source
// kind.sh reads too: loopback, plain HTTP, the wrapper's port, no credentials.
func TestGridWrapperKubeconfigFromTheManifest(t *testing.T) {
	root, _ := filepath.Abs("../../..")
	kc, err := gridWrapperKubeconfig(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kind: Config", "server: http://127.0.0.1:10266", "current-context: default", "user: {}"} {
		if !strings.Contains(string(kc), want) {
			t.Errorf("kubeconfig lacks %q:\n%s", want, kc)
		}
	}
	if _, err := gridWrapperKubeconfig(t.TempDir()); err == nil {
		t.Error("a checkout without manifests/edge/kubeconfig.yaml gave a kubeconfig")
	}
}
