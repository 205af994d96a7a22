package charts_test

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// podKnobs are the per-component values of testdata/knobs.yaml as each workload must show them.
type podKnobs struct {
	kind, namespace, name, values string
	priority                      string
	annotation, label, env        string
	verbosity                     string
	strategyField                 string // updateStrategy (DaemonSet) or strategy (Deployment)
}

var knobWorkloads = []podKnobs{
	{"DaemonSet", "kube-system", "staticip-agent", "agent", "agent-priority", "example.com/agent", "agent", "AGENT_ENV", "--v=3", "updateStrategy"},
	{"Deployment", "kube-system", "staticip-scheduler", "scheduler", "scheduler-priority", "example.com/scheduler", "scheduler", "SCHEDULER_ENV", "--v=6", "strategy"},
	{"Deployment", "staticip-system", "staticip-controller-manager", "controllerManager", "cm-priority", "example.com/cm", "cm", "CM_ENV", "--v=7", "strategy"},
	{"DaemonSet", "kube-system", "application-grid-wrapper", "edge.wrapper", "wrapper-priority", "example.com/wrapper", "wrapper", "WRAPPER_ENV", "--v=4", "updateStrategy"},
	{"DaemonSet", "kube-system", "statefulset-grid-daemon", "edge.gridDaemon", "grid-priority", "example.com/grid", "grid", "GRID_ENV", "--v=5", "updateStrategy"},
}

// TestChartKnobs: every per-component knob of values.yaml (priorityClassName, affinity,
// podAnnotations, podLabels, extraEnv, updateStrategy, logLevel) lands where Kubernetes reads
// it, without touching what the chart itself needs (the selector's label, the metrics
// annotations, the controller-manager's anti-affinity).
func TestChartKnobs(t *testing.T) {
	helm, _ := tools(t)
	valuesFile, err := filepath.Abs("testdata/knobs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(valuesFile)
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	rendered := index(t, "chart", objects(t, "helm template -f testdata/knobs.yaml",
		run(t, ".", helm, "template", "staticip", "staticip", "-n", "kube-system", "-f", valuesFile)), nil)
	for _, w := range knobWorkloads {
		t.Run(w.name, func(t *testing.T) {
			o, ok := rendered[w.apiKey()]
			if !ok {
				t.Fatalf("%s not rendered", w.apiKey())
			}
			want := get(values, strings.Split(w.values, ".")...).(map[string]any)
			spec := get(o, "spec").(map[string]any)
			tmpl := get(spec, "template").(map[string]any)
			pod := get(tmpl, "spec").(map[string]any)
			if got := pod["priorityClassName"]; got != w.priority {
				t.Errorf("priorityClassName = %v, want %s", got, w.priority)
			}
			// The values' affinity is in the pod's (the controller-manager adds its anti-affinity).
			for k, v := range want["affinity"].(map[string]any) {
				if got := get(pod, "affinity", k); !reflect.DeepEqual(got, v) {
					t.Errorf("affinity.%s = %v, want %v", k, got, v)
				}
			}
			if w.name == "staticip-controller-manager" && get(pod, "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution") == nil {
				t.Errorf("the controller-manager's required podAntiAffinity (host ports) is gone: %v", pod["affinity"])
			}
			if got := get(tmpl, "metadata", "annotations", w.annotation); got != "yes" {
				t.Errorf("pod annotation %s = %v, want yes", w.annotation, got)
			}
			if w.name != "staticip-scheduler" && get(tmpl, "metadata", "annotations", "prometheus.io/scrape") != "true" {
				t.Errorf("podAnnotations dropped prometheus.io/scrape: %v", get(tmpl, "metadata", "annotations"))
			}
			if got := get(tmpl, "metadata", "labels", "team"); got != w.label {
				t.Errorf("pod label team = %v, want %s", got, w.label)
			}
			if got := get(tmpl, "metadata", "labels", "app.kubernetes.io/name"); got != w.name {
				t.Errorf("pod label app.kubernetes.io/name = %v, want %s (the selector's)", got, w.name)
			}
			if _, ok := get(spec, "selector", "matchLabels").(map[string]any)["team"]; ok {
				t.Errorf("podLabels reached the selector: %v", get(spec, "selector"))
			}
			if got := spec[w.strategyField]; !reflect.DeepEqual(got, want["updateStrategy"]) {
				t.Errorf("%s = %v, want %v", w.strategyField, got, want["updateStrategy"])
			}
			c := get(pod, "containers").([]any)[0].(map[string]any)
			var env []string
			for _, e := range asList(c["env"]) {
				env = append(env, e.(map[string]any)["name"].(string))
			}
			if !contains(env, w.env) {
				t.Errorf("env %v has no %s", env, w.env)
			}
			flags := append(asStrings(c["command"]), asStrings(c["args"])...)
			if !contains(flags, w.verbosity) {
				t.Errorf("command and args %v have no %s", flags, w.verbosity)
			}
		})
	}
}

func (w podKnobs) apiKey() string {
	return "apps/v1 " + w.kind + " " + w.namespace + "/" + w.name
}

// TestChartControllerManagerPDB: the PodDisruptionBudget exists with two or more replicas
// (minAvailable 1 keeps one leading through a drain) and never with one (it would block every
// drain of its node), nor when turned off.
func TestChartControllerManagerPDB(t *testing.T) {
	helm, _ := tools(t)
	const pdb = "policy/v1 PodDisruptionBudget staticip-system/staticip-controller-manager"
	for _, c := range []struct {
		set  string
		want bool
	}{
		{"controllerManager.replicas=2", true},
		{"controllerManager.replicas=3", true},
		{"controllerManager.replicas=1", false},
		{"controllerManager.replicas=3,controllerManager.podDisruptionBudget.enabled=false", false},
		{"controllerManager.enabled=false", false},
	} {
		t.Run(c.set, func(t *testing.T) {
			got := index(t, "chart", objects(t, "helm template --set "+c.set,
				run(t, ".", helm, "template", "staticip", "staticip", "-n", "kube-system", "--set", c.set)), nil)
			o, ok := got[pdb]
			if ok != c.want {
				t.Fatalf("PodDisruptionBudget rendered: %v, want %v", ok, c.want)
			}
			if ok && get(o, "spec", "minAvailable") != float64(1) {
				t.Errorf("minAvailable = %v, want 1", get(o, "spec", "minAvailable"))
			}
		})
	}
}

// TestChartRefusesOtherNamespaces: the admission policies trust the components' service
// accounts in kube-system and staticip-system by name, so the chart installs only into
// kube-system and says why otherwise.
func TestChartRefusesOtherNamespaces(t *testing.T) {
	helm, _ := tools(t)
	for _, ns := range []string{"default", "staticip-system", "my-namespace"} {
		cmd := exec.Command(helm, "template", "staticip", "staticip", "-n", ns)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Errorf("-n %s: rendered (err %v), want a failure", ns, err)
			continue
		}
		if !strings.Contains(string(out), "install the release into namespace kube-system") || !strings.Contains(string(out), `not "`+ns+`"`) {
			t.Errorf("-n %s: the failure does not say what to do:\n%s", ns, out)
		}
	}
	run(t, ".", helm, "template", "staticip", "staticip", "-n", "kube-system")
}

// TestChartPackageHoldsScripts: `helm package` (what a registry serves and `helm pull`
// fetches) carries scripts/uninstall.sh and scripts/adopt.sh, which find the chart's crds/
// relative to themselves.
func TestChartPackageHoldsScripts(t *testing.T) {
	helm, _ := tools(t)
	dir := t.TempDir()
	run(t, ".", helm, "package", "staticip", "-d", dir)
	tgzs, err := filepath.Glob(filepath.Join(dir, "staticip-*.tgz"))
	if err != nil || len(tgzs) != 1 {
		t.Fatalf("helm package wrote %v (%v)", tgzs, err)
	}
	f, err := os.Open(tgzs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]bool{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = true
	}
	for _, want := range []string{"staticip/scripts/uninstall.sh", "staticip/scripts/adopt.sh", "staticip/crds/jke.jdcloud.com_staticips.yaml", "staticip/README.md"} {
		if !files[want] {
			t.Errorf("the packaged chart has no %s", want)
		}
	}
}

// get walks nested maps; nil when a key is missing.
func get(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func asStrings(v any) []string {
	var out []string
	for _, e := range asList(v) {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}
