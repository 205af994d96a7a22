package bench

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
)

// CountingProxy sits between one component and the API server on loopback (HTTPS with
// HTTP/2 in, the harness's admin credentials out) and counts every request by verb and
// resource, so a component's API requests are counted exactly, whatever metrics it exposes.
//
// It speaks TLS so that clients negotiate HTTP/2, as with a real kube-apiserver: over plain
// HTTP client-go falls back to HTTP/1.1, one connection per request in flight. At 1,000
// nodes kube-scheduler's asynchronous binds then held 15,540 connections to its proxy
// (2 GiB RSS), the harness ran out of file descriptors ("accept4: too many open files",
// 2026-11-28) and both schedulers spent CPU dialing (net/http dialConn: 4–9 % of their
// profiles) — costs no real cluster has.
type CountingProxy struct {
	URL string
	// CAData is the PEM certificate clients trust (the proxy's own, self-signed).
	CAData []byte

	ln     net.Listener
	srv    *http.Server
	infos  *request.RequestInfoFactory
	mu     sync.Mutex
	counts map[string]int // "list endpointslices"
}

// MaxAPIServerConns bounds the connections one proxy opens to the API server
// (TestProxyBoundsItsConnectionsToTheAPIServer): one proxy needs one or two.
const MaxAPIServerConns = 4

// upstreamTransport reaches the API server over HTTP/2 with one dial at a time: a new
// connection only when every open one is at its stream limit, and after a lost connection one
// redial. client-go's transport (net/http with HTTP/2 attached) dials once per request while
// no connection is up — after every connection the loaded API server dropped (its 15 s ping
// deadline) the proxy of a scheduler with thousands of binds in flight dialed thousands of
// times, filled the API server's accept queue and failed the binds (2026-11-28, 300 nodes:
// 942 connections, 5,265 more in SYN-SENT). A real kube-scheduler holds one connection to a
// real kube-apiserver; the proxy now does as well. Plain-HTTP targets (tests) keep client-go's
// transport.
func upstreamTransport(cfg *rest.Config, target *url.URL) (http.RoundTripper, error) {
	if target.Scheme != "https" {
		return rest.TransportFor(cfg)
	}
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	if tlsConfig == nil {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	tlsConfig = tlsConfig.Clone()
	tlsConfig.NextProtos = []string{"h2"}
	h2 := &http2.Transport{TLSClientConfig: tlsConfig, ReadIdleTimeout: 30 * time.Second, PingTimeout: 15 * time.Second}
	return rest.HTTPWrappersForConfig(cfg, h2)
}

// NewCountingProxy listens on a free loopback port and forwards to cfg's API server.
func NewCountingProxy(cfg *rest.Config) (*CountingProxy, error) {
	target, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	rt, err := upstreamTransport(cfg, target)
	if err != nil {
		return nil, err
	}
	cert, caPEM, err := loopbackCert()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &CountingProxy{URL: "https://" + ln.Addr().String(), CAData: caPEM, ln: ln, counts: map[string]int{},
		infos: &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = rt
	rp.FlushInterval = -1 // watches stream
	// A client that goes away mid-request (a watch it ends, a component stopped) is normal.
	rp.ErrorLog = log.New(io.Discard, "", 0)
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.count(r)
		r.Host = target.Host
		rp.ServeHTTP(w, r)
	}), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12}}
	go func() { _ = p.srv.ServeTLS(ln, "", "") }()
	return p, nil
}

// ClientConfig is a rest.Config reaching the API server through p.
func (p *CountingProxy) ClientConfig() *rest.Config {
	return &rest.Config{Host: p.URL, TLSClientConfig: rest.TLSClientConfig{CAData: p.CAData}}
}

// loopbackCert is a self-signed serving certificate for 127.0.0.1 and its PEM.
func loopbackCert() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "scalebench-proxy"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return cert, certPEM, err
}

func (p *CountingProxy) count(r *http.Request) {
	key := r.Method + " " + r.URL.Path
	if info, err := p.infos.NewRequestInfo(r); err == nil && info.IsResourceRequest {
		key = info.Verb + " " + info.Resource
		if info.Subresource != "" {
			key += "/" + info.Subresource
		}
	}
	p.mu.Lock()
	p.counts[key]++
	p.mu.Unlock()
}

// Counts returns a copy of the counts so far.
func (p *CountingProxy) Counts() Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := Counts{}
	for k, v := range p.counts {
		c[k] = v
	}
	return c
}

// Close stops the proxy (open watches end).
func (p *CountingProxy) Close() { _ = p.srv.Close() }

// Counts are API requests by "verb resource".
type Counts map[string]int

// Total is every request counted.
func (c Counts) Total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// Verb sums the requests of one verb (list, watch, create, ...), over resources whose name
// has the given prefix ("" for all).
func (c Counts) Verb(verb, resource string) int {
	n := 0
	for k, v := range c {
		vb, res, _ := strings.Cut(k, " ")
		if vb == verb && strings.HasPrefix(res, resource) {
			n += v
		}
	}
	return n
}

// Sub is c minus an earlier snapshot.
func (c Counts) Sub(before Counts) Counts {
	d := Counts{}
	for k, v := range c {
		if v-before[k] != 0 {
			d[k] = v - before[k]
		}
	}
	return d
}

// String lists the counts, largest first.
func (c Counts) String() string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if c[keys[i]] != c[keys[j]] {
			return c[keys[i]] > c[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, c[k])
	}
	return strings.Join(parts, " ")
}
