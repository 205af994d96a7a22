package cluster

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/staticip/staticip/tools/images/imagebuilder"
)

// TestControllerManagerOverlay renders the overlay over the shipped manifests with kubectl's
// kustomize, as `up` applies it: the Deployment runs the image localcluster imports, never
// pulls, and keeps every shipped flag except the shorter lease.
func TestControllerManagerOverlay(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(root, "_output", "bin", "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Skipf("no %s (make k8s-bins)", kubectl)
	}
	dir := t.TempDir()
	base, err := filepath.Rel(dir, filepath.Join(root, "manifests", "controller-manager"))
	if err != nil {
		t.Fatal(err)
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- " + base + "\n" + controllerManagerOverlay()
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubectl, "kustomize", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, out)
	}
	var dep *appsv1.Deployment
	for _, doc := range strings.Split(string(out), "\n---\n") {
		if !strings.Contains(doc, "kind: Deployment") {
			continue
		}
		dep = &appsv1.Deployment{}
		if err := yaml.Unmarshal([]byte(doc), dep); err != nil {
			t.Fatal(err)
		}
	}
	if dep == nil || len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("no Deployment with one container in:\n%s", out)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Image != imagebuilder.ControllerManagerImage || c.ImagePullPolicy != "Never" {
		t.Errorf("image %s pull %s, want %s pull Never", c.Image, c.ImagePullPolicy, imagebuilder.ControllerManagerImage)
	}
	if *dep.Spec.Replicas != 2 {
		t.Errorf("replicas %d, want the shipped 2", *dep.Spec.Replicas)
	}
	shipped, err := os.ReadFile(filepath.Join(root, "manifests", "controller-manager", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var orig appsv1.Deployment
	if err := yaml.Unmarshal(shipped, &orig); err != nil {
		t.Fatal(err)
	}
	// Same flags as shipped, only the lease values differ.
	flagNames := func(args []string) string {
		var names []string
		for _, a := range args {
			n, _, _ := strings.Cut(a, "=")
			names = append(names, n)
		}
		return strings.Join(names, " ")
	}
	if got, want := flagNames(c.Args), flagNames(orig.Spec.Template.Spec.Containers[0].Args); got != want {
		t.Errorf("flags %s, want the shipped %s", got, want)
	}
	if !strings.Contains(strings.Join(c.Args, " "), "--leader-elect-lease-duration=8s") {
		t.Errorf("args %v lack the local lease duration", c.Args)
	}
}

// TestDownUsesTheRecordedPrefix: `down --state-dir=X` without --prefix must act on the cluster
// recorded in X (prefix c2), never on the default prefix's namespaces and links.
func TestDownUsesTheRecordedPrefix(t *testing.T) {
	o := DefaultOptions()
	o.StateDir = t.TempDir()
	if got := recordedOptions(o); got.Prefix != o.Prefix {
		t.Fatalf("no record: prefix %q, want the flag's %q", got.Prefix, o.Prefix)
	}
	rec := record{Nodes: 2, CNI: o.CNI, Scheduler: o.Scheduler, Prefix: "c2", NodeSubnet: "172.31.0.0/24",
		PodCIDR: "10.245.0.0/16", ServiceCIDR: "10.97.0.0/16"}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(o.StateDir, "cluster.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	got := recordedOptions(o)
	if got.Prefix != "c2" || got.NodeSubnet != "172.31.0.0/24" || got.Nodes != 2 || got.StateDir != o.StateDir {
		t.Fatalf("recorded options %+v, want prefix c2, subnet 172.31.0.0/24, 2 nodes, state dir %s", got, o.StateDir)
	}
	l := newLayout(got)
	if l.bridge != "c2-br0" || l.cpNetns != "c2-cp" {
		t.Errorf("layout bridge %s netns %s, want c2-br0 c2-cp", l.bridge, l.cpNetns)
	}
}
