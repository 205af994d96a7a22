// Command crdtrim removes the descriptions of embedded Kubernetes types (pod templates,
// volume claim templates, Deployment/StatefulSet/Service specs and statuses) from the
// CRDs controller-gen writes.
//
// Why: with every PodSpec description a CRD such as EnhancedStatefulSet is ~650 KB, and
// client-side `kubectl apply` stores the whole object in the last-applied annotation,
// which is limited to 256 KB. Those descriptions are Kubernetes' own (`kubectl explain
// pod.spec` has them); staticip's own fields keep theirs.
//
// Usage: crdtrim DIR (rewrites every *.yaml in DIR in place).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// embeddedPaths are property paths under a version's openAPIV3Schema whose subtrees are
// Kubernetes types.
var embeddedPaths = [][]string{
	{"spec", "template"},
	{"spec", "volumeClaimTemplates"},
	{"status", "states"},
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: crdtrim DIR")
		os.Exit(2)
	}
	files, err := filepath.Glob(filepath.Join(os.Args[1], "*.yaml"))
	if err != nil || len(files) == 0 {
		fmt.Fprintf(os.Stderr, "crdtrim: no CRD files in %s\n", os.Args[1])
		os.Exit(1)
	}
	for _, f := range files {
		if err := trimFile(f); err != nil {
			fmt.Fprintf(os.Stderr, "crdtrim: %s: %v\n", f, err)
			os.Exit(1)
		}
	}
}

type object = map[string]interface{}

func trimFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var crd object
	if err := yaml.Unmarshal(data, &crd); err != nil {
		return err
	}
	spec, _ := crd["spec"].(object)
	versions, _ := spec["versions"].([]interface{})
	for _, v := range versions {
		version, _ := v.(object)
		schema, _ := version["schema"].(object)
		root, _ := schema["openAPIV3Schema"].(object)
		for _, p := range embeddedPaths {
			if sub := lookup(root, p); sub != nil {
				stripDescriptions(sub)
			}
		}
	}
	out, err := yaml.Marshal(crd)
	if err != nil {
		return err
	}
	return os.WriteFile(path, append([]byte("---\n"), out...), 0o644)
}

// lookup follows properties.<name> for each name in path.
func lookup(s object, path []string) object {
	for _, name := range path {
		props, _ := s["properties"].(object)
		child, ok := props[name].(object)
		if !ok {
			return nil
		}
		s = child
	}
	return s
}

// stripDescriptions removes "description" from a schema node and every schema below it.
// It walks schema keywords only, so a field that happens to be named "description" (a key
// of "properties") is kept.
func stripDescriptions(s object) {
	delete(s, "description")
	if props, ok := s["properties"].(object); ok {
		for _, p := range props {
			if child, ok := p.(object); ok {
				stripDescriptions(child)
			}
		}
	}
	for _, key := range []string{"items", "additionalProperties", "not"} {
		if child, ok := s[key].(object); ok {
			stripDescriptions(child)
		}
	}
	for _, key := range []string{"allOf", "anyOf", "oneOf"} {
		if list, ok := s[key].([]interface{}); ok {
			for _, c := range list {
				if child, ok := c.(object); ok {
					stripDescriptions(child)
				}
			}
		}
	}
}
