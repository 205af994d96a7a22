package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Histogram sums the cumulative buckets of one histogram family over the series whose
// labels include match.
type Histogram struct {
	Bounds []float64
	Counts []float64
	Total  float64
}

// ScrapeHistogram reads url (a component's /metrics, TLS unverified: loopback, a
// self-signed serving certificate) and sums family over the series with the labels match.
func ScrapeHistogram(ctx context.Context, url, family string, match map[string]string) (Histogram, error) {
	var h Histogram
	series, err := scrape(ctx, url, family, match)
	if err != nil {
		return h, err
	}
	buckets := map[float64]float64{}
	for _, m := range series {
		hist := m.GetHistogram()
		for _, b := range hist.GetBucket() {
			buckets[b.GetUpperBound()] += float64(b.GetCumulativeCount())
		}
		h.Total += float64(hist.GetSampleCount())
	}
	for b := range buckets {
		h.Bounds = append(h.Bounds, b)
	}
	sort.Float64s(h.Bounds)
	for _, b := range h.Bounds {
		h.Counts = append(h.Counts, buckets[b])
	}
	return h, nil
}

// Quantile interpolates the q-quantile inside its bucket (as Prometheus'
// histogram_quantile), in the histogram's unit; NaN without observations.
func (h Histogram) Quantile(q float64) float64 {
	if h.Total == 0 || len(h.Bounds) == 0 {
		return math.NaN()
	}
	rank := q * h.Total
	lower, below := 0.0, 0.0
	for i, b := range h.Bounds {
		if h.Counts[i] >= rank {
			if math.IsInf(b, 1) {
				return lower
			}
			in := h.Counts[i] - below
			if in == 0 {
				return b
			}
			return lower + (b-lower)*(rank-below)/in
		}
		lower, below = b, h.Counts[i]
	}
	return lower
}

// mib formats bytes as MiB.
func mib(b int64) string { return fmt.Sprintf("%.0f", float64(b)/(1<<20)) }

// kv formats extra columns.
func kv(pairs ...string) string { return strings.Join(pairs, ", ") }

// ScrapeCounter reads url as ScrapeHistogram does and sums counter family over the series
// with the labels match (0 when there are none).
func ScrapeCounter(ctx context.Context, url, family string, match map[string]string) (float64, error) {
	series, err := scrape(ctx, url, family, match)
	if err != nil {
		return 0, err
	}
	total := 0.0
	for _, m := range series {
		total += m.GetCounter().GetValue()
	}
	return total, nil
}

// scrape returns the series of family at url whose labels include match.
func scrape(ctx context.Context, url, family string, match map[string]string) ([]*dto.Metric, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	f := families[family]
	if f == nil {
		return nil, nil
	}
	var out []*dto.Metric
series:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range match {
			if labels[k] != v {
				continue series
			}
		}
		out = append(out, m)
	}
	return out, nil
}
