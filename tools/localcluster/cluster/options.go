// Package cluster runs a real Kubernetes cluster as processes on one machine: etcd and the
// control plane in one network namespace, and N worker nodes, each a network namespace
// with its own containerd, kubelet and kube-proxy, all joined by veths to one host bridge.
package cluster

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Options are what a user chooses; everything else is derived from them.
type Options struct {
	// Nodes is the number of worker nodes.
	Nodes int
	// SpareNodes are extra nodes after the workers, labelled and tainted as failover spares
	// (spare.go): no ordinary pod lands there; node failover claims one.
	SpareNodes int
	// FailoverWindow, when set, is staticip-controller-manager's --node-failover-window
	// (e2e: seconds instead of the default minutes).
	FailoverWindow string
	// StateDir holds certificates, configs, logs, pids and every component's data.
	StateDir string
	// BinDir holds etcd, kube-* and coredns (the repository's _output/bin).
	BinDir string
	// CRDDir holds the staticip CRDs installed at up (manifests/crds); empty: none.
	CRDDir string
	// ImageDir holds image tarballs built by tools/images; every *.tar is imported into
	// every node's containerd.
	ImageDir string
	// RepoRoot is the staticip checkout (used to build images that are missing).
	RepoRoot string
	// CNI names the pod network provider (see cniProviders).
	CNI string
	// Scheduler names the scheduler (see schedulers).
	Scheduler string
	// FeatureGates ("A=true,B=false"), passed as --feature-gates to kube-apiserver and
	// kube-controller-manager (e.g. MaxUnavailableStatefulSet=true for tools/estsbench).
	FeatureGates string
	// KubeProxyDirect runs kube-proxy against the API server itself. By default every
	// node's kube-proxy talks to the API server through application-grid-wrapper (the
	// manifests/edge DaemonSet, on the node's loopback), as on an edge node.
	KubeProxyDirect bool
	// CentralDNS runs one CoreDNS Deployment behind kube-dns. By default (with the wrapper
	// and the staticip CRDs) DNS is the edge DNS of manifests/edge/coredns: one CoreDNS per
	// zone reading statefulset-grid-daemon's hosts file (edge_dns.go).
	CentralDNS bool
	// Prefix starts every global name the cluster creates (netns, links), so that
	// other users of the machine can tell them apart and `down` finds exactly its own.
	Prefix string
	// NodeSubnet is the /24 on the host bridge; .1 is the host, .2 the control plane,
	// .11+i node i. It exists only on links the cluster creates.
	NodeSubnet string
	// PodCIDR is the IPv4 /16 of pod addresses; node i gets <a.b>.i.0/24. ServiceCIDR is
	// the IPv4 /16 of Services (.0.1 the API server, .0.10 DNS). Two clusters on one machine
	// need different ones: the host routes both into its nodes.
	PodCIDR     string
	ServiceCIDR string
	// OutsideSubnet is the network behind the datacenter router (router.go): the router has
	// its first address, the outside namespace the second. It must not be used elsewhere on
	// this machine; a second cluster needs its own.
	OutsideSubnet string
	// Logf prints progress.
	Logf func(format string, args ...any)
}

const (
	clusterDomain = "cluster.local"
	apiserverPort = 6443
)

// DefaultOptions returns the options `localcluster` uses without flags.
func DefaultOptions() Options {
	return Options{
		Nodes:       3,
		StateDir:    "/var/lib/staticip-localcluster",
		CNI:         "staticip",
		Scheduler:   "staticip-scheduler",
		Prefix:      "cluster",
		NodeSubnet:  "172.30.0.0/24",
		PodCIDR:     "10.244.0.0/16",
		ServiceCIDR: "10.96.0.0/16",
		// RFC 2544's benchmarking range: never routed on the internet.
		OutsideSubnet: "198.18.0.0/24",
		Logf:          func(string, ...any) {},
	}
}

func (o *Options) validate() error {
	if o.Nodes < 1 || o.Nodes > 200 {
		return fmt.Errorf("--nodes must be between 1 and 200, got %d", o.Nodes)
	}
	if err := o.validateSpares(); err != nil {
		return err
	}
	if !filepath.IsAbs(o.StateDir) {
		return fmt.Errorf("--state-dir must be absolute, got %q", o.StateDir)
	}
	if filepath.Clean(o.StateDir) == "/" {
		return fmt.Errorf("--state-dir must not be /")
	}
	_, n, err := net.ParseCIDR(o.NodeSubnet)
	if err != nil {
		return fmt.Errorf("--node-subnet: %w", err)
	}
	if ones, bits := n.Mask.Size(); ones != 24 || bits != 32 {
		return fmt.Errorf("--node-subnet must be an IPv4 /24, got %s", o.NodeSubnet)
	}
	for flag, cidr := range map[string]string{"--pod-cidr": o.PodCIDR, "--service-cidr": o.ServiceCIDR} {
		if _, err := slash16(cidr); err != nil {
			return fmt.Errorf("%s: %w", flag, err)
		}
	}
	if p, err := netip.ParsePrefix(o.OutsideSubnet); o.OutsideSubnet != "" && (err != nil || !p.Addr().Is4() || p.Bits() > 29) {
		return fmt.Errorf("--outside-subnet must be an IPv4 prefix of at most /29, got %q", o.OutsideSubnet)
	}
	if o.PodCIDR == o.ServiceCIDR {
		return fmt.Errorf("--pod-cidr and --service-cidr must differ, both are %s", o.PodCIDR)
	}
	if len(o.Prefix) == 0 || len(o.Prefix) > 8 {
		return fmt.Errorf("--prefix must be 1-8 characters (link names are at most 15), got %q", o.Prefix)
	}
	if _, ok := cniProviders[o.CNI]; !ok {
		return fmt.Errorf("--cni=%s is unknown; known: %v", o.CNI, keys(cniProviders))
	}
	if _, ok := schedulers[o.Scheduler]; !ok {
		return fmt.Errorf("--scheduler=%s is unknown; known: %v", o.Scheduler, keys(schedulers))
	}
	if o.FeatureGates != "" {
		for _, kv := range strings.Split(o.FeatureGates, ",") {
			name, value, ok := strings.Cut(kv, "=")
			if _, err := strconv.ParseBool(value); !ok || name == "" || err != nil {
				return fmt.Errorf("--feature-gates: %q is not Name=true|false", kv)
			}
		}
	}
	return nil
}

// layout is every name, address and path of one cluster, derived from Options.
type layout struct {
	Options
	bridge      string
	hostIP      string
	cpNetns     string
	cpIP        string
	cpHostVeth  string
	nodes       []nodeLayout
	router      routerLayout
	pkiDir      string
	logDir      string
	pidDir      string
	etcdDir     string
	kubeconfig  string
	apiserverIP string
	// Addresses derived from PodCIDR and ServiceCIDR.
	clusterCIDR   string
	serviceCIDR   string
	kubernetesSvc string
	dnsServiceIP  string
	// The IPv6 side of the dual-stack cluster (ULA only, on links the tool creates; nothing
	// routes them off the machine): nodeSubnet6 the nodes' /64 on the bridge (NodeSubnet's
	// octets as groups: 172.30.0.0/24 -> fd00:172:30:0::/64), serviceCIDR6 the second Service
	// range (10.96.0.0/16 -> fd00:10:96::/112), podCIDR6 the IPv6 pool's space
	// (10.244.0.0/16 -> fd00:10:244::/112).
	nodeSubnet6  string
	serviceCIDR6 string
	podCIDR6     string
}

// dualStack is the pair "IPv4,IPv6" the components' dual-stack flags take.
func dualStack(v4, v6 string) string { return v4 + "," + v6 }

// slash16 returns the first two octets of an IPv4 /16.
func slash16(cidr string) ([2]byte, error) {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		return [2]byte{}, err
	}
	if ones, bits := n.Mask.Size(); ones != 16 || bits != 32 || n.String() != cidr {
		return [2]byte{}, fmt.Errorf("must be an IPv4 /16 like 10.244.0.0/16, got %s", cidr)
	}
	ip := n.IP.To4()
	return [2]byte{ip[0], ip[1]}, nil
}

type nodeLayout struct {
	index    int // 1-based
	name     string
	spare    bool // a failover spare (spare.go)
	netns    string
	hostVeth string
	ip       string
	ip6      string // its IPv6 address on the bridge (nodeSubnet6), its second InternalIP
	podCIDR  string
	gateway  string // first address of podCIDR, the CNI bridge
	zone     string
	dir      string
	// containerd
	containerdRoot   string
	containerdState  string
	containerdSocket string
	// cniDir holds the node's CNI bin and conf dirs (and a CNI's own state): one subtree
	// per node under <state>/cni/<node name>, so a CNI DaemonSet can mount <state>/cni and
	// find its node's part by name.
	cniDir     string
	cniBinDir  string
	cniConfDir string
	// kubelet
	kubeletRoot string
	podLogsDir  string
}

func newLayout(o Options) layout {
	_, subnet, _ := net.ParseCIDR(o.NodeSubnet)
	base := subnet.IP.To4()
	ip := func(last int) string { return fmt.Sprintf("%d.%d.%d.%d", base[0], base[1], base[2], last) }
	l := layout{
		Options:    o,
		bridge:     o.Prefix + "-br0",
		hostIP:     ip(1),
		cpNetns:    o.Prefix + "-cp",
		cpIP:       ip(2),
		cpHostVeth: o.Prefix + "-vcp",
		pkiDir:     filepath.Join(o.StateDir, "pki"),
		logDir:     filepath.Join(o.StateDir, "logs"),
		pidDir:     filepath.Join(o.StateDir, "pids"),
		etcdDir:    filepath.Join(o.StateDir, "etcd"),
		kubeconfig: filepath.Join(o.StateDir, "kubeconfig"),
	}
	l.apiserverIP = l.cpIP
	if o.PodCIDR == "" || o.ServiceCIDR == "" { // a record written before these options existed
		d := DefaultOptions()
		l.PodCIDR, l.ServiceCIDR = d.PodCIDR, d.ServiceCIDR
	}
	if l.OutsideSubnet == "" {
		l.OutsideSubnet = DefaultOptions().OutsideSubnet
	}
	l.router = newRouterLayout(l.Options, ip)
	pod, _ := slash16(l.PodCIDR)
	svc, _ := slash16(l.ServiceCIDR)
	l.clusterCIDR, l.serviceCIDR = l.PodCIDR, l.ServiceCIDR
	l.kubernetesSvc = fmt.Sprintf("%d.%d.0.1", svc[0], svc[1])
	l.dnsServiceIP = fmt.Sprintf("%d.%d.0.10", svc[0], svc[1])
	l.nodeSubnet6 = fmt.Sprintf("fd00:%d:%d:%d::/64", base[0], base[1], base[2])
	l.serviceCIDR6 = fmt.Sprintf("fd00:%d:%d::/112", svc[0], svc[1])
	l.podCIDR6 = fmt.Sprintf("fd00:%d:%d::/112", pod[0], pod[1])
	ip6 := func(last int) string { return fmt.Sprintf("fd00:%d:%d:%d::%d", base[0], base[1], base[2], last) }
	for i := 1; i <= o.Nodes+o.SpareNodes; i++ {
		name := fmt.Sprintf("node-%d", i)
		dir := filepath.Join(o.StateDir, name)
		n := nodeLayout{
			index:            i,
			name:             name,
			netns:            fmt.Sprintf("%s-node-%d", o.Prefix, i),
			hostVeth:         fmt.Sprintf("%s-v%d", o.Prefix, i),
			ip:               ip(10 + i),
			ip6:              ip6(10 + i),
			podCIDR:          fmt.Sprintf("%d.%d.%d.0/24", pod[0], pod[1], i),
			gateway:          fmt.Sprintf("%d.%d.%d.1", pod[0], pod[1], i),
			zone:             fmt.Sprintf("zone-%d", (i-1)%2),
			dir:              dir,
			containerdRoot:   filepath.Join(dir, "containerd", "root"),
			containerdState:  filepath.Join(dir, "containerd", "state"),
			containerdSocket: filepath.Join(dir, "containerd", "containerd.sock"),
			cniDir:           filepath.Join(o.StateDir, "cni", name),
			cniBinDir:        filepath.Join(o.StateDir, "cni", name, "bin"),
			cniConfDir:       filepath.Join(o.StateDir, "cni", name, "net.d"),
			kubeletRoot:      filepath.Join(dir, "kubelet"),
			podLogsDir:       filepath.Join(dir, "pod-logs"),
		}
		if i > o.Nodes {
			n.spare, n.zone = true, spareZone(o.Nodes, i)
		}
		l.nodes = append(l.nodes, n)
	}
	return l
}

func (l *layout) netnsPath(name string) string { return filepath.Join("/run/netns", name) }

// keys are m's keys, sorted.
func keys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
