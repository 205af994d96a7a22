package app

import (
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"github.com/staticip/staticip/internal/kubeclient"
	"github.com/staticip/staticip/internal/serving"
)

// Common are the flags every daemon has: its API client (--kubeconfig, --kube-api-qps,
// --kube-api-burst) and its status server (--metrics-bind-address, --health-bind-address, the
// delegated authn/authz flags). A binary's Options embed it.
type Common struct {
	Client  kubeclient.Options
	Serving *serving.Options
}

// NewCommon returns a binary's defaults: its client limits and its two status addresses.
func NewCommon(qps float32, burst int, metricsBindAddress, healthBindAddress string) Common {
	return Common{Client: kubeclient.Options{QPS: qps, Burst: burst}, Serving: serving.NewOptions(metricsBindAddress, healthBindAddress)}
}

// AddFlags registers the common flags.
func (c *Common) AddFlags(fs *pflag.FlagSet) {
	c.Client.AddFlags(fs)
	c.Serving.AddFlags(fs)
}

// Validate checks the common flags.
func (c *Common) Validate() error { return c.Serving.Validate() }

// Load loads the binary's identity (user agent: component) and makes the delegated authn/authz
// of /metrics use it: the part of Complete every binary shares.
func (c *Common) Load(component string) (*rest.Config, error) {
	cfg, err := c.Client.Config(component)
	if err != nil {
		return nil, err
	}
	c.Serving.Complete(c.Client.Kubeconfig)
	return cfg, nil
}
