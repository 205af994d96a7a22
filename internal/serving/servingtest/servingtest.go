// Package servingtest checks a status server of internal/serving from a test: the delegated
// authentication and authorization of its /metrics.
package servingtest

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

var client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed serving certificates

// Get sends GET url with the bearer token (none when empty), accepting a self-signed
// certificate, and returns the status code and body.
func Get(ctx context.Context, url, bearer string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// CheckMetricsAuth checks https://metricsAddr/metrics: the scraper's token (a service account
// bound to staticip-metrics-reader) reads it with every string of want in the body (polled: new
// RBAC takes a moment); no token is refused 403 (system:anonymous), an unknown token 401, the
// stranger's token (no role) 403; plain HTTP is not served.
func CheckMetricsAuth(ctx context.Context, t *testing.T, metricsAddr, scraper, stranger string, want ...string) {
	t.Helper()
	metrics := "https://" + metricsAddr + "/metrics"
	var last string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		code, body, err := Get(ctx, metrics, scraper)
		last = fmt.Sprintf("HTTP %d %v: %.300s", code, err, body)
		if err != nil || code != http.StatusOK {
			return false, nil
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the scraper bound to staticip-metrics-reader never read %q: %s", want, last)
	}
	for _, c := range []struct {
		who, token string
		want       int
	}{{"no token (system:anonymous)", "", http.StatusForbidden}, {"an unknown token", "not-a-token", http.StatusUnauthorized},
		{"a service account without staticip-metrics-reader", stranger, http.StatusForbidden}} {
		if code, body, err := Get(ctx, metrics, c.token); err != nil || code != c.want {
			t.Errorf("/metrics with %s: HTTP %d (%v), want %d: %.200s", c.who, code, err, c.want, body)
		}
	}
	if code, _, err := Get(ctx, "http://"+metricsAddr+"/metrics", ""); err == nil && code == http.StatusOK {
		t.Error("/metrics answered 200 over plain HTTP")
	}
}
