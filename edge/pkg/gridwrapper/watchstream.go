package gridwrapper

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"sync"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
)

// The media types whose EndpointSlice responses the wrapper can rewrite. Requests for
// EndpointSlices accept only these upstream (proxy.go), so no other encoding (CBOR, YAML,
// Table) can carry unfiltered endpoints past the wrapper.
const (
	mediaTypeProtobuf = runtime.ContentTypeProtobuf
	mediaTypeJSON     = runtime.ContentTypeJSON
)

// maxFrameBytes bounds one watch frame (client-go's own limit is the same order: 16 MiB).
const maxFrameBytes = 16 << 20

// serializerFor returns the serializer of a response's Content-Type, e.g.
// "application/vnd.kubernetes.protobuf;stream=watch" or "application/json".
func serializerFor(contentType string) (runtime.SerializerInfo, error) {
	mediaType, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return runtime.SerializerInfo{}, fmt.Errorf("content type %q: %w", contentType, err)
	}
	if mediaType != mediaTypeProtobuf && mediaType != mediaTypeJSON {
		return runtime.SerializerInfo{}, fmt.Errorf("content type %q cannot be filtered", contentType)
	}
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mediaType)
	if !ok || info.StreamSerializer == nil {
		return runtime.SerializerInfo{}, fmt.Errorf("content type %q has no serializer", contentType)
	}
	return info, nil
}

// sliceFilter returns what the client may see of one slice (never nil).
type sliceFilter func(*discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice

// filterList decodes an EndpointSliceList in its own encoding, filters every item and
// encodes it back the same way. List metadata (resourceVersion, continue) is untouched and
// returned. v, when not nil, records every item as the client will hold it.
func filterList(info runtime.SerializerInfo, body []byte, filter sliceFilter, v *view) ([]byte, metav1.ListMeta, error) {
	list := &discoveryv1.EndpointSliceList{}
	if _, _, err := info.Serializer.Decode(body, nil, list); err != nil {
		return nil, metav1.ListMeta{}, fmt.Errorf("decoding EndpointSliceList: %w", err)
	}
	for i := range list.Items {
		orig := list.Items[i] // shallow: the filter never modifies its input
		out := filter(&list.Items[i])
		if v != nil {
			v.put(&orig, fingerprint(orig.ResourceVersion, out))
		}
		if out != &list.Items[i] {
			list.Items[i] = *out
		}
	}
	var buf bytes.Buffer
	enc := scheme.Codecs.EncoderForVersion(info.Serializer, discoveryv1.SchemeGroupVersion)
	if err := enc.Encode(list, &buf); err != nil {
		return nil, metav1.ListMeta{}, fmt.Errorf("encoding EndpointSliceList: %w", err)
	}
	return buf.Bytes(), list.ListMeta, nil
}

// view is what one client holds of the EndpointSlices it lists and watches through the
// wrapper: the version of each slice its list or stream carried (unfiltered, managedFields
// dropped), by Service, and a fingerprint of the filtered version it was sent. A selection
// change re-filters the held versions of the changed Services and re-sends those whose result
// differs: no request to the API server.
type view struct {
	bySvc map[string]map[string]*discoveryv1.EndpointSlice // service -> slice key -> held version
	sent  map[string]string                                // slice key -> fingerprint sent
	svcOf map[string]string                                // slice key -> service
}

func newView() *view {
	return &view{bySvc: map[string]map[string]*discoveryv1.EndpointSlice{}, sent: map[string]string{}, svcOf: map[string]string{}}
}

func serviceOf(es *discoveryv1.EndpointSlice) string {
	return es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]
}

// put records es (not modified afterwards by anyone) as held, sent with fingerprint fp.
func (v *view) put(es *discoveryv1.EndpointSlice, fp string) {
	key := es.Namespace + "/" + es.Name
	v.remove(key)
	held := es
	if len(es.ManagedFields) > 0 {
		cp := *es
		cp.ManagedFields = nil
		held = &cp
	}
	svc := serviceOf(es)
	if v.bySvc[svc] == nil {
		v.bySvc[svc] = map[string]*discoveryv1.EndpointSlice{}
	}
	v.bySvc[svc][key] = held
	v.svcOf[key] = svc
	v.sent[key] = fp
}

func (v *view) remove(key string) {
	if svc, ok := v.svcOf[key]; ok {
		delete(v.bySvc[svc], key)
		if len(v.bySvc[svc]) == 0 {
			delete(v.bySvc, svc)
		}
		delete(v.svcOf, key)
	}
	delete(v.sent, key)
}

// clone copies the index (the held slices are shared: nobody modifies them).
func (v *view) clone() *view {
	out := &view{bySvc: make(map[string]map[string]*discoveryv1.EndpointSlice, len(v.bySvc)), sent: maps.Clone(v.sent), svcOf: maps.Clone(v.svcOf)}
	for svc, m := range v.bySvc {
		out.bySvc[svc] = maps.Clone(m)
	}
	return out
}

// watchFilter rewrites one EndpointSlice watch stream frame by frame: ADDED, MODIFIED
// and DELETED carry a filtered slice re-encoded in the stream's encoding; BOOKMARK
// (including WatchList's k8s.io/initial-events-end) and ERROR frames are written exactly
// as they arrived. Nothing is buffered beyond one frame.
//
// A selection change (refresh) is written into the same stream by the same goroutine
// that forwards the API server's frames, between two of them: for each slice of an
// affected Service, the version the client holds (the view: what its list and this stream
// carried) re-filtered, as a MODIFIED event carrying that version's own resourceVersion,
// then a BOOKMARK at the stream's newest resourceVersion (see writeRefresh). The only other
// frame the wrapper writes itself is the 410 Expired ERROR of end(), when a refresh is
// impossible. That goroutine is the only writer, and holds no lock while it writes: a client
// that does not read blocks its own stream only (the proxy's write timeout then drops it).
type watchFilter struct {
	info   runtime.SerializerInfo
	in     io.ReadCloser
	out    *io.PipeWriter
	filter sliceFilter
	// onEvent gets the resourceVersion of every event or bookmark passed on, and the
	// selection generation the client's view at that resourceVersion was filtered with.
	onEvent func(rv string, gen uint64)
	// refreshes: a selection change is re-sent on the stream; false: every selection change
	// ends the watch with 410.
	refreshes bool
	// onRefresh, when set, gets the outcome of every refresh (slices re-sent or error).
	onRefresh func(resent int, err error)
	// onEnd, when set, gets the client's view at the stream's position when the stream ends
	// other than with a 410 (the client resumes from there), before the client sees the end.
	onEnd func(rv string, v *view)

	// Owned by the forwarding goroutine (run).
	pos streamPosition
	// held is the client's view: the versions of the slices it holds and the fingerprint
	// of what it was sent of each (resourceVersion and the endpoints kept), so a refresh
	// re-sends only what changes.
	held *view
	// gen is the selection generation the client's view was last filtered with.
	gen uint64

	kick chan struct{} // a refresh or an end is pending (capacity 1)

	// mu guards what other goroutines hand to run; never held while writing to the client.
	mu         sync.Mutex
	ended      bool
	endReason  string // end() asked for a 410 with this reason
	pending    Changes
	pendingGen uint64
}

// streamPosition is the bookkeeping of the newest resourceVersion the API server
// delivered on one watch stream: the state the client's store is at. A refresh lists at
// exactly this resourceVersion and ends with a BOOKMARK at it, so the client's
// lastSyncResourceVersion is where the API server left it, never older.
type streamPosition struct {
	// rv is "" while unknown: a WatchList watch before its initial-events-end bookmark
	// (its initial ADDED events are not in resourceVersion order), or a watch from ""/"0"
	// without sendInitialEvents (initial events with no end marker).
	rv string
	// initial: a WatchList watch that has not yet sent its initial-events-end bookmark.
	initial bool
	// bookmarks: the client asked for bookmarks (allowWatchBookmarks), so the closing
	// BOOKMARK of a refresh is something it reads.
	bookmarks bool
}

// newStreamPosition reads a watch request's query.
func newStreamPosition(q url.Values) streamPosition {
	p := streamPosition{bookmarks: q.Get("allowWatchBookmarks") == "true"}
	rv := q.Get("resourceVersion")
	switch {
	case q.Get("sendInitialEvents") == "true":
		p.initial = true
	case rv != "" && rv != "0":
		p.rv = rv
	}
	return p
}

// observe advances the position past one frame the API server sent (event type, its
// object's resourceVersion, whether it is the initial-events-end bookmark).
func (p *streamPosition) observe(eventType watch.EventType, rv string, initialEnd bool) {
	if rv == "" || eventType == watch.Error {
		return
	}
	if p.initial {
		if eventType == watch.Bookmark && initialEnd {
			p.initial = false
			p.rv = rv
		}
		return
	}
	if p.rv != "" {
		p.rv = rv
	}
}

// refreshable says whether a refresh can be written now: "" yes, otherwise why not
// (then the watch is ended with 410). wait: not yet, retry after the initial events.
func (p *streamPosition) refreshable() (wait bool, whyNot string) {
	switch {
	case p.initial:
		return true, ""
	case !p.bookmarks:
		return false, "client does not accept bookmarks"
	case p.rv == "":
		return false, "stream position unknown"
	}
	return false, ""
}

func newWatchFilter(info runtime.SerializerInfo, in io.ReadCloser, out *io.PipeWriter, filter sliceFilter, onEvent func(string, uint64)) *watchFilter {
	return &watchFilter{info: info, in: in, out: out, filter: filter, onEvent: onEvent,
		held: newView(), kick: make(chan struct{}, 1)}
}

// refresh asks the forwarding goroutine to re-send the slices of the changed Services
// (selection generation gen).
func (w *watchFilter) refresh(c Changes, gen uint64) {
	w.mu.Lock()
	w.pending.Merge(c)
	w.pendingGen = max(w.pendingGen, gen)
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

type frameOrErr struct {
	frame []byte
	err   error
}

// run copies the stream until the upstream ends, the client goes away or end() is
// called. It is the only writer of the stream.
func (w *watchFilter) run() error {
	frames := make(chan frameOrErr)
	done := make(chan struct{})
	defer w.in.Close() // runs after close(done): unblocks the reader
	defer close(done)
	go func() {
		r := w.info.StreamSerializer.Framer.NewFrameReader(w.in)
		buf := make([]byte, 64<<10)
		for {
			frame, err := readFrame(r, &buf)
			var f frameOrErr
			if err != nil {
				f.err = err
			} else {
				f.frame = bytes.Clone(frame)
			}
			select {
			case frames <- f:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	fw := w.info.StreamSerializer.Framer.NewFrameWriter(w.out)
	for {
		if reason := w.endRequested(); reason != "" {
			// Before any further frame: an end asked for at the start precedes everything.
			w.writeEnd(fw, reason)
			return nil
		}
		select {
		case f := <-frames:
			if f.err != nil {
				err := f.err
				if errors.Is(err, io.EOF) {
					err = nil
				}
				w.close(err)
				return err
			}
			if err := w.forward(fw, f.frame); err != nil {
				w.close(err)
				return err
			}
			if !w.pos.initial && w.hasPending() {
				// Changes that came during WatchList's initial events: right after its end.
				if w.runRefresh(fw) {
					return nil
				}
			}
		case <-w.kick:
			if w.endRequested() != "" {
				continue
			}
			if w.runRefresh(fw) {
				return nil
			}
		}
		if w.isEnded() {
			return nil
		}
	}
}

func (w *watchFilter) endRequested() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.endReason
}

// forward rewrites and writes one frame from the API server.
func (w *watchFilter) forward(fw io.Writer, frame []byte) error {
	out, ev, err := w.rewrite(frame)
	if err != nil {
		return err
	}
	if w.isEnded() {
		return nil
	}
	if _, err := fw.Write(out); err != nil {
		return err
	}
	w.pos.observe(ev.eventType, ev.rv, ev.initialEnd)
	switch {
	case ev.key == "":
	case ev.eventType == watch.Deleted:
		w.held.remove(ev.key)
	default:
		w.held.put(ev.obj, ev.fingerprint)
	}
	if ev.rv != "" && w.onEvent != nil {
		w.onEvent(ev.rv, w.gen)
	}
	return nil
}

func (w *watchFilter) hasPending() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.pending.Empty()
}

func (w *watchFilter) isEnded() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ended
}

// runRefresh writes a pending refresh, or ends the watch with 410 when it cannot (then it
// returns true).
func (w *watchFilter) runRefresh(fw io.Writer) bool {
	if wait, _ := w.pos.refreshable(); wait {
		return false // kept pending until the initial-events-end bookmark
	}
	w.mu.Lock()
	c, gen := w.pending, w.pendingGen
	w.pending = Changes{}
	w.mu.Unlock()
	if c.Empty() {
		return false
	}
	n, err := w.writeRefresh(fw, c)
	if w.onRefresh != nil {
		w.onRefresh(n, err)
	}
	if err != nil {
		w.writeEnd(fw, "application-grid-wrapper: topology selection changed ("+err.Error()+"), relist")
		return true
	}
	// The client's view at the stream's position is now filtered with generation gen.
	w.gen = max(w.gen, gen)
	if w.onEvent != nil {
		w.onEvent(w.pos.rv, w.gen)
	}
	return false
}

// errNoRefresh: the watch cannot take a refresh; the caller ends it with 410.
var errNoRefresh = errors.New("no refresh on this watch")

// writeRefresh writes, for each slice of the changed Services, the version the client
// holds re-filtered with the current selection, when that differs from what this stream
// last sent of it, then a BOOKMARK at the stream's position. It returns the number of
// slices re-sent.
//
// Why this is exact, and invents nothing:
//   - the client's store is what its list (or the WatchList initial events) and this
//     stream carried, in order, up to the stream's newest resourceVersion N: exactly the
//     view (held), kept from those very frames; each slice is re-sent with its own
//     resourceVersion, as the client already has it, only its endpoints re-filtered (and
//     without managedFields, which the view does not keep);
//   - a MODIFIED event sets client-go's lastSyncResourceVersion to that object's
//     resourceVersion, older than N: the closing BOOKMARK at N (a resourceVersion the
//     API server itself sent on this stream, and true: everything up to N is delivered)
//     puts it back, so a later watch resumes from N, not from the past (a resume from an
//     older resourceVersion would replay events the client already had, putting older
//     versions of other slices back in its store for a moment, or get a 410);
//   - the forwarding goroutine writes it between two API server frames, so no event of
//     the API server is reordered around it.
//
// client-go's informer hands an update whose resourceVersion equals the cached one to
// handlers only while they are "syncing": kube-proxy's EndpointSlice handler always is
// (its resync period equals its informer factory's, see edge/README.md); the relist a
// 410 causes depends on the same thing.
func (w *watchFilter) writeRefresh(fw io.Writer, c Changes) (int, error) {
	if !w.refreshes {
		return 0, errNoRefresh
	}
	if _, whyNot := w.pos.refreshable(); whyNot != "" {
		return 0, fmt.Errorf("%w: %s", errNoRefresh, whyNot)
	}
	enc := scheme.Codecs.EncoderForVersion(w.info.Serializer, discoveryv1.SchemeGroupVersion)
	var frames [][]byte
	fingerprints := map[string]string{}
	for _, svc := range slices.Sorted(maps.Keys(c.Services)) {
		held := w.held.bySvc[svc]
		for _, key := range slices.Sorted(maps.Keys(held)) {
			es := held[key]
			filtered := w.filter(es)
			fp := fingerprint(es.ResourceVersion, filtered)
			if w.held.sent[key] == fp {
				continue
			}
			frame, err := w.encodeEvent(enc, watch.Modified, filtered)
			if err != nil {
				return 0, err
			}
			frames = append(frames, frame)
			fingerprints[key] = fp
		}
	}
	if len(frames) == 0 {
		return 0, nil
	}
	bookmark := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{ResourceVersion: w.pos.rv}}
	frame, err := w.encodeEvent(enc, watch.Bookmark, bookmark)
	if err != nil {
		return 0, err
	}
	frames = append(frames, frame)
	if w.isEnded() {
		return 0, nil
	}
	for _, f := range frames {
		if _, err := fw.Write(f); err != nil {
			return 0, err
		}
	}
	for k, fp := range fingerprints {
		w.held.sent[k] = fp
	}
	return len(fingerprints), nil
}

func (w *watchFilter) encodeEvent(enc runtime.Encoder, t watch.EventType, es *discoveryv1.EndpointSlice) ([]byte, error) {
	raw, err := runtime.Encode(enc, es)
	if err != nil {
		return nil, fmt.Errorf("encoding EndpointSlice: %w", err)
	}
	var buf bytes.Buffer
	event := metav1.WatchEvent{Type: string(t), Object: runtime.RawExtension{Raw: raw}}
	if err := w.info.StreamSerializer.Serializer.Encode(&event, &buf); err != nil {
		return nil, fmt.Errorf("encoding watch event: %w", err)
	}
	return buf.Bytes(), nil
}

// fingerprint identifies what a client holds of one slice: its resourceVersion and the
// endpoints the filter kept (the filter only removes endpoints, so these two determine
// the object).
func fingerprint(rv string, filtered *discoveryv1.EndpointSlice) string {
	h := fnv.New64a()
	for _, ep := range filtered.Endpoints {
		for _, a := range ep.Addresses {
			_, _ = h.Write([]byte(a))
			_, _ = h.Write([]byte{0})
		}
		_, _ = h.Write([]byte{1})
	}
	return fmt.Sprintf("%s/%d/%x", rv, len(filtered.Endpoints), h.Sum64())
}

// event is what rewrite learnt of one frame.
type event struct {
	eventType   watch.EventType
	rv          string
	initialEnd  bool
	key         string                     // namespace/name of an ADDED/MODIFIED/DELETED slice
	obj         *discoveryv1.EndpointSlice // that slice as the API server sent it
	fingerprint string
}

// rewrite returns the frame to send and what it carries.
func (w *watchFilter) rewrite(frame []byte) ([]byte, event, error) {
	var wev metav1.WatchEvent
	if _, _, err := w.info.StreamSerializer.Serializer.Decode(frame, nil, &wev); err != nil {
		return nil, event{}, fmt.Errorf("decoding watch event: %w", err)
	}
	ev := event{eventType: watch.EventType(wev.Type)}
	switch ev.eventType {
	case watch.Error:
		return frame, ev, nil
	case watch.Bookmark:
		// Passed untouched; its resourceVersion is read for the bookkeeping only.
		es := &discoveryv1.EndpointSlice{}
		if _, _, err := w.info.Serializer.Decode(wev.Object.Raw, nil, es); err != nil {
			return frame, ev, nil
		}
		ev.rv = es.ResourceVersion
		ev.initialEnd = es.Annotations[metav1.InitialEventsAnnotationKey] == "true"
		return frame, ev, nil
	case watch.Added, watch.Modified, watch.Deleted:
	default:
		return nil, ev, fmt.Errorf("unknown watch event type %q", wev.Type)
	}
	es := &discoveryv1.EndpointSlice{}
	if _, _, err := w.info.Serializer.Decode(wev.Object.Raw, nil, es); err != nil {
		return nil, ev, fmt.Errorf("decoding EndpointSlice of a %s event: %w", wev.Type, err)
	}
	ev.rv, ev.key, ev.obj = es.ResourceVersion, es.Namespace+"/"+es.Name, es
	filtered := w.filter(es)
	ev.fingerprint = fingerprint(es.ResourceVersion, filtered)
	if filtered == es {
		return frame, ev, nil
	}
	raw, err := runtime.Encode(scheme.Codecs.EncoderForVersion(w.info.Serializer, discoveryv1.SchemeGroupVersion), filtered)
	if err != nil {
		return nil, ev, fmt.Errorf("encoding EndpointSlice: %w", err)
	}
	wev.Object = runtime.RawExtension{Raw: raw}
	var buf bytes.Buffer
	if err := w.info.StreamSerializer.Serializer.Encode(&wev, &buf); err != nil {
		return nil, ev, fmt.Errorf("encoding watch event: %w", err)
	}
	return buf.Bytes(), ev, nil
}

// end asks for the stream to be ended with a 410 Expired ERROR event: client-go's reflector
// then relists (with the resourceVersion it last saw, so the API server serves current data
// and no resourceVersion is made up), and the relist passes the filter with the new
// selection. It never blocks: the forwarding goroutine writes the event.
func (w *watchFilter) end(reason string) {
	w.mu.Lock()
	if w.ended || w.endReason != "" {
		w.mu.Unlock()
		return
	}
	w.endReason = reason
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// writeEnd writes the 410 and closes the stream (the forwarding goroutine only).
func (w *watchFilter) writeEnd(fw io.Writer, reason string) {
	w.mu.Lock()
	if w.ended {
		w.mu.Unlock()
		return
	}
	w.ended = true
	w.mu.Unlock()
	status := apierrors.NewResourceExpired(reason).ErrStatus
	raw, err := runtime.Encode(scheme.Codecs.EncoderForVersion(w.info.Serializer, schema.GroupVersion{Version: "v1"}), &status)
	if err == nil {
		var buf bytes.Buffer
		event := metav1.WatchEvent{Type: string(watch.Error), Object: runtime.RawExtension{Raw: raw}}
		if err = w.info.StreamSerializer.Serializer.Encode(&event, &buf); err == nil {
			_, err = fw.Write(buf.Bytes())
		}
	}
	_ = w.out.CloseWithError(err)
	_ = w.in.Close()
}

// close ends the stream without a 410: the client resumes from the stream's position, where
// onEnd leaves its view.
func (w *watchFilter) close(err error) {
	w.mu.Lock()
	if w.ended {
		w.mu.Unlock()
		return
	}
	w.ended = true
	w.mu.Unlock()
	if w.onEnd != nil && w.pos.rv != "" && !w.pos.initial {
		w.onEnd(w.pos.rv, w.held)
	}
	_ = w.out.CloseWithError(err)
}

// readFrame reads one whole frame, growing buf as needed (the framers return
// io.ErrShortBuffer with a partial frame, as apimachinery's streaming decoder expects).
func readFrame(r io.Reader, buf *[]byte) ([]byte, error) {
	base := 0
	for {
		n, err := r.Read((*buf)[base:])
		if err == io.ErrShortBuffer {
			if n == 0 {
				return nil, fmt.Errorf("watch frame: short buffer with no data")
			}
			base += n
			if len(*buf) >= maxFrameBytes {
				return nil, fmt.Errorf("watch frame larger than %d bytes", maxFrameBytes)
			}
			*buf = append(*buf, make([]byte, len(*buf))...)
			continue
		}
		if err != nil {
			return nil, err
		}
		base += n
		return (*buf)[:base], nil
	}
}

// writeStatus answers with a metav1.Status in JSON (client-go decodes it in any case).
func writeStatus(rw http.ResponseWriter, status *metav1.Status) {
	raw, _ := runtime.Encode(scheme.Codecs.LegacyCodec(schema.GroupVersion{Version: "v1"}), status)
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(int(status.Code))
	_, _ = rw.Write(raw)
}
