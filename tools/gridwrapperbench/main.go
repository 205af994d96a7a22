// Command gridwrapperbench measures application-grid-wrapper against kube-proxy talking to
// the API server directly, in one run, on a real kube-apiserver (internal/testenv) with two
// real kube-proxies (iptables mode), each in a network namespace of its own:
//
//  1. latency: an endpoint change → its DNAT rule present in the node's iptables, through
//     the wrapper and direct (p50, p99, ratio) over -changes changes;
//  2. scale: the wrapper's CPU and memory with -services Services × -endpoints endpoints;
//  3. per-event cost: the wrapper's CPU per EndpointSlice event with -services/10 and with
//     -services Services (flat = the cost does not grow with the Service count);
//  4. selection changes (a Service's topologyKeys annotation, a node's labels; no
//     EndpointSlice changes): change → kube-proxy's rule added or removed, through the
//     wrapper refreshing kube-proxy's open watch (--selection-change=refresh, the default)
//     and, in the same run, through a second wrapper that ends the watch with 410 so
//     kube-proxy relists (--selection-change=relist), first change and repeated changes.
//
// Root only (network namespaces, iptables). Not part of make test:
//
//	tools/run.sh gridwrapperbench [-changes=200] [-services=1000] [-endpoints=10] \
//	    [-selection-changes=200] [-relist-changes=12] [-phases=latency,selection,scale]
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/staticip/staticip/internal/serving"
	"github.com/staticip/staticip/internal/testenv"
	scalebench "github.com/staticip/staticip/tools/scalebench/bench"
)

const ns = "bench"

func main() {
	changes := flag.Int("changes", 200, "endpoint changes timed in the latency phase")
	services := flag.Int("services", 1000, "Services in the scale phase")
	endpoints := flag.Int("endpoints", 10, "endpoints per Service in the scale phase")
	eventChanges := flag.Int("event-changes", 200, "endpoint changes per size in the per-event phase")
	selectionChanges := flag.Int("selection-changes", 200, "selection changes timed through the refreshing wrapper")
	relistChanges := flag.Int("relist-changes", 12, "of those, how many are also timed through the relisting wrapper (each relist after another within 2 min waits for client-go's backoff, doubling up to 30 s)")
	phases := flag.String("phases", "latency,selection,scale", "phases to run")
	flag.Parse()
	want := map[string]bool{}
	for _, ph := range strings.Split(*phases, ",") {
		want[ph] = true
	}
	if err := run(want, *changes, *services, *endpoints, *eventChanges, *selectionChanges, *relistChanges); err != nil {
		fmt.Fprintln(os.Stderr, "gridwrapperbench:", err)
		os.Exit(1)
	}
}

type bench struct {
	ctx     context.Context
	client  kubernetes.Interface
	dir     string
	binDir  string
	cleanup []func()
	wrapper *exec.Cmd
	metrics string
	scraper *http.Client // reads the wrapper's /metrics as the admin
}

func run(phases map[string]bool, changes, services, endpoints, eventChanges, selectionChanges, relistChanges int) (err error) {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (network namespaces, iptables)")
	}
	env, err := testenv.Start()
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	binDir, _ := testenv.BinDir()
	dir, err := os.MkdirTemp("", "gridwrapperbench-")
	if err != nil {
		return err
	}
	b := &bench{ctx: context.Background(), client: kubernetes.NewForConfigOrDie(env.Config), dir: dir, binDir: binDir}
	defer func() {
		for i := len(b.cleanup) - 1; i >= 0; i-- {
			b.cleanup[i]()
		}
		if err != nil {
			// The components' last words, to see why.
			logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
			for _, l := range logs {
				raw, _ := os.ReadFile(l)
				lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
				if len(lines) > 15 {
					lines = lines[len(lines)-15:]
				}
				fmt.Fprintf(os.Stderr, "== %s\n%s\n", filepath.Base(l), strings.Join(lines, "\n"))
			}
		}
		os.RemoveAll(dir)
	}()
	if err := b.setup(env.Config); err != nil {
		return err
	}

	if phases["latency"] {
		if err := b.latency(changes); err != nil {
			return err
		}
	}
	if phases["selection"] {
		if err := b.selection(selectionChanges, relistChanges); err != nil {
			return err
		}
	}
	if phases["scale"] {
		return b.scale(services, endpoints, eventChanges)
	}
	return nil
}

// latency: endpoint changes on a small cluster state (iptables-save stays cheap to poll).
func (b *bench) latency(changes int) error {
	fmt.Printf("latency: %d endpoint changes of a [\"zone\",\"*\"] Service, both kube-proxies polled\n", changes)
	if err := b.service("lat", `["zone","*"]`, 1, 0); err != nil {
		return err
	}
	var viaWrapper, direct []time.Duration
	for i := 0; i < changes; i++ {
		ip := fmt.Sprintf("10.99.%d.%d", i/250, i%250+1)
		if err := b.setEndpoint("lat", ip); err != nil {
			return err
		}
		t0 := time.Now()
		w, d, err := b.waitBoth(ip, t0)
		if err != nil {
			return err
		}
		viaWrapper, direct = append(viaWrapper, w), append(direct, d)
	}
	pw50, pw99 := percentile(viaWrapper, 50), percentile(viaWrapper, 99)
	pd50, pd99 := percentile(direct, 50), percentile(direct, 99)
	fmt.Printf("  through wrapper: p50 %v  p99 %v\n  direct:          p50 %v  p99 %v\n  ratio wrapper/direct: p50 %.2f  p99 %.2f\n",
		pw50, pw99, pd50, pd99, float64(pw50)/float64(pd50), float64(pw99)/float64(pd99))
	return nil
}

// selection: changes outside the EndpointSlice stream. Service "sel" has one endpoint on
// bench-a (zone-0, kube-proxy's node) and one on bench-b; the changes cycle through
// annotation ["zone"] -> ["*"] -> ["zone"], bench-b relabelled zone-1 -> zone-0 -> zone-1,
// so bench-b's endpoint is in kube-proxy's rules after every other change.
func (b *bench) selection(changes, relistChanges int) error {
	fmt.Printf("selection: %d changes (annotation and node label, alternating), refresh wrapper polled; the first %d also through the relist wrapper\n", changes, relistChanges)
	if err := b.service("sel", `["zone"]`, 1, 1); err != nil {
		return err
	}
	es, err := b.client.DiscoveryV1().EndpointSlices(ns).Get(b.ctx, "sel", metav1.GetOptions{})
	if err != nil {
		return err
	}
	own, other := es.Endpoints[0].Addresses[0], es.Endpoints[1].Addresses[0]
	// Start from a settled state: both kube-proxies synced (bench-a's endpoint in their
	// rules), bench-b's endpoint absent.
	if _, err := b.waitRule(own, true, time.Now(), "gwbw", "gwbr"); err != nil {
		return err
	}
	if _, err := b.waitRule(other, false, time.Now(), "gwbw", "gwbr"); err != nil {
		return err
	}
	var refresh, relist []time.Duration
	for i := 0; i < changes; i++ {
		var patch []byte
		var target string
		switch i % 4 {
		case 0:
			patch, target = []byte(`{"metadata":{"annotations":{"topologyKeys":"[\"*\"]"}}}`), "service"
		case 1:
			patch, target = []byte(`{"metadata":{"annotations":{"topologyKeys":"[\"zone\"]"}}}`), "service"
		case 2:
			patch, target = []byte(`{"metadata":{"labels":{"zone":"zone-0"}}}`), "node"
		case 3:
			patch, target = []byte(`{"metadata":{"labels":{"zone":"zone-1"}}}`), "node"
		}
		present := i%2 == 0
		t0 := time.Now()
		if target == "service" {
			_, err = b.client.CoreV1().Services(ns).Patch(b.ctx, "sel", types.MergePatchType, patch, metav1.PatchOptions{})
		} else {
			_, err = b.client.CoreV1().Nodes().Patch(b.ctx, "bench-b", types.MergePatchType, patch, metav1.PatchOptions{})
		}
		if err != nil {
			return err
		}
		netns := []string{"gwbw"}
		if i < relistChanges {
			netns = append(netns, "gwbr")
		}
		d, err := b.waitRule(other, present, t0, netns...)
		if err != nil {
			return err
		}
		refresh = append(refresh, d[0])
		if len(d) > 1 {
			relist = append(relist, d[1])
		}
	}
	report := func(name string, ds []time.Duration) {
		if len(ds) < 2 {
			return
		}
		fmt.Printf("  %-8s first change %v; repeated changes (%d): p50 %v  p99 %v  max %v\n", name, ds[0].Round(time.Millisecond), len(ds)-1,
			percentile(ds[1:], 50), percentile(ds[1:], 99), percentile(ds[1:], 100))
	}
	report("refresh", refresh)
	report("relist", relist)
	if len(relist) > 1 {
		fmt.Printf("  the same %d changes: refresh p50 %v  p99 %v; relist p50 %v  p99 %v; ratio relist/refresh p50 %.1f\n", len(relist),
			percentile(refresh[:len(relist)], 50), percentile(refresh[:len(relist)], 99), percentile(relist, 50), percentile(relist, 99),
			float64(percentile(relist, 50))/float64(percentile(refresh[:len(relist)], 50)))
	}
	return nil
}

// waitRule polls the netns' iptables until the DNAT to ip is present (or absent) in each,
// returning the time from t0 per netns.
func (b *bench) waitRule(ip string, present bool, t0 time.Time, netns ...string) ([]time.Duration, error) {
	type res struct {
		d   time.Duration
		err error
	}
	needle := []byte("--to-destination " + ip + ":8080")
	chans := make([]chan res, len(netns))
	for i, n := range netns {
		chans[i] = make(chan res, 1)
		go func(n string, out chan<- res) {
			for time.Since(t0) < 120*time.Second {
				raw, err := exec.Command("ip", "netns", "exec", n, "iptables-save", "-t", "nat").Output()
				if err != nil {
					out <- res{err: err}
					return
				}
				if bytes.Contains(raw, needle) == present {
					out <- res{d: time.Since(t0)}
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
			out <- res{err: fmt.Errorf("%s: rule for %s present=%v not reached after 120s", n, ip, !present)}
		}(n, chans[i])
	}
	out := make([]time.Duration, len(netns))
	var firstErr error
	for i := range chans {
		r := <-chans[i]
		if r.err != nil && firstErr == nil {
			firstErr = r.err
		}
		out[i] = r.d
	}
	return out, firstErr
}

// scale: per-event cost at services/10 and at services, then the idle cost.
func (b *bench) scale(services, endpoints, eventChanges int) error {
	// 3 (small) then 2 + 3 (large): per-event cost at services/10 and at services.
	small := services / 10
	var perEvent []float64
	for _, size := range []int{small, services} {
		if err := b.grow(size, endpoints); err != nil {
			return err
		}
		// Let both kube-proxies and the wrapper digest the growth.
		time.Sleep(10 * time.Second)
		cpu0, err := procCPU(b.wrapper.Process.Pid)
		if err != nil {
			return err
		}
		hs0, hc0 := b.histogram()
		start := time.Now()
		for i := 0; i < eventChanges; i++ {
			if err := b.setEndpoint("svc-0", fmt.Sprintf("10.98.%d.%d", i/250, i%250+1)); err != nil {
				return err
			}
		}
		time.Sleep(3 * time.Second)
		cpu1, _ := procCPU(b.wrapper.Process.Pid)
		hs1, hc1 := b.histogram()
		rss, _ := procRSS(b.wrapper.Process.Pid)
		evCPU := (cpu1 - cpu0).Seconds() / float64(eventChanges)
		perEvent = append(perEvent, evCPU)
		filterMean := 0.0
		if hc1 > hc0 {
			filterMean = (hs1 - hs0) / (hc1 - hc0)
		}
		fmt.Printf("size %d Services x %d endpoints: wrapper RSS %.1f MiB; %d changes in %v: wrapper CPU %.3f ms/event, filter %.1f µs/event (%d events filtered)\n",
			size, endpoints, float64(rss)/(1<<20), eventChanges, time.Since(start).Round(time.Millisecond), evCPU*1e3, filterMean*1e6, int(hc1-hc0))
	}
	fmt.Printf("per-event CPU ratio %d vs %d Services: %.2f\n", services, small, perEvent[1]/perEvent[0])

	// 2. Idle cost at full size.
	cpu0, _ := procCPU(b.wrapper.Process.Pid)
	time.Sleep(30 * time.Second)
	cpu1, _ := procCPU(b.wrapper.Process.Pid)
	rss, _ := procRSS(b.wrapper.Process.Pid)
	fmt.Printf("idle at %d Services / %d endpoints: wrapper CPU %.2f%% of a core over 30 s, RSS %.1f MiB\n",
		services, services*endpoints, 100*(cpu1-cpu0).Seconds()/30, float64(rss)/(1<<20))
	return nil
}

// setup: namespace, two Nodes (zone-0, zone-1), two netns each with a kube-proxy (one
// through the wrapper, one direct through a plain TCP relay to the API server), the
// wrapper as its own process (its CPU and memory are read from /proc).
func (b *bench) setup(cfg *rest.Config) error {
	if _, err := b.client.CoreV1().Namespaces().Create(b.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for _, n := range []struct{ name, zone string }{{"bench-a", "zone-0"}, {"bench-b", "zone-1"}} {
		node, err := b.client.CoreV1().Nodes().Create(b.ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: map[string]string{"zone": n.zone}}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.1"}}
		if _, err := b.client.CoreV1().Nodes().UpdateStatus(b.ctx, node, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	// testenv's Service range is a /24: a second ServiceCIDR makes room for the scale phase.
	if _, err := b.client.NetworkingV1().ServiceCIDRs().Create(b.ctx, &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "gridwrapperbench"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.180.0.0/16"}}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	adminKubeconfig := filepath.Join(b.dir, "admin.kubeconfig")
	if err := writeKubeconfig(adminKubeconfig, cfg, cfg.Host, ""); err != nil {
		return err
	}
	wHost, err := b.netns("gwbw", "169.254.201.1", "169.254.201.2")
	if err != nil {
		return err
	}
	dHost, err := b.netns("gwbd", "169.254.201.5", "169.254.201.6")
	if err != nil {
		return err
	}
	rHost, err := b.netns("gwbr", "169.254.201.9", "169.254.201.10")
	if err != nil {
		return err
	}
	// The wrapper (measured), and a second one that relists on selection changes (the
	// selection phase's peer).
	metricsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	b.metrics = metricsLn.Addr().String()
	metricsLn.Close()
	// /metrics over HTTPS (delegated authn/authz with the admin's kubeconfig); the bench
	// scrapes as the admin.
	if b.scraper, err = serving.Client(cfg); err != nil {
		return err
	}
	if b.wrapper, err = b.startWrapper("wrapper", adminKubeconfig, wHost, "--metrics-bind-address="+b.metrics, "--health-bind-address=0"); err != nil {
		return err
	}
	if _, err := b.startWrapper("wrapper-relist", adminKubeconfig, rHost, "--metrics-bind-address=0", "--health-bind-address=0", "--selection-change=relist"); err != nil {
		return err
	}
	// The relay for the direct kube-proxy: bytes only, TLS end to end.
	hostURL, err := url.Parse(cfg.Host)
	if err != nil {
		return err
	}
	upstream := hostURL.Host
	relay, err := net.Listen("tcp", dHost+":6443")
	if err != nil {
		return err
	}
	b.cleanup = append(b.cleanup, func() { relay.Close() })
	go func() {
		for {
			c, err := relay.Accept()
			if err != nil {
				return
			}
			go func() {
				u, err := net.Dial("tcp", upstream)
				if err != nil {
					c.Close()
					return
				}
				go func() { _, _ = io.Copy(u, c); u.Close() }()
				_, _ = io.Copy(c, u)
				c.Close()
			}()
		}
	}()
	directKubeconfig := filepath.Join(b.dir, "direct.kubeconfig")
	if err := writeKubeconfig(directKubeconfig, cfg, "https://"+dHost+":6443", "localhost"); err != nil {
		return err
	}
	for _, w := range []struct{ netns, host string }{{"gwbw", wHost}, {"gwbr", rHost}} {
		kubeconfig := filepath.Join(b.dir, w.netns+".kubeconfig")
		if err := os.WriteFile(kubeconfig, []byte(fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: w, cluster: {server: \"http://%s:10266\"}}]\ncontexts: [{name: d, context: {cluster: w, user: u}}]\ncurrent-context: d\nusers: [{name: u, user: {}}]\n", w.host)), 0o600); err != nil {
			return err
		}
		if err := b.kubeProxy(w.netns, kubeconfig); err != nil {
			return err
		}
	}
	return b.kubeProxy("gwbd", directKubeconfig)
}

// startWrapper runs application-grid-wrapper as a process of its own for node bench-a,
// listening on host:10266.
func (b *bench) startWrapper(name, kubeconfig, host string, args ...string) (*exec.Cmd, error) {
	cmd := exec.Command(filepath.Join(b.binDir, "application-grid-wrapper"), append([]string{"--kubeconfig=" + kubeconfig, "--node-name=bench-a",
		"--listen-address=" + host + ":10266", "--kube-api-qps=1000", "--kube-api-burst=2000"}, args...)...)
	logW, _ := os.Create(filepath.Join(b.dir, name+".log"))
	cmd.Stdout, cmd.Stderr = logW, logW
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("application-grid-wrapper (make build): %w", err)
	}
	b.cleanup = append(b.cleanup, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, nil
}

func writeKubeconfig(path string, cfg *rest.Config, server, serverName string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: cfg.CAData, TLSServerName: serverName}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	return clientcmd.WriteToFile(*kc, path)
}

func (b *bench) netns(name, hostIP, nsIP string) (string, error) {
	host, peer := name+"h", name+"n"
	cmds := [][]string{
		{"ip", "netns", "add", name},
		{"ip", "link", "add", host, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", peer, "netns", name},
		{"ip", "addr", "add", hostIP + "/30", "dev", host},
		{"ip", "link", "set", host, "up"},
		{"ip", "-n", name, "addr", "add", nsIP + "/30", "dev", peer},
		{"ip", "-n", name, "link", "set", peer, "up"},
		{"ip", "-n", name, "link", "set", "lo", "up"},
	}
	b.cleanup = append(b.cleanup, func() {
		_ = exec.Command("ip", "netns", "delete", name).Run()
		_ = exec.Command("ip", "link", "delete", host).Run()
	})
	for _, c := range cmds {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("%s: %v: %s", strings.Join(c, " "), err, out)
		}
	}
	return hostIP, nil
}

// kubeProxy runs kube-proxy (iptables) in netns. Flags, not a config file: with --config
// kube-proxy watches the file with inotify, and a shared machine can run out of inotify
// instances (kube-proxy then exits with "too many open files").
func (b *bench) kubeProxy(netns, kubeconfig string) error {
	cmd := exec.Command("nsenter", "--net=/var/run/netns/"+netns, "--", filepath.Join(b.binDir, "kube-proxy"),
		"--kubeconfig="+kubeconfig, "--kube-api-qps=1000", "--kube-api-burst=2000", "--proxy-mode=iptables",
		"--hostname-override=bench-a", "--healthz-bind-address=127.0.0.1:10256", "--metrics-bind-address=127.0.0.1:10249",
		"--cluster-cidr=10.244.0.0/16", "--iptables-min-sync-period=10ms", "--conntrack-max-per-core=0", "--conntrack-min=0",
		"--conntrack-tcp-timeout-established=0s", "--conntrack-tcp-timeout-close-wait=0s")
	log, _ := os.Create(filepath.Join(b.dir, netns+"-kube-proxy.log"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return err
	}
	b.cleanup = append(b.cleanup, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return nil
}

// service creates a Service and one slice with n endpoints on bench-a (zone-0) and m on
// bench-b (zone-1).
func (b *bench) service(name, keys string, n, m int) error {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	if keys != "" {
		svc.Annotations = map[string]string{"topologyKeys": keys}
	}
	if _, err := b.client.CoreV1().Services(ns).Create(b.ctx, svc, metav1.CreateOptions{}); err != nil {
		return err
	}
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "gridwrapperbench"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	h := len(name) * 7
	for i := 0; i < n+m; i++ {
		node := "bench-a"
		if i >= n {
			node = "bench-b"
		}
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.%d.%d.%d", 100+h%50, (h+i)%250, i%250+1)},
			NodeName: ptr.To(node), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	_, err := b.client.DiscoveryV1().EndpointSlices(ns).Create(b.ctx, es, metav1.CreateOptions{})
	return err
}

// grow creates Services svc-<i> up to total, half with topologyKeys, endpoints split
// between the zones.
func (b *bench) grow(total, endpoints int) error {
	existing, err := b.client.CoreV1().Services(ns).List(b.ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	have := 0
	for _, s := range existing.Items {
		if strings.HasPrefix(s.Name, "svc-") {
			have++
		}
	}
	for i := have; i < total; i++ {
		keys := ""
		if i%2 == 0 {
			keys = `["zone"]`
		}
		if err := b.service("svc-"+strconv.Itoa(i), keys, endpoints/2, endpoints-endpoints/2); err != nil {
			return err
		}
	}
	return nil
}

// setEndpoint makes the first endpoint of a Service's slice ip (on bench-a).
func (b *bench) setEndpoint(name, ip string) error {
	es, err := b.client.DiscoveryV1().EndpointSlices(ns).Get(b.ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	es.Endpoints[0].Addresses = []string{ip}
	_, err = b.client.DiscoveryV1().EndpointSlices(ns).Update(b.ctx, es, metav1.UpdateOptions{})
	return err
}

// waitBoth polls both netns' iptables until the DNAT to ip is there.
func (b *bench) waitBoth(ip string, t0 time.Time) (viaWrapper, direct time.Duration, err error) {
	type res struct {
		d   time.Duration
		err error
	}
	poll := func(netns string, out chan<- res) {
		needle := []byte("--to-destination " + ip + ":8080")
		for time.Since(t0) < 60*time.Second {
			b, err := exec.Command("ip", "netns", "exec", netns, "iptables-save", "-t", "nat").Output()
			if err != nil {
				out <- res{err: err}
				return
			}
			if bytes.Contains(b, needle) {
				out <- res{d: time.Since(t0)}
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
		out <- res{err: fmt.Errorf("%s: no rule for %s after 60s", netns, ip)}
	}
	wc, dc := make(chan res, 1), make(chan res, 1)
	go poll("gwbw", wc)
	go poll("gwbd", dc)
	w, d := <-wc, <-dc
	if w.err != nil {
		return 0, 0, w.err
	}
	if d.err != nil {
		return 0, 0, d.err
	}
	return w.d, d.d, nil
}

func (b *bench) histogram() (sum, count float64) {
	resp, err := b.scraper.Get("https://" + b.metrics + "/metrics")
	if err != nil {
		return 0, 0
	}
	out, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, `staticip_application_grid_wrapper_filter_duration_seconds_sum{kind="watch_event"}`) {
			sum, _ = strconv.ParseFloat(strings.Fields(line)[1], 64)
		}
		if strings.HasPrefix(line, `staticip_application_grid_wrapper_filter_duration_seconds_count{kind="watch_event"}`) {
			count, _ = strconv.ParseFloat(strings.Fields(line)[1], 64)
		}
	}
	return sum, count
}

func percentile(ds []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[i].Round(time.Millisecond)
}

// procCPU is a process's user+system CPU time (tools/scalebench's /proc reader).
func procCPU(pid int) (time.Duration, error) {
	u, err := scalebench.ReadUsage(pid)
	return u.CPU, err
}

// procRSS is a process's resident memory now.
func procRSS(pid int) (int64, error) {
	u, err := scalebench.ReadUsage(pid)
	return u.RSS, err
}
