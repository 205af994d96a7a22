// Package kubeclient builds the API client identity shared by the edge components: the pod's
// service account in a cluster, or a kubeconfig file (the local cluster, tests).
package kubeclient

import (
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Config loads the in-cluster identity when kubeconfig is empty, otherwise the file, and sets
// the client's rate limits and user agent (the component's name, so the API server's audit
// log and metrics say who asked).
func Config(kubeconfig string, qps float32, burst int, userAgent string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = qps, burst
	cfg.UserAgent = userAgent
	return cfg, nil
}
