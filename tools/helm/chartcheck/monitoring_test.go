// Package chartcheck tests charts/staticip's monitoring objects with the types and parser of
// the projects that consume them: the PodMonitors, ServiceMonitors and the PrometheusRule
// decode strictly into prometheus-operator's Go types, every alert expression and every
// dashboard query parses with Prometheus' own PromQL parser, and every metric they name is
// one staticip's code exports (or one of the few named in externalMetrics).
package chartcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// repoRoot is the staticip checkout this module lives in (tools/helm/chartcheck).
const repoRoot = "../../.."

// externalMetrics are metrics the chart's queries may name that staticip's code does not
// define itself: staticip-scheduler is kube-scheduler with plugins and exports kube-scheduler's
// own framework metrics (k8s.io/kubernetes/pkg/scheduler/metrics).
var externalMetrics = map[string]string{
	"scheduler_framework_extension_point_duration_seconds": "kube-scheduler's (staticip-scheduler)",
	"up": "Prometheus' own, one per scrape target (the target-down and absent() alerts)",
}

// everything the test renders: all components and all monitoring objects on.
var renderFlags = []string{"--set", "edge.enabled=true,metrics.podMonitor.enabled=true,metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,metrics.dashboard.enabled=true"}

func TestMonitoringObjects(t *testing.T) {
	docs := render(t)
	known := exportedMetrics(t)
	counts := map[string]int{}
	used := map[string][]string{} // metric -> where
	for _, doc := range docs {
		var tm struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatal(err)
		}
		where := tm.Kind + " " + tm.Metadata.Name
		switch tm.Kind {
		case "PodMonitor":
			var pm monitoringv1.PodMonitor
			strict(t, where, doc, &pm)
			if len(pm.Spec.PodMetricsEndpoints) == 0 || len(pm.Spec.Selector.MatchLabels) == 0 {
				t.Errorf("%s: no endpoint or no selector", where)
			}
			for _, ep := range pm.Spec.PodMetricsEndpoints {
				if ep.PortNumber == nil && ep.Port == nil {
					t.Errorf("%s: an endpoint without port", where)
				}
				checkAuth(t, where, ep.Scheme, ep.Authorization != nil)
			}
		case "ServiceMonitor":
			var sm monitoringv1.ServiceMonitor
			strict(t, where, doc, &sm)
			for _, ep := range sm.Spec.Endpoints {
				if ep.Port == "" {
					t.Errorf("%s: an endpoint without port", where)
				}
				checkAuth(t, where, ep.Scheme, ep.Authorization != nil)
			}
		case "PrometheusRule":
			var pr monitoringv1.PrometheusRule
			strict(t, where, doc, &pr)
			for _, g := range pr.Spec.Groups {
				for _, r := range g.Rules {
					if r.Alert == "" {
						t.Errorf("%s: group %s has a rule without alert name", where, g.Name)
						continue
					}
					if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
						t.Errorf("%s: alert %s has no severity label or no summary", where, r.Alert)
					}
					expr := r.Expr.String()
					for _, m := range metricNames(t, fmt.Sprintf("%s alert %s", where, r.Alert), expr) {
						used[m] = append(used[m], "alert "+r.Alert)
					}
				}
			}
		case "ConfigMap":
			if tm.Metadata.Name != "staticip-grafana-dashboard" {
				continue
			}
			var cm corev1.ConfigMap
			strict(t, where, doc, &cm)
			for _, e := range dashboardExprs(t, cm.Data["staticip.json"]) {
				for _, m := range metricNames(t, "dashboard panel "+e.panel, e.expr) {
					used[m] = append(used[m], "dashboard panel "+e.panel)
				}
			}
		default:
			continue
		}
		counts[tm.Kind]++
	}
	// One PodMonitor and one ServiceMonitor per component (agent, controller-manager,
	// scheduler, wrapper, grid daemon), one PrometheusRule, the dashboard.
	for kind, want := range map[string]int{"PodMonitor": 5, "ServiceMonitor": 5, "PrometheusRule": 1, "ConfigMap": 1} {
		if counts[kind] != want {
			t.Errorf("rendered %d %s, want %d", counts[kind], kind, want)
		}
	}
	if len(used) == 0 {
		t.Fatal("the alerts and the dashboard name no metric")
	}
	var names []string
	for m := range used {
		names = append(names, m)
	}
	sort.Strings(names)
	for _, m := range names {
		if _, ok := known[m]; ok {
			continue
		}
		base := m
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, suffix)
		}
		if src, ok := externalMetrics[base]; ok {
			t.Logf("%s: %s", m, src)
			continue
		}
		t.Errorf("metric %s (used by %s) is exported by no staticip component (searched %d metric names in the code)",
			m, strings.Join(dedupe(used[m]), ", "), len(known))
	}
	t.Logf("%d metric names used by the alerts and the dashboard; %d objects checked", len(names), counts["PodMonitor"]+counts["ServiceMonitor"]+counts["PrometheusRule"]+counts["ConfigMap"])
}

// TestExportedMetricsScan guards the scanner the test above relies on: it finds metrics of
// each kind of definition the code has (client_golang opts with a literal name, with a
// namespace constant, with a subsystem, and the agent's hand-written exposition).
func TestExportedMetricsScan(t *testing.T) {
	known := exportedMetrics(t)
	for _, m := range []string{
		"staticip_controller_syncs_total",                    // Name only
		"staticip_nodefailover_step_duration_seconds_bucket", // histogram series
		"staticip_application_grid_wrapper_endpoints_total",  // Namespace: ns
		"staticip_statefulset_grid_daemon_records",           // Namespace: ns (gauge)
		"workqueue_depth",         // Subsystem
		"staticip_ipam_addresses", // the agent's # TYPE line
		"staticip_agent_last_sync_timestamp_seconds",
		"staticip_cni_operation_duration_seconds_bucket", // the agent's const histogram
		"staticip_cni_failures_total",
	} {
		if _, ok := known[m]; !ok {
			t.Errorf("the scan misses %s", m)
		}
	}
}

func checkAuth(t *testing.T, where string, scheme *monitoringv1.Scheme, hasAuth bool) {
	t.Helper()
	if scheme == nil {
		t.Errorf("%s: an endpoint without scheme", where)
		return
	}
	// HTTPS /metrics is behind delegated authentication: without a token the scrape is 401.
	if strings.EqualFold(string(*scheme), "https") && !hasAuth {
		t.Errorf("%s: an HTTPS endpoint without authorization (delegated authentication needs the scraper's token)", where)
	}
}

func strict(t *testing.T, where string, doc []byte, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, into); err != nil {
		t.Errorf("%s does not decode strictly into %T: %v", where, into, err)
	}
}

// metricNames parses expr with Prometheus' parser and returns the metric names it selects.
func metricNames(t *testing.T, where, expr string) []string {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: the expression does not parse: %v\n%s", where, err, expr)
		return nil
	}
	var out []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			t.Errorf("%s: a selector without a metric name: %s", where, vs)
			return nil
		}
		out = append(out, name)
		return nil
	})
	return out
}

type panelExpr struct{ panel, expr string }

// dashboardExprs returns every query of the Grafana dashboard (panels, nested rows).
func dashboardExprs(t *testing.T, js string) []panelExpr {
	t.Helper()
	var d struct {
		Title  string            `json:"title"`
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal([]byte(js), &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	if d.Title == "" || len(d.Panels) == 0 {
		t.Fatal("the dashboard has no title or no panels")
	}
	type panel struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var out []panelExpr
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, raw := range ps {
			var p panel
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatal(err)
			}
			if p.Type == "timeseries" && len(p.Targets) == 0 {
				t.Errorf("dashboard panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				out = append(out, panelExpr{panel: p.Title, expr: tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

var (
	optsRe   = regexp.MustCompile(`(?s)prometheus\.(Counter|Gauge|Histogram|Summary)Opts\{(.*?)\}`)
	fieldRe  = regexp.MustCompile(`(Namespace|Subsystem|Name):\s*("[^"]*"|[A-Za-z_][A-Za-z0-9_]*)`)
	constRe  = regexp.MustCompile(`const\s+([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"([^"]*)"`)
	typeLine = regexp.MustCompile(`# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary)`)
	descRe   = regexp.MustCompile(`prometheus\.NewDesc\(\s*"([a-zA-Z_:][a-zA-Z0-9_:]*)"`)
)

// exportedMetrics scans the components' Go code for the metrics they define: client_golang
// *Opts literals (Namespace_Subsystem_Name, string constants resolved within the file),
// prometheus.NewDesc literals (the agent's collector) and # TYPE lines. Histograms and summaries also
// give their _bucket/_sum/_count series.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	add := func(name, typ string) {
		known[name] = true
		if typ == "Histogram" || typ == "histogram" || typ == "Summary" || typ == "summary" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				known[name+s] = true
			}
		}
	}
	for _, dir := range []string{"controllers", "cni", "edge", "ipam", "scheduler-plugins", "internal"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			src := string(b)
			consts := map[string]string{}
			for _, m := range constRe.FindAllStringSubmatch(src, -1) {
				consts[m[1]] = m[2]
			}
			for _, m := range optsRe.FindAllStringSubmatch(src, -1) {
				parts := map[string]string{}
				for _, f := range fieldRe.FindAllStringSubmatch(m[2], -1) {
					v := f[2]
					if strings.HasPrefix(v, `"`) {
						v = strings.Trim(v, `"`)
					} else if c, ok := consts[v]; ok {
						v = c
					} else {
						continue
					}
					parts[f[1]] = v
				}
				if parts["Name"] == "" {
					continue
				}
				var name []string
				for _, k := range []string{"Namespace", "Subsystem", "Name"} {
					if parts[k] != "" {
						name = append(name, parts[k])
					}
				}
				add(strings.Join(name, "_"), m[1])
			}
			for _, m := range typeLine.FindAllStringSubmatch(src, -1) {
				add(m[1], m[2])
			}
			for _, m := range descRe.FindAllStringSubmatch(src, -1) {
				// A collector's const metrics (the agent's): gauges and counters, and the
				// histograms of a file that builds const histograms.
				typ := ""
				if strings.Contains(src, "NewConstHistogram(") && strings.HasSuffix(m[1], "_seconds") {
					typ = "histogram"
				}
				add(m[1], typ)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(known) == 0 {
		t.Fatal("no metric found in the code")
	}
	return known
}

// render runs `helm template` over charts/staticip with every monitoring object on; skipped
// (with the reason) when no helm binary was built (make helm; make test builds it first).
func render(t *testing.T) [][]byte {
	t.Helper()
	helm := os.Getenv("HELM")
	if helm == "" {
		helm = filepath.Join(repoRoot, "_output", "bin", "helm")
	}
	if _, err := os.Stat(helm); err != nil {
		t.Skipf("no helm binary at %s: run `make helm` (tools/helm.sh builds it from the Go module proxy): %v", helm, err)
	}
	args := append([]string{"template", "staticip", filepath.Join(repoRoot, "charts", "staticip"), "-n", "kube-system"}, renderFlags...)
	out, err := exec.Command(helm, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(out), -1) {
		if strings.TrimSpace(d) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
