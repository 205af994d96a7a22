package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	"github.com/staticip/staticip/apis/generated/informers/externalversions"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/cni/agent"
)

// The staticip CNI owns the address space: the IPPool allocator gives each node its IPRanges,
// and a failover or a joining node changes them while the cluster runs. Every node's agent
// routes the other nodes' ranges; the host and the control plane run no agent (on a real
// cluster the control-plane node runs one), so the daemon rangeRoutesDaemon, started by `up`,
// does it for them for the cluster's whole life. Without it, a range given out after `up`
// (node-3's new block after a failover) was reachable from every node but not from the API
// server: a CoreDNS that landed there never became ready ("kubernetes" plugin not synced), and
// the host's packets to it left by the default route (TestStatefulSetGridDNS, CI of 947001f).

// rangeRoutesDaemonName is the daemon that keeps the host's and the control plane's routes to
// the IPRanges.
const rangeRoutesDaemonName = "range-routes"

// wantRangeRoutes maps every IPRange to the IP of the node its traffic goes to (CIDR -> IP), by
// the agents' own rule (agent.RouteTargets): the node that holds addresses of it — its owner once
// that serves it, a node that still drains it (unassigned, or assigned to a node that waits)
// until it is drained. reports are the nodes' ObservedAnnotation values by node name. A range
// nobody holds and a node the layout does not know (an IPRange written for a node that never
// joined) get no route.
func wantRangeRoutes(ranges []*jkev1.IPRange, reports map[string]string, nodeIPs map[string]string) map[string]string {
	want := map[string]string{}
	for cidr, node := range agent.RouteTargets(ranges, reports) {
		if ip := nodeIPs[node]; cidr != "" && ip != "" {
			want[cidr] = ip
		}
	}
	return want
}

// nodeReports are the nodes' ObservedAnnotation values by node name.
func nodeReports(nodes []*corev1.Node) map[string]string {
	out := map[string]string{}
	for _, n := range nodes {
		if v := n.Annotations[agent.ObservedAnnotation]; v != "" {
			out[n.Name] = v
		}
	}
	return out
}

func (l *layout) nodeIPs() map[string]string {
	ips := map[string]string{}
	for _, n := range l.nodes {
		ips[n.name] = n.ip
	}
	return ips
}

// routeRanges makes the host's (over the bridge) and the control plane's routes into the pod
// address space equal want and returns what it changed.
func (l *layout) routeRanges(want map[string]string) ([]string, error) {
	var changes []string
	for _, where := range []struct{ netns, dev, what string }{{"", l.bridge, "the host"}, {l.cpNetns, "", "the control plane"}} {
		changed, err := syncRangeRoutes(where.netns, where.dev, l.clusterCIDR, want, l.nodeIPs())
		for _, c := range changed {
			changes = append(changes, where.what+": "+c)
		}
		if err != nil {
			return changes, fmt.Errorf("routes from %s (is an IPRange's CIDR used elsewhere on this machine?): %w", where.what, err)
		}
	}
	return changes, nil
}

// routeAssignedRanges routes the IPRanges as they are now, once (`up`, before it waits for
// DNS, and `localcluster routes`); the daemon keeps them routed afterwards.
func (l *layout) routeAssignedRanges(ctx context.Context) error {
	cs, err := l.staticipClient(10 * time.Second)
	if err != nil {
		return err
	}
	list, err := cs.JkeV1().IPRanges().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	kube, err := l.client()
	if err != nil {
		return err
	}
	nodeList, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var ranges []*jkev1.IPRange
	for i := range list.Items {
		ranges = append(ranges, &list.Items[i])
	}
	var nodes []*corev1.Node
	for i := range nodeList.Items {
		nodes = append(nodes, &nodeList.Items[i])
	}
	want := wantRangeRoutes(ranges, nodeReports(nodes), l.nodeIPs())
	if _, err := l.routeRanges(want); err != nil {
		return err
	}
	l.Logf("network: %d IPRanges routed via their nodes from the host and the control plane", len(want))
	return nil
}

// staticipClient is a client of the cluster's staticip API. timeout bounds every request
// (0: none — an informer's watch is one long request, which a timeout would cut and restart).
func (l *layout) staticipClient(timeout time.Duration) (versioned.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = timeout
	return versioned.NewForConfig(cfg)
}

// syncRangeRoutes makes the routes via node IPs to destinations inside the pod address space
// (podSpace) in one network namespace ("" = the host) equal want: replaces what is missing or
// points elsewhere, deletes what points at a node but is no longer any node's range, and
// returns what it changed. Every other route stays — the host's route to the Service CIDR via
// node-1 above all (deleting it sent Service traffic to the default route). Two of these may
// run at once (`up` and the daemon): a route the other one deleted first is no error.
func syncRangeRoutes(netns, dev, podSpace string, want, nodeIPs map[string]string) ([]string, error) {
	space, err := netip.ParsePrefix(podSpace)
	if err != nil {
		return nil, fmt.Errorf("pod address space %q: %w", podSpace, err)
	}
	ip := func(args ...string) []string {
		if netns != "" {
			return append([]string{"ip", "-n", netns}, args...)
		}
		return append([]string{"ip"}, args...)
	}
	isNode := map[string]bool{}
	for _, a := range nodeIPs {
		isNode[a] = true
	}
	argv := ip("-j", "-4", "route", "show")
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		return nil, err
	}
	var have []struct{ Dst, Gateway string }
	if err := json.Unmarshal(out, &have); err != nil {
		return nil, fmt.Errorf("ip -j route show: %w", err)
	}
	current := map[string]string{}
	for _, r := range have {
		dst, err := netip.ParsePrefix(r.Dst)
		if err != nil || !isNode[r.Gateway] || !space.Overlaps(dst) || dst.Bits() < space.Bits() {
			continue // not a route to a piece of the pod address space via a node: not ours
		}
		current[r.Dst] = r.Gateway
	}
	var changes []string
	for _, dst := range keys(current) {
		gw := current[dst]
		if want[dst] != "" {
			continue
		}
		if err := run(ip("route", "del", dst, "via", gw)...); err != nil && !strings.Contains(err.Error(), "No such process") {
			return changes, err
		}
		changes = append(changes, fmt.Sprintf("deleted %s via %s", dst, gw))
	}
	for _, cidr := range keys(want) {
		gw := want[cidr]
		if current[cidr] == gw {
			continue
		}
		args := []string{"route", "replace", cidr, "via", gw}
		if dev != "" {
			args = append(args, "dev", dev)
		}
		if err := run(ip(args...)...); err != nil {
			return changes, fmt.Errorf("%s via %s: %w", cidr, gw, err)
		}
		changes = append(changes, fmt.Sprintf("%s via %s", cidr, gw))
	}
	return changes, nil
}

// SyncRoutes re-routes, from the host and the control plane, the IPRanges of the cluster
// recorded in o's state dir (`localcluster routes`); a no-op for CNIs that do not own the
// address space (their routes are the layout's fixed per-node CIDRs).
func SyncRoutes(ctx context.Context, o Options) error {
	if err := o.validate(); err != nil {
		return err
	}
	l := newLayout(o)
	rec, err := l.readRecord()
	if err != nil {
		return fmt.Errorf("no cluster recorded in %s (run `up`): %w", o.StateDir, err)
	}
	l = newLayout(rec.options(o))
	if !cniProviders[l.CNI].ownsAddressSpace() {
		return nil
	}
	return l.routeAssignedRanges(ctx)
}

// followRanges keeps the host's and the control plane's routes equal to the IPRanges until ctx
// ends: on every IPRange event, and every 30 s against drift. A failed sync is retried a
// second later. It is the body of the daemon rangeRoutesDaemon.
func (l *layout) followRanges(ctx context.Context) error {
	cs, err := l.staticipClient(0)
	if err != nil {
		return err
	}
	factory := externalversions.NewSharedInformerFactory(cs, 0)
	ranges := factory.Jke().V1().IPRanges()
	// The nodes' reports say who holds a range that moved away (it stays routed via that node
	// until drained).
	cfg, err := clientcmd.BuildConfigFromFlags("", l.kubeconfig)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	kubeFactory := informers.NewSharedInformerFactory(kube, 0)
	nodes := kubeFactory.Core().V1().Nodes()
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	if _, err := ranges.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}); err != nil {
		return err
	}
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { poke() },
		UpdateFunc: func(o, n any) {
			if o.(*corev1.Node).Annotations[agent.ObservedAnnotation] != n.(*corev1.Node).Annotations[agent.ObservedAnnotation] {
				poke()
			}
		},
		DeleteFunc: func(any) { poke() },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	kubeFactory.Start(ctx.Done())
	defer kubeFactory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), ranges.Informer().HasSynced, nodes.Informer().HasSynced) {
		return ctx.Err()
	}
	logf := func(format string, args ...any) {
		fmt.Printf("%s range-routes: %s\n", time.Now().Format(time.TimeOnly), fmt.Sprintf(format, args...))
	}
	logf("following the IPRanges for the host and the control plane (%s)", l.clusterCIDR)
	poke()
	drift := time.NewTicker(30 * time.Second)
	defer drift.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-drift.C:
		}
		list, err := ranges.Lister().List(labels.Everything())
		if err != nil {
			return err
		}
		nodeList, err := nodes.Lister().List(labels.Everything())
		if err != nil {
			return err
		}
		changes, err := l.routeRanges(wantRangeRoutes(list, nodeReports(nodeList), l.nodeIPs()))
		for _, c := range changes {
			logf("%s", c)
		}
		if err != nil {
			logf("%v (retrying in 1s)", err)
			time.AfterFunc(time.Second, poke)
		}
	}
}

// rangeRoutesEnv, in a process's environment, makes it the daemon range-routes: the value is
// the cluster's shape (rangeRoutesShape, JSON). The daemon is a copy of the binary that ran `up`
// — the localcluster command, or a test binary that calls Up — re-executed (as Docker's
// reexec does), so it needs no binary of its own and no flags that a test binary would take
// for its own.
const rangeRoutesEnv = "STATICIP_LOCALCLUSTER_RANGE_ROUTES"

// rangeRoutesShape is what the daemon needs to know of the cluster: `up` starts it before the
// cluster's record is written.
type rangeRoutesShape struct {
	StateDir, CNI, Prefix, NodeSubnet, PodCIDR, ServiceCIDR string
	Nodes, SpareNodes                                       int
}

func init() {
	if v := os.Getenv(rangeRoutesEnv); v != "" {
		os.Exit(runRangeRoutes(v))
	}
}

// runRangeRoutes is the daemon's main: shape from the environment, until SIGTERM (`down`).
func runRangeRoutes(shapeJSON string) int {
	var shape rangeRoutesShape
	if err := json.Unmarshal([]byte(shapeJSON), &shape); err != nil {
		fmt.Fprintf(os.Stderr, "range-routes: %s=%q: %v\n", rangeRoutesEnv, shapeJSON, err)
		return 2
	}
	o := DefaultOptions()
	o.StateDir, o.CNI, o.Prefix, o.NodeSubnet, o.PodCIDR, o.ServiceCIDR = shape.StateDir, shape.CNI, shape.Prefix, shape.NodeSubnet, shape.PodCIDR, shape.ServiceCIDR
	o.Nodes, o.SpareNodes = shape.Nodes, shape.SpareNodes
	if err := o.validate(); err != nil {
		fmt.Fprintf(os.Stderr, "range-routes: %v\n", err)
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	l := newLayout(o)
	if err := l.followRanges(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "range-routes: %v\n", err)
		return 1
	}
	return 0
}

// rangeRoutesDaemon runs followRanges as a daemon of the cluster, from a copy of this binary in
// the state dir (a `go run` or `go test` binary is deleted when its command returns).
func (l *layout) rangeRoutesDaemon() daemon {
	shape, _ := json.Marshal(rangeRoutesShape{
		StateDir: l.StateDir, CNI: l.CNI, Prefix: l.Prefix, NodeSubnet: l.NodeSubnet, PodCIDR: l.clusterCIDR, ServiceCIDR: l.serviceCIDR,
		Nodes: l.Nodes, SpareNodes: l.SpareNodes,
	})
	return daemon{name: rangeRoutesDaemonName, argv: []string{l.selfCopy()}, env: []string{rangeRoutesEnv + "=" + string(shape)}}
}

func (l *layout) selfCopy() string { return filepath.Join(l.StateDir, "bin", "localcluster") }

// copySelf puts this binary where rangeRoutesDaemon runs it from.
func (l *layout) copySelf() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(l.selfCopy()), 0o755); err != nil {
		return err
	}
	src, err := os.Open(self)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp := l.selfCopy() + ".tmp"
	dst, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	if err := dst.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, l.selfCopy())
}
