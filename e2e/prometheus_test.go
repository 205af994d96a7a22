//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/e2e/framework"
)

// promComponent is a staticip component the shipped scrape configuration finds, and the
// series that must be there once Prometheus scrapes it.
type promComponent struct {
	name, namespace, kind string // the workload (app.kubernetes.io/name = name)
	series                []string
}

var promComponents = []promComponent{
	{name: "staticip-agent", namespace: "kube-system", kind: "DaemonSet", series: []string{
		`staticip_ipam_addresses{state="total"}`, `staticip_agent_syncs_total{result="ok"}`, `staticip_agent_caches_synced`,
		`staticip_build_info`, `process_cpu_seconds_total`}},
	{name: "staticip-controller-manager", namespace: "staticip-system", kind: "Deployment", series: []string{
		`workqueue_adds_total`, `workqueue_depth`, `staticip_controller_syncs_total`, `staticip_controller_manager_leader`, `staticip_build_info`}},
	{name: "application-grid-wrapper", namespace: "kube-system", kind: "DaemonSet", series: []string{
		`staticip_application_grid_wrapper_endpointslice_watches`, `staticip_application_grid_wrapper_requests_total`, `staticip_application_grid_wrapper_endpoints_total`,
		`staticip_build_info`}},
	{name: "statefulset-grid-daemon", namespace: "kube-system", kind: "DaemonSet", series: []string{
		`staticip_statefulset_grid_daemon_records`, `staticip_statefulset_grid_daemon_sync_duration_seconds_count`, `staticip_build_info`}},
}

// TestPrometheusScrapesEveryComponent runs a real Prometheus (Debian's package, `make deps`)
// on this host with manifests/monitoring/prometheus-scrape.yaml, scraping as a service account
// that holds nothing but the ClusterRole staticip-metrics-reader, through each component's
// delegated authentication and authorization. Every component's targets must be up and its
// key series present; a static-IP pod the test starts must show in the agent's allocation
// counter and used-address gauge of its node.
//
// Debian's prometheus is built without Kubernetes service discovery (promtool: "field
// kubernetes_sd_configs not found in type config.ScrapeConfig"), so the test lists the pods
// itself and hands them to Prometheus as file_sd targets carrying the pod role's
// __meta_kubernetes_* labels; the shipped relabel rules, scheme, TLS and authorization run
// unchanged (only the discovery and the token's path differ).
func TestPrometheusScrapesEveryComponent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("SKIP: no prometheus on PATH (make deps installs Debian's package)")
	}
	rangesByNode := requireStaticIPCNI(t, ctx)
	var present []promComponent
	for _, c := range promComponents {
		if ok, err := workloadExists(ctx, c); err != nil {
			t.Fatal(err)
		} else if ok {
			present = append(present, c)
		} else {
			t.Logf("%s/%s %s not installed here: not scraped", c.namespace, c.name, c.kind)
		}
	}
	ns := f.IPRequestNamespace(t, "e2e-prom")
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(scraperToken(t, ctx, ns)), 0o600); err != nil {
		t.Fatal(err)
	}
	targetsFile := filepath.Join(dir, "targets.json")
	if err := writePodTargets(ctx, targetsFile); err != nil {
		t.Fatal(err)
	}
	prom := startPrometheus(t, ctx, promBin, dir, targetsFile, tokenFile)

	// Every component's pods are up targets.
	for _, c := range present {
		want, err := runningPods(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if err := framework.WaitFor(ctx, 3*time.Minute, fmt.Sprintf("%d up targets of %s", want, c.name), func(ctx context.Context) (bool, error) {
			v, err := prom.scalar(ctx, fmt.Sprintf(`count(up{job="staticip",component=%q} == 1) or vector(0)`, c.name))
			if err != nil {
				return false, err
			}
			if int(v) != want {
				return false, fmt.Errorf("%v up, targets: %s", v, prom.targetErrors(ctx))
			}
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, s := range c.series {
			q := withComponent(s, c.name)
			if err := framework.WaitFor(ctx, time.Minute, "series "+q, func(ctx context.Context) (bool, error) {
				n, err := prom.count(ctx, q)
				return n > 0, err
			}); err != nil {
				t.Error(err)
			}
		}
		t.Logf("%s: %d targets up, series %v present", c.name, want, c.series)
	}
	if v, err := prom.scalar(ctx, `sum(staticip_controller_manager_leader{component="staticip-controller-manager"})`); err == nil && v != 1 {
		t.Errorf("staticip_controller_manager_leader sums to %v over the replicas, want 1 (one leader)", v)
	}

	// Something happens: a static-IP pod on one node. The agent of that node counts the
	// allocation and one more used address of its range.
	nodes := workloadNodes(t, ctx)
	target := nodes[len(nodes)-1].Name
	if len(rangesByNode[target]) == 0 {
		t.Fatalf("node %s has no IPRange", target)
	}
	ip := hostInRange(t, rangesByNode[target][0], 213)
	allocQ := fmt.Sprintf(`sum(staticip_agent_allocations_total{node=%q}) or vector(0)`, target)
	usedQ := fmt.Sprintf(`sum(staticip_ipam_addresses{node=%q,state="used"}) or vector(0)`, target)
	allocBefore, err := prom.scalar(ctx, allocQ)
	if err != nil {
		t.Fatal(err)
	}
	usedBefore, err := prom.scalar(ctx, usedQ)
	if err != nil {
		t.Fatal(err)
	}
	// The plugin's own count of its ADDs on that node (ipam.db, passed on by the agent).
	addsQ := fmt.Sprintf(`sum(staticip_cni_operation_duration_seconds_count{node=%q,operation="add",result="success"}) or vector(0)`, target)
	addsBefore, err := prom.scalar(ctx, addsQ)
	if err != nil {
		t.Fatal(err)
	}
	pod := testServerPod("static", "", nil)
	pod.Spec.NodeSelector = nil // the scheduler pins it to the IP's node
	pod.Annotations = map[string]string{podip.AnnotationIPAddress: ip}
	runPodOn(t, ctx, ns, pod, target, ip)
	t.Logf("pod static runs on %s with %s; allocations on the node before: %v, used addresses: %v", target, ip, allocBefore, usedBefore)
	// The allocations counter only grows: the pod's ADD must show in it.
	var allocNow float64
	if err := framework.WaitFor(ctx, 2*time.Minute, allocQ+" to grow", func(ctx context.Context) (bool, error) {
		allocNow, err = prom.scalar(ctx, allocQ)
		return err == nil && allocNow >= allocBefore+1, err
	}); err != nil {
		t.Errorf("%v (last value %v, before the pod %v)", err, allocNow, allocBefore)
	}
	// The used gauge is a state: other tests' pods leave the node meanwhile (kind, 2026-11-26: 3
	// before the pod, 2 after, while the previous test's namespace was being deleted), so "grew by
	// one" is not what it promises. It promises the node's used addresses: once the node settles,
	// the live pods there that hold a pod-network IP, this one among them.
	var usedNow float64
	var holders int
	if err := framework.WaitFor(ctx, 2*time.Minute, usedQ+" to equal the pods holding an IP on "+target, func(ctx context.Context) (bool, error) {
		if usedNow, err = prom.scalar(ctx, usedQ); err != nil {
			return false, err
		}
		if holders, err = podsHoldingIPsOn(ctx, target); err != nil {
			return false, err
		}
		return holders >= 1 && usedNow == float64(holders), nil
	}); err != nil {
		t.Errorf("%v (last value %v, pods holding an IP on the node %d; before the pod %v)", err, usedNow, holders, usedBefore)
	}
	cniCallsShow(t, ctx, prom, ns, target, ip, addsQ, addsBefore)
}

// cniCallsShow: the pod's ADD shows in the node's CNI duration histogram, and a pod sent to
// the same node's kubelet asking for the IP the first one holds is refused by the plugin and
// counted under reason ip_in_use.
func cniCallsShow(t *testing.T, ctx context.Context, prom *prometheus, ns, node, heldIP, addsQ string, addsBefore float64) {
	t.Helper()
	var addsNow float64
	var err error
	if err := framework.WaitFor(ctx, 2*time.Minute, addsQ+" to grow", func(ctx context.Context) (bool, error) {
		addsNow, err = prom.scalar(ctx, addsQ)
		return err == nil && addsNow >= addsBefore+1, err
	}); err != nil {
		t.Errorf("%v (last value %v, before the pod %v)", err, addsNow, addsBefore)
	}
	refusedQ := fmt.Sprintf(`sum(staticip_cni_failures_total{node=%q,operation="add",reason="ip_in_use"}) or vector(0)`, node)
	refusedBefore, err := prom.scalar(ctx, refusedQ)
	if err != nil {
		t.Fatal(err)
	}
	intruder := testServerPod("intruder", "", nil)
	intruder.Spec.NodeSelector = nil
	intruder.Spec.NodeName = node // past the scheduler, straight to the kubelet
	intruder.Annotations = map[string]string{podip.AnnotationIPAddress: heldIP}
	if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, intruder, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForPodEvent(t, ctx, ns, "intruder", "FailedCreatePodSandBox", fmt.Sprintf("IP %s is in use by pod %s/static", heldIP, ns))
	var refusedNow float64
	if err := framework.WaitFor(ctx, 2*time.Minute, refusedQ+" to grow", func(ctx context.Context) (bool, error) {
		refusedNow, err = prom.scalar(ctx, refusedQ)
		return err == nil && refusedNow >= refusedBefore+1, err
	}); err != nil {
		t.Errorf("%v (last value %v, before the refused pod %v)", err, refusedNow, refusedBefore)
	}
	t.Logf("node %s: CNI ADDs counted %v -> %v; ip_in_use refusals %v -> %v", node, addsBefore, addsNow, refusedBefore, refusedNow)
}

// podsHoldingIPsOn counts the pods bound to node that hold a pod-network IP: not hostNetwork,
// with a pod IP, not finished (a finished pod's sandbox, and so its IP, is released).
func podsHoldingIPsOn(ctx context.Context, node string) (int, error) {
	pods, err := f.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range pods.Items {
		if !p.Spec.HostNetwork && p.Status.PodIP != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			n++
		}
	}
	return n, nil
}

// workloadExists reports whether c's DaemonSet or Deployment is installed.
func workloadExists(ctx context.Context, c promComponent) (bool, error) {
	var err error
	if c.kind == "Deployment" {
		_, err = f.Client.AppsV1().Deployments(c.namespace).Get(ctx, c.name, metav1.GetOptions{})
	} else {
		_, err = f.Client.AppsV1().DaemonSets(c.namespace).Get(ctx, c.name, metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// runningPods counts c's Running pods with an IP: the targets the scrape configuration keeps.
func runningPods(ctx context.Context, c promComponent) (int, error) {
	pods, err := f.Client.CoreV1().Pods(c.namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + c.name})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			n++
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("%s/%s has no running pod", c.namespace, c.name)
	}
	return n, nil
}

// scraperToken creates a service account bound to staticip-metrics-reader only (what the
// scrape configuration's comment asks of a Prometheus) and returns a token of it.
func scraperToken(t *testing.T, ctx context.Context, ns string) string {
	t.Helper()
	if _, err := f.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := "e2e-prometheus-" + ns
	if _, err := f.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: binding},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "staticip-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding, metav1.DeleteOptions{})
	})
	tr, err := f.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "prometheus",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

var invalidLabelChars = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// podTargets are the targets Prometheus' kubernetes_sd_configs role "pod" gives for pods: one
// per container port, at the pod's IP, with its __meta_kubernetes_* labels (those the shipped
// relabel rules and a reader may use).
func podTargets(pods []corev1.Pod) []map[string]any {
	var out []map[string]any
	for _, p := range pods {
		if p.Status.PodIP == "" {
			continue
		}
		base := map[string]string{
			"__meta_kubernetes_namespace":      p.Namespace,
			"__meta_kubernetes_pod_name":       p.Name,
			"__meta_kubernetes_pod_ip":         p.Status.PodIP,
			"__meta_kubernetes_pod_node_name":  p.Spec.NodeName,
			"__meta_kubernetes_pod_host_ip":    p.Status.HostIP,
			"__meta_kubernetes_pod_phase":      string(p.Status.Phase),
			"__meta_kubernetes_pod_uid":        string(p.UID),
			"__meta_kubernetes_pod_ready":      strconv.FormatBool(podReady(&p)),
			"__meta_kubernetes_pod_controller": controllerKind(&p),
		}
		for k, v := range p.Labels {
			base["__meta_kubernetes_pod_label_"+invalidLabelChars.ReplaceAllString(k, "_")] = v
			base["__meta_kubernetes_pod_labelpresent_"+invalidLabelChars.ReplaceAllString(k, "_")] = "true"
		}
		for k, v := range p.Annotations {
			base["__meta_kubernetes_pod_annotation_"+invalidLabelChars.ReplaceAllString(k, "_")] = v
		}
		for _, c := range p.Spec.Containers {
			for _, port := range c.Ports {
				if port.Protocol != "" && port.Protocol != corev1.ProtocolTCP {
					continue
				}
				labels := map[string]string{
					"__meta_kubernetes_pod_container_name":          c.Name,
					"__meta_kubernetes_pod_container_image":         c.Image,
					"__meta_kubernetes_pod_container_port_name":     port.Name,
					"__meta_kubernetes_pod_container_port_number":   strconv.Itoa(int(port.ContainerPort)),
					"__meta_kubernetes_pod_container_port_protocol": "TCP",
				}
				for k, v := range base {
					labels[k] = v
				}
				out = append(out, map[string]any{
					"targets": []string{net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port.ContainerPort)))},
					"labels":  labels,
				})
			}
		}
	}
	return out
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func controllerKind(p *corev1.Pod) string {
	if ref := metav1.GetControllerOf(p); ref != nil {
		return ref.Kind
	}
	return ""
}

// writePodTargets lists every pod (as the pod role watches every namespace) and writes them
// as a file_sd target file.
func writePodTargets(ctx context.Context, path string) error {
	pods, err := f.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	data, err := json.Marshal(podTargets(pods.Items))
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// adaptScrapeConfig is the shipped scrape configuration with file_sd discovery of
// targetsFile instead of kubernetes_sd_configs and the token at tokenFile, and a 5 s scrape
// interval; everything else (relabel rules, scheme, TLS, authorization type) as shipped.
func adaptScrapeConfig(shipped []byte, targetsFile, tokenFile string) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(shipped, &cfg); err != nil {
		return nil, err
	}
	scrapes, _ := cfg["scrape_configs"].([]any)
	if len(scrapes) == 0 {
		return nil, fmt.Errorf("no scrape_configs")
	}
	for _, s := range scrapes {
		sc, ok := s.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("scrape config %v is not a map", s)
		}
		if _, ok := sc["kubernetes_sd_configs"]; !ok {
			return nil, fmt.Errorf("scrape config %v has no kubernetes_sd_configs", sc["job_name"])
		}
		delete(sc, "kubernetes_sd_configs")
		sc["file_sd_configs"] = []any{map[string]any{"files": []string{targetsFile}, "refresh_interval": "5s"}}
		auth, ok := sc["authorization"].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("scrape config %v has no authorization", sc["job_name"])
		}
		auth["credentials_file"] = tokenFile
	}
	cfg["global"] = map[string]any{"scrape_interval": "5s", "scrape_timeout": "4s", "evaluation_interval": "5s"}
	return yaml.Marshal(cfg)
}

// prometheus is a running Prometheus' HTTP API.
type prometheus struct{ base string }

// startPrometheus writes the adapted configuration into dir, checks it with promtool when
// there is one, and runs prometheus on a free loopback port (its data in dir) until the test
// ends.
func startPrometheus(t *testing.T, ctx context.Context, bin, dir, targetsFile, tokenFile string) *prometheus {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := os.ReadFile(filepath.Join(root, "manifests", "monitoring", "prometheus-scrape.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := adaptScrapeConfig(shipped, targetsFile, tokenFile)
	if err != nil {
		t.Fatalf("manifests/monitoring/prometheus-scrape.yaml: %v", err)
	}
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		if out, err := exec.CommandContext(ctx, promtool, "check", "config", cfgFile).CombinedOutput(); err != nil {
			t.Fatalf("promtool check config: %v\n%s\n%s", err, out, cfg)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logFile, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=info")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logFile.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logFile.Name()); err == nil {
				t.Logf("prometheus log:\n%s", tail(string(b), 4000))
			}
		}
	})
	p := &prometheus{base: "http://" + addr}
	if err := framework.WaitFor(ctx, time.Minute, "prometheus ready", func(ctx context.Context) (bool, error) {
		_, err := p.get(ctx, "/-/ready")
		return err == nil, err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("prometheus %s at %s, configuration %s", bin, p.base, cfgFile)
	return p
}

func (p *prometheus) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d: %.300s", path, resp.StatusCode, b)
	}
	return b, nil
}

// query runs an instant query and returns its vector's samples.
func (p *prometheus) query(ctx context.Context, q string) ([]float64, error) {
	b, err := p.get(ctx, "/api/v1/query?query="+neturl.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	if r.Status != "success" || r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: %s %s (%s)", q, r.Status, r.Error, r.Data.ResultType)
	}
	var out []float64
	for _, s := range r.Data.Result {
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %v: %w", q, s.Value[1], err)
		}
		out = append(out, v)
	}
	return out, nil
}

// count is the number of series q returns.
func (p *prometheus) count(ctx context.Context, q string) (int, error) {
	v, err := p.query(ctx, q)
	return len(v), err
}

// scalar is the one sample of q (an aggregation).
func (p *prometheus) scalar(ctx context.Context, q string) (float64, error) {
	v, err := p.query(ctx, q)
	if err != nil {
		return 0, err
	}
	if len(v) != 1 {
		return 0, fmt.Errorf("query %s: %d samples, want 1", q, len(v))
	}
	return v[0], nil
}

// targetErrors summarises the targets that are not up (for failure messages).
func (p *prometheus) targetErrors(ctx context.Context) string {
	b, err := p.get(ctx, "/api/v1/targets?state=active")
	if err != nil {
		return err.Error()
	}
	var r struct {
		Data struct {
			ActiveTargets []struct {
				ScrapeURL string            `json:"scrapeUrl"`
				Health    string            `json:"health"`
				LastError string            `json:"lastError"`
				Labels    map[string]string `json:"labels"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return err.Error()
	}
	var out []string
	for _, tg := range r.Data.ActiveTargets {
		if tg.Health != "up" {
			out = append(out, fmt.Sprintf("%s %s (%s): %s", tg.Labels["component"], tg.ScrapeURL, tg.Health, tg.LastError))
		}
	}
	return fmt.Sprintf("%d active, not up: [%s]", len(r.Data.ActiveTargets), strings.Join(out, "; "))
}

// withComponent adds component="name" to a series selector.
func withComponent(series, name string) string {
	sel := fmt.Sprintf("component=%q", name)
	if i := strings.Index(series, "{"); i >= 0 {
		return series[:i+1] + sel + "," + series[i+1:]
	}
	return series + "{" + sel + "}"
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
