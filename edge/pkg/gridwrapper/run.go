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
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/staticip/staticip/internal/app"
	"github.com/staticip/staticip/internal/kubeclient"
	"github.com/staticip/staticip/internal/serving"
)

// ComponentName is the binary's name.
const ComponentName = "application-grid-wrapper"

// Options are the wrapper's flags.
type Options struct {
	// Common: the client flags and the status server: /metrics on the node's address (HTTPS,
	// delegated authn/authz), /healthz and /readyz on loopback for the kubelet's probes.
	app.Common
	NodeName      string
	ListenAddress string
	// SelectionChange: "refresh" (re-send the affected slices on the open watches) or
	// "relist" (end the watches with 410).
	SelectionChange string
	// WatchWriteTimeout bounds each write to an EndpointSlice watch client.
	WatchWriteTimeout time.Duration
}

// Ports of the wrapper on the node (host network): kube-proxy's, /metrics, health.
const (
	DefaultListenAddress      = "127.0.0.1:10266"
	DefaultHealthBindAddress  = "127.0.0.1:10267"
	DefaultMetricsBindAddress = ":10269"
)

// NewOptions returns the defaults: kube-proxy's side and health on loopback, /metrics on
// every address of the node (HTTPS, authenticated).
func NewOptions() *Options {
	return &Options{
		Common:            app.NewCommon(50, 100, DefaultMetricsBindAddress, DefaultHealthBindAddress),
		NodeName:          os.Getenv("NODE_NAME"),
		ListenAddress:     DefaultListenAddress,
		SelectionChange:   "refresh",
		WatchWriteTimeout: DefaultWriteTimeout,
	}
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Common.AddFlags(fs)
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "this node's name (default $NODE_NAME)")
	fs.StringVar(&o.ListenAddress, "listen-address", o.ListenAddress, "address kube-proxy connects to (plain HTTP: keep it on loopback)")
	fs.DurationVar(&o.WatchWriteTimeout, "watch-write-timeout", o.WatchWriteTimeout, "a write to an EndpointSlice watch client (kube-proxy) that does not complete by then drops that client, which re-watches")
	fs.StringVar(&o.SelectionChange, "selection-change", o.SelectionChange, `how kube-proxy learns of a selection change outside the EndpointSlice stream (annotation, node labels): "refresh" re-sends the affected slices on its open watch, "relist" ends the watch with 410 so it relists (slower: client-go's relist backoff)`)
}

// Validate checks the flags.
func (o *Options) Validate() error {
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, errors.New("--node-name (or $NODE_NAME) is required"))
	}
	if o.WatchWriteTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--watch-write-timeout: %v, want > 0", o.WatchWriteTimeout))
	}
	if o.SelectionChange != "refresh" && o.SelectionChange != "relist" {
		errs = append(errs, fmt.Errorf("--selection-change: %q, want refresh or relist", o.SelectionChange))
	}
	if _, _, err := net.SplitHostPort(o.ListenAddress); err != nil {
		errs = append(errs, fmt.Errorf("--listen-address: %w", err))
	}
	errs = append(errs, o.Common.Validate())
	return errors.Join(errs...)
}

// Config is the completed Options: what Run needs.
type Config struct {
	*Options
	Rest *rest.Config
	// Ready, if not nil, is told the bound addresses once the wrapper serves (tests).
	Ready func(proxyAddr string, status *serving.Server)
}

// Complete loads the wrapper's own identity; the delegated authn/authz of /metrics use it too.
func (o *Options) Complete() (*Config, error) {
	cfg, err := o.Load(ComponentName)
	if err != nil {
		return nil, err
	}
	return &Config{Options: o, Rest: cfg}, nil
}

// Run serves until ctx ends.
func Run(ctx context.Context, c *Config) error {
	o, cfg := c.Options, c.Rest
	m := NewMetrics()
	// The informers' client asks for protobuf like kube-proxy does.
	client, err := kubeclient.Kubernetes(cfg)
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
	status, err := o.Serving.Start(ctx, serving.Endpoints{Component: ComponentName, Metrics: m.Registry,
		Readyz: func(*http.Request) error {
			if !state.Synced() {
				return errors.New("caches not synced")
			}
			return nil
		}})
	if err != nil {
		_ = srv.Close()
		return err
	}
	klog.InfoS("Serving", "node", o.NodeName, "listen", ln.Addr().String(), "metrics", status.MetricsAddr, "health", status.HealthAddr, "upstream", upstream.String())
	if c.Ready != nil {
		c.Ready(ln.Addr().String(), status)
	}
	select {
	case <-ctx.Done():
	case err = <-errCh:
	}
	shutdown, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	_ = srv.Shutdown(shutdown)
	_ = srv.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
