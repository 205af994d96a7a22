// Package gridwrapper is application-grid-wrapper: a reverse proxy between kube-proxy and
// the API server that rewrites only EndpointSlice lists and watch events, keeping the
// endpoints a Service's topologyKeys select for this node. See edge/README.md.
package gridwrapper

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/staticip/staticip/edge/pkg/kubeclient"
	"github.com/staticip/staticip/edge/pkg/statusserver"
)

// ComponentName is the binary's name.
const ComponentName = "application-grid-wrapper"

// Options are the wrapper's flags.
type Options struct {
	Kubeconfig     string
	NodeName       string
	ListenAddress  string
	MetricsAddress string
	QPS            float32
	Burst          int
	// SelectionChange: "refresh" (re-send the affected slices on the open watches) or
	// "relist" (end the watches with 410).
	SelectionChange string
	// WatchWriteTimeout bounds each write to an EndpointSlice watch client.
	WatchWriteTimeout time.Duration
}

// NewOptions returns the defaults: loopback only.
func NewOptions() *Options {
	return &Options{
		NodeName:          os.Getenv("NODE_NAME"),
		ListenAddress:     "127.0.0.1:10266",
		MetricsAddress:    "127.0.0.1:10267",
		QPS:               50,
		Burst:             100,
		SelectionChange:   "refresh",
		WatchWriteTimeout: DefaultWriteTimeout,
	}
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig of the wrapper's own identity (empty: in-cluster service account)")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "this node's name (default $NODE_NAME)")
	fs.StringVar(&o.ListenAddress, "listen-address", o.ListenAddress, "address kube-proxy connects to (plain HTTP: keep it on loopback)")
	fs.StringVar(&o.MetricsAddress, "metrics-address", o.MetricsAddress, "address of /metrics, /healthz and /readyz (empty: off)")
	fs.Float32Var(&o.QPS, "kube-api-qps", o.QPS, "QPS towards the API server (shared by kube-proxy's requests and the wrapper's informers)")
	fs.IntVar(&o.Burst, "kube-api-burst", o.Burst, "burst towards the API server")
	fs.DurationVar(&o.WatchWriteTimeout, "watch-write-timeout", o.WatchWriteTimeout, "a write to an EndpointSlice watch client (kube-proxy) that does not complete by then drops that client, which re-watches")
	fs.StringVar(&o.SelectionChange, "selection-change", o.SelectionChange, `how kube-proxy learns of a selection change outside the EndpointSlice stream (annotation, node labels): "refresh" re-sends the affected slices on its open watch, "relist" ends the watch with 410 so it relists (slower: client-go's relist backoff)`)
}

// Validate checks the flags.
func (o *Options) Validate() error {
	if o.NodeName == "" {
		return errors.New("--node-name (or $NODE_NAME) is required")
	}
	if o.WatchWriteTimeout <= 0 {
		return fmt.Errorf("--watch-write-timeout: %v, want > 0", o.WatchWriteTimeout)
	}
	if o.SelectionChange != "refresh" && o.SelectionChange != "relist" {
		return fmt.Errorf("--selection-change: %q, want refresh or relist", o.SelectionChange)
	}
	if _, _, err := net.SplitHostPort(o.ListenAddress); err != nil {
		return fmt.Errorf("--listen-address: %w", err)
	}
	if o.MetricsAddress != "" {
		if _, _, err := net.SplitHostPort(o.MetricsAddress); err != nil {
			return fmt.Errorf("--metrics-address: %w", err)
		}
	}
	return nil
}

// RestConfig loads the wrapper's own identity.
func (o *Options) RestConfig() (*rest.Config, error) {
	return kubeclient.Config(o.Kubeconfig, o.QPS, o.Burst, ComponentName)
}

// Run serves until ctx ends. ready, if not nil, is called with the bound addresses.
func Run(ctx context.Context, o *Options, cfg *rest.Config, ready func(proxyAddr, metricsAddr string)) error {
	m := NewMetrics()
	// The informers' client asks for protobuf like kube-proxy does.
	informerCfg := rest.CopyConfig(cfg)
	informerCfg.ContentType = "application/vnd.kubernetes.protobuf"
	client, err := kubernetes.NewForConfig(informerCfg)
	if err != nil {
		return err
	}
	metaClient, err := metadata.NewForConfig(cfg)
	if err != nil {
		return err
	}
	state, err := NewState(client, metaClient, o.NodeName, m)
	if err != nil {
		return err
	}
	upstream, err := url.Parse(cfg.Host)
	if err != nil {
		return err
	}
	if upstream.Scheme == "" {
		upstream, err = url.Parse("https://" + cfg.Host)
		if err != nil {
			return err
		}
	}
	// The proxied requests go with the wrapper's credentials and without client-side
	// rate limiting (kube-proxy limits itself); no timeout (watches are long).
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return err
	}
	proxy := NewProxy(upstream, transport, o.NodeName, state, m)
	proxy.RelistOnChange = o.SelectionChange == "relist"
	proxy.WriteTimeout = o.WatchWriteTimeout

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	state.Run(ctx)
	go proxy.RunSelectionChanges(ctx, state)

	ln, err := net.Listen("tcp", o.ListenAddress)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	errCh := make(chan error, 2)
	go func() { errCh <- srv.Serve(ln) }()
	metricsAddr := ""
	var msrv *http.Server
	if o.MetricsAddress != "" {
		msrv, metricsAddr, err = statusserver.Start(o.MetricsAddress, m.Registry, func() error {
			if !state.Synced() {
				return errors.New("caches not synced")
			}
			return nil
		}, errCh)
		if err != nil {
			_ = srv.Close()
			return err
		}
	}
	klog.InfoS("Serving", "node", o.NodeName, "listen", ln.Addr().String(), "metrics", metricsAddr, "upstream", upstream.String())
	if ready != nil {
		ready(ln.Addr().String(), metricsAddr)
	}
	select {
	case <-ctx.Done():
	case err = <-errCh:
	}
	shutdown, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	_ = srv.Shutdown(shutdown)
	_ = srv.Close()
	if msrv != nil {
		_ = msrv.Close()
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
