// Command staticip-agent runs on every node (DaemonSet, host network): it installs the
// staticip CNI plugin and conflist, syncs the node's IPRanges and StaticIP reservations into
// the plugin's database, garbage-collects IPs of gone pods, and routes to other nodes' ranges.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	"github.com/staticip/staticip/cni/agent"
)

func main() {
	var cfg agent.Config
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the agent (empty: in-cluster)")
	flag.StringVar(&cfg.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name")
	flag.StringVar(&cfg.PluginBinary, "plugin-binary", "/staticip", "staticip plugin binary to install")
	flag.StringVar(&cfg.CNIBinDir, "cni-bin-dir", "/opt/cni/bin", "CNI binary directory")
	flag.StringVar(&cfg.CNIConfDir, "cni-conf-dir", "/etc/cni/net.d", "CNI configuration directory")
	flag.StringVar(&cfg.ConfName, "conf-name", "10-staticip.conflist", "conflist file name")
	flag.StringVar(&cfg.PluginKubeconfig, "plugin-kubeconfig", "", "kubeconfig path the plugin uses, as the host sees it (written into the conflist)")
	writeKubeconfig := flag.Bool("write-plugin-kubeconfig", true, "in-cluster: write the plugin's kubeconfig (API server, CA, a token of --plugin-service-account bound to this node) to <cni-conf-dir>/<base of --plugin-kubeconfig>")
	pluginSA := flag.String("plugin-service-account", "kube-system/staticip-cni", "namespace/name of the plugin's service account, whose node-bound tokens the agent mints (TokenRequest) for the plugin's kubeconfig")
	pluginTokenLifetime := flag.Duration("plugin-token-lifetime", agent.DefaultPluginTokenLifetime, "lifetime asked for the plugin's tokens (10m to 1h: manifests/cni/admission.yaml refuses longer); each is renewed after 80% of it")
	flag.StringVar(&cfg.DataDir, "data-dir", "/var/lib/staticip", "directory of ipam.db")
	flag.StringVar(&cfg.CNIVersion, "cni-version", agent.DefaultCNIVersion, "cniVersion of the conflist: 1.0.0 for containerd 1.6/1.7; 1.1.0 adds GC and STATUS on runtimes that support them")
	flag.IntVar(&cfg.MTU, "mtu", 1500, "pod MTU")
	flag.StringVar(&cfg.Quarantine, "quarantine", "", "quarantine of released IPs (plugin default when empty)")
	flag.BoolVar(&cfg.Routes, "routes", true, "route other nodes' IPRanges via their InternalIP")
	flag.BoolVar(&cfg.PortMap, "portmap", true, "chain the portmap plugin (from --cni-bin-dir) after staticip, for hostPort")
	flag.DurationVar(&cfg.GCGrace, "gc-grace", agent.DefaultGCGrace, "GC never frees an allocation younger than this (its pod may not be in the agent's cache yet)")
	interval := flag.Duration("interval", 30*time.Second, "sync interval (a sync also follows every change that matters to the node)")
	minGap := flag.Duration("min-sync-gap", 500*time.Millisecond, "least time between two syncs: changes within it are handled by one sync")
	listen := flag.String("listen", "127.0.0.1:9489", "metrics and health address (keep it on loopback)")
	cleanup := flag.Bool("cleanup", false, "uninstall: remove the plugin binary, the conflist, the plugin's kubeconfig, the plugin's database and the agent's routes from this node (the paths the flags above name), then only answer /healthz and /readyz until terminated, so that a DaemonSet rollout tells when every node is clean (charts/staticip/README.md, \"Uninstall\")")
	flag.Parse()
	if *cleanup {
		os.Exit(runCleanup(cfg, *listen))
	}
	if cfg.NodeName == "" {
		fmt.Fprintln(os.Stderr, "staticip-agent: --node-name (or NODE_NAME) is required")
		os.Exit(2)
	}
	if *minGap <= 0 || *minGap >= *interval {
		fmt.Fprintf(os.Stderr, "staticip-agent: --min-sync-gap=%s must be above 0 and below --interval=%s\n", *minGap, *interval)
		os.Exit(2)
	}
	var restCfg *rest.Config
	var err error
	if *kubeconfig != "" {
		restCfg, err = clientcmd.BuildConfigFromFlags("", *kubeconfig)
	} else {
		restCfg, err = rest.InClusterConfig()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "staticip-agent:", err)
		os.Exit(1)
	}
	saNamespace, saName, ok := strings.Cut(*pluginSA, "/")
	if !ok || saNamespace == "" || saName == "" || *pluginTokenLifetime < 10*time.Minute || *pluginTokenLifetime > time.Hour {
		fmt.Fprintf(os.Stderr, "staticip-agent: --plugin-service-account=%q must be namespace/name and --plugin-token-lifetime=%s between 10m and 1h\n", *pluginSA, *pluginTokenLifetime)
		os.Exit(2)
	}
	kube := kubernetes.NewForConfigOrDie(restCfg)
	if *kubeconfig == "" && *writeKubeconfig && cfg.PluginKubeconfig != "" {
		cfg.PluginCredentials = &agent.Credentials{Server: restCfg.Host, CAFile: restCfg.TLSClientConfig.CAFile,
			Tokens: &agent.NodeBoundTokens{Kube: kube, Namespace: saNamespace, ServiceAccount: saName, Node: cfg.NodeName, Lifetime: *pluginTokenLifetime}}
	}
	a := agent.New(cfg, kube, versioned.NewForConfigOrDie(restCfg), os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Addr: *listen, Handler: a.Handler(3 * *interval), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
			fmt.Fprintln(os.Stderr, "staticip-agent: http:", err)
		}
	}()
	a.Run(ctx, *interval, *minGap)
	_ = srv.Shutdown(context.Background())
}

// runCleanup removes what the agent installed on this node (agent.Cleanup), then serves
// /healthz and /readyz (200) until SIGTERM: Ready means this node is clean. A failure exits
// non-zero, so the pod restarts and tries again.
func runCleanup(cfg agent.Config, listen string) int {
	removed, err := agent.Cleanup(cfg)
	for _, r := range removed {
		fmt.Fprintln(os.Stderr, "staticip-agent: cleanup: removed", r)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "staticip-agent: cleanup:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "staticip-agent: cleanup: node %s is clean\n", cfg.NodeName)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "clean") })
	mux := http.NewServeMux()
	mux.Handle("/healthz", ok)
	mux.Handle("/readyz", ok)
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
			fmt.Fprintln(os.Stderr, "staticip-agent: http:", err)
		}
	}()
	<-ctx.Done()
	_ = srv.Shutdown(context.Background())
	return 0
}
