package benchstat

import (
	"slices"
	"testing"
	"time"
)

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func TestPairedRatioInterval(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	// a is exactly twice b, pair by pair: every resample's ratio is 2.
	lo, hi, ok := PairedRatioInterval(ms(20, 40, 60, 80), ms(10, 20, 30, 40), median)
	if !ok || lo != 2 || hi != 2 {
		t.Fatalf("a = 2b: interval %.3f-%.3f ok=%v, want 2-2", lo, hi, ok)
	}
	// Noisy but equal in distribution: the interval must contain 1 and be wider than a point.
	a := ms(90, 110, 100, 130, 70, 105, 95, 120, 80, 100, 115, 85)
	b := ms(100, 100, 120, 90, 110, 80, 105, 95, 125, 75, 100, 100)
	lo, hi, ok = PairedRatioInterval(a, b, median)
	if !ok || lo >= 1 || hi <= 1 || lo == hi {
		t.Fatalf("equal distributions: interval %.3f-%.3f ok=%v, want one around 1", lo, hi, ok)
	}
	// Deterministic: the same input prints the same interval.
	if lo2, hi2, _ := PairedRatioInterval(a, b, median); lo2 != lo || hi2 != hi {
		t.Fatalf("second call %.3f-%.3f, first %.3f-%.3f", lo2, hi2, lo, hi)
	}
	// Failed measurements (negative) leave their pair out; nothing left is not ok.
	if _, _, ok := PairedRatioInterval(ms(-1), ms(10), median); ok {
		t.Fatal("only a failed pair: ok, want not ok")
	}
	lo, hi, ok = PairedRatioInterval(append(ms(30, 30), -1), append(ms(10, 10), time.Second), median)
	if !ok || lo != 3 || hi != 3 {
		t.Fatalf("failed pair left out: %.3f-%.3f ok=%v, want 3-3", lo, hi, ok)
	}
}
