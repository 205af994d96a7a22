package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	"github.com/staticip/staticip/internal/app"
	"github.com/staticip/staticip/internal/kubeclient"
	"github.com/staticip/staticip/internal/serving"
)

// ComponentName is the binary's name.
const ComponentName = "staticip-agent"

// Ports of the agent on its node (host network): /metrics on the node's addresses (HTTPS,
// delegated authn/authz), health on loopback for the kubelet's probes.
const (
	DefaultMetricsBindAddress = ":9490"
	DefaultHealthBindAddress  = "127.0.0.1:9489"
)

// Options are staticip-agent's flags.
type Options struct {
	// Common: the client flags and the status server (/metrics on the node's addresses,
	// health on loopback).
	app.Common
	// Agent: the node, paths and plugin settings (flags of the same names).
	Agent Config
	// WritePluginKubeconfig, PluginServiceAccount and PluginTokenLifetime: the plugin's own
	// credentials (credentials.go), in-cluster only.
	WritePluginKubeconfig bool
	PluginServiceAccount  string
	PluginTokenLifetime   time.Duration
	// Interval and MinSyncGap pace the sync loop (Run).
	Interval, MinSyncGap time.Duration
	// Cleanup: uninstall mode (RunCleanup) instead of the sync loop.
	Cleanup bool
	// NonMasqueradeCIDRs and ServiceCIDRs: the flags of the same names, parsed into
	// Agent.NAT by Validate.
	NonMasqueradeCIDRs, ServiceCIDRs []string
	// BGPPasswordSecret is --bgp-password-secret (namespace/name), parsed into Agent.BGP.
	BGPPasswordSecret string
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		Common: app.NewCommon(5, 10, DefaultMetricsBindAddress, DefaultHealthBindAddress), // client-go's limits: the agent asks little
		Agent: Config{NodeName: os.Getenv("NODE_NAME"), PluginBinary: "/staticip", CNIBinDir: "/opt/cni/bin",
			CNIConfDir: "/etc/cni/net.d", ConfName: "10-staticip.conflist", DataDir: "/var/lib/staticip",
			CNIVersion: DefaultCNIVersion, MTU: 1500, Routes: true, PortMap: true, GCGrace: DefaultGCGrace,
			NAT: NATConfig{Enabled: true, Default: true}, BGP: BGPConfig{Enabled: true, NodeFailoverWindow: 2 * time.Minute}},
		WritePluginKubeconfig: true,
		PluginServiceAccount:  "kube-system/staticip-cni",
		PluginTokenLifetime:   DefaultPluginTokenLifetime,
		Interval:              30 * time.Second,
		MinSyncGap:            500 * time.Millisecond,
	}
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	c := &o.Agent
	o.Common.AddFlags(fs)
	fs.StringVar(&c.NodeName, "node-name", c.NodeName, "this node's name (default $NODE_NAME)")
	fs.StringVar(&c.PluginBinary, "plugin-binary", c.PluginBinary, "staticip plugin binary to install")
	fs.StringVar(&c.CNIBinDir, "cni-bin-dir", c.CNIBinDir, "CNI binary directory")
	fs.StringVar(&c.CNIConfDir, "cni-conf-dir", c.CNIConfDir, "CNI configuration directory")
	fs.StringVar(&c.ConfName, "conf-name", c.ConfName, "conflist file name")
	fs.StringVar(&c.PluginKubeconfig, "plugin-kubeconfig", c.PluginKubeconfig, "kubeconfig path the plugin uses, as the host sees it (written into the conflist)")
	fs.BoolVar(&o.WritePluginKubeconfig, "write-plugin-kubeconfig", o.WritePluginKubeconfig, "in-cluster: write the plugin's kubeconfig (API server, CA, a token of --plugin-service-account bound to this node) to <cni-conf-dir>/<base of --plugin-kubeconfig>")
	fs.StringVar(&o.PluginServiceAccount, "plugin-service-account", o.PluginServiceAccount, "namespace/name of the plugin's service account, whose node-bound tokens the agent mints (TokenRequest) for the plugin's kubeconfig")
	fs.DurationVar(&o.PluginTokenLifetime, "plugin-token-lifetime", o.PluginTokenLifetime, "lifetime asked for the plugin's tokens (10m to 1h: manifests/cni/admission.yaml refuses longer); each is renewed after 80% of it")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory of ipam.db")
	fs.StringVar(&c.CNIVersion, "cni-version", c.CNIVersion, "cniVersion of the conflist: 1.0.0 for containerd 1.6/1.7; 1.1.0 adds GC and STATUS on runtimes that support them")
	fs.IntVar(&c.MTU, "mtu", c.MTU, "pod MTU")
	fs.StringVar(&c.Quarantine, "quarantine", c.Quarantine, "quarantine of released IPs (plugin default when empty)")
	fs.BoolVar(&c.Routes, "routes", c.Routes, "route other nodes' IPRanges via their InternalIP")
	fs.BoolVar(&c.PortMap, "portmap", c.PortMap, "chain the portmap plugin (from --cni-bin-dir) after staticip, for hostPort")
	fs.DurationVar(&c.GCGrace, "gc-grace", c.GCGrace, "GC never frees an allocation younger than this (its pod may not be in the agent's cache yet)")
	fs.DurationVar(&o.Interval, "interval", o.Interval, "sync interval (a sync also follows every change that matters to the node)")
	fs.DurationVar(&o.MinSyncGap, "min-sync-gap", o.MinSyncGap, "least time between two syncs: changes within it are handled by one sync")
	fs.BoolVar(&c.NAT.Enabled, "nat", c.NAT.Enabled, "keep the outgoing NAT table (nftables inet "+NATTable+", through the nft binary): pod traffic to destinations outside the cluster leaves with the node's address, per IPRange's natOutgoing; false: the agent never touches nftables (another component masquerades, or the network routes every pool)")
	fs.BoolVar(&c.NAT.Default, "nat-outgoing-default", c.NAT.Default, "natOutgoing of an IPRange that does not set spec.natOutgoing (hand-written ranges; the range allocator sets it on every IPPool block)")
	fs.StringSliceVar(&o.NonMasqueradeCIDRs, "non-masquerade-cidrs", o.NonMasqueradeCIDRs, "destinations outside the IPRanges that pods reach with their own IP, never masqueraded (ip-masq-agent's nonMasqueradeCIDRs): networks that route the pod space")
	fs.StringSliceVar(&o.ServiceCIDRs, "service-cidrs", o.ServiceCIDRs, "the cluster's Service CIDRs (kube-apiserver --service-cluster-ip-range): never masqueraded to (a ClusterIP kube-proxy did not translate stays inside)")
	fs.BoolVar(&c.BGP.Enabled, "bgp", c.BGP.Enabled, "watch BGPConfiguration and BGPPeers and announce this node's IPRanges to the peers that select it (nothing runs until a BGPConfiguration \"default\" and a BGPPeer exist); false: no BGP informers and never a speaker")
	fs.StringVar(&o.BGPPasswordSecret, "bgp-password-secret", o.BGPPasswordSecret, "namespace/name of the one Secret BGP session passwords are read from (a BGPPeer's password.secretKeyRef must name it; the agent's RBAC grants that Secret alone); empty: no passwords")
	fs.DurationVar(&c.BGP.NodeFailoverWindow, "node-failover-window", c.BGP.NodeFailoverWindow, "the controller-manager's --node-failover-window: a BGP peer whose hold time (plus graceful restart time) is not shorter gets the warning condition HoldTimeSafe=False; 0: not checked")
	fs.BoolVar(&o.Cleanup, "cleanup", o.Cleanup, "uninstall: remove the plugin binary, the conflist, the plugin's kubeconfig, the plugin's database and the agent's routes from this node (the paths the flags above name), then only answer /healthz and /readyz until terminated, so that a DaemonSet rollout tells when every node is clean (charts/staticip/README.md, \"Uninstall\")")
}

// Validate checks the flags.
func (o *Options) Validate() error {
	var errs []error
	if o.Agent.NodeName == "" && !o.Cleanup {
		errs = append(errs, errors.New("--node-name (or $NODE_NAME) is required"))
	}
	if o.MinSyncGap <= 0 || o.MinSyncGap >= o.Interval {
		errs = append(errs, fmt.Errorf("--min-sync-gap=%s must be above 0 and below --interval=%s", o.MinSyncGap, o.Interval))
	}
	if ns, name, ok := strings.Cut(o.PluginServiceAccount, "/"); !ok || ns == "" || name == "" {
		errs = append(errs, fmt.Errorf("--plugin-service-account=%q must be namespace/name", o.PluginServiceAccount))
	}
	if o.PluginTokenLifetime < 10*time.Minute || o.PluginTokenLifetime > time.Hour {
		errs = append(errs, fmt.Errorf("--plugin-token-lifetime=%s must be between 10m and 1h", o.PluginTokenLifetime))
	}
	for _, list := range []struct {
		flag string
		in   []string
		out  *[]netip.Prefix
	}{{"--non-masquerade-cidrs", o.NonMasqueradeCIDRs, &o.Agent.NAT.NonMasqueradeCIDRs}, {"--service-cidrs", o.ServiceCIDRs, &o.Agent.NAT.ServiceCIDRs}} {
		*list.out = nil
		for _, s := range list.in {
			p, err := netip.ParsePrefix(strings.TrimSpace(s))
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %q is not a CIDR such as 10.0.0.0/8: %v", list.flag, s, err))
				continue
			}
			*list.out = append(*list.out, p.Masked())
		}
	}
	o.Agent.BGP.PasswordSecretNamespace, o.Agent.BGP.PasswordSecretName = "", ""
	if o.BGPPasswordSecret != "" {
		ns, name, ok := strings.Cut(o.BGPPasswordSecret, "/")
		if !ok || ns == "" || name == "" {
			errs = append(errs, fmt.Errorf("--bgp-password-secret=%q must be namespace/name", o.BGPPasswordSecret))
		}
		o.Agent.BGP.PasswordSecretNamespace, o.Agent.BGP.PasswordSecretName = ns, name
	}
	errs = append(errs, o.Common.Validate())
	return errors.Join(errs...)
}

// Completed is the completed Options: what Run needs.
type Completed struct {
	*Options
	Rest *rest.Config
}

// Complete loads the agent's identity; the delegated authn/authz of /metrics use it too.
func (o *Options) Complete() (*Completed, error) {
	cfg, err := o.Load(ComponentName)
	if err != nil {
		return nil, err
	}
	return &Completed{Options: o, Rest: cfg}, nil
}

// Run runs the agent and its status server until ctx ends. In-cluster (no --kubeconfig) with
// --write-plugin-kubeconfig and --plugin-kubeconfig, the agent writes the plugin's own
// node-bound credentials.
func Run(ctx context.Context, c *Completed) error {
	if c.Cleanup {
		return RunCleanup(ctx, c)
	}
	kube, err := kubeclient.Kubernetes(c.Rest)
	if err != nil {
		return err
	}
	sip, err := versioned.NewForConfig(c.Rest)
	if err != nil {
		return err
	}
	cfg := c.Agent
	if c.Client.Kubeconfig == "" && c.WritePluginKubeconfig && cfg.PluginKubeconfig != "" {
		ns, name, _ := strings.Cut(c.PluginServiceAccount, "/")
		cfg.PluginCredentials = &Credentials{Server: c.Rest.Host, CAFile: c.Rest.TLSClientConfig.CAFile,
			Tokens: &NodeBoundTokens{Kube: kube, Namespace: ns, ServiceAccount: name, Node: cfg.NodeName, Lifetime: c.PluginTokenLifetime}}
	}
	a := New(cfg, kube, sip, os.Stderr)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The status server starts beside the loop, never before it: the node's pods depend on
	// the plugin files the first pass installs, also while the API server (which the
	// delegated authentication asks at start) cannot be reached. A port that cannot be bound
	// is logged; the kubelet's probes then fail and restart the agent.
	started := make(chan *serving.Server, 1)
	go func() {
		defer close(started)
		status, err := c.Serving.Start(ctx, a.Endpoints(3*c.Interval))
		if err != nil {
			klog.FromContext(ctx).Error(err, "Status server not started")
			return
		}
		started <- status
	}()
	a.Run(ctx, c.Interval, c.MinSyncGap)
	cancel()
	if status := <-started; status != nil {
		<-status.Stopped()
	}
	return nil
}

// RunCleanup removes what the agent installed on this node (Cleanup), then serves /healthz
// and /readyz (200, no /metrics) until ctx ends: Ready means this node is clean. A failure is
// returned (the process exits non-zero, the pod restarts and tries again).
func RunCleanup(ctx context.Context, c *Completed) error {
	logger := klog.FromContext(ctx)
	removed, err := Cleanup(c.Agent)
	for _, r := range removed {
		logger.Info("Cleanup: removed", "what", r)
	}
	if err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	logger.Info("Cleanup: this node is clean", "node", c.Agent.NodeName)
	health := *c.Serving
	health.MetricsBindAddress = "0"
	status, err := health.Start(ctx, serving.Endpoints{Component: ComponentName, Metrics: prometheus.NewRegistry()})
	if err != nil {
		return err
	}
	<-ctx.Done()
	<-status.Stopped()
	return nil
}
