// Package benchstat holds the statistics the benchmarks under tools/ share: how far a ratio
// measured once on a shared, noisy machine can be trusted.
package benchstat

import (
	"math/rand/v2"
	"slices"
	"time"
)

// Resamples of the bootstrap; 2,000 puts the 2.5% and 97.5% points 50 values from each end.
const Resamples = 2000

// PairedRatioInterval is the 95% interval of stat(a)/stat(b) by a paired bootstrap: pair i is
// (a[i], b[i]), two measurements taken back to back under the same load, and the pairs are
// resampled with replacement Resamples times. Pairs with a negative side (a failed
// measurement) are left out; ok is false when none is left. The generator is seeded, so the
// same measurements print the same interval.
func PairedRatioInterval(a, b []time.Duration, stat func([]time.Duration) time.Duration) (lo, hi float64, ok bool) {
	var pairs [][2]time.Duration
	for i := range min(len(a), len(b)) {
		if a[i] >= 0 && b[i] >= 0 {
			pairs = append(pairs, [2]time.Duration{a[i], b[i]})
		}
	}
	if len(pairs) == 0 {
		return 0, 0, false
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ratios := make([]float64, 0, Resamples)
	xa, xb := make([]time.Duration, len(pairs)), make([]time.Duration, len(pairs))
	for range Resamples {
		for i := range pairs {
			p := pairs[rng.IntN(len(pairs))]
			xa[i], xb[i] = p[0], p[1]
		}
		if den := stat(xb); den > 0 {
			ratios = append(ratios, float64(stat(xa))/float64(den))
		}
	}
	if len(ratios) == 0 {
		return 0, 0, false
	}
	slices.Sort(ratios)
	return ratios[len(ratios)*25/1000], ratios[min(len(ratios)-1, len(ratios)*975/1000)], true
}
