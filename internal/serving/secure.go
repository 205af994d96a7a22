package serving

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	"k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes/scheme"
)

// AlwaysAllowPaths are served to anyone: health, for the kubelet's probes.
var AlwaysAllowPaths = []string{"/healthz", "/readyz", "/livez"}

// serveSecure listens on addr (host:port; port 0 picks one) with TLS and serves handler behind
// authentication and authorization until ctx ends. It returns the address it listens on and a
// channel closed once the server has stopped.
func (o *Options) serveSecure(ctx context.Context, addr string, handler http.Handler) (net.Addr, <-chan struct{}, error) {
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
