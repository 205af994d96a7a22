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
