// Package charts holds staticip's Helm chart (charts/staticip) and the test that keeps it
// and the kustomize install (manifests/) one: rendered with default values, and with the
// values that pick each alternative, the chart gives exactly the objects kustomize gives.
package charts_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/staticip/staticip/internal/testenv"
)

// helmOnlyLabels are the labels Helm's conventions add (templates/_helpers.tpl,
// staticip.labels); kustomize's objects have none of them.
var helmOnlyLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance"}

// Each case renders the chart with its values and kustomizes its directories (relative to
// the repo root); both must give the same objects. readmePool adds the IPPool of the README's
// "Installing into a cluster" (the chart's default ipPools).
var cases = []struct {
	name       string
	set        []string
	kustomize  []string
	readmePool bool
}{
	{
		name:       "defaults",
		kustomize:  []string{"manifests/cni", "manifests/scheduler/replace-default", "manifests/admission", "manifests/user-roles", "manifests/controller-manager"},
		readmePool: true,
	},
	{
		name:      "second-scheduler",
		set:       []string{"scheduler.mode=second-scheduler", "ipPools=null", "agent.enabled=false", "admissionPolicies.enabled=false", "userRoles.enabled=false", "controllerManager.enabled=false"},
		kustomize: []string{"manifests/scheduler/second-scheduler"},
	},
	{
		name:      "edge",
		set:       []string{"edge.enabled=true", "ipPools=null", "agent.enabled=false", "admissionPolicies.enabled=false", "userRoles.enabled=false", "controllerManager.enabled=false", "scheduler.enabled=false"},
		kustomize: []string{"manifests/edge"},
	},
}

func TestChartRendersWhatKustomizeRenders(t *testing.T) {
	helm, kubectl := tools(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"template", "staticip", "staticip", "-n", "kube-system"}
			for _, s := range c.set {
				args = append(args, "--set", s)
			}
			chart := objects(t, "helm "+strings.Join(args, " "), run(t, ".", helm, args...))
			var want []map[string]any
			for _, d := range c.kustomize {
				want = append(want, objects(t, "kubectl kustomize "+d, run(t, "..", kubectl, "kustomize", d))...)
			}
			if c.readmePool {
				want = append(want, objects(t, "README.md's IPPool", readmeIPPool(t))...)
			}
			compare(t, want, chart)
		})
	}
}

// TestChartCRDsAreManifestsCRDs: crds/ is a copy of manifests/crds (tools/chart-sync.sh,
// make generate), as `helm template --include-crds` renders it.
func TestChartCRDsAreManifestsCRDs(t *testing.T) {
	helm, _ := tools(t)
	out := run(t, ".", helm, "template", "staticip", "staticip", "-n", "kube-system", "--include-crds",
		"--set", "ipPools=null,agent.enabled=false,admissionPolicies.enabled=false,userRoles.enabled=false,controllerManager.enabled=false,scheduler.enabled=false")
	chart := objects(t, "helm template --include-crds", out)
	files, err := filepath.Glob("../manifests/crds/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests/crds/*.yaml: %v", err)
	}
	var want []map[string]any
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, objects(t, f, b)...)
	}
	compare(t, want, chart)
}

// TestREADMEValuesRender: the my-values.yaml README shows renders (values.schema.json accepts
// it) and gives the IPPool of README's kustomize steps.
func TestREADMEValuesRender(t *testing.T) {
	helm, _ := tools(t)
	values := readmeBlock(t, "ipPools:")
	file := filepath.Join(t.TempDir(), "my-values.yaml")
	if err := os.WriteFile(file, values, 0o644); err != nil {
		t.Fatal(err)
	}
	out := run(t, ".", helm, "template", "staticip", "staticip", "-n", "kube-system", "-f", file)
	var pools []map[string]any
	for _, o := range objects(t, "helm template -f README's my-values.yaml", out) {
		if o["kind"] == "IPPool" {
			pools = append(pools, o)
		}
	}
	compare(t, objects(t, "README.md's IPPool", readmeIPPool(t)), pools)
}

// tools returns helm (HELM, else the repo's _output/bin, else STATICIP_BIN_DIR) and kubectl
// (testenv's bin dir); the test is skipped, saying why, without them. `make test` builds helm
// first (make helm), so CI never skips.
func tools(t *testing.T) (helm, kubectl string) {
	t.Helper()
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl = filepath.Join(bin, "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Skipf("no kubectl at %s (make k8s-bins builds it): %v", kubectl, err)
	}
	candidates := []string{os.Getenv("HELM"), filepath.Join("..", "_output", "bin", "helm"), filepath.Join(bin, "helm")}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if _, err := os.Stat(c); err == nil {
			abs, err := filepath.Abs(c)
			if err != nil {
				t.Fatal(err)
			}
			return abs, kubectl
		}
	}
	t.Skipf("no helm binary (looked at $HELM, ../_output/bin/helm, %s/helm): run `make helm` (tools/helm.sh builds it from the Go module proxy)", bin)
	return "", ""
}

func run(t *testing.T, dir, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, ee.Stderr)
		}
		t.Fatal(err)
	}
	return out
}

// readmeIPPool is the IPPool of README.md's "Installing into a cluster" (the my-ippool.yaml
// of the kustomize steps), which the chart's default ipPools must equal.
func readmeIPPool(t *testing.T) []byte {
	t.Helper()
	return readmeBlock(t, "kind: IPPool")
}

// readmeBlock is the yaml block of README.md's "Installing into a cluster" that contains what.
func readmeBlock(t *testing.T, what string) []byte {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := bytes.Cut(b, []byte("\n## Installing into a cluster"))
	if !ok {
		t.Fatal(`README.md has no "## Installing into a cluster"`)
	}
	sec, _, _ = bytes.Cut(sec, []byte("\n## "))
	for {
		var blk []byte
		_, blk, ok = bytes.Cut(sec, []byte("```yaml\n"))
		if !ok {
			t.Fatalf(`README.md's "Installing into a cluster" has no yaml block with %q`, what)
		}
		blk, sec, _ = bytes.Cut(blk, []byte("```"))
		if bytes.Contains(blk, []byte(what)) {
			return blk
		}
	}
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// objects splits a multi-document YAML stream into its objects (empty documents dropped).
func objects(t *testing.T, what string, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for i, doc := range docSep.Split(string(b), -1) {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%s: document %d: %v\n%s", what, i, err, doc)
		}
		if len(o) > 0 {
			out = append(out, o)
		}
	}
	return out
}

func key(o map[string]any) string {
	md, _ := o["metadata"].(map[string]any)
	ns, _ := md["namespace"].(string)
	name, _ := md["name"].(string)
	if ns != "" {
		name = ns + "/" + name
	}
	return fmt.Sprintf("%v %v %s", o["apiVersion"], o["kind"], name)
}

// hashSuffix is the suffix kustomize's configMapGenerator appends to a name.
var hashSuffix = regexp.MustCompile(`^(.+)-[a-z0-9]{10}$`)

// compare fails with every object one side has and the other lacks, and every field that
// differs (its path, both values).
func compare(t *testing.T, kustomize, chart []map[string]any) {
	t.Helper()
	// kustomize's generated ConfigMap names (name-<hash>) are the chart's plain names; every
	// reference to them (a volume's configMap.name) too.
	chartNames := map[string]bool{}
	for _, o := range chart {
		if o["kind"] == "ConfigMap" {
			chartNames[o["metadata"].(map[string]any)["name"].(string)] = true
		}
	}
	renames := map[string]string{}
	for _, o := range kustomize {
		if o["kind"] != "ConfigMap" {
			continue
		}
		name := o["metadata"].(map[string]any)["name"].(string)
		if m := hashSuffix.FindStringSubmatch(name); m != nil && chartNames[m[1]] {
			renames[name] = m[1]
		}
	}
	want := index(t, "kustomize", kustomize, renames)
	got := index(t, "chart", chart, nil)
	var problems []string
	for _, k := range sortedKeys(want) {
		if _, ok := got[k]; !ok {
			problems = append(problems, fmt.Sprintf("%s: in manifests/ (kustomize), not rendered by the chart", k))
			continue
		}
		for _, d := range diff("", want[k], got[k]) {
			problems = append(problems, fmt.Sprintf("%s: %s", k, d))
		}
	}
	for _, k := range sortedKeys(got) {
		if _, ok := want[k]; !ok {
			problems = append(problems, fmt.Sprintf("%s: rendered by the chart, not in manifests/ (kustomize)", k))
		}
	}
	if len(problems) > 0 {
		t.Errorf("the chart and manifests/ differ in %d places (kustomize = manifests/, chart = charts/staticip; fix the chart's template or values):\n  %s",
			len(problems), strings.Join(problems, "\n  "))
	}
	t.Logf("%d objects compared", len(want))
}

func index(t *testing.T, side string, objs []map[string]any, renames map[string]string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, o := range objs {
		o = normalize(o, renames).(map[string]any)
		k := key(o)
		if _, dup := out[k]; dup {
			t.Fatalf("%s renders %s twice", side, k)
		}
		out[k] = o
	}
	return out
}

// normalize drops what only Helm adds (its labels, checksum/* pod template annotations),
// renames kustomize's hashed ConfigMap names, and parses ConfigMap data that is YAML (a
// scheduler configuration, a kubeconfig) so that comments and layout do not count.
func normalize(v any, renames map[string]string) any {
	switch x := v.(type) {
	case map[string]any:
		m := map[string]any{}
		for k, e := range x {
			m[k] = normalize(e, renames)
		}
		if md, ok := m["metadata"].(map[string]any); ok {
			if l, ok := md["labels"].(map[string]any); ok {
				for _, h := range helmOnlyLabels {
					delete(l, h)
				}
				if len(l) == 0 {
					delete(md, "labels")
				}
			}
			if a, ok := md["annotations"].(map[string]any); ok {
				for k := range a {
					if strings.HasPrefix(k, "checksum/") {
						delete(a, k)
					}
				}
				if len(a) == 0 {
					delete(md, "annotations")
				}
			}
			if len(md) == 0 {
				delete(m, "metadata")
			}
		}
		if m["kind"] == "ConfigMap" {
			if data, ok := m["data"].(map[string]any); ok {
				for k, s := range data {
					str, ok := s.(string)
					if !ok || !strings.Contains(str, "\n") {
						continue
					}
					var parsed map[string]any
					if err := yaml.Unmarshal([]byte(str), &parsed); err == nil && parsed != nil {
						data[k] = parsed
					}
				}
			}
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = normalize(e, renames)
		}
		return l
	case string:
		if r, ok := renames[x]; ok {
			return r
		}
		// kustomize (kyaml) re-serializes a folded scalar (>-) whose lines are indented more
		// with an extra blank line (the CEL expressions of the admission policies): `kubectl
		// apply -k` sends "a ||\n\n  (b" where the file and the chart say "a ||\n  (b". Blank
		// lines mean nothing in CEL; they do not count here.
		for strings.Contains(x, "\n\n") {
			x = strings.ReplaceAll(x, "\n\n", "\n")
		}
		return x
	default:
		return v
	}
}

// diff lists the paths at which a (kustomize) and b (chart) differ.
func diff(path string, a, b any) []string {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		var out []string
		for _, k := range sortedKeys(am) {
			if _, ok := bm[k]; !ok {
				out = append(out, fmt.Sprintf("%s.%s: kustomize has %s, the chart has nothing", path, k, show(am[k])))
				continue
			}
			out = append(out, diff(path+"."+k, am[k], bm[k])...)
		}
		for _, k := range sortedKeys(bm) {
			if _, ok := am[k]; !ok {
				out = append(out, fmt.Sprintf("%s.%s: the chart has %s, kustomize has nothing", path, k, show(bm[k])))
			}
		}
		return out
	}
	al, aok := a.([]any)
	bl, bok := b.([]any)
	if aok && bok && len(al) == len(bl) {
		var out []string
		for i := range al {
			out = append(out, diff(fmt.Sprintf("%s[%d]", path, i), al[i], bl[i])...)
		}
		return out
	}
	if reflect.DeepEqual(a, b) {
		return nil
	}
	return []string{fmt.Sprintf("%s: kustomize has %s, the chart has %s", path, show(a), show(b))}
}

func show(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := strings.TrimSpace(string(b))
	if strings.Contains(s, "\n") {
		return "\n      " + strings.ReplaceAll(s, "\n", "\n      ")
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// TestPackagedChartCarriesTheLicense: `helm package` ships LICENSE and NOTICE, equal to the
// repository's (tools/chart-sync.sh copies them), inside the chart archive users install.
func TestPackagedChartCarriesTheLicense(t *testing.T) {
	helm, _ := tools(t)
	dir := t.TempDir()
	run(t, ".", helm, "package", "staticip", "--destination", dir)
	archives, err := filepath.Glob(filepath.Join(dir, "staticip-*.tgz"))
	if err != nil || len(archives) != 1 {
		t.Fatalf("helm package wrote %v (%v), want one staticip-*.tgz", archives, err)
	}
	packaged := tgzFiles(t, archives[0])
	for _, name := range []string{"LICENSE", "NOTICE"} {
		want, err := os.ReadFile(filepath.Join("..", name))
		if err != nil {
			t.Fatal(err)
		}
		got, ok := packaged["staticip/"+name]
		if !ok {
			t.Errorf("the packaged chart has no %s", name)
		} else if !bytes.Equal(got, want) {
			t.Errorf("the packaged chart's %s differs from the repository's (make generate copies it)", name)
		}
	}
}

// tgzFiles reads a gzipped tar archive: path → content.
func tgzFiles(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
}

// TestIPPoolExportAndNATRender: ipPools[].natOutgoing and disableBGPExport (issue 36) reach the
// IPPool as given, false included (values.schema.json accepts both); unset, neither is written
// (the CRD's defaults apply: natOutgoing true, the pool exported).
func TestIPPoolExportAndNATRender(t *testing.T) {
	helm, _ := tools(t)
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, []byte(`ipPools:
  - name: private
    cidrs: [10.244.0.0/16]
    natOutgoing: true
    disableBGPExport: true
  - name: routed
    cidrs: [10.245.0.0/16]
    natOutgoing: false
    disableBGPExport: false
  - name: defaults
    cidrs: [10.246.0.0/16]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := run(t, ".", helm, "template", "staticip", "staticip", "-n", "kube-system", "-f", file)
	got := map[string]string{}
	for _, o := range objects(t, "helm template -f "+file, out) {
		if o["kind"] != "IPPool" {
			continue
		}
		spec, _ := o["spec"].(map[string]any)
		name, _ := o["metadata"].(map[string]any)["name"].(string)
		got[name] = fmt.Sprintf("natOutgoing=%v disableBGPExport=%v", spec["natOutgoing"], spec["disableBGPExport"])
	}
	want := map[string]string{
		"private":  "natOutgoing=true disableBGPExport=true",
		"routed":   "natOutgoing=false disableBGPExport=false",
		"defaults": "natOutgoing=<nil> disableBGPExport=<nil>",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("IPPools rendered %v, want %v", got, want)
	}
}
