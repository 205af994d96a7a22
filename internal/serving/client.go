package serving

import (
	"net/http"

	"k8s.io/client-go/rest"
)

// Client is an HTTP client that presents cfg's credentials (client certificate or bearer
// token) to a status server and accepts its serving certificate unverified (self-signed by
// default): for tests and tools that scrape a binary's /metrics.
func Client(cfg *rest.Config) (*http.Client, error) {
	c := rest.AnonymousClientConfig(cfg)
	c.CertData, c.CertFile, c.KeyData, c.KeyFile = cfg.CertData, cfg.CertFile, cfg.KeyData, cfg.KeyFile
	c.BearerToken, c.BearerTokenFile = cfg.BearerToken, cfg.BearerTokenFile
	c.CAData, c.CAFile, c.ServerName = nil, "", ""
	c.Insecure = true
	c.Impersonate = rest.ImpersonationConfig{}
	return rest.HTTPClientFor(c)
}
