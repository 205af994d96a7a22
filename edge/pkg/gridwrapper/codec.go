package gridwrapper

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"mime"
	"net/http"
	"net/url"
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
// encodes it back the same way. List metadata (resourceVersion, continue) is untouched.
func filterList(info runtime.SerializerInfo, body []byte, filter sliceFilter) ([]byte, string, error) {
	list := &discoveryv1.EndpointSliceList{}
	if _, _, err := info.Serializer.Decode(body, nil, list); err != nil {
		return nil, "", fmt.Errorf("decoding EndpointSliceList: %w", err)
	}
	for i := range list.Items {
		if out := filter(&list.Items[i]); out != &list.Items[i] {
			list.Items[i] = *out
		}
	}
	var buf bytes.Buffer
	enc := scheme.Codecs.EncoderForVersion(info.Serializer, discoveryv1.SchemeGroupVersion)
	if err := enc.Encode(list, &buf); err != nil {
		return nil, "", fmt.Errorf("encoding EndpointSliceList: %w", err)
	}
	return buf.Bytes(), list.ResourceVersion, nil
}

// watchFilter rewrites one EndpointSlice watch stream frame by frame: ADDED, MODIFIED
// and DELETED carry a filtered slice re-encoded in the stream's encoding; BOOKMARK
// (including WatchList's k8s.io/initial-events-end) and ERROR frames are written exactly
// as they arrived. Nothing is buffered beyond one frame.
//
// A selection change (refresh) is written into the same stream by the same goroutine
// that forwards the API server's frames, between two of them: for each slice of an
// affected Service, the version the client holds (the API server's list at exactly the
// stream's newest resourceVersion) re-filtered, as a MODIFIED event carrying that
// version's own resourceVersion, then a BOOKMARK at the stream's newest resourceVersion
// (see writeRefresh). The only other frame the wrapper writes itself is the 410 Expired ERROR
// of end(), when a refresh is impossible.
type watchFilter struct {
	info   runtime.SerializerInfo
	in     io.ReadCloser
	out    *io.PipeWriter
	filter sliceFilter
	// onEvent gets the resourceVersion of every event or bookmark passed on, and the
	// selection generation the client's view at that resourceVersion was filtered with.
	onEvent func(rv string, gen uint64)
	// listAt, when set, returns the slices of the affected Services exactly as the API
	// server held them at a resourceVersion (the client's view); nil: every selection
	// change ends the watch with 410.
	listAt func(rv string, c Changes) ([]*discoveryv1.EndpointSlice, error)
	// onRefresh, when set, gets the outcome of every refresh (slices re-sent or error).
	onRefresh func(resent int, err error)

	// Owned by the forwarding goroutine (run).
	pos streamPosition
	// sent fingerprints the filtered version of each slice last written on this stream
	// (resourceVersion and the endpoints kept), so a refresh re-sends only what changes.
	sent map[string]string
	// gen is the selection generation the client's view was last filtered with.
	gen uint64

	kick chan struct{} // a refresh is pending (capacity 1)

	mu         sync.Mutex
	ended      bool
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
		sent: map[string]string{}, kick: make(chan struct{}, 1)}
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
// called. It is the only writer of the stream (end's 410 aside, which closes it).
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
				w.runRefresh(fw)
			}
		case <-w.kick:
			w.runRefresh(fw)
		}
		if w.isEnded() {
			return nil
		}
	}
}

// forward rewrites and writes one frame from the API server.
func (w *watchFilter) forward(fw io.Writer, frame []byte) error {
	out, ev, err := w.rewrite(frame)
	if err != nil {
		return err
	}
	w.mu.Lock()
	if w.ended {
		w.mu.Unlock()
		return nil
	}
	_, err = fw.Write(out)
	w.mu.Unlock()
	if err != nil {
		return err
	}
	w.pos.observe(ev.eventType, ev.rv, ev.initialEnd)
	switch {
	case ev.key == "":
	case ev.eventType == watch.Deleted:
		delete(w.sent, ev.key)
	default:
		w.sent[ev.key] = ev.fingerprint
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

// runRefresh writes a pending refresh, or ends the watch with 410 when it cannot.
func (w *watchFilter) runRefresh(fw io.Writer) {
	if wait, _ := w.pos.refreshable(); wait {
		return // kept pending until the initial-events-end bookmark
	}
	w.mu.Lock()
	c, gen := w.pending, w.pendingGen
	w.pending = Changes{}
	w.mu.Unlock()
	if c.Empty() {
		return
	}
	n, err := w.writeRefresh(fw, c)
	if w.onRefresh != nil {
		w.onRefresh(n, err)
	}
	if err != nil {
		w.end("application-grid-wrapper: topology selection changed (" + err.Error() + "), relist")
		return
	}
	// The client's view at the stream's position is now filtered with generation gen.
	w.gen = max(w.gen, gen)
	if w.onEvent != nil {
		w.onEvent(w.pos.rv, w.gen)
	}
}

// errNoRefresh: the watch cannot take a refresh; the caller ends it with 410.
var errNoRefresh = errors.New("no refresh on this watch")

// writeRefresh writes, for each slice of the changed Services, the version the client
// holds re-filtered with the current selection, when that differs from what this stream
// last sent of it, then a BOOKMARK at the stream's position. It returns the number of
// slices re-sent.
//
// Why this is exact, and invents nothing:
//   - the client's store is the API server's state at the stream's newest
//     resourceVersion N (every event up to N was delivered, in order), so the list at
//     exactly N holds precisely the objects the client has; each is re-sent with its own
//     resourceVersion, as kube-proxy already has it, only its endpoints re-filtered;
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
	if w.listAt == nil {
		return 0, errNoRefresh
	}
	if _, whyNot := w.pos.refreshable(); whyNot != "" {
		return 0, fmt.Errorf("%w: %s", errNoRefresh, whyNot)
	}
	held, err := w.listAt(w.pos.rv, c)
	if err != nil {
		return 0, fmt.Errorf("list at resourceVersion %s: %w", w.pos.rv, err)
	}
	enc := scheme.Codecs.EncoderForVersion(w.info.Serializer, discoveryv1.SchemeGroupVersion)
	var frames [][]byte
	fingerprints := map[string]string{}
	for _, es := range held {
		filtered := w.filter(es)
		key := es.Namespace + "/" + es.Name
		fp := fingerprint(es.ResourceVersion, filtered)
		if w.sent[key] == fp {
			continue
		}
		frame, err := w.encodeEvent(enc, watch.Modified, filtered)
		if err != nil {
			return 0, err
		}
		frames = append(frames, frame)
		fingerprints[key] = fp
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
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return 0, nil
	}
	for _, f := range frames {
		if _, err := fw.Write(f); err != nil {
			return 0, err
		}
	}
	for k, fp := range fingerprints {
		w.sent[k] = fp
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
	key         string // namespace/name of an ADDED/MODIFIED/DELETED slice
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
	ev.rv, ev.key = es.ResourceVersion, es.Namespace+"/"+es.Name
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

// end writes a 410 Expired ERROR event and closes the stream: client-go's reflector then
// relists (with the resourceVersion it last saw, so the API server serves current data
// and no resourceVersion is made up), and the relist passes the filter with the new
// selection.
func (w *watchFilter) end(reason string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return
	}
	w.ended = true
	status := apierrors.NewResourceExpired(reason).ErrStatus
	raw, err := runtime.Encode(scheme.Codecs.EncoderForVersion(w.info.Serializer, schema.GroupVersion{Version: "v1"}), &status)
	if err == nil {
		var buf bytes.Buffer
		event := metav1.WatchEvent{Type: string(watch.Error), Object: runtime.RawExtension{Raw: raw}}
		if err = w.info.StreamSerializer.Serializer.Encode(&event, &buf); err == nil {
			_, err = w.info.StreamSerializer.Framer.NewFrameWriter(w.out).Write(buf.Bytes())
		}
	}
	_ = w.out.CloseWithError(err)
	_ = w.in.Close()
}

func (w *watchFilter) close(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return
	}
	w.ended = true
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
