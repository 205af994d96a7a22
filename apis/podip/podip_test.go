package podip

import (
	"errors"
	"net/netip"
	"testing"
)

func TestChoose(t *testing.T) {
	for _, tc := range []struct {
		name               string
		record, annotation string
		want               Choice
		badAnnotation      bool
		err                bool
	}{
		{name: "neither", want: Choice{}},
		{name: "annotation only", annotation: "10.0.0.5", want: Choice{IP: netip.MustParseAddr("10.0.0.5"), Source: Annotation}},
		{name: "record only", record: "10.0.0.6", want: Choice{IP: netip.MustParseAddr("10.0.0.6"), Source: StaticIP}},
		{name: "agree", record: "10.0.0.6", annotation: "10.0.0.6", want: Choice{IP: netip.MustParseAddr("10.0.0.6"), Source: StaticIP}},
		{name: "disagree: the record wins over a stale annotation", record: "10.0.0.6", annotation: "10.0.0.5",
			want: Choice{IP: netip.MustParseAddr("10.0.0.6"), Source: StaticIP, Overrode: netip.MustParseAddr("10.0.0.5")}},
		{name: "the record wins over a malformed annotation", record: "10.0.0.6", annotation: "10.0.0.300", want: Choice{IP: netip.MustParseAddr("10.0.0.6"), Source: StaticIP}},
		{name: "a malformed annotation that decides", annotation: "10.0.0.300", badAnnotation: true, err: true},
		{name: "a malformed record", record: "x", annotation: "10.0.0.5", err: true},
		{name: "spaces and mapped addresses", record: " ::ffff:10.0.0.6 ", annotation: "::ffff:10.0.0.6", want: Choice{IP: netip.MustParseAddr("10.0.0.6"), Source: StaticIP}},
		{name: "mapped annotation", annotation: " ::ffff:10.0.0.5", want: Choice{IP: netip.MustParseAddr("10.0.0.5"), Source: Annotation}},
		{name: "IPv6", record: "fd00::6", annotation: "fd00::5", want: Choice{IP: netip.MustParseAddr("fd00::6"), Source: StaticIP, Overrode: netip.MustParseAddr("fd00::5")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Choose(tc.record, tc.annotation)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			var bad *BadAnnotationError
			if errors.As(err, &bad) != tc.badAnnotation {
				t.Fatalf("err = %v, want BadAnnotationError %v", err, tc.badAnnotation)
			}
			if got != tc.want {
				t.Fatalf("Choose(%q, %q) = %+v, want %+v", tc.record, tc.annotation, got, tc.want)
			}
		})
	}
	if msg := (&BadAnnotationError{Value: "1.2.3"}).Error(); msg != `annotation staticip.jke.jdcloud.com/ip-address="1.2.3" is not an IP address` {
		t.Fatalf("message %q", msg)
	}
}
