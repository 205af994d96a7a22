package gridwrapper

import (
	"bytes"
	"io"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	restclientwatch "k8s.io/client-go/rest/watch"
)

// dropOdd keeps endpoints at even positions (a stand-in decision).
func dropOdd(es *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	out := es.DeepCopy()
	out.Endpoints = nil
	for i, e := range es.Endpoints {
		if i%2 == 0 {
			out.Endpoints = append(out.Endpoints, e)
		}
	}
	return out
}

func testSlice(name, rv string, ips ...string) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		TypeMeta:    metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: rv},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for _, ip := range ips {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}})
	}
	return es
}

// encodeStream writes events the way the API server does: each object in the media
// type's serializer, wrapped in a WatchEvent, framed.
func encodeStream(t *testing.T, info runtime.SerializerInfo, events []watch.Event) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := streaming.NewEncoder(info.StreamSerializer.Framer.NewFrameWriter(&buf), info.StreamSerializer.Serializer)
	for _, ev := range events {
		gv := discoveryv1.SchemeGroupVersion
		if _, ok := ev.Object.(*metav1.Status); ok {
			gv.Group, gv.Version = "", "v1"
		}
		raw, err := runtime.Encode(scheme.Codecs.EncoderForVersion(info.Serializer, gv), ev.Object)
		if err != nil {
			t.Fatal(err)
		}
		if err := enc.Encode(&metav1.WatchEvent{Type: string(ev.Type), Object: runtime.RawExtension{Raw: raw}}); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// decodeStream reads a stream with client-go's own watch decoder, as kube-proxy does.
func decodeStream(t *testing.T, mediaType string, r io.ReadCloser) []watch.Event {
	t.Helper()
	objDecoder, streamSerializer, framer, err := runtime.NewClientNegotiator(scheme.Codecs.WithoutConversion(), discoveryv1.SchemeGroupVersion).StreamDecoder(mediaType, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := restclientwatch.NewDecoder(streaming.NewDecoder(framer.NewFrameReader(r), streamSerializer), objDecoder)
	var out []watch.Event
	for {
		typ, obj, err := d.Decode()
		if err != nil {
			return out
		}
		out = append(out, watch.Event{Type: typ, Object: obj})
	}
}

func TestWatchFilterRoundTrip(t *testing.T) {
	bookmark := testSlice("", "42")
	bookmark.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	status := apierrors.NewInternalError(io.ErrUnexpectedEOF).ErrStatus
	for _, mediaType := range []string{mediaTypeProtobuf, mediaTypeJSON} {
		t.Run(mediaType, func(t *testing.T) {
			info, err := serializerFor(mediaType + ";stream=watch")
			if err != nil {
				t.Fatal(err)
			}
			in := encodeStream(t, info, []watch.Event{
				{Type: watch.Added, Object: testSlice("a", "40", "10.0.0.1", "10.0.0.2", "10.0.0.3")},
				{Type: watch.Bookmark, Object: bookmark},
				{Type: watch.Modified, Object: testSlice("a", "43", "10.0.0.4", "10.0.0.5")},
				{Type: watch.Error, Object: &status},
			})
			pr, pw := io.Pipe()
			var rvs []string
			wf := newWatchFilter(info, io.NopCloser(bytes.NewReader(in)), pw, dropOdd, func(rv string, _ uint64) { rvs = append(rvs, rv) })
			go func() { _ = wf.run() }()
			events := decodeStream(t, mediaType, pr)
			if len(events) != 4 {
				t.Fatalf("got %d events, want 4: %+v", len(events), events)
			}
			if got := events[0].Object.(*discoveryv1.EndpointSlice); len(got.Endpoints) != 2 || got.Endpoints[1].Addresses[0] != "10.0.0.3" || got.ResourceVersion != "40" {
				t.Errorf("ADDED not filtered: %+v", got)
			}
			if got := events[1].Object.(*discoveryv1.EndpointSlice); events[1].Type != watch.Bookmark || got.Annotations[metav1.InitialEventsAnnotationKey] != "true" || got.ResourceVersion != "42" {
				t.Errorf("BOOKMARK not passed untouched: %s %+v", events[1].Type, got)
			}
			if got := events[2].Object.(*discoveryv1.EndpointSlice); len(got.Endpoints) != 1 || got.ResourceVersion != "43" {
				t.Errorf("MODIFIED not filtered: %+v", got)
			}
			if got, ok := events[3].Object.(*metav1.Status); events[3].Type != watch.Error || !ok || got.Code != 500 {
				t.Errorf("ERROR not passed: %s %+v", events[3].Type, events[3].Object)
			}
			if want := []string{"40", "42", "43"}; len(rvs) != 3 || rvs[0] != want[0] || rvs[1] != want[1] || rvs[2] != want[2] {
				t.Errorf("resourceVersions reported %v, want %v", rvs, want)
			}
		})
	}
}

// TestWatchFilterEnd: end() sends a 410 Expired ERROR the reflector takes as "relist".
func TestWatchFilterEnd(t *testing.T) {
	for _, mediaType := range []string{mediaTypeProtobuf, mediaTypeJSON} {
		info, err := serializerFor(mediaType)
		if err != nil {
			t.Fatal(err)
		}
		upstreamR, upstreamW := io.Pipe() // never writes: an idle watch
		pr, pw := io.Pipe()
		wf := newWatchFilter(info, upstreamR, pw, dropOdd, nil)
		go func() { _ = wf.run() }()
		go wf.end("selection changed")
		events := decodeStream(t, mediaType, pr)
		_ = upstreamW.Close()
		if len(events) != 1 || events[0].Type != watch.Error {
			t.Fatalf("%s: got %+v, want one ERROR", mediaType, events)
		}
		st := events[0].Object.(*metav1.Status)
		if err := apierrors.FromObject(st); !apierrors.IsResourceExpired(err) {
			t.Errorf("%s: ERROR is %v, want 410 Expired", mediaType, err)
		}
	}
}

func TestFilterList(t *testing.T) {
	for _, mediaType := range []string{mediaTypeProtobuf, mediaTypeJSON} {
		info, err := serializerFor(mediaType)
		if err != nil {
			t.Fatal(err)
		}
		list := &discoveryv1.EndpointSliceList{ListMeta: metav1.ListMeta{ResourceVersion: "77"},
			Items: []discoveryv1.EndpointSlice{*testSlice("a", "70", "1", "2", "3"), *testSlice("b", "71")}}
		raw, err := runtime.Encode(scheme.Codecs.EncoderForVersion(info.Serializer, discoveryv1.SchemeGroupVersion), list)
		if err != nil {
			t.Fatal(err)
		}
		out, lm, err := filterList(info, raw, dropOdd, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := &discoveryv1.EndpointSliceList{}
		if err := runtime.DecodeInto(scheme.Codecs.UniversalDecoder(), out, got); err != nil {
			t.Fatalf("%s: client cannot decode the filtered list: %v", mediaType, err)
		}
		if rv := lm.ResourceVersion; rv != "77" || got.ResourceVersion != "77" || len(got.Items) != 2 || len(got.Items[0].Endpoints) != 2 || len(got.Items[1].Endpoints) != 0 {
			t.Errorf("%s: filtered list %+v (rv %s)", mediaType, got, lm.ResourceVersion)
		}
	}
	if _, err := serializerFor("application/cbor"); err == nil {
		t.Errorf("cbor accepted: an encoding the wrapper cannot filter must be refused")
	}
}
