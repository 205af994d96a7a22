package gridwrapper

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Filterer is what the proxy needs from State.
type Filterer interface {
	Synced() bool
	Filter(*discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice
	// HasTopology says whether the Service "namespace/name" carries topologyKeys.
	HasTopology(service string) bool
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
	upstream *url.URL
	client   *http.Client

	// RelistOnChange: a selection change ends every open EndpointSlice watch with 410 so
	// the clients relist, instead of refreshing the affected slices on the open watches.
	// Set before serving.
	RelistOnChange bool

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
}

// NewProxy proxies to upstream through transport (which carries the wrapper's own
// credentials).
func NewProxy(upstream *url.URL, transport http.RoundTripper, nodeName string, state Filterer, m *Metrics) *Proxy {
	p := &Proxy{nodeName: nodeName, state: state, metrics: m, watches: map[*watchFilter]struct{}{}, rvGen: map[string]uint64{},
		upstream: upstream, client: &http.Client{Transport: transport}}
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
	p.rp.ServeHTTP(rw, r)
}

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
		out, rv, err := filterList(info, raw, p.state.Filter)
		if err != nil {
			return err
		}
		p.metrics.filterSeconds.WithLabelValues("list").Observe(time.Since(start).Seconds())
		p.remember(rv, gen)
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
		wf.listAt = p.listAt(r, info)
		wf.onRefresh = p.refreshed
	}
	p.watches[wf] = struct{}{}
	stale := p.staleStart(r)
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
		// Not here: end writes into the pipe, which nobody reads before this returns.
		go wf.end("application-grid-wrapper: " + stale + ", relist")
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
	for _, wf := range open {
		if wf.listAt != nil {
			wf.refresh(c, gen)
			continue
		}
		p.metrics.watchResets.WithLabelValues("selection changed").Inc()
		// Each on its own: a client slow to read its stream must not hold up the others.
		go wf.end("application-grid-wrapper: topology selection changed, relist")
	}
	klog.V(2).InfoS("Topology selection changed", "watches", len(open), "services", len(c.Services), "allTopologyServices", c.All, "relist", p.RelistOnChange)
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

// maxNamedServices bounds the Services a refresh names in its label selector; beyond it
// the list is of all slices the client watches, narrowed here.
const maxNamedServices = 100

// listAt returns how a watch's refresh reads the client's view: the EndpointSlices the
// watch request selects, listed from the API server at exactly a resourceVersion (so
// exactly as the client holds them), in the watch's own encoding, those of the changed
// Services only.
func (p *Proxy) listAt(watchReq *http.Request, info runtime.SerializerInfo) func(string, Changes) ([]*discoveryv1.EndpointSlice, error) {
	ctx := watchReq.Context()
	q := watchReq.URL.Query()
	return func(rv string, c Changes) ([]*discoveryv1.EndpointSlice, error) {
		sel, err := labels.Parse(q.Get("labelSelector"))
		if err != nil {
			return nil, fmt.Errorf("label selector: %w", err)
		}
		if !c.All && len(c.Services) <= maxNamedServices {
			names := map[string]bool{}
			for key := range c.Services {
				if _, name, err := cache.SplitMetaNamespaceKey(key); err == nil {
					names[name] = true
				}
			}
			req, err := labels.NewRequirement(discoveryv1.LabelServiceName, selection.In, slices.Sorted(maps.Keys(names)))
			if err != nil {
				return nil, err
			}
			sel = sel.Add(*req)
		}
		out := url.Values{}
		if s := sel.String(); s != "" {
			out.Set("labelSelector", s)
		}
		if fs := q.Get("fieldSelector"); fs != "" {
			out.Set("fieldSelector", fs)
		}
		out.Set("resourceVersion", rv)
		out.Set("resourceVersionMatch", string(metav1.ResourceVersionMatchExact))
		u := p.upstream.JoinPath(watchReq.URL.Path)
		u.RawQuery = out.Encode()
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", info.MediaType)
		start := time.Now()
		resp, err := p.client.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		body := io.Reader(resp.Body)
		if strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip") {
			zr, err := gzip.NewReader(resp.Body)
			if err != nil {
				return nil, fmt.Errorf("gzip response: %w", err)
			}
			body = zr
		}
		raw, err := io.ReadAll(io.LimitReader(body, 1<<30))
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("API server answered %d: %s", resp.StatusCode, statusMessage(raw))
		}
		rinfo, err := serializerFor(resp.Header.Get("Content-Type"))
		if err != nil {
			return nil, err
		}
		list := &discoveryv1.EndpointSliceList{}
		if _, _, err := rinfo.Serializer.Decode(raw, nil, list); err != nil {
			return nil, fmt.Errorf("decoding EndpointSliceList: %w", err)
		}
		p.metrics.filterSeconds.WithLabelValues("refresh_list").Observe(time.Since(start).Seconds())
		held := make([]*discoveryv1.EndpointSlice, 0, len(list.Items))
		for i := range list.Items {
			es := &list.Items[i]
			if c.Affects(es.Namespace+"/"+es.Labels[discoveryv1.LabelServiceName], p.state.HasTopology) {
				held = append(held, es)
			}
		}
		return held, nil
	}
}

// statusMessage extracts the message of a metav1.Status body, or returns it shortened.
func statusMessage(raw []byte) string {
	var status metav1.Status
	if err := json.Unmarshal(raw, &status); err == nil && status.Message != "" {
		return status.Message
	}
	if len(raw) > 200 {
		raw = raw[:200]
	}
	return string(raw)
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
