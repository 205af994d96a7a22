// Package kubeclient is the one REST-config loader of staticip's binaries: the pod's service
// account in a cluster, or a kubeconfig file (the local cluster, tests).
package kubeclient

import (
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Options are a binary's API client flags: --kubeconfig, --kube-api-qps, --kube-api-burst.
type Options struct {
	Kubeconfig string
	QPS        float32
	Burst      int
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig of this binary's identity; empty: the in-cluster service account.")
	fs.Float32Var(&o.QPS, "kube-api-qps", o.QPS, "QPS towards the API server.")
	fs.IntVar(&o.Burst, "kube-api-burst", o.Burst, "Burst towards the API server.")
}

// Config loads the identity (Config of the package).
func (o *Options) Config(userAgent string) (*rest.Config, error) {
	return Config(o.Kubeconfig, o.QPS, o.Burst, userAgent)
}

// Config loads the in-cluster identity when kubeconfig is empty, otherwise the file, and sets
// the client's rate limits (when qps > 0) and user agent (the component's name, so the API
// server's audit log and metrics say who asked).
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
	if qps > 0 {
		cfg.QPS, cfg.Burst = qps, burst
	}
	cfg.UserAgent = userAgent
	return cfg, nil
}

// Kubernetes is a clientset of Kubernetes' built-in APIs that speaks protobuf, as
// kube-controller-manager's, kube-scheduler's, kubelet's and kube-proxy's clients do
// (--kube-api-content-type): the API server encodes and decodes a protobuf Pod, Node or Lease for
// a fraction of the CPU JSON costs it, which at scale is the server's bound (issue 37: 6,000
// route-report Lease writes in one 5,000-node failover). JSON stays accepted for answers.
// Custom resources have no protobuf: their clients (apis/generated) keep cfg as it is.
//
// staticip-controller-manager does not use it yet. Tried: in a 1,000-node tools/scalebench failover
// the moved EnhancedStatefulSet's pods churned after the rebind (created, bound, deleted again)
// with protobuf (37 s, and once > 5 min without converging) — and then, in the same A/B, with JSON
// too (51 s): not the encoding but kube-controller-manager's taint-eviction workers deleting the
// recreated pods by name, and a pod left pinned to the failed node (controllers/README.md,
// "Known: deletions by name after a failover"). The manager moves to protobuf once an A/B
// without that churn shows what the encoding gives.
func Kubernetes(cfg *rest.Config) (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(Protobuf(cfg))
}

// Protobuf is a copy of cfg that sends protobuf and prefers it in answers (built-in APIs only).
func Protobuf(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return c
}
