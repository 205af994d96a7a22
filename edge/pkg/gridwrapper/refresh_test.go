package gridwrapper

import (
	"io"
	"net/url"
	"sync"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	restclientwatch "k8s.io/client-go/rest/watch"
)

// TestStreamPosition: the newest resourceVersion the API server delivered on a watch, as
// the refresh bookkeeping tracks it, frame by frame.
func TestStreamPosition(t *testing.T) {
	type frame struct {
		t          watch.EventType
		rv         string
		initialEnd bool
	}
	tests := []struct {
		name      string
		query     string
		frames    []frame
		wantRV    string
		wantWait  bool
		wantWhyNo string
	}{
		{name: "resumed watch starts at its resourceVersion", query: "watch=true&resourceVersion=100&allowWatchBookmarks=true",
			wantRV: "100"},
		{name: "events and bookmarks advance it", query: "watch=true&resourceVersion=100&allowWatchBookmarks=true",
			frames: []frame{{watch.Added, "101", false}, {watch.Modified, "103", false}, {watch.Bookmark, "110", false}, {watch.Deleted, "111", false}},
			wantRV: "111"},
		{name: "errors do not", query: "watch=true&resourceVersion=100&allowWatchBookmarks=true",
			frames: []frame{{watch.Modified, "103", false}, {watch.Error, "", false}},
			wantRV: "103"},
		{name: "WatchList: unknown during the initial events (not in resourceVersion order)", query: "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
			frames:   []frame{{watch.Added, "50", false}, {watch.Added, "30", false}, {watch.Bookmark, "60", false}},
			wantWait: true},
		{name: "WatchList: known from the initial-events-end bookmark", query: "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
			frames: []frame{{watch.Added, "50", false}, {watch.Added, "30", false}, {watch.Bookmark, "60", true}, {watch.Modified, "61", false}},
			wantRV: "61"},
		{name: "WatchList resuming from a resourceVersion: still initial events first", query: "watch=true&sendInitialEvents=true&resourceVersion=40&allowWatchBookmarks=true",
			frames: []frame{{watch.Added, "50", false}}, wantWait: true},
		{name: "watch from 0: initial events with no end marker, never known", query: "watch=true&resourceVersion=0&allowWatchBookmarks=true",
			frames:    []frame{{watch.Added, "50", false}, {watch.Bookmark, "60", false}, {watch.Modified, "61", false}},
			wantWhyNo: "stream position unknown"},
		{name: "watch from empty resourceVersion: the same", query: "watch=true&allowWatchBookmarks=true",
			frames: []frame{{watch.Modified, "61", false}}, wantWhyNo: "stream position unknown"},
		{name: "no bookmarks: the closing bookmark cannot be sent", query: "watch=true&resourceVersion=100",
			frames: []frame{{watch.Modified, "103", false}}, wantRV: "103", wantWhyNo: "client does not accept bookmarks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := url.ParseQuery(tt.query)
			if err != nil {
				t.Fatal(err)
			}
			p := newStreamPosition(q)
			for _, f := range tt.frames {
				p.observe(f.t, f.rv, f.initialEnd)
			}
			wait, whyNot := p.refreshable()
			if p.rv != tt.wantRV || wait != tt.wantWait || whyNot != tt.wantWhyNo {
				t.Errorf("position %q wait=%v whyNot=%q; want %q wait=%v whyNot=%q", p.rv, wait, whyNot, tt.wantRV, tt.wantWait, tt.wantWhyNo)
			}
		})
	}
}

// switchable is a selection that a test changes: dropOdd, or keep everything.
type switchable struct {
	mu      sync.Mutex
	keepAll bool
}

func (s *switchable) set(keepAll bool) {
	s.mu.Lock()
	s.keepAll = keepAll
	s.mu.Unlock()
}

func (s *switchable) filter(es *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keepAll {
		return es
	}
	return dropOdd(es)
}

// streamHarness runs a watchFilter between a test-fed upstream and client-go's decoder.
type streamHarness struct {
	t      *testing.T
	info   runtime.SerializerInfo
	up     *io.PipeWriter
	enc    streaming.Encoder
	events chan watch.Event
}

func newStreamHarness(t *testing.T, mediaType string, wf func(in io.ReadCloser, out *io.PipeWriter) *watchFilter) *streamHarness {
	t.Helper()
	info, err := serializerFor(mediaType + ";stream=watch")
	if err != nil {
		t.Fatal(err)
	}
	upR, upW := io.Pipe()
	pr, pw := io.Pipe()
	h := &streamHarness{t: t, info: info, up: upW, events: make(chan watch.Event, 16),
		enc: streaming.NewEncoder(info.StreamSerializer.Framer.NewFrameWriter(upW), info.StreamSerializer.Serializer)}
	w := wf(upR, pw)
	go func() { _ = w.run() }()
	objDecoder, streamSerializer, framer, err := runtime.NewClientNegotiator(scheme.Codecs.WithoutConversion(), discoveryv1.SchemeGroupVersion).StreamDecoder(mediaType, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := restclientwatch.NewDecoder(streaming.NewDecoder(framer.NewFrameReader(pr), streamSerializer), objDecoder)
	go func() {
		defer close(h.events)
		for {
			typ, obj, err := d.Decode()
			if err != nil {
				return
			}
			h.events <- watch.Event{Type: typ, Object: obj}
		}
	}()
	t.Cleanup(func() { _ = upW.Close(); _ = pr.Close() })
	return h
}

// send writes one event as the API server would.
func (h *streamHarness) send(t watch.EventType, obj runtime.Object) {
	h.t.Helper()
	raw, err := runtime.Encode(scheme.Codecs.EncoderForVersion(h.info.Serializer, discoveryv1.SchemeGroupVersion), obj)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.enc.Encode(&metav1.WatchEvent{Type: string(t), Object: runtime.RawExtension{Raw: raw}}); err != nil {
		h.t.Fatal(err)
	}
}

// next returns the next event the client decodes (fails after a generous wait).
func (h *streamHarness) next() watch.Event {
	h.t.Helper()
	select {
	case ev, ok := <-h.events:
		if !ok {
			h.t.Fatal("stream ended")
		}
		return ev
	case <-time.After(30 * time.Second):
		h.t.Fatal("no event")
	}
	return watch.Event{}
}

// expect checks the next event's type, resourceVersion and endpoint count.
func (h *streamHarness) expect(what string, typ watch.EventType, rv string, endpoints int) *discoveryv1.EndpointSlice {
	h.t.Helper()
	ev := h.next()
	es, ok := ev.Object.(*discoveryv1.EndpointSlice)
	if ev.Type != typ || !ok || es.ResourceVersion != rv || (typ != watch.Bookmark && len(es.Endpoints) != endpoints) {
		h.t.Fatalf("%s: got %s %#v, want %s at resourceVersion %s with %d endpoints", what, ev.Type, ev.Object, typ, rv, endpoints)
	}
	return es
}

func withSvc(es *discoveryv1.EndpointSlice, svc string) *discoveryv1.EndpointSlice {
	es.Labels = map[string]string{discoveryv1.LabelServiceName: svc}
	return es
}

// TestRefreshResendsHeldVersionThenBookmark: a selection change reaches an open WatchList
// watch as MODIFIED events carrying the very versions the client holds (their own
// resourceVersions) re-filtered, then a BOOKMARK at the stream's newest resourceVersion;
// a change during the initial events waits for their end; a refresh that changes nothing
// writes nothing; API server frames are never reordered around a refresh.
func TestRefreshResendsHeldVersionThenBookmark(t *testing.T) {
	for _, mediaType := range []string{mediaTypeProtobuf, mediaTypeJSON} {
		t.Run(mediaType, func(t *testing.T) {
			sel := &switchable{}
			var gens []string
			var mu sync.Mutex
			var wf *watchFilter
			h := newStreamHarness(t, mediaType, func(in io.ReadCloser, out *io.PipeWriter) *watchFilter {
				wf = newWatchFilter(h0info(t, mediaType), in, out, sel.filter, func(rv string, gen uint64) {
					mu.Lock()
					gens = append(gens, rv+"@"+string(rune('0'+gen)))
					mu.Unlock()
				})
				q, _ := url.ParseQuery("watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")
				wf.pos = newStreamPosition(q)
				// The refresh re-sends what the stream itself carried: no list.
				wf.refreshes = true
				return wf
			})

			h.send(watch.Added, withSvc(testSlice("a", "40", "10.0.0.1", "10.0.0.2", "10.0.0.3"), "svc-a"))
			h.send(watch.Added, withSvc(testSlice("b", "41", "10.0.1.1", "10.0.1.2"), "svc-b"))
			h.expect("initial a, old selection", watch.Added, "40", 2)
			h.expect("initial b", watch.Added, "41", 1)

			// The selection changes before the initial events are over: nothing may be
			// written among them (their resourceVersions are not in order).
			sel.set(true)
			wf.refresh(Changes{Services: map[string]bool{"ns/svc-a": true}}, 1)
			end := testSlice("", "42")
			end.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
			h.send(watch.Bookmark, end)
			if got := h.expect("initial-events-end bookmark, untouched", watch.Bookmark, "42", 0); got.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
				t.Fatalf("initial-events-end annotation lost: %+v", got)
			}
			h.expect("refresh: a as the client holds it, re-filtered, own resourceVersion", watch.Modified, "40", 3)
			if got := h.expect("refresh ends with a bookmark at the stream's position", watch.Bookmark, "42", 0); len(got.Annotations) != 0 {
				t.Errorf("refresh bookmark carries annotations %v", got.Annotations)
			}

			// Newer events move the position; a refresh that changes nothing writes nothing.
			h.send(watch.Modified, withSvc(testSlice("c", "43", "10.0.2.1"), "svc-c"))
			h.expect("c", watch.Modified, "43", 1)
			wf.refresh(Changes{Services: map[string]bool{"ns/svc-a": true}}, 2)
			h.send(watch.Bookmark, testSlice("", "44"))
			h.expect("API server bookmark next: the no-op refresh wrote nothing", watch.Bookmark, "44", 0)

			// Back to the old selection.
			sel.set(false)
			wf.refresh(Changes{Services: map[string]bool{"ns/svc-a": true}}, 3)
			h.expect("refresh back", watch.Modified, "40", 2)
			h.expect("refresh bookmark", watch.Bookmark, "44", 0)

			// (the last one is handed out just after the refresh's frames are written)
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				mu.Lock()
				n := len(gens)
				mu.Unlock()
				if n >= 8 {
					break
				}
			}
			mu.Lock()
			defer mu.Unlock()
			// Each refresh hands the stream's position out under the new generation, so a
			// client resuming from it is not ended as stale.
			want := []string{"40@0", "41@0", "42@0", "42@1", "43@1", "43@2", "44@2", "44@3"}
			if len(gens) != len(want) {
				t.Fatalf("resourceVersions handed out %v, want %v", gens, want)
			}
			for i := range want {
				if gens[i] != want[i] {
					t.Fatalf("resourceVersions handed out %v, want %v", gens, want)
				}
			}
		})
	}
}

func h0info(t *testing.T, mediaType string) runtime.SerializerInfo {
	info, err := serializerFor(mediaType + ";stream=watch")
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// TestRefreshImpossibleEndsWith410: when a refresh cannot be written exactly, the watch
// is ended with 410 Expired (the client relists), never left with the old selection.
func TestRefreshImpossibleEndsWith410(t *testing.T) {
	tests := []struct {
		name      string
		query     string
		refreshes bool
	}{
		{"client takes no bookmarks", "watch=true&resourceVersion=39", true},
		{"watch from 0: position unknown", "watch=true&resourceVersion=0&allowWatchBookmarks=true", true},
		{"relist mode", "watch=true&resourceVersion=39&allowWatchBookmarks=true", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel := &switchable{}
			var wf *watchFilter
			var results []string
			h := newStreamHarness(t, mediaTypeProtobuf, func(in io.ReadCloser, out *io.PipeWriter) *watchFilter {
				wf = newWatchFilter(h0info(t, mediaTypeProtobuf), in, out, sel.filter, nil)
				q, _ := url.ParseQuery(tt.query)
				wf.pos = newStreamPosition(q)
				wf.refreshes = tt.refreshes
				wf.onRefresh = func(n int, err error) { results = append(results, errString(err)) }
				return wf
			})
			h.send(watch.Modified, withSvc(testSlice("a", "40", "10.0.0.1", "10.0.0.2"), "svc-a"))
			h.expect("a", watch.Modified, "40", 1)
			sel.set(true)
			wf.refresh(Changes{Services: map[string]bool{"ns/svc-a": true}}, 1)
			ev := h.next()
			st, ok := ev.Object.(*metav1.Status)
			if ev.Type != watch.Error || !ok || !apierrors.IsResourceExpired(apierrors.FromObject(st)) {
				t.Fatalf("got %s %#v, want a 410 Expired ERROR", ev.Type, ev.Object)
			}
			if _, open := <-h.events; open {
				t.Errorf("stream still open after the 410")
			}
			t.Logf("410 reason: %s (refresh results %v)", st.Message, results)
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
