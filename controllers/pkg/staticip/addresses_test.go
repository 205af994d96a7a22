package staticip

import (
	"testing"

	"github.com/staticip/staticip/apis/podip"
)

func TestRecordAddresses(t *testing.T) {
	parse := func(s string) podip.Addresses {
		a, err := podip.ParseAddresses(s)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for _, c := range []struct {
		name, rec, pod, want, mismatch string
	}{
		{name: "first IP", rec: "", pod: "10.0.0.5", want: "10.0.0.5"},
		{name: "first IPs of a dual-stack pod", rec: "", pod: "10.0.0.5,fd00::5", want: "10.0.0.5,fd00::5"},
		{name: "agrees", rec: "10.0.0.5,fd00::5", pod: "10.0.0.5,fd00::5", want: "10.0.0.5,fd00::5"},
		{name: "agrees in another order (the kubelet's primary)", rec: "fd00::5,10.0.0.5", pod: "10.0.0.5,fd00::5", want: "fd00::5,10.0.0.5"},
		{name: "single-stack record gains the other family", rec: "10.0.0.5", pod: "10.0.0.5,fd00::5", want: "10.0.0.5,fd00::5"},
		{name: "single-stack IPv6 record gains IPv4", rec: "fd00::5", pod: "10.0.0.5,fd00::5", want: "fd00::5,10.0.0.5"},
		{name: "the pod lacks a recorded family: kept", rec: "10.0.0.5,fd00::5", pod: "10.0.0.5", want: "10.0.0.5,fd00::5"},
		{name: "IPv6 differs", rec: "10.0.0.5,fd00::5", pod: "10.0.0.5,fd00::9", want: "10.0.0.5,fd00::5", mismatch: "IPv6 fd00::9, recorded fd00::5"},
		{name: "single-stack record, other address", rec: "10.0.0.5", pod: "10.0.0.6,fd00::5", want: "10.0.0.5", mismatch: "IPv4 10.0.0.6, recorded 10.0.0.5"},
		{name: "single-stack record, pod of the other family only: nothing gained", rec: "10.0.0.5", pod: "fd00::5", want: "10.0.0.5"},
		{name: "no pod IP yet", rec: "10.0.0.5", pod: "", want: "10.0.0.5"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, mismatch := recordAddresses(parse(c.rec), parse(c.pod))
			if got != parse(c.want) || mismatch != c.mismatch {
				t.Fatalf("recordAddresses(%q, %q) = %q, %q; want %q, %q", c.rec, c.pod, got, mismatch, c.want, c.mismatch)
			}
		})
	}
}
