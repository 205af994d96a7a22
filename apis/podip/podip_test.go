package podip

import (
	"errors"
	"net/netip"
	"testing"
)

var (
	v4 = netip.MustParseAddr("10.0.0.5")
	v6 = netip.MustParseAddr("fd00::5")
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
			want: Choice{IP: netip.MustParseAddr("10.0.0.6"), Source: StaticIP, Overrode: Addresses{Primary: netip.MustParseAddr("10.0.0.5")}}},
		{name: "the record wins over a malformed annotation", record: "10.0.0.6", annotation: "10.0.0.300", want: Choice{IP: netip.MustParseAddr("10.0.0.6"), Source: StaticIP}},
		{name: "a malformed annotation that decides", annotation: "10.0.0.300", badAnnotation: true, err: true},
		{name: "a malformed record", record: "x", annotation: "10.0.0.5", err: true},
		{name: "spaces and mapped addresses", record: " ::ffff:10.0.0.6 ", annotation: "::ffff:10.0.0.6", want: Choice{IP: netip.MustParseAddr("10.0.0.6"), Source: StaticIP}},
		{name: "mapped annotation", annotation: " ::ffff:10.0.0.5", want: Choice{IP: netip.MustParseAddr("10.0.0.5"), Source: Annotation}},
		{name: "dual-stack annotation", annotation: "10.0.0.5, fd00::5", want: Choice{IP: v4, Secondary: v6, Source: Annotation}},
		{name: "dual-stack annotation, IPv6 first", annotation: "fd00::5,10.0.0.5", want: Choice{IP: v6, Secondary: v4, Source: Annotation}},
		{name: "dual-stack record", record: "10.0.0.5,fd00::5", want: Choice{IP: v4, Secondary: v6, Source: StaticIP}},
		{name: "dual-stack record and an agreeing annotation", record: "10.0.0.5,fd00::5", annotation: "10.0.0.5,fd00::5", want: Choice{IP: v4, Secondary: v6, Source: StaticIP}},
		{name: "dual-stack record over an annotation that differs in one family", record: "10.0.0.5,fd00::5", annotation: "10.0.0.5,fd00::9",
			want: Choice{IP: v4, Secondary: v6, Source: StaticIP, Overrode: Addresses{Primary: v4, Secondary: netip.MustParseAddr("fd00::9")}}},
		{name: "dual-stack record over a single-stack annotation", record: "10.0.0.5,fd00::5", annotation: "10.0.0.5", want: Choice{IP: v4, Secondary: v6, Source: StaticIP}},
		{name: "a single-stack record gains the annotation's other family", record: "10.0.0.5", annotation: "10.0.0.5,fd00::5", want: Choice{IP: v4, Secondary: v6, Source: StaticIP}},
		{name: "a single-stack record over an annotation of the other family", record: "10.0.0.5", annotation: "fd00::5",
			want: Choice{IP: v4, Source: StaticIP, Overrode: Addresses{Primary: v6}}},
		{name: "two of one family in the annotation", annotation: "10.0.0.5,10.0.0.6", badAnnotation: true, err: true},
		{name: "three addresses in the annotation", annotation: "10.0.0.5,fd00::5,10.0.0.6", badAnnotation: true, err: true},
		{name: "a dual-stack record with two of one family", record: "fd00::5,fd00::6", err: true},
		{name: "IPv6", record: "fd00::6", annotation: "fd00::5", want: Choice{IP: netip.MustParseAddr("fd00::6"), Source: StaticIP, Overrode: Addresses{Primary: netip.MustParseAddr("fd00::5")}}},
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
	if msg := (&BadAnnotationError{Value: "10.0.0.5,10.0.0.6", Reason: "holds two IPv4 addresses"}).Error(); msg != `annotation staticip.jke.jdcloud.com/ip-address="10.0.0.5,10.0.0.6" holds two IPv4 addresses` {
		t.Fatalf("message %q", msg)
	}
	if msg := (&BadAnnotationError{Value: "1.2.3"}).Error(); msg != `annotation staticip.jke.jdcloud.com/ip-address="1.2.3" is not an IP address` {
		t.Fatalf("message %q", msg)
	}
}

func TestParseAddresses(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  Addresses
		err   string // the AddressesError's message; "" for none
	}{
		{value: "", want: Addresses{}},
		{value: "  ", want: Addresses{}},
		{value: "10.0.0.5", want: Addresses{Primary: v4}},
		{value: "fd00::5", want: Addresses{Primary: v6}},
		{value: " ::ffff:10.0.0.5 ", want: Addresses{Primary: v4}},
		{value: "10.0.0.5,fd00::5", want: Addresses{Primary: v4, Secondary: v6}},
		{value: "fd00::5 , 10.0.0.5", want: Addresses{Primary: v6, Secondary: v4}},
		{value: "::ffff:10.0.0.5,fd00::5", want: Addresses{Primary: v4, Secondary: v6}},
		{value: "10.0.0.300", err: `"10.0.0.300" is not an IP address`},
		{value: "10.0.0.5,x", err: `"10.0.0.5,x" holds "x", which is not an IP address`},
		{value: "10.0.0.5,", err: `"10.0.0.5," has an empty address; it takes one address per IP family separated by a comma (e.g. 10.0.0.5,fd00::5)`},
		{value: "10.0.0.5,10.0.0.6", err: `"10.0.0.5,10.0.0.6" holds two IPv4 addresses; it takes one address per IP family (e.g. 10.0.0.5,fd00::5)`},
		{value: "fd00::5,fd00::6", err: `"fd00::5,fd00::6" holds two IPv6 addresses; it takes one address per IP family (e.g. 10.0.0.5,fd00::5)`},
		{value: "10.0.0.5,::ffff:10.0.0.6", err: `"10.0.0.5,::ffff:10.0.0.6" holds two IPv4 addresses; it takes one address per IP family (e.g. 10.0.0.5,fd00::5)`},
		{value: "10.0.0.5,fd00::5,10.0.0.6", err: `"10.0.0.5,fd00::5,10.0.0.6" holds 3 addresses; it takes one address per IP family, at most two (e.g. 10.0.0.5,fd00::5)`},
		{value: "fe80::1%eth0", err: `"fe80::1%eth0" is not an IP address`},
		{value: "10.0.0.5/24", err: `"10.0.0.5/24" is not an IP address`},
	} {
		t.Run(tc.value, func(t *testing.T) {
			got, err := ParseAddresses(tc.value)
			if tc.err != "" {
				var bad *AddressesError
				if !errors.As(err, &bad) || err.Error() != tc.err {
					t.Fatalf("ParseAddresses(%q) error = %v, want %s", tc.value, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseAddresses(%q) = %+v, %v; want %+v", tc.value, got, err, tc.want)
			}
			// The annotation's form round-trips.
			if again, err := ParseAddresses(got.String()); err != nil || again != got {
				t.Fatalf("ParseAddresses(%q) = %+v, %v; want %+v", got.String(), again, err, got)
			}
		})
	}
}

func TestAddressesOf(t *testing.T) {
	a := Addresses{Primary: v6, Secondary: v4}
	if a.Of(4) != v4 || a.Of(6) != v6 || (Addresses{Primary: v4}).Of(6).IsValid() {
		t.Fatalf("Of: %v %v", a.Of(4), a.Of(6))
	}
	if got := a.List(); len(got) != 2 || got[0] != v6 || got[1] != v4 {
		t.Fatalf("List = %v", got)
	}
	if (Addresses{}).List() != nil || (Addresses{}).String() != "" || (Addresses{}).IsValid() {
		t.Fatal("the zero Addresses is no address")
	}
}
