package bench

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
)

// CountingProxy sits between one component and the API server on loopback (plain HTTP in,
// the harness's admin credentials out) and counts every request by verb and resource, so a
// component's API requests are counted exactly, whatever metrics it exposes.
type CountingProxy struct {
	URL string

	ln     net.Listener
	srv    *http.Server
	infos  *request.RequestInfoFactory
	mu     sync.Mutex
	counts map[string]int // "list endpointslices"
}

// NewCountingProxy listens on a free loopback port and forwards to cfg's API server.
func NewCountingProxy(cfg *rest.Config) (*CountingProxy, error) {
	target, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &CountingProxy{URL: "http://" + ln.Addr().String(), ln: ln, counts: map[string]int{},
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
	})}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
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
