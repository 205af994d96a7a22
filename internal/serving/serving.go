// Package serving is how every staticip binary (staticip-controller-manager, staticip-agent,
// application-grid-wrapper, statefulset-grid-daemon) serves its status:
//
//   - /metrics (client_golang registry) over HTTPS behind the API server's delegated
//     authentication and authorization, as kube-controller-manager and kube-scheduler do
//     (k8s.io/apiserver): a bearer token is checked with a TokenReview, a client certificate
//     against the cluster's client CA (the kube-system/extension-apiserver-authentication
//     ConfigMap), and GET /metrics (a non-resource URL) with a SubjectAccessReview. Without
//     --tls-cert-file/--tls-private-key-file a self-signed serving certificate is generated
//     in memory at start. On --metrics-bind-address, reachable from the cluster.
//   - /healthz and /readyz over plain HTTP, without credentials, for the kubelet's probes, on
//     --health-bind-address (loopback for the node daemons). When both addresses are the same,
//     one HTTPS port serves all three, the health paths always allowed.
//
// What a component's service account needs (manifests/*/rbac.yaml): the ClusterRole
// system:auth-delegator (create tokenreviews and subjectaccessreviews) and, in kube-system, the
// Role extension-apiserver-authentication-reader (the client-CA ConfigMap), as Kubernetes' own
// components. A scraper needs the ClusterRole staticip-metrics-reader (nonResourceURLs
// /metrics, get).
package serving

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/server/options"
	"k8s.io/klog/v2"

	"github.com/staticip/staticip/internal/version"
)

// Options are where a binary serves /metrics and health, and how /metrics is protected.
type Options struct {
	// MetricsBindAddress: /metrics over HTTPS, delegated authn/authz ("" or "0": off).
	MetricsBindAddress string
	// HealthBindAddress: /healthz and /readyz over plain HTTP, open ("" or "0": off).
	HealthBindAddress string
	// CertFile and KeyFile: the serving certificate of /metrics (empty: self-signed).
	CertFile, KeyFile string
	Authentication    *options.DelegatingAuthenticationOptions
	Authorization     *options.DelegatingAuthorizationOptions
}

// NewOptions returns the defaults of a binary: its two addresses; health paths always
// allowed, /metrics needs a caller the API server authenticates and authorizes
// (system:masters always is).
func NewOptions(metricsBindAddress, healthBindAddress string) *Options {
	authn := options.NewDelegatingAuthenticationOptions()
	// As kube-scheduler: a component that starts while the API server is away still serves
	// (bearer tokens are reviewed per request; only front-proxy request headers need the
	// ConfigMap read at start).
	authn.TolerateInClusterLookupFailure = true
	authz := options.NewDelegatingAuthorizationOptions()
	authz.AlwaysAllowPaths = slices.Clone(AlwaysAllowPaths)
	return &Options{MetricsBindAddress: metricsBindAddress, HealthBindAddress: healthBindAddress,
		Authentication: authn, Authorization: authz}
}

// AddFlags registers --metrics-bind-address, --health-bind-address, --tls-cert-file,
// --tls-private-key-file and the delegating authentication/authorization flags
// (--authentication-kubeconfig, --authorization-kubeconfig, --client-ca-file,
// --authorization-always-allow-paths, ...): the same names in every binary.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "Address of /metrics (HTTPS; callers authenticated and authorized by the API server: TokenReview, SubjectAccessReview of GET /metrics, e.g. the ClusterRole staticip-metrics-reader); empty or 0 disables it.")
	fs.StringVar(&o.HealthBindAddress, "health-bind-address", o.HealthBindAddress, "Address of /healthz and /readyz (plain HTTP, no credentials, for the kubelet's probes); empty or 0 disables it. The same address as --metrics-bind-address serves all three over HTTPS.")
	fs.StringVar(&o.CertFile, "tls-cert-file", o.CertFile, "Serving certificate of /metrics (HTTPS); empty: a self-signed one generated at start.")
	fs.StringVar(&o.KeyFile, "tls-private-key-file", o.KeyFile, "Private key of --tls-cert-file.")
	o.Authentication.AddFlags(fs)
	o.Authorization.AddFlags(fs)
}

// Enabled reports whether an address flag turns its server on.
func Enabled(addr string) bool { return addr != "" && addr != "0" }

// Validate checks the addresses and the certificate flags.
func (o *Options) Validate() error {
	var errs []error
	for _, a := range []struct{ flag, addr string }{{"--metrics-bind-address", o.MetricsBindAddress}, {"--health-bind-address", o.HealthBindAddress}} {
		if !Enabled(a.addr) {
			continue
		}
		if _, port, err := net.SplitHostPort(a.addr); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.flag, err))
		} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: port: %w", a.flag, a.addr, err))
		}
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file go together"))
	}
	errs = append(errs, o.Authentication.Validate()...)
	errs = append(errs, o.Authorization.Validate()...)
	return errors.Join(errs...)
}

// Complete makes the delegating authentication and authorization use kubeconfig (the
// binary's own --kubeconfig) when their own flags name none; empty: the in-cluster
// configuration.
func (o *Options) Complete(kubeconfig string) {
	if o.Authentication.RemoteKubeConfigFile == "" {
		o.Authentication.RemoteKubeConfigFile = kubeconfig
	}
	if o.Authorization.RemoteKubeConfigFile == "" {
		o.Authorization.RemoteKubeConfigFile = kubeconfig
	}
}

// Endpoints is what a binary serves.
type Endpoints struct {
	// Component names the binary (staticip_build_info's label, logs).
	Component string
	// Metrics is the binary's registry.
	Metrics prometheus.Gatherer
	// Healthz and Readyz: nil or a nil error is 200 "ok", an error 503 with its text.
	Healthz, Readyz func(*http.Request) error
}

// Server is a started status server.
type Server struct {
	// MetricsAddr and HealthAddr are the bound addresses ("" when off; the same when shared).
	MetricsAddr, HealthAddr string
	stopped                 []<-chan struct{}
}

// Stopped is closed once every listener has stopped (after ctx of Start ended).
func (s *Server) Stopped() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for _, c := range s.stopped {
			<-c
		}
		close(done)
	}()
	return done
}

// Handler is the mux of e: /metrics (with staticip_build_info), /healthz, /readyz.
func Handler(e Endpoints) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", MetricsHandler(e))
	HealthHandlers(mux, e)
	return mux
}

// MetricsHandler serves e.Metrics and staticip_build_info in the Prometheus formats.
func MetricsHandler(e Endpoints) http.Handler {
	build := prometheus.NewRegistry()
	build.MustRegister(BuildInfo(e.Component))
	return promhttp.HandlerFor(prometheus.Gatherers{e.Metrics, build}, promhttp.HandlerOpts{})
}

// BuildInfo is staticip_build_info{component,version,revision} 1.
func BuildInfo(component string) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "staticip_build_info",
		Help: "Always 1; the labels say which staticip release (internal/version) the binary is."},
		[]string{"component", "version", "revision"})
	g.WithLabelValues(component, version.Version, version.Revision()).Set(1)
	return g
}

// HealthHandlers adds /healthz and /readyz of e to mux.
func HealthHandlers(mux *http.ServeMux, e Endpoints) {
	check := func(f func(*http.Request) error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if f != nil {
				if err := f(r); err != nil {
					http.Error(w, err.Error(), http.StatusServiceUnavailable)
					return
				}
			}
			_, _ = w.Write([]byte("ok"))
		}
	}
	mux.HandleFunc("/healthz", check(e.Healthz))
	mux.HandleFunc("/readyz", check(e.Readyz))
}

// shared: one HTTPS port for /metrics and health (the same address, not port 0, which
// picks two ports).
func (o *Options) shared() bool {
	_, port, _ := net.SplitHostPort(o.MetricsBindAddress)
	return o.MetricsBindAddress == o.HealthBindAddress && port != "0"
}

// Start serves e on the options' addresses until ctx ends. On an error, what started stops
// with ctx.
func (o *Options) Start(ctx context.Context, e Endpoints) (*Server, error) {
	logger := klog.FromContext(ctx)
	s := &Server{}
	// Health first: it needs nothing from the API server, and the kubelet probes it.
	if Enabled(o.HealthBindAddress) && !o.shared() {
		ln, err := net.Listen("tcp", o.HealthBindAddress)
		if err != nil {
			return nil, fmt.Errorf("health on %s: %w", o.HealthBindAddress, err)
		}
		mux := http.NewServeMux()
		HealthHandlers(mux, e)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error(err, "Health server stopped", "address", o.HealthBindAddress)
			}
		}()
		context.AfterFunc(ctx, func() { _ = srv.Close() })
		s.HealthAddr, s.stopped = ln.Addr().String(), append(s.stopped, stopped)
		logger.Info("Serving /healthz and /readyz over HTTP", "component", e.Component, "address", s.HealthAddr)
	}
	if Enabled(o.MetricsBindAddress) {
		h := http.Handler(MetricsHandler(e))
		if o.shared() {
			h = Handler(e)
		}
		bound, stopped, err := o.serveSecure(ctx, o.MetricsBindAddress, h)
		if err != nil {
			return nil, fmt.Errorf("metrics on %s: %w", o.MetricsBindAddress, err)
		}
		s.MetricsAddr, s.stopped = bound.String(), append(s.stopped, stopped)
		if o.shared() {
			s.HealthAddr = s.MetricsAddr
		}
		logger.Info("Serving /metrics over HTTPS with delegated authentication and authorization", "component", e.Component, "address", s.MetricsAddr)
	}
	return s, nil
}
