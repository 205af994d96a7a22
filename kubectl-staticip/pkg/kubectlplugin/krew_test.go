package kubectlplugin

import (
	"os"
	"regexp"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestKrewManifest checks the krew Plugin manifest's shape: krew's apiVersion and kind, the
// plugin name kubectl resolves (kubectl-staticip -> `kubectl staticip`), and per platform a
// selector, a uri, a 64-hex sha256 and the binary name.
func TestKrewManifest(t *testing.T) {
	raw, err := os.ReadFile("../../cmd/kubectl-staticip/krew.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version          string `json:"version"`
			ShortDescription string `json:"shortDescription"`
			Platforms        []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				SHA256 string `json:"sha256"`
				Bin    string `json:"bin"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "staticip" {
		t.Errorf("header = %s %s %s", m.APIVersion, m.Kind, m.Metadata.Name)
	}
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(m.Spec.Version) || m.Spec.ShortDescription == "" || len(m.Spec.Platforms) == 0 {
		t.Errorf("spec = %+v", m.Spec)
	}
	for _, p := range m.Spec.Platforms {
		if p.Selector.MatchLabels["os"] == "" || p.URI == "" || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(p.SHA256) || p.Bin != "kubectl-staticip" {
			t.Errorf("platform %+v", p)
		}
	}
}
