package gridwrapper

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
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
// as they arrived. Nothing is buffered beyond one frame, nothing is invented: the only
// frame the wrapper itself writes is the 410 Expired ERROR of end(), the API's own way to
// tell a watcher to relist.
type watchFilter struct {
	info   runtime.SerializerInfo
	in     io.ReadCloser
	out    *io.PipeWriter
	filter sliceFilter
	// onEvent gets the resourceVersion of every event or bookmark passed on.
	onEvent func(rv string)

	mu    sync.Mutex
	ended bool
}

func newWatchFilter(info runtime.SerializerInfo, in io.ReadCloser, out *io.PipeWriter, filter sliceFilter, onEvent func(string)) *watchFilter {
	return &watchFilter{info: info, in: in, out: out, filter: filter, onEvent: onEvent}
}

// run copies the stream until the upstream ends, the client goes away or end() is called.
func (w *watchFilter) run() error {
	defer w.in.Close()
	frames := w.info.StreamSerializer.Framer.NewFrameReader(w.in)
	fw := w.info.StreamSerializer.Framer.NewFrameWriter(w.out)
	buf := make([]byte, 64<<10)
	for {
		frame, err := readFrame(frames, &buf)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			w.close(err)
			return err
		}
		out, rv, err := w.rewrite(frame)
		if err != nil {
			w.close(err)
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
			w.close(err)
			return err
		}
		if rv != "" && w.onEvent != nil {
			w.onEvent(rv)
		}
	}
}

// rewrite returns the frame to send and the resourceVersion it carries.
func (w *watchFilter) rewrite(frame []byte) ([]byte, string, error) {
	var event metav1.WatchEvent
	if _, _, err := w.info.StreamSerializer.Serializer.Decode(frame, nil, &event); err != nil {
		return nil, "", fmt.Errorf("decoding watch event: %w", err)
	}
	switch watch.EventType(event.Type) {
	case watch.Error:
		return frame, "", nil
	case watch.Bookmark:
		// Passed untouched; its resourceVersion is read for the relist bookkeeping only.
		es := &discoveryv1.EndpointSlice{}
		if _, _, err := w.info.Serializer.Decode(event.Object.Raw, nil, es); err != nil {
			return frame, "", nil
		}
		return frame, es.ResourceVersion, nil
	case watch.Added, watch.Modified, watch.Deleted:
	default:
		return nil, "", fmt.Errorf("unknown watch event type %q", event.Type)
	}
	es := &discoveryv1.EndpointSlice{}
	if _, _, err := w.info.Serializer.Decode(event.Object.Raw, nil, es); err != nil {
		return nil, "", fmt.Errorf("decoding EndpointSlice of a %s event: %w", event.Type, err)
	}
	filtered := w.filter(es)
	if filtered == es {
		return frame, es.ResourceVersion, nil
	}
	raw, err := runtime.Encode(scheme.Codecs.EncoderForVersion(w.info.Serializer, discoveryv1.SchemeGroupVersion), filtered)
	if err != nil {
		return nil, "", fmt.Errorf("encoding EndpointSlice: %w", err)
	}
	event.Object = runtime.RawExtension{Raw: raw}
	var buf bytes.Buffer
	if err := w.info.StreamSerializer.Serializer.Encode(&event, &buf); err != nil {
		return nil, "", fmt.Errorf("encoding watch event: %w", err)
	}
	return buf.Bytes(), es.ResourceVersion, nil
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
