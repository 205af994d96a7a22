// Package integration runs the real kube-proxy (iptables mode, in a network namespace
// the test creates) against application-grid-wrapper against a real kube-apiserver.
package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/staticip/staticip/edge/pkg/gridwrapper"
	"github.com/staticip/staticip/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const wrapperSA = "system:serviceaccount:kube-system:application-grid-wrapper"

// TestKubeProxyThroughWrapper: kube-proxy syncs through the wrapper with WatchList on and
// off, in protobuf and in JSON; its iptables rules for a topology Service hold only the
// selected endpoints; node relabels and annotation changes reach the rules (polled, the
// time it took is logged, never asserted); the wrapper refuses what kube-proxy does not need.
func TestKubeProxyThroughWrapper(t *testing.T) {
	env := testenv.Get(t)
	if os.Geteuid() != 0 {
		t.Skip("SKIP: needs root (network namespace, iptables)")
	}
	binDir, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubeProxy := filepath.Join(binDir, "kube-proxy")
	if _, err := os.Stat(kubeProxy); err != nil {
		t.Fatalf("kube-proxy binary (make k8s-bins): %v", err)
	}
	for _, tool := range []string{"ip", "iptables-save", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not installed (tools/install-deps.sh): %v", tool, err)
		}
	}
	ctx := testenv.Context(t, 10*time.Minute)
	admin := kubernetes.NewForConfigOrDie(env.Config)
	wcfg := wrapperConfig(ctx, t, admin, env.Config)

	for _, mode := range []struct {
		name        string
		watchList   bool
		contentType string
	}{
		{"watchlist-protobuf", true, "application/vnd.kubernetes.protobuf"},
		{"watchlist-json", true, "application/json"},
		{"list-protobuf", false, "application/vnd.kubernetes.protobuf"},
		{"list-json", false, "application/json"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			runMode(ctx, t, admin, wcfg, kubeProxy, mode.watchList, mode.contentType)
		})
	}
}

func runMode(ctx context.Context, t *testing.T, admin kubernetes.Interface, wcfg *rest.Config, kubeProxyBin string, watchList bool, contentType string) {
	suffix := fmt.Sprintf("%04x", rand.IntN(1<<16))
	nodeA, nodeB, nodeC := "gw-a-"+suffix, "gw-b-"+suffix, "gw-c-"+suffix
	createZonedNodes(ctx, t, admin, map[string]string{nodeA: "zone-0", nodeB: "zone-0", nodeC: "zone-1"})
	ns := "gw-" + suffix
	createNamespace(ctx, t, admin, ns)
	// The same three endpoints (one per node) behind a topology Service and a plain one.
	endpoints := map[string]string{nodeA: "10.200.0.1", nodeB: "10.200.0.2", nodeC: "10.200.0.3"}
	createService(ctx, t, admin, ns, "topo", `["zone"]`, endpoints)
	createService(ctx, t, admin, ns, "plain", "", endpoints)

	// The wrapper, on the host side of a veth into the node's network namespace (the test
	// process cannot sit in the netns; in a cluster it listens on the node's loopback).
	netns, hostIP := makeNetns(t, suffix)
	rec := &recorder{}
	proxyURL := startWrapper(ctx, t, wcfg, nodeA, net.JoinHostPort(hostIP, "0"), rec)

	// Refused: anything kube-proxy does not read, and other nodes.
	for _, path := range []string{"/api/v1/secrets", "/api/v1/namespaces/kube-system/pods", "/api/v1/nodes/" + nodeB,
		"/api/v1/nodes", "/api/v1/nodes?fieldSelector=metadata.name%3D" + nodeB, "/apis/discovery.k8s.io/v1/namespaces/" + ns + "/endpointslices"} {
		resp, err := http.Get(proxyURL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("GET %s through the wrapper: %d, want 403", path, resp.StatusCode)
		}
	}
	resp, err := http.Post(proxyURL+"/api/v1/namespaces/"+ns+"/configmaps", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST configmaps through the wrapper: %d, want 403", resp.StatusCode)
	}

	rec.mu.Lock()
	rec.kubeProxy = true
	rec.mu.Unlock()
	startKubeProxy(t, kubeProxyBin, netns, proxyURL, nodeA, watchList, contentType)

	want := func(step, svc string, ips ...string) {
		t.Helper()
		start := time.Now()
		var got []string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
			got = destinations(t, netns, ns, svc)
			return slices.Equal(got, ips), nil
		})
		if err != nil {
			t.Fatalf("%s: iptables DNAT destinations of %s/%s = %v, want %v", step, ns, svc, got, ips)
		}
		t.Logf("%s: %s/%s -> %v after %v", step, ns, svc, ips, time.Since(start).Round(time.Millisecond))
	}
	want("initial sync", "plain", "10.200.0.1:8080", "10.200.0.2:8080", "10.200.0.3:8080")
	want("initial sync", "topo", "10.200.0.1:8080", "10.200.0.2:8080")

	// From here on kube-proxy must get every selection change on the EndpointSlice watch it
	// has open: no 410, no relist (a relist costs it the reflector's backoff, 0.8 s doubling
	// to 30 s while changes follow each other). Its requests are counted, not timed.
	synced := rec.sliceRequests()

	relabel(ctx, t, admin, nodeC, "zone-0")
	want("endpoint node relabelled zone-1 -> zone-0", "topo", "10.200.0.1:8080", "10.200.0.2:8080", "10.200.0.3:8080")
	relabel(ctx, t, admin, nodeA, "zone-1")
	want("own node relabelled zone-0 -> zone-1", "topo", "10.200.0.1:8080")
	annotate(ctx, t, admin, ns, "topo", `["rack","*"]`)
	want(`annotation -> ["rack","*"] (own node has no rack)`, "topo", "10.200.0.1:8080", "10.200.0.2:8080", "10.200.0.3:8080")
	want("unchanged", "plain", "10.200.0.1:8080", "10.200.0.2:8080", "10.200.0.3:8080")
	// Repeated changes in a row, each of them only outside the EndpointSlice stream.
	for i := range 3 {
		annotate(ctx, t, admin, ns, "topo", `["zone"]`)
		want(fmt.Sprintf(`repeat %d: annotation -> ["zone"]`, i), "topo", "10.200.0.1:8080")
		relabel(ctx, t, admin, nodeB, "zone-1")
		want(fmt.Sprintf("repeat %d: endpoint node relabelled zone-0 -> zone-1", i), "topo", "10.200.0.1:8080", "10.200.0.2:8080")
		relabel(ctx, t, admin, nodeB, "zone-0")
		want(fmt.Sprintf("repeat %d: endpoint node relabelled zone-1 -> zone-0", i), "topo", "10.200.0.1:8080")
		annotate(ctx, t, admin, ns, "topo", `["rack","*"]`)
		want(fmt.Sprintf(`repeat %d: annotation -> ["rack","*"]`, i), "topo", "10.200.0.1:8080", "10.200.0.2:8080", "10.200.0.3:8080")
	}
	if after := rec.sliceRequests(); len(after) != len(synced) {
		t.Errorf("kube-proxy relisted EndpointSlices after selection changes (the wrapper ended its watch): requests after its sync %v", after[len(synced):])
	}

	// How kube-proxy asked: WatchList (sendInitialEvents) or list+watch, and in which
	// encoding the wrapper decoded and re-encoded the EndpointSlices.
	rec.check(t, watchList, contentType)
}

// recorder notes the EndpointSlice requests the wrapper served.
type recorder struct {
	mu   sync.Mutex
	seen []string // "list|watch|watchlist <code> <content type>"
	// kubeProxy is set once kube-proxy runs: from then on every refused request is its own.
	kubeProxy bool
	refused   []string
}

func (r *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		cw := &captureWriter{ResponseWriter: w}
		if strings.HasSuffix(req.URL.Path, "/endpointslices") {
			q := req.URL.Query()
			kind := "list"
			if q.Get("watch") == "true" || q.Get("watch") == "1" {
				kind = "watch"
				if q.Get("sendInitialEvents") == "true" {
					kind = "watchlist"
				}
			}
			// Recorded when the response starts: a watch is counted while it is open.
			cw.onHeader = func(code int, contentType string) {
				r.mu.Lock()
				r.seen = append(r.seen, fmt.Sprintf("%s %d %s", kind, code, contentType))
				r.mu.Unlock()
			}
		}
		h.ServeHTTP(cw, req)
		if cw.code == 0 {
			cw.WriteHeader(http.StatusOK)
		}
		r.mu.Lock()
		if cw.onHeader == nil && r.kubeProxy && cw.code == http.StatusForbidden {
			r.refused = append(r.refused, req.Method+" "+req.URL.String())
		}
		r.mu.Unlock()
	})
}

// sliceRequests returns the EndpointSlice requests served so far.
func (r *recorder) sliceRequests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

func (r *recorder) check(t *testing.T, watchList bool, contentType string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	t.Logf("EndpointSlice requests served: %v", r.seen)
	if len(r.refused) > 0 {
		t.Errorf("the wrapper refused requests kube-proxy made: %v", r.refused)
	}
	var lists, watchLists int
	for _, s := range r.seen {
		f := strings.Fields(s)
		if f[1] != "200" {
			continue
		}
		if !strings.HasPrefix(f[2], contentType) {
			t.Errorf("EndpointSlice %s answered in %s, want %s", f[0], f[2], contentType)
		}
		switch f[0] {
		case "list":
			lists++
		case "watchlist":
			watchLists++
		}
	}
	if watchList && watchLists == 0 {
		t.Errorf("WatchListClient on: kube-proxy never watched with sendInitialEvents=true")
	}
	if !watchList && (watchLists != 0 || lists == 0) {
		t.Errorf("WatchListClient off: %d lists, %d WatchList watches; want lists only", lists, watchLists)
	}
}

type captureWriter struct {
	http.ResponseWriter
	code        int
	contentType string
	onHeader    func(code int, contentType string)
}

func (c *captureWriter) WriteHeader(code int) {
	c.code, c.contentType = code, c.Header().Get("Content-Type")
	if c.onHeader != nil {
		c.onHeader(c.code, c.contentType)
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *captureWriter) Write(b []byte) (int, error) {
	if c.code == 0 {
		c.WriteHeader(http.StatusOK)
	}
	return c.ResponseWriter.Write(b)
}

func (c *captureWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func startWrapper(ctx context.Context, t *testing.T, cfg *rest.Config, node, listen string, rec *recorder) string {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	m := gridwrapper.NewMetrics()
	icfg := rest.CopyConfig(cfg)
	icfg.ContentType = "application/vnd.kubernetes.protobuf"
	state, err := gridwrapper.NewState(kubernetes.NewForConfigOrDie(icfg), metadata.NewForConfigOrDie(cfg), node, m)
	if err != nil {
		t.Fatal(err)
	}
	state.Run(ctx)
	upstream, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	proxy := gridwrapper.NewProxy(upstream, transport, node, state, m)
	go proxy.RunSelectionChanges(ctx, state)
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: rec.wrap(proxy)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// makeNetns creates a network namespace joined to the host by a veth (169.254.X.1 on the
// host, .2 inside), removed with the test.
func makeNetns(t *testing.T, suffix string) (netns, hostIP string) {
	t.Helper()
	netns = "gwtest-" + suffix
	host, peer := "gwh"+suffix, "gwn"+suffix
	octet := 100 + rand.IntN(150)
	hostIP = fmt.Sprintf("169.254.%d.1", octet)
	nsIP := fmt.Sprintf("169.254.%d.2", octet)
	run(t, "ip", "netns", "add", netns)
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "delete", netns).Run()
		_ = exec.Command("ip", "link", "delete", host).Run()
	})
	run(t, "ip", "link", "add", host, "type", "veth", "peer", "name", peer)
	run(t, "ip", "link", "set", peer, "netns", netns)
	run(t, "ip", "addr", "add", hostIP+"/30", "dev", host)
	run(t, "ip", "link", "set", host, "up")
	run(t, "ip", "-n", netns, "addr", "add", nsIP+"/30", "dev", peer)
	run(t, "ip", "-n", netns, "link", "set", peer, "up")
	run(t, "ip", "-n", netns, "link", "set", "lo", "up")
	return netns, hostIP
}

func startKubeProxy(t *testing.T, bin, netns, server, node string, watchList bool, contentType string) {
	t.Helper()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: wrapper, cluster: {server: %q}}]
contexts: [{name: default, context: {cluster: wrapper, user: kube-proxy}}]
current-context: default
users: [{name: kube-proxy, user: {}}]
`, server)), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "kube-proxy.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	// Flags, not --config: with a config file kube-proxy watches it with inotify, and a
	// shared machine can run out of inotify instances ("too many open files").
	cmd := exec.Command("nsenter", "--net=/var/run/netns/"+netns, "--", bin, "--kubeconfig="+kubeconfig,
		"--kube-api-content-type="+contentType, "--proxy-mode=iptables", "--hostname-override="+node,
		"--healthz-bind-address=127.0.0.1:10256", "--metrics-bind-address=127.0.0.1:10249", "--cluster-cidr=10.244.0.0/16",
		fmt.Sprintf("--feature-gates=WatchListClient=%t", watchList), "--conntrack-max-per-core=0", "--conntrack-min=0",
		"--conntrack-tcp-timeout-established=0s", "--conntrack-tcp-timeout-close-wait=0s", "--v=2")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		logFile.Close()
		if t.Failed() || os.Getenv("GRIDWRAPPER_TEST_LOGS") != "" {
			b, _ := os.ReadFile(logPath)
			lines := strings.Split(string(b), "\n")
			if len(lines) > 60 {
				lines = lines[len(lines)-60:]
			}
			t.Logf("kube-proxy log (last lines):\n%s", strings.Join(lines, "\n"))
		}
	})
}

var dnatRE = regexp.MustCompile(`--to-destination (\S+)`)

// destinations reads the DNAT targets of a Service's endpoint chains from the netns.
func destinations(t *testing.T, netns, ns, svc string) []string {
	out, err := exec.Command("ip", "netns", "exec", netns, "iptables-save", "-t", "nat").Output()
	if err != nil {
		t.Fatalf("iptables-save in %s: %v", netns, err)
	}
	set := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "-A KUBE-SEP-") || !strings.Contains(line, `"`+ns+"/"+svc+":") {
			continue
		}
		if m := dnatRE.FindStringSubmatch(line); m != nil {
			set[m[1]] = true
		}
	}
	got := make([]string, 0, len(set))
	for d := range set {
		got = append(got, d)
	}
	sort.Strings(got)
	return got
}

func createService(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name, keys string, endpoints map[string]string) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	if keys != "" {
		svc.Annotations = map[string]string{"topologyKeys": keys}
	}
	if _, err := c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-1", Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "gridwrapper-test"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	nodes := make([]string, 0, len(endpoints))
	for n := range endpoints {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{endpoints[n]}, NodeName: ptr.To(n),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	if _, err := c.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createZonedNodes creates Nodes (name → "zone" label) with an InternalIP (kube-proxy waits
// up to 30 s for its Node to have an address; there is no kubelet here), deleted with the test.
func createZonedNodes(ctx context.Context, t *testing.T, c kubernetes.Interface, zones map[string]string) {
	t.Helper()
	for name, zone := range zones {
		created, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"zone": zone}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.1"}}
		if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// createNamespace creates a namespace deleted with the test.
func createNamespace(ctx context.Context, t *testing.T, c kubernetes.Interface, ns string) {
	t.Helper()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
}

func relabel(ctx context.Context, t *testing.T, c kubernetes.Interface, node, zone string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{"zone":%q}}}`, zone)
	if _, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func annotate(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, svc, keys string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"topologyKeys":%q}}}`, keys)
	if _, err := c.CoreV1().Services(ns).Patch(ctx, svc, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// wrapperConfig returns the wrapper's own identity: the ServiceAccount of manifests/edge,
// with its RBAC applied as shipped, so the tests also prove its ClusterRole is enough.
func wrapperConfig(ctx context.Context, t *testing.T, admin kubernetes.Interface, cfg *rest.Config) *rest.Config {
	t.Helper()
	applyRBAC(ctx, t, cfg)
	wcfg := rest.CopyConfig(cfg)
	wcfg.Impersonate = rest.ImpersonationConfig{UserName: wrapperSA,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}
	return wcfg
}

// applyRBAC applies manifests/edge/rbac.yaml as shipped.
func applyRBAC(ctx context.Context, t *testing.T, cfg *rest.Config) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.ApplyFiles(ctx, cfg, []string{filepath.Join(root, "manifests", "edge", "rbac.yaml")}); err != nil {
		t.Fatal(err)
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}
