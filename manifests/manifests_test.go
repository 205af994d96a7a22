// Package manifests_test checks the shipped manifests: static properties of the files, and
// (against a real kube-apiserver from tools/testenv) what their admission policies let
// through.
package manifests_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/staticip/staticip/tools/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// yamlDocs returns every YAML document under manifests/ (CRDs excluded: generated, no images).
func yamlDocs(t *testing.T) map[string][][]byte {
	t.Helper()
	docs := map[string][][]byte{}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") || strings.HasPrefix(path, "crds"+string(filepath.Separator)) {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		docs[path], err = splitYAML(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// splitYAML returns the documents of a multi-document YAML stream.
func splitYAML(data []byte) ([][]byte, error) {
	var docs [][]byte
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, doc)
	}
}

// Every image in manifests/ names a version: a `:latest` (or untagged) image is whatever was
// pushed last, so two nodes can run different agents and a rollback rolls back nothing.
func TestImagesAreVersioned(t *testing.T) {
	found := 0
	for path, docs := range yamlDocs(t) {
		for _, doc := range docs {
			for _, line := range strings.Split(string(doc), "\n") {
				line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "- "))
				image, ok := strings.CutPrefix(line, "image:")
				if !ok {
					continue
				}
				image = strings.Trim(strings.TrimSpace(image), `"'`)
				found++
				_, tag, tagged := strings.Cut(image[strings.LastIndex(image, "/")+1:], ":")
				if !tagged || tag == "" || tag == "latest" {
					t.Errorf("%s: image %q has no version tag", path, image)
				}
			}
		}
	}
	if found == 0 {
		t.Fatal("no image found under manifests/: the test reads the wrong directory")
	}
}

// The node agent is not privileged: CAP_NET_ADMIN (its host routes) is the one capability
// it adds, all others are dropped (verified on the local cluster by the whole e2e suite,
// which runs on these agents).
func TestAgentIsNotPrivileged(t *testing.T) {
	var ds *appsv1.DaemonSet
	for _, doc := range yamlDocs(t)[filepath.Join("cni", "daemonset.yaml")] {
		var d appsv1.DaemonSet
		if err := yaml.Unmarshal(doc, &d); err != nil {
			t.Fatal(err)
		}
		if d.Kind == "DaemonSet" {
			ds = &d
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet in cni/daemonset.yaml")
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		sc := c.SecurityContext
		if sc == nil {
			t.Fatalf("container %s has no securityContext", c.Name)
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("container %s is privileged", c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("container %s allows privilege escalation", c.Name)
		}
		if sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("container %s does not drop all capabilities: %+v", c.Name, sc.Capabilities)
		} else if add := sc.Capabilities.Add; len(add) != 1 || add[0] != corev1.Capability("NET_ADMIN") {
			t.Errorf("container %s adds %v, want only NET_ADMIN", c.Name, add)
		}
	}
}
