package main

import (
	"testing"
	"time"
)

func TestBootstrapRatio(t *testing.T) {
	var a, b []time.Duration
	for i := range 500 {
		d := time.Duration(i+1) * time.Millisecond
		a, b = append(a, 2*d), append(b, d)
	}
	if got := bootstrapRatio(a, b, 0.99); got != "2.00x-2.00x" {
		t.Errorf("twice as slow in every cycle: interval %s, want 2.00x-2.00x", got)
	}
	// A failed cycle of either plugin leaves the pair out instead of pairing unrelated cycles.
	a[0], b[1] = failed, failed
	if got := bootstrapRatio(a, b, 0.50); got != "2.00x-2.00x" {
		t.Errorf("with failed cycles: interval %s, want 2.00x-2.00x", got)
	}
	// One slow outlier in a: the p99 interval must span the ratio with and without it.
	a, b = a[:0], b[:0]
	for range 500 {
		a, b = append(a, time.Millisecond), append(b, time.Millisecond)
	}
	for i := range 5 {
		a[i] = 10 * time.Millisecond
	}
	if got := bootstrapRatio(a, b, 0.99); got != "1.00x-10.00x" {
		t.Errorf("five outliers in 500 cycles: p99 interval %s, want 1.00x-10.00x", got)
	}
}
