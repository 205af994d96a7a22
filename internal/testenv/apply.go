package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// ApplyKustomization server-side applies the resources a shipped manifest directory's
// kustomization.yaml lists (plain files only: the manifests under test, unchanged), e.g.
// ApplyKustomization(ctx, cfg, "<repo>/manifests/cni"). Objects whose kind is in skipKinds
// (a DaemonSet nothing runs here, say) are left out.
func ApplyKustomization(ctx context.Context, cfg *rest.Config, dir string, skipKinds ...string) error {
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return err
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return fmt.Errorf("%s/kustomization.yaml: %w", dir, err)
	}
	var files []string
	for _, r := range k.Resources {
		files = append(files, filepath.Join(dir, r))
	}
	return ApplyFiles(ctx, cfg, files, skipKinds...)
}

// ApplyFiles server-side applies every object of the given multi-document YAML files.
func ApplyFiles(ctx context.Context, cfg *rest.Config, files []string, skipKinds ...string) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	skip := map[string]bool{}
	for _, k := range skipKinds {
		skip[k] = true
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var obj unstructured.Unstructured
			if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			if len(obj.Object) == 0 || skip[obj.GetKind()] {
				continue
			}
			gvk := obj.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", file, gvk, err)
			}
			_, err = dyn.Resource(m.Resource).Namespace(obj.GetNamespace()).Apply(ctx, obj.GetName(), &obj,
				metav1.ApplyOptions{FieldManager: "testenv", Force: true})
			if err != nil {
				return fmt.Errorf("%s: apply %s %s: %w", file, gvk.Kind, obj.GetName(), err)
			}
		}
	}
	return nil
}
