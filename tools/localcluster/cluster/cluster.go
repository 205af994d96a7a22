package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/staticip/staticip/tools/images/imagebuilder"
)

// NetnsAnnotation on a Node names the network namespace the node lives in, so that
// tests can run commands "on the node" (nsenter --net=/run/netns/<name>).
const NetnsAnnotation = "localcluster.staticip.io/netns"

// record is what `up` leaves in the state directory; `up` compares it to decide whether
// it has nothing to do, and `status`/`down` read it.
type record struct {
	Nodes      int `json:"nodes"`
	SpareNodes int `json:"spareNodes,omitempty"`
	// FailoverWindow: staticip-controller-manager's --node-failover-window, if set.
	FailoverWindow string `json:"failoverWindow,omitempty"`
	CNI            string `json:"cni"`
	Scheduler      string `json:"scheduler"`
	Prefix         string `json:"prefix"`
	NodeSubnet     string `json:"nodeSubnet"`
	PodCIDR        string `json:"podCIDR,omitempty"`
	ServiceCIDR    string `json:"serviceCIDR,omitempty"`
	// OutsideSubnet: the network behind the datacenter router (router.go).
	OutsideSubnet string `json:"outsideSubnet,omitempty"`
	// KubeProxyDirect: kube-proxy without application-grid-wrapper.
	KubeProxyDirect bool `json:"kubeProxyDirect,omitempty"`
	// CentralDNS: one CoreDNS Deployment instead of the edge DNS (edge_dns.go).
	CentralDNS bool      `json:"centralDNS,omitempty"`
	Started    time.Time `json:"started"`
}

// shape is what must match for `up` on a running cluster to be a no-op.
func (l layout) shape() string {
	return fmt.Sprint(len(l.nodes), l.SpareNodes, l.FailoverWindow, l.CNI, l.Scheduler, l.Prefix, l.NodeSubnet, l.clusterCIDR, l.serviceCIDR, l.OutsideSubnet, l.KubeProxyDirect, l.CentralDNS)
}

// options are the Options of the recorded cluster: o's local settings (state and binary
// directories, logging) with the recorded shape.
func (r *record) options(o Options) Options {
	o.Nodes, o.CNI, o.Scheduler, o.Prefix, o.NodeSubnet = r.Nodes, r.CNI, r.Scheduler, r.Prefix, r.NodeSubnet
	o.SpareNodes, o.FailoverWindow = r.SpareNodes, r.FailoverWindow
	o.PodCIDR, o.ServiceCIDR, o.OutsideSubnet = r.PodCIDR, r.ServiceCIDR, r.OutsideSubnet
	o.KubeProxyDirect, o.CentralDNS = r.KubeProxyDirect, r.CentralDNS
	return o
}

func (l *layout) recordFile() string { return filepath.Join(l.StateDir, "cluster.json") }

func (l *layout) readRecord() (*record, error) {
	b, err := os.ReadFile(l.recordFile())
	if err != nil {
		return nil, err
	}
	var r record
	return &r, json.Unmarshal(b, &r)
}

// controlPlane and nodeDaemons name every daemon in start order.
func (l *layout) daemons() []daemon {
	ds := append(l.routerDaemons(), l.etcd(), l.apiserver(), l.controllerManager(), l.scheduler())
	for _, n := range l.nodes {
		ds = append(ds, l.containerd(n), l.kubelet(n), l.kubeProxy(n))
	}
	return ds
}

// Up brings the cluster up, or does nothing when the same cluster is already healthy.
// Anything left from an earlier run that is not a healthy cluster (a crash, kill -9, a
// failed up) is removed first.
func Up(ctx context.Context, o Options) error {
	if err := o.validate(); err != nil {
		return err
	}
	l := newLayout(o)
	start := time.Now()
	if rec, err := l.readRecord(); err == nil {
		// Health is judged against the cluster that is up, not the one asked for.
		running := newLayout(rec.options(o))
		if running.healthy(ctx) {
			if l.shape() != running.shape() {
				return fmt.Errorf("a cluster is already up in %s with %d nodes (+%d spare, failover window %q), --cni=%s, --scheduler=%s, --pod-cidr=%s, --service-cidr=%s, --kube-proxy-direct=%t; run `down` first to change it",
					o.StateDir, rec.Nodes, rec.SpareNodes, rec.FailoverWindow, running.CNI, running.Scheduler, running.PodCIDR, running.ServiceCIDR, running.KubeProxyDirect)
			}
			o.Logf("cluster already up (%d nodes, started %s); nothing to do", rec.Nodes, rec.Started.Format(time.RFC3339))
			return nil
		}
	}
	if err := l.checkPrerequisites(); err != nil {
		return err
	}
	if l.anythingLeft() {
		o.Logf("removing stale state of an earlier cluster")
		if err := l.teardown(); err != nil {
			return fmt.Errorf("cleaning stale state: %w", err)
		}
	}
	for _, d := range []string{l.pkiDir, l.logDir, l.pidDir, l.etcdDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := l.saveHostSysctls(); err != nil {
		return err
	}
	if err := l.saveHostDirs(); err != nil {
		return err
	}
	o.Logf("images: building missing or outdated tarballs in %s", o.ImageDir)
	images, err := l.ensureImages()
	if err != nil {
		return err
	}
	o.Logf("pki: CA and certificates in %s", l.pkiDir)
	if err := l.writePKI(); err != nil {
		return err
	}
	o.Logf("network: bridge %s (%s), netns %s and %d nodes", l.bridge, l.hostIP, l.cpNetns, len(l.nodes))
	if err := l.setupNetwork(); err != nil {
		return err
	}
	o.Logf("network: datacenter router %s (FRR bgpd+zebra, netns %s) and the outside %s (netns %s) behind it", l.router.ip, l.router.netns, l.router.outsideIP, l.router.outsideNetns)
	if err := l.startRouter(ctx); err != nil {
		return err
	}

	o.Logf("control plane: etcd, kube-apiserver on https://%s:%d", l.apiserverIP, apiserverPort)
	for _, d := range []daemon{l.etcd(), l.apiserver()} {
		if _, err := l.start(d); err != nil {
			return l.componentError(d.name, err)
		}
	}
	client, err := l.client()
	if err != nil {
		return err
	}
	if err := l.waitFor(ctx, 90*time.Second, []string{"etcd", "kube-apiserver"}, "kube-apiserver ready", func() (bool, error) {
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	}); err != nil {
		// Say which readiness checks failed and what both daemons last logged: a test that
		// fails here takes the cluster's log directory with it in its cleanup.
		return fmt.Errorf("%w\n%s", err, l.apiserverNotReady(client))
	}
	// staticip's CRDs are part of every local cluster (kubectl get sip/ipr/ests works); the
	// staticip scheduler also needs read access to them before it starts.
	if o.CRDDir != "" {
		o.Logf("control plane: staticip CRDs from %s", o.CRDDir)
		if _, err := l.kubectl("", "apply", "--server-side", "--force-conflicts", "-f", o.CRDDir); err != nil {
			return err
		}
		if _, err := l.kubectl("", "wait", "--for=condition=Established", "--timeout=60s", "-f", o.CRDDir); err != nil {
			return err
		}
		o.Logf("control plane: staticip admission policies and user roles from manifests/admission, manifests/user-roles")
		if err := l.installAdmission(); err != nil {
			return err
		}
		if cniProviders[l.CNI].ownsAddressSpace() {
			o.Logf("control plane: BGPConfiguration default (AS %d, hold %s) and BGPPeer %s (the router, %s, AS %d)", ClusterASN, RouterHoldTime, BGPPeerName, l.router.ip, RouterASN)
			if _, err := l.kubectl(l.bgpObjects(), "apply", "--server-side", "-f", "-"); err != nil {
				return err
			}
		}
	}
	if l.Scheduler == "staticip-scheduler" {
		if o.CRDDir == "" {
			return fmt.Errorf("--scheduler=staticip-scheduler needs the staticip CRDs: set --crd-dir")
		}
		if _, err := l.kubectl(staticipSchedulerRBAC, "apply", "-f", "-"); err != nil {
			return err
		}
		if err := os.WriteFile(l.schedulerConfigPath(), []byte(l.schedulerConfig()), 0o644); err != nil {
			return err
		}
	}
	o.Logf("control plane: kube-controller-manager, %s", l.Scheduler)
	for _, d := range []daemon{l.controllerManager(), l.scheduler()} {
		if _, err := l.start(d); err != nil {
			return l.componentError(d.name, err)
		}
	}
	cni := cniProviders[l.CNI]

	o.Logf("nodes: containerd x%d", len(l.nodes))
	for _, n := range l.nodes {
		if err := l.prepareNode(cni, n); err != nil {
			return fmt.Errorf("%s: %w", n.name, err)
		}
		if _, err := l.start(l.containerd(n)); err != nil {
			return l.componentError(n.name+"-containerd", err)
		}
	}
	var names []string
	for _, n := range l.nodes {
		names = append(names, n.name+"-containerd")
	}
	if err := l.waitFor(ctx, 60*time.Second, names, "containerd sockets", func() (bool, error) {
		for _, n := range l.nodes {
			if _, err := os.Stat(n.containerdSocket); err != nil {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return err
	}
	o.Logf("nodes: importing %d images into every containerd", len(images))
	if err := l.importImages(images); err != nil {
		return err
	}
	o.Logf("nodes: kubelet and kube-proxy x%d (kubelets one at a time: see startKubelet)", len(l.nodes))
	for _, n := range l.nodes {
		if err := l.startKubelet(ctx, n); err != nil {
			return err
		}
		if _, err := l.start(l.kubeProxy(n)); err != nil {
			return l.componentError(n.name+"-kube-proxy", err)
		}
	}
	all := l.daemonNames()
	if err := l.waitFor(ctx, 120*time.Second, all, "nodes registered", func() (bool, error) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		return err == nil && len(nodes.Items) == len(l.nodes), nil
	}); err != nil {
		return err
	}
	// Node CIDRs come from the layout (the CNI config already uses them); record them on
	// the Nodes as node-ipam would, for anything that reads spec.podCIDR.
	// With the staticip CNI the IPPool allocator gives the nodes their ranges instead.
	for _, n := range l.nodes {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}},"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`,
			NetnsAnnotation, n.netns, n.podCIDR, n.podCIDR)
		if cni.ownsAddressSpace() {
			patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, NetnsAnnotation, n.netns)
		}
		if _, err := client.CoreV1().Nodes().Patch(ctx, n.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("set %s podCIDR: %w", n.name, err)
		}
	}
	// Before anything that needs Service IPs: with the wrapper, kube-proxy has no rules
	// until the wrapper runs (the agent and CoreDNS reach the API server by ClusterIP).
	if err := l.installGridWrapper(); err != nil {
		return err
	}
	if err := cni.install(&l); err != nil {
		return fmt.Errorf("CNI %s: %w", l.CNI, err)
	}
	o.Logf("addons: staticip-controller-manager from manifests/controller-manager (2 replicas, Lease leader election)")
	if err := l.installControllerManager(); err != nil {
		return err
	}
	// After the controller-manager: the edge DNS is a DeploymentGrid (edge_dns.go).
	if err := l.installDNS(); err != nil {
		return err
	}
	if err := l.waitFor(ctx, 120*time.Second, all, "all nodes Ready", func() (bool, error) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == len(l.nodes), nil
	}); err != nil {
		return err
	}
	if cni.ownsAddressSpace() && o.CRDDir != "" {
		if err := l.waitRangesRouted(ctx); err != nil {
			return err
		}
		o.Logf("network: the router has a BGP route to every node's IPRange, via that node")
	}
	if err := l.waitFor(ctx, 120*time.Second, all, "CoreDNS available and default ServiceAccount created", func() (bool, error) {
		if ok, err := l.dnsReady(ctx, client); !ok || err != nil {
			return ok, err
		}
		_, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return err
	}
	rec := record{Nodes: o.Nodes, SpareNodes: o.SpareNodes, FailoverWindow: o.FailoverWindow, CNI: o.CNI, Scheduler: o.Scheduler, Prefix: o.Prefix, NodeSubnet: o.NodeSubnet,
		PodCIDR: o.PodCIDR, ServiceCIDR: o.ServiceCIDR, OutsideSubnet: o.OutsideSubnet, KubeProxyDirect: o.KubeProxyDirect, CentralDNS: o.CentralDNS, Started: time.Now()}
	b, _ := json.MarshalIndent(rec, "", "  ")
	if err := os.WriteFile(l.recordFile(), b, 0o644); err != nil {
		return err
	}
	o.Logf("cluster up in %s: %d nodes; export KUBECONFIG=%s", time.Since(start).Round(100*time.Millisecond), len(l.nodes), l.kubeconfig)
	return nil
}

// checkPrerequisites fails early, with the fix, when a binary the cluster runs is missing.
func (l *layout) checkPrerequisites() error {
	var missing []string
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", schedulers[l.Scheduler], "kubelet", "kube-proxy", "kubectl", "coredns"} {
		if _, err := os.Stat(l.bin(b)); err != nil {
			missing = append(missing, l.bin(b)+" (make k8s-bins)")
		}
	}
	for _, b := range []string{"staticip", "staticip-agent", "staticip-controller-manager", "application-grid-wrapper"} {
		if _, err := os.Stat(l.bin(b)); err != nil {
			missing = append(missing, l.bin(b)+" (make build)")
		}
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "nsenter", "ip", "iptables", "conntrack", "sysctl", "go", "vtysh", "/usr/lib/frr/bgpd", "/usr/lib/frr/zebra"} {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b+" (tools/install-deps.sh)")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing: %s", strings.Join(missing, ", "))
	}
	return nil
}

func (l *layout) daemonNames() []string {
	var names []string
	for _, d := range l.daemons() {
		names = append(names, d.name)
	}
	return names
}

// healthy: every daemon alive and the API server ready.
func (l *layout) healthy(ctx context.Context) bool {
	for _, name := range l.daemonNames() {
		if !l.running(name) {
			return false
		}
	}
	client, err := l.client()
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err == nil && string(body) == "ok"
}

func (l *layout) client() (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 10 * time.Second
	return kubernetes.NewForConfig(cfg)
}

// waitFor polls cond; while it waits, a watched daemon that exits fails the wait with that
// daemon's name and log.
func (l *layout) waitFor(ctx context.Context, timeout time.Duration, watch []string, what string, cond func() (bool, error)) error {
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		for _, name := range watch {
			if !l.running(name) {
				return false, l.componentError(name, errors.New("exited while waiting for "+what))
			}
		}
		return cond()
	})
	if ctx.Err() == nil && wait.Interrupted(err) { // timed out, not cancelled
		return fmt.Errorf("waiting for %s: timed out after %s (logs in %s)", what, timeout, l.logDir)
	}
	return err
}

// prepareNode writes one node's directories and configs.
func (l *layout) prepareNode(cni cniProvider, n nodeLayout) error {
	for _, d := range []string{n.containerdRoot, n.containerdState, n.cniBinDir, n.cniConfDir, n.kubeletRoot, n.podLogsDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := cni.installNode(l, n); err != nil {
		return fmt.Errorf("CNI %s: %w", l.CNI, err)
	}
	files := map[string]string{
		"containerd.toml": l.containerdConfig(n),
		"kubelet.yaml":    l.kubeletConfig(n),
		"kube-proxy.yaml": l.kubeProxyConfig(n),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(n.dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// ensureImages builds the default images whose tarballs are missing or older than their
// binaries, and returns every tarball in ImageDir (so images added there by `tools/images`
// are imported too).
func (l *layout) ensureImages() ([]string, error) {
	for _, im := range imagebuilder.Defaults(l.BinDir) {
		if !im.Stale(l.ImageDir) {
			continue
		}
		if _, err := imagebuilder.Build(l.RepoRoot, l.ImageDir, im); err != nil {
			return nil, fmt.Errorf("image %s: %w", im.Ref, err)
		}
	}
	return filepath.Glob(filepath.Join(l.ImageDir, "*.tar"))
}

func (l *layout) importImages(images []string) error {
	var wg sync.WaitGroup
	errs := make([]error, len(l.nodes))
	for i, n := range l.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, img := range images {
				if err := imagebuilder.Import(n.containerdSocket, img); err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Down removes everything the cluster made. It works from the state directory and the
// prefix alone, so it also cleans up after a crash.
func Down(o Options) error {
	if err := o.validate(); err != nil {
		return err
	}
	l := newLayout(recordedOptions(o))
	if !l.anythingLeft() {
		o.Logf("nothing to remove")
		return nil
	}
	start := time.Now()
	if err := l.teardown(); err != nil {
		return err
	}
	o.Logf("cluster removed in %s", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// recordedOptions are o with the shape (prefix, subnet, CIDRs, nodes) of the cluster recorded
// in o's state dir, when there is one: `down --state-dir=/var/lib/staticip-c2` of a cluster
// started with --prefix=c2 must tear down c2's network namespaces, links and the processes
// in them, not those of the default prefix — another cluster on this machine.
func recordedOptions(o Options) Options {
	l := newLayout(o)
	if rec, err := l.readRecord(); err == nil {
		return rec.options(o)
	}
	return o
}

// Status prints the daemons and nodes.
func Status(ctx context.Context, o Options) error {
	l := newLayout(o)
	rec, err := l.readRecord()
	if err != nil {
		if l.anythingLeft() {
			return fmt.Errorf("no healthy cluster in %s, but leftovers exist; run `down` (or `up`, which cleans them)", o.StateDir)
		}
		return fmt.Errorf("no cluster in %s", o.StateDir)
	}
	l = newLayout(rec.options(o))
	fmt.Printf("cluster in %s, started %s, %d nodes, cni=%s, scheduler=%s\n", o.StateDir, rec.Started.Format(time.RFC3339), rec.Nodes, rec.CNI, rec.Scheduler)
	for _, name := range l.daemonNames() {
		state := "running"
		if !l.running(name) {
			state = "NOT RUNNING"
		}
		fmt.Printf("  %-28s %-12s %s\n", name, state, l.logFile(name))
	}
	client, err := l.client()
	if err != nil {
		return err
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	for _, n := range nodes.Items {
		ready := "NotReady"
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready = "Ready"
			}
		}
		fmt.Printf("  node %-10s %-9s zone=%s podCIDR=%s\n", n.Name, ready, n.Labels["zone"], n.Spec.PodCIDR)
	}
	fmt.Printf("export KUBECONFIG=%s\n", l.kubeconfig)
	return nil
}

// Kubeconfig returns the admin kubeconfig path of a running cluster.
func Kubeconfig(o Options) (string, error) {
	l := newLayout(o)
	if _, err := os.Stat(l.kubeconfig); err != nil {
		return "", fmt.Errorf("no cluster in %s (run `up`)", o.StateDir)
	}
	return l.kubeconfig, nil
}

// apiserverNotReady describes a kube-apiserver that did not become ready: its failing
// /readyz checks and the last lines of its and etcd's logs.
func (l *layout) apiserverNotReady(client kubernetes.Interface) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").Param("verbose", "true").DoRaw(ctx)
	switch {
	case err != nil:
		fmt.Fprintf(&b, "  /readyz?verbose: %v\n", err)
	default:
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "[-]") {
				fmt.Fprintf(&b, "  /readyz failing: %s\n", line)
			}
		}
	}
	for _, name := range []string{"etcd", "kube-apiserver"} {
		fmt.Fprintf(&b, "  %s log %s, last lines:\n%s\n", name, l.logFile(name), indent(l.logTail(name, 15), "    "))
	}
	return strings.TrimRight(b.String(), "\n")
}
