package manifests_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Every workload of manifests/ that names a container port "metrics" is scraped by
// monitoring/prometheus-scrape.yaml: its app.kubernetes.io/name matches the configuration's
// keep rule, which keeps only ports named "metrics", over HTTPS; and the workload's
// prometheus.io/port annotation is that port.
func TestScrapeConfigCoversEveryMetricsPort(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("monitoring", "prometheus-scrape.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ScrapeConfigs []struct {
			Scheme         string `json:"scheme"`
			RelabelConfigs []struct {
				SourceLabels []string `json:"source_labels"`
				Regex        string   `json:"regex"`
				Action       string   `json:"action"`
			} `json:"relabel_configs"`
		} `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.ScrapeConfigs) != 1 || cfg.ScrapeConfigs[0].Scheme != "https" {
		t.Fatalf("want one https scrape config, got %+v", cfg.ScrapeConfigs)
	}
	keep := map[string]*regexp.Regexp{}
	for _, r := range cfg.ScrapeConfigs[0].RelabelConfigs {
		if r.Action == "keep" && len(r.SourceLabels) == 1 {
			keep[r.SourceLabels[0]] = regexp.MustCompile("^(?:" + r.Regex + ")$")
		}
	}
	nameRule, portRule := keep["__meta_kubernetes_pod_label_app_kubernetes_io_name"], keep["__meta_kubernetes_pod_container_port_name"]
	if nameRule == nil || portRule == nil || !portRule.MatchString("metrics") || portRule.MatchString("health") {
		t.Fatalf("the scrape config must keep by app.kubernetes.io/name and the port name metrics only")
	}
	found := 0
	for path, docs := range yamlDocs(t) {
		for _, doc := range docs {
			var obj struct {
				Kind string `json:"kind"`
				Spec struct {
					Template corev1.PodTemplateSpec `json:"template"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal(doc, &obj); err != nil || (obj.Kind != "DaemonSet" && obj.Kind != "Deployment") {
				continue
			}
			for _, c := range obj.Spec.Template.Spec.Containers {
				for _, p := range c.Ports {
					if p.Name != "metrics" {
						continue
					}
					found++
					name := obj.Spec.Template.Labels["app.kubernetes.io/name"]
					if !nameRule.MatchString(name) {
						t.Errorf("%s: pods labelled app.kubernetes.io/name=%q serve metrics on %d, which the scrape config does not keep", path, name, p.ContainerPort)
					}
					if a := obj.Spec.Template.Annotations["prometheus.io/port"]; a != "" && a != strconv.Itoa(int(p.ContainerPort)) {
						t.Errorf("%s: prometheus.io/port %q, metrics port %d", path, a, p.ContainerPort)
					}
				}
			}
		}
	}
	if found < 4 {
		t.Errorf("%d metrics ports under manifests/, want the controller-manager's, the agent's, the wrapper's and the grid daemon's", found)
	}
}
