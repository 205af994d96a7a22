// Package secureserving serves a component's /metrics (and any other endpoint) over HTTPS
// behind the API server's delegated authentication and authorization, as kube-controller-manager
// and kube-scheduler do (k8s.io/apiserver): a bearer token is checked with a TokenReview, a
// client certificate against the cluster's client CA (the kube-system/extension-apiserver-
// authentication ConfigMap), and the request (a non-resource URL such as GET /metrics) with a
// SubjectAccessReview. Health paths (/healthz, /readyz, /livez) are always allowed, without
// credentials, so probes need none. Without --tls-cert-file/--tls-private-key-file a
// self-signed serving certificate is generated in memory at start.
//
// What a component's service account needs (manifests/*/rbac.yaml): create tokenreviews and
// subjectaccessreviews, and get/list/watch the ConfigMap extension-apiserver-authentication in
// kube-system (Role extension-apiserver-authentication-reader, as Kubernetes' own components).
// A scraper needs the ClusterRole staticip-metrics-reader (nonResourceURLs /metrics, get).
package secureserving

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	"k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes/scheme"
)

// AlwaysAllowPaths are served to anyone: health, for the kubelet's probes.
var AlwaysAllowPaths = []string{"/healthz", "/readyz", "/livez"}

// Options are the serving certificate and the delegated authentication and authorization.
type Options struct {
	CertFile, KeyFile string
	Authentication    *options.DelegatingAuthenticationOptions
	Authorization     *options.DelegatingAuthorizationOptions
}

// NewOptions returns the defaults: health paths always allowed, everything else needs a
// caller the API server authenticates and authorizes (system:masters always is).
func NewOptions() *Options {
	authn := options.NewDelegatingAuthenticationOptions()
	authz := options.NewDelegatingAuthorizationOptions()
	authz.AlwaysAllowPaths = slices.Clone(AlwaysAllowPaths)
	return &Options{Authentication: authn, Authorization: authz}
}

// AddFlags registers --tls-cert-file, --tls-private-key-file and the delegating
// authentication/authorization flags (--authentication-kubeconfig, --authorization-kubeconfig,
// --client-ca-file, --authorization-always-allow-paths, ...).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.CertFile, "tls-cert-file", o.CertFile, "Serving certificate of the metrics endpoint (HTTPS); empty: a self-signed one generated at start.")
	fs.StringVar(&o.KeyFile, "tls-private-key-file", o.KeyFile, "Private key of --tls-cert-file.")
	o.Authentication.AddFlags(fs)
	o.Authorization.AddFlags(fs)
}

// DefaultKubeconfig makes the delegating authentication and authorization use kubeconfig
// when their own flags name none (empty: the in-cluster configuration).
func (o *Options) DefaultKubeconfig(kubeconfig string) {
	if o.Authentication.RemoteKubeConfigFile == "" {
		o.Authentication.RemoteKubeConfigFile = kubeconfig
	}
	if o.Authorization.RemoteKubeConfigFile == "" {
		o.Authorization.RemoteKubeConfigFile = kubeconfig
	}
}

// Serve listens on addr (host:port; port 0 picks one) with TLS and serves handler behind
// authentication and authorization until ctx ends. It returns the address it listens on and a
// channel closed once the server has stopped.
func (o *Options) Serve(ctx context.Context, addr string, handler http.Handler) (net.Addr, <-chan struct{}, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, nil, fmt.Errorf("address %q: port: %w", addr, err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return nil, nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	secure := options.NewSecureServingOptions()
	secure.Listener = ln
	secure.BindPort = ln.Addr().(*net.TCPAddr).Port
	if ip := net.ParseIP(host); ip != nil {
		secure.BindAddress = ip
	} else {
		secure.BindAddress = net.IPv4zero
	}
	secure.ServerCert.CertDirectory = "" // generated certificates stay in memory
	secure.ServerCert.CertKey = options.CertKey{CertFile: o.CertFile, KeyFile: o.KeyFile}
	fail := func(err error) (net.Addr, <-chan struct{}, error) {
		_ = ln.Close()
		return nil, nil, err
	}
	if err := secure.MaybeDefaultWithSelfSignedCerts("localhost", nil, nil); err != nil {
		return fail(fmt.Errorf("serving certificate: %w", err))
	}
	var serving *server.SecureServingInfo
	if err := secure.ApplyTo(&serving); err != nil {
		return fail(fmt.Errorf("serving: %w", err))
	}
	var authn server.AuthenticationInfo
	if err := o.Authentication.ApplyTo(&authn, serving, nil); err != nil {
		return fail(fmt.Errorf("delegated authentication: %w", err))
	}
	var authz server.AuthorizationInfo
	if err := o.Authorization.ApplyTo(&authz); err != nil {
		return fail(fmt.Errorf("delegated authorization: %w", err))
	}
	// The client CAs (the ConfigMap's, kept current) are run by Serve with the serving cert.
	stopped, _, err := serving.Serve(chain(handler, &authn, &authz), 5*time.Second, ctx.Done())
	if err != nil {
		return fail(err)
	}
	return ln.Addr(), stopped, nil
}

// chain is kube-controller-manager's handler chain (k8s.io/controller-manager/app
// BuildHandlerChain) without what a metrics endpoint does not need.
func chain(h http.Handler, authn *server.AuthenticationInfo, authz *server.AuthorizationInfo) http.Handler {
	resolver := &apirequest.RequestInfoFactory{}
	h = genericapifilters.WithAuthorization(h, authz.Authorizer, scheme.Codecs)
	h = genericapifilters.WithAuthentication(h, authn.Authenticator, genericapifilters.Unauthorized(scheme.Codecs), nil, nil)
	h = genericapifilters.WithRequestInfo(h, resolver)
	h = genericapifilters.WithCacheControl(h)
	return genericfilters.WithPanicRecovery(h, resolver)
}
