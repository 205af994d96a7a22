package gridwrapper

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
)

// Filterer is what the proxy needs from State.
type Filterer interface {
	Synced() bool
	Filter(*discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice
}

// ChangeSource tells the proxy when, and for which Services, the selection changed
// outside the EndpointSlice stream (State).
type ChangeSource interface {
	Changed() <-chan struct{}
	TakeChanges() Changes
}

// route is what the wrapper does with one kind of request.
type route int

const (
	refuse       route = iota
	pass               // proxied unchanged
	filterSlices       // EndpointSlice list or watch: rewritten
)

// Paths kube-proxy v1.36 uses (see edge/README.md, "What kube-proxy asks for").
var (
	slicesPath     = regexp.MustCompile(`^/apis/discovery\.k8s\.io/v1/endpointslices$`)
	servicesPath   = regexp.MustCompile(`^/api/v1/services$`)
	cidrsPath      = regexp.MustCompile(`^/apis/networking\.k8s\.io/v1/servicecidrs$`)
	nodesPath      = regexp.MustCompile(`^/api/v1/nodes$`)
	nodePath       = regexp.MustCompile(`^/api/v1/nodes/([^/]+)$`)
	eventsPath     = regexp.MustCompile(`^/apis/events\.k8s\.io/v1/namespaces/[^/]+/events$`)
	eventPath      = regexp.MustCompile(`^/apis/events\.k8s\.io/v1/namespaces/[^/]+/events/[^/]+$`)
	discoveryPaths = map[string]bool{"/version": true}
)

// Proxy is the HTTP handler kube-proxy talks to.
type Proxy struct {
	nodeName string
	state    Filterer
	metrics  *Metrics
	rp       *httputil.ReverseProxy

	// RelistOnChange: a selection change ends every open EndpointSlice watch with 410 so
	// the clients relist, instead of refreshing the affected slices on the open watches.
	// Set before serving.
	RelistOnChange bool
	// WriteTimeout bounds each write to an EndpointSlice watch client (0: DefaultWriteTimeout):
	// a client that does not read is dropped (it re-watches, as after any broken watch) rather
	// than holding its stream, and the upstream watch behind it, forever. Set before serving.
	WriteTimeout time.Duration

	mu      sync.Mutex
	watches map[*watchFilter]struct{}
	// generation counts selection changes; rvGen remembers, for resourceVersions this
	// wrapper handed out (a list's, the last one of an ended watch), the generation their
	// data was filtered with. A watch resuming from an older generation, or from a
	// resourceVersion this wrapper never handed out (it restarted), is ended at once so
	// the client relists.
	generation uint64
	rvGen      map[string]uint64
	rvOrder    []string
	// views are the clients' views (what they hold of the slices) at the resourceVersions of
	// the lists served and the watches ended, which a watch resuming from one of them starts
	// from (cloned); pages are those of paginated lists by continue token, until their last
	// page. Both bounded (maxViews).
	views     map[string]*view
	viewOrder []string
	pages     map[string]*view
	pageOrder []string
}

// maxViews bounds the views kept (one client, kube-proxy, needs one or two at a time).
const maxViews = 8

// DefaultWriteTimeout is the default Proxy.WriteTimeout.
const DefaultWriteTimeout = 30 * time.Second

// keep adds v under key to a bounded map with its insertion order.
func keep(m map[string]*view, order *[]string, key string, v *view) {
	if _, ok := m[key]; !ok {
		*order = append(*order, key)
		if len(*order) > maxViews {
			delete(m, (*order)[0])
			*order = (*order)[1:]
		}
	}
	m[key] = v
}

// saveView keeps the client's view at resourceVersion rv.
func (p *Proxy) saveView(rv string, v *view) {
	if rv == "" || v == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	keep(p.views, &p.viewOrder, rv, v)
}

// NewProxy proxies to upstream through transport (which carries the wrapper's own
// credentials).
func NewProxy(upstream *url.URL, transport http.RoundTripper, nodeName string, state Filterer, m *Metrics) *Proxy {
	p := &Proxy{nodeName: nodeName, state: state, metrics: m, watches: map[*watchFilter]struct{}{}, rvGen: map[string]uint64{},
		views: map[string]*view{}, pages: map[string]*view{}}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(upstream)
			r.Out.Host = upstream.Host
			// The caller's identity is never forwarded: the wrapper speaks as itself.
			r.Out.Header.Del("Authorization")
			for h := range r.Out.Header {
				if strings.HasPrefix(h, "Impersonate-") {
					r.Out.Header.Del(h)
				}
			}
			if classify(r.In, nodeName) == filterSlices {
				r.Out.Header.Set("Accept", acceptFor(r.In.Header.Get("Accept")))
			}
		},
		Transport:      transport,
		FlushInterval:  -1,
		ModifyResponse: p.modifyResponse,
		ErrorHandler: func(rw http.ResponseWriter, r *http.Request, err error) {
			klog.V(2).InfoS("Upstream request failed", "method", r.Method, "path", r.URL.Path, "err", err)
			writeStatus(rw, &apierrors.NewServiceUnavailable(fmt.Sprintf("application-grid-wrapper: API server unreachable: %v", err)).ErrStatus)
		},
	}
	return p
}

// acceptFor keeps the client's preference between protobuf and JSON and drops anything
// else (CBOR, Table, YAML), so the API server only answers in an encoding the wrapper can
// filter.
func acceptFor(accept string) string {
	if strings.Contains(accept, mediaTypeProtobuf) {
		return mediaTypeProtobuf + ", " + mediaTypeJSON
	}
	return mediaTypeJSON
}

// classify decides what to do with a request: only the reads and Event writes
// kube-proxy makes are served, everything else is refused.
func classify(r *http.Request, nodeName string) route {
	path := r.URL.Path
	switch r.Method {
	case http.MethodGet:
		switch {
		case slicesPath.MatchString(path):
			return filterSlices
		case servicesPath.MatchString(path), cidrsPath.MatchString(path), discoveryPaths[path]:
			return pass
		case nodesPath.MatchString(path):
			// Only this node's object, as kube-proxy's node informer asks for it.
			sel, err := fields.ParseSelector(r.URL.Query().Get("fieldSelector"))
			if err != nil {
				return refuse
			}
			if name, ok := sel.RequiresExactMatch("metadata.name"); ok && name == nodeName && len(sel.Requirements()) == 1 {
				return pass
			}
			return refuse
		case nodePath.MatchString(path):
			if nodePath.FindStringSubmatch(path)[1] == nodeName {
				return pass
			}
			return refuse
		}
	case http.MethodPost:
		if eventsPath.MatchString(path) {
			return pass
		}
	case http.MethodPatch, http.MethodPut:
		if eventPath.MatchString(path) {
			return pass
		}
	}
	return refuse
}

func isWatch(r *http.Request) bool {
	w := r.URL.Query().Get("watch")
	return w == "true" || w == "1"
}

func (p *Proxy) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	rt := classify(r, p.nodeName)
	resource := resourceOf(r.URL.Path)
	verb := verbOf(r)
	switch rt {
	case refuse:
		p.metrics.requests.WithLabelValues(resource, verb, "refused").Inc()
		klog.V(1).InfoS("Refused request", "method", r.Method, "path", r.URL.Path, "query", r.URL.RawQuery, "remote", r.RemoteAddr)
		writeStatus(rw, &apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "",
			fmt.Errorf("application-grid-wrapper serves only what kube-proxy reads on node %q and its Event writes", p.nodeName)).ErrStatus)
		return
	case filterSlices:
		if !p.state.Synced() {
			p.metrics.requests.WithLabelValues(resource, verb, "not_synced").Inc()
			rw.Header().Set("Retry-After", "1")
			writeStatus(rw, &apierrors.NewTooManyRequests("application-grid-wrapper: topology caches are not synced yet", 1).ErrStatus)
			return
		}
	}
	p.metrics.requests.WithLabelValues(resource, verb, "proxied").Inc()
	if rt == filterSlices && isWatch(r) {
		timeout := p.WriteTimeout
		if timeout <= 0 {
			timeout = DefaultWriteTimeout
		}
		dw := &deadlineWriter{ResponseWriter: rw, rc: http.NewResponseController(rw), timeout: timeout}
		// The connection may serve the client's next request: no deadline left behind.
		defer func() { _ = dw.rc.SetWriteDeadline(time.Time{}) }()
		rw = dw
	}
	p.rp.ServeHTTP(rw, r)
}

// deadlineWriter bounds every write (and flush) to a watch client by a deadline: past it the
// write fails, the reverse proxy aborts the response and closes the stream it copies from, and
// the watch's forwarding goroutine ends.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (d *deadlineWriter) Write(b []byte) (int, error) {
	_ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
	return d.ResponseWriter.Write(b)
}

func (d *deadlineWriter) FlushError() error {
	_ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
	return d.rc.Flush()
}

func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }

func (p *Proxy) modifyResponse(resp *http.Response) error {
	r := resp.Request
	if classify(r, p.nodeName) != filterSlices || resp.StatusCode != http.StatusOK {
		return nil
	}
	info, err := serializerFor(resp.Header.Get("Content-Type"))
	if err != nil {
		// Never let an encoding the wrapper cannot read pass unfiltered.
		return err
	}
	body := resp.Body
	if strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return fmt.Errorf("gzip response: %w", err)
		}
		body = readCloser{zr, resp.Body}
		resp.Header.Del("Content-Encoding")
	}
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1

	p.mu.Lock()
	gen := p.generation
	p.mu.Unlock()
	if !isWatch(r) {
		start := time.Now()
		raw, err := io.ReadAll(body)
		body.Close()
		if err != nil {
			return err
		}
		// The client's view: a first page starts one, a further page adds to its first's.
		var v *view
		if cont := r.URL.Query().Get("continue"); cont == "" {
			v = newView()
		} else {
			p.mu.Lock()
			v = p.pages[cont]
			delete(p.pages, cont)
			p.mu.Unlock()
		}
		out, lm, err := filterList(info, raw, p.state.Filter, v)
		if err != nil {
			return err
		}
		p.metrics.filterSeconds.WithLabelValues("list").Observe(time.Since(start).Seconds())
		if lm.Continue != "" {
			if v != nil {
				p.mu.Lock()
				keep(p.pages, &p.pageOrder, lm.Continue, v)
				p.mu.Unlock()
			}
		} else {
			p.saveView(lm.ResourceVersion, v)
		}
		p.remember(lm.ResourceVersion, gen)
		resp.Body = io.NopCloser(bytes.NewReader(out))
		resp.ContentLength = int64(len(out))
		resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
		return nil
	}

	pr, pw := io.Pipe()
	// The generation is read and the watch registered under one lock: a selection change
	// either happened before (then the start is stale if the client's data is older) or
	// reaches this watch.
	p.mu.Lock()
	gen = p.generation
	wf := newWatchFilter(info, body, pw, func(es *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
		start := time.Now()
		out := p.state.Filter(es)
		p.metrics.filterSeconds.WithLabelValues("watch_event").Observe(time.Since(start).Seconds())
		return out
	}, p.remember)
	wf.gen = gen
	wf.pos = newStreamPosition(r.URL.Query())
	if !p.RelistOnChange {
		wf.refreshes = true
		wf.onRefresh = p.refreshed
		wf.onEnd = p.saveView
	}
	p.watches[wf] = struct{}{}
	stale := p.staleStart(r)
	if stale == "" && wf.refreshes && wf.pos.rv != "" {
		// A watch resuming from a resourceVersion: the client holds the view of the list or
		// watch that handed it out.
		if v := p.views[wf.pos.rv]; v != nil {
			wf.held = v.clone()
		} else {
			stale = "no view of that resourceVersion"
		}
	}
	p.mu.Unlock()
	p.metrics.watchesOpen.Inc()
	go func() {
		err := wf.run()
		p.mu.Lock()
		delete(p.watches, wf)
		p.mu.Unlock()
		p.metrics.watchesOpen.Dec()
		if err != nil {
			klog.V(2).InfoS("EndpointSlice watch ended", "err", err)
		}
	}()
	if stale != "" {
		p.metrics.watchResets.WithLabelValues(stale).Inc()
		klog.V(2).InfoS("Ending EndpointSlice watch at once so the client relists", "reason", stale, "resourceVersion", r.URL.Query().Get("resourceVersion"))
		// Written by the watch's own goroutine, once the client reads.
		wf.end("application-grid-wrapper: " + stale + ", relist")
	}
	resp.Body = pr
	return nil
}

// staleStart says why a watch must be ended before it starts, or "". Watches that send
// the full state first (no resourceVersion, "0", or WatchList's sendInitialEvents) never
// are. p.mu is held.
func (p *Proxy) staleStart(r *http.Request) string {
	q := r.URL.Query()
	rv := q.Get("resourceVersion")
	if rv == "" || rv == "0" || q.Get("sendInitialEvents") == "true" {
		return ""
	}
	g, ok := p.rvGen[rv]
	switch {
	case !ok:
		return "resourceVersion not handed out by this wrapper"
	case g != p.generation:
		return "selection changed since that resourceVersion"
	}
	return ""
}

// remember records the generation a resourceVersion's data was filtered with (bounded).
// A later generation for the same resourceVersion wins (a watch's refresh).
func (p *Proxy) remember(rv string, gen uint64) {
	if rv == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.rvGen[rv]; !ok {
		p.rvOrder = append(p.rvOrder, rv)
		if len(p.rvOrder) > 1024 {
			delete(p.rvGen, p.rvOrder[0])
			p.rvOrder = p.rvOrder[1:]
		}
	}
	p.rvGen[rv] = max(p.rvGen[rv], gen)
}

// SelectionChanged brings every open EndpointSlice watch to the new selection: the
// affected slices are re-sent on the watch (watchFilter.writeRefresh), or, when that is
// impossible or RelistOnChange is set, the watch is ended with 410 Expired so the client
// relists through the filter.
func (p *Proxy) SelectionChanged(c Changes) {
	p.mu.Lock()
	p.generation++
	gen := p.generation
	open := make([]*watchFilter, 0, len(p.watches))
	for wf := range p.watches {
		open = append(open, wf)
	}
	p.mu.Unlock()
	// Neither call blocks: each watch's own goroutine writes, so a client slow to read its
	// stream holds up nobody else.
	for _, wf := range open {
		if wf.refreshes {
			wf.refresh(c, gen)
			continue
		}
		p.metrics.watchResets.WithLabelValues("selection changed").Inc()
		wf.end("application-grid-wrapper: topology selection changed, relist")
	}
	klog.V(2).InfoS("Topology selection changed", "watches", len(open), "services", len(c.Services), "relist", p.RelistOnChange)
}

// refreshed records the outcome of one watch's refresh.
func (p *Proxy) refreshed(resent int, err error) {
	switch {
	case err != nil:
		p.metrics.refreshes.WithLabelValues("failed").Inc()
		p.metrics.watchResets.WithLabelValues("refresh impossible").Inc()
		klog.V(1).InfoS("Could not refresh an EndpointSlice watch: ending it so the client relists", "err", err)
	case resent == 0:
		p.metrics.refreshes.WithLabelValues("unchanged").Inc()
	default:
		p.metrics.refreshes.WithLabelValues("resent").Inc()
		p.metrics.refreshedSlices.Add(float64(resent))
	}
}

// coalesce bounds how often open watches are brought to a new selection during a burst
// of changes (a rollout relabelling nodes, a kubectl apply of many Services). Refreshing:
// the first change of a burst goes out at once, the rest at most every coalesce (each
// refresh costs a list per watch). Relisting: every change waits coalesce for the rest of
// its burst (each costs kube-proxy a relist, and client-go backs off more with each relist
// that follows another closely).
const coalesce = 100 * time.Millisecond

// RunSelectionChanges brings the open watches to the new selection whenever src fires
// (bursts coalesced), until ctx ends.
func (p *Proxy) RunSelectionChanges(ctx context.Context, src ChangeSource) {
	changed := src.Changed()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		if p.RelistOnChange {
			timer := time.NewTimer(coalesce)
		burst:
			for {
				select {
				case <-ctx.Done():
					timer.Stop()
					return
				case <-changed:
				case <-timer.C:
					break burst
				}
			}
		}
		if c := src.TakeChanges(); !c.Empty() {
			p.SelectionChanged(c)
		}
		if !p.RelistOnChange {
			// Changes meanwhile stay in src (and its signal in changed) for the next round.
			select {
			case <-ctx.Done():
				return
			case <-time.After(coalesce):
			}
		}
	}
}

type readCloser struct {
	io.Reader
	io.Closer
}

func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		if len(parts) >= 5 && parts[2] == "namespaces" {
			return parts[4]
		}
		return parts[2]
	case len(parts) >= 4 && parts[0] == "apis":
		if len(parts) >= 6 && parts[3] == "namespaces" {
			return parts[5]
		}
		return parts[3]
	case len(parts) == 1 && parts[0] == "version":
		return "version"
	}
	return "other"
}

func verbOf(r *http.Request) string {
	switch r.Method {
	case http.MethodGet:
		if isWatch(r) {
			return "watch"
		}
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPatch:
		return "patch"
	case http.MethodPut:
		return "update"
	case http.MethodDelete:
		return "delete"
	}
	return strings.ToLower(r.Method)
}
