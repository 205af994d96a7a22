// Package bench is tools/scalebench's harness: its own control plane on loopback (etcd and
// kube-apiserver from internal/testenv, kube-controller-manager and kube-scheduler as
// processes when a scenario needs them), kwok faking N nodes and their pods, and the
// staticip components as real processes whose CPU, peak memory and API requests are
// measured one scenario at a time.
package bench

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	sipclient "github.com/staticip/staticip/apis/generated/clientset/versioned"
	"github.com/staticip/staticip/internal/testenv"
)

//go:embed stages.yaml
var kwokStages []byte

const (
	// KwokAnnotation marks the nodes kwok manages (--manage-nodes-with-annotation-selector).
	KwokAnnotation = "kwok.x-k8s.io/node"
	// NodeLabel is on every fake node.
	NodeLabel = "scalebench.staticip.io/node"
	// ZoneLabel spreads the nodes over three zones.
	ZoneLabel = "topology.kubernetes.io/zone"
)

// ErrMissingBinary means a binary the harness needs is not in the bin directory.
var ErrMissingBinary = errors.New("scalebench: binary missing")

// Options configure the control plane.
type Options struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and
	// the staticip binaries (default testenv.BinDir()).
	BinDir string
	// Dir is where logs, kubeconfigs and configs go (a temp dir when empty).
	Dir string
	// Need lists binaries that must exist (ErrMissingBinary otherwise).
	Need []string
	// KwokBin is kwok's binary (default $KWOK_BIN, else BinDir/kwok; make k8s-bins builds it
	// from tools/kwok).
	KwokBin string
	// ControllerQPS and ControllerBurst are the client limits of both controller managers,
	// kube-controller-manager and staticip-controller-manager (--kube-api-qps/-burst): one
	// value for both, so a scenario that sets them side by side compares controllers, not
	// rate limits. Default DefaultControllerQPS/Burst.
	ControllerQPS   float32
	ControllerBurst int
}

// DefaultControllerQPS and DefaultControllerBurst are what both controller managers ship
// with: kube-controller-manager's defaults since v1.27 (component-base's client connection
// defaults) and staticip-controller-manager's (controllers/README.md, "Flags").
const (
	DefaultControllerQPS   = 50
	DefaultControllerBurst = 100
)

// Cluster is a running control plane with kwok.
type Cluster struct {
	Config  *rest.Config
	Kube    kubernetes.Interface
	SIP     sipclient.Interface
	BinDir  string
	KwokBin string
	Dir     string
	Nodes   []string
	env     *testenv.Env
	kwok    *Proc
	// kwokStarts counts kwok's starts (a restart makes it forget a powered-off node).
	kwokStarts int
	proxies    []*CountingProxy
	tempDir    bool
	// controllerQPS/Burst: Options.ControllerQPS/Burst, defaulted.
	controllerQPS   float32
	controllerBurst int
	// rangeNames: node → the name of its IPRange, as Ranges last read them.
	rangeNames map[string]string
}

// Start brings up etcd + kube-apiserver (MaxUnavailableStatefulSet on, so the native
// StatefulSet can be measured with the same budget) with the staticip CRDs, then kwok.
func Start(opts Options) (*Cluster, error) {
	c := &Cluster{BinDir: opts.BinDir, Dir: opts.Dir, KwokBin: opts.KwokBin, controllerQPS: opts.ControllerQPS, controllerBurst: opts.ControllerBurst}
	if c.controllerQPS <= 0 {
		c.controllerQPS = DefaultControllerQPS
	}
	if c.controllerBurst <= 0 {
		c.controllerBurst = DefaultControllerBurst
	}
	if c.BinDir == "" {
		d, err := testenv.BinDir()
		if err != nil {
			return nil, err
		}
		c.BinDir = d
	}
	if c.KwokBin == "" {
		c.KwokBin = os.Getenv("KWOK_BIN")
	}
	if c.KwokBin == "" {
		c.KwokBin = filepath.Join(c.BinDir, "kwok")
	}
	need := []string{c.KwokBin}
	for _, b := range append([]string{"etcd", "kube-apiserver"}, opts.Need...) {
		need = append(need, filepath.Join(c.BinDir, b))
	}
	for _, b := range need {
		if _, err := os.Stat(b); err != nil {
			return nil, fmt.Errorf("%w: %s (make k8s-bins builds kwok and the Kubernetes binaries, make build staticip's)", ErrMissingBinary, b)
		}
	}
	if c.Dir == "" {
		d, err := os.MkdirTemp("", "scalebench-")
		if err != nil {
			return nil, err
		}
		c.Dir, c.tempDir = d, true
	} else if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, err
	}
	env, err := testenv.StartWith(testenv.Options{APIServerArgs: map[string]string{
		"feature-gates": "MaxUnavailableStatefulSet=true",
		// 5,000 Services (the wrapper scenario) need more than envtest's /24.
		"service-cluster-ip-range": "10.96.0.0/16",
		// Thousands of nodes, one client: the defaults (400/200) make the harness wait.
		"max-requests-inflight":          "1000",
		"max-mutating-requests-inflight": "500",
		// The scheduler scenario deletes every pass's 30,000 pods and 10,000 StaticIPs with
		// DeleteCollection: one worker (the default) deletes ~120 objects/s here.
		"delete-collection-workers": "16",
	}})
	if err != nil {
		return nil, err
	}
	c.env = env
	c.Config = rest.CopyConfig(env.Config)
	c.Config.QPS, c.Config.Burst = 1000, 2000
	if c.Kube, err = kubernetes.NewForConfig(c.Config); err != nil {
		c.Stop()
		return nil, err
	}
	if c.SIP, err = sipclient.NewForConfig(c.Config); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.startKwok(); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// Stop ends kwok, the proxies and the control plane, and removes a temp dir.
func (c *Cluster) Stop() {
	c.kwok.Stop()
	for _, p := range c.proxies {
		p.Close()
	}
	if c.env != nil {
		_ = c.env.Stop()
	}
	if c.tempDir && os.Getenv("SCALEBENCH_KEEP") == "" {
		_ = os.RemoveAll(c.Dir)
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (c *Cluster) startKwok() error {
	kc := filepath.Join(c.Dir, "kwok.kubeconfig")
	if err := testenv.WriteKubeconfig(c.Config, kc); err != nil {
		return err
	}
	cfg := filepath.Join(c.Dir, "kwok.yaml")
	if err := os.WriteFile(cfg, kwokStages, 0o644); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	c.kwokStarts++
	name := "kwok"
	if c.kwokStarts > 1 {
		name = fmt.Sprintf("kwok-%d", c.kwokStarts)
	}
	c.kwok, err = StartProc(c.Dir, name, c.KwokBin, "--kubeconfig="+kc, "--config="+cfg,
		"--manage-nodes-with-annotation-selector="+KwokAnnotation+"=fake",
		"--server-address=127.0.0.1:"+strconv.Itoa(port), "--cidr=10.250.0.0/16", "--node-ip=10.251.0.1", "--v=WARN")
	return err
}

// Kwok is kwok's process (its CPU is the simulator's, not a component's).
func (c *Cluster) Kwok() *Proc { return c.kwok }

// Kubeconfig writes a kubeconfig for a component that reaches the API server through a
// new counting proxy, and returns both.
func (c *Cluster) Kubeconfig(name string) (string, *CountingProxy, error) {
	p, err := NewCountingProxy(c.Config)
	if err != nil {
		return "", nil, err
	}
	c.proxies = append(c.proxies, p)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: p.URL, CertificateAuthorityData: p.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	path := filepath.Join(c.Dir, name+".kubeconfig")
	return path, p, clientcmd.WriteToFile(*kc, path)
}

// NodeName is the i-th fake node's name.
func NodeName(i int) string { return fmt.Sprintf("kwok-%05d", i) }

// NodeCapacity is every fake node's capacity: 110 pods, as a kubelet's default.
var NodeCapacity = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("64"),
	corev1.ResourceMemory: resource.MustParse("256Gi"),
	corev1.ResourcePods:   resource.MustParse("110"),
}

// FakeNode is a node kwok manages, in zone.
func FakeNode(name, zone string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Annotations: map[string]string{KwokAnnotation: "fake"},
		Labels: map[string]string{NodeLabel: "true", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
			ZoneLabel: zone, "type": "kwok"}},
		Status: corev1.NodeStatus{Capacity: NodeCapacity, Allocatable: NodeCapacity}}
}

// AddNodes creates fake nodes from len(c.Nodes) up to n (kwok makes them Ready) and waits
// until all are Ready.
func (c *Cluster) AddNodes(ctx context.Context, n int) error {
	first := len(c.Nodes)
	err := parallel(ctx, n-first, 32, func(ctx context.Context, j int) error {
		i := first + j
		if _, err := c.Kube.CoreV1().Nodes().Create(ctx, FakeNode(NodeName(i), fmt.Sprintf("zone-%d", i%3)), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := first; i < n; i++ {
		c.Nodes = append(c.Nodes, NodeName(i))
	}
	if err := c.WaitNodesReady(ctx, n); err != nil {
		return err
	}
	// kube-apiserver taints a new node not-ready (TaintNodesByCondition); kube-controller-
	// manager's node lifecycle controller, which lifts it on a real cluster, does not run here.
	return parallel(ctx, n-first, 32, func(ctx context.Context, j int) error {
		_, err := c.Kube.CoreV1().Nodes().Patch(ctx, NodeName(first+j), types.MergePatchType, []byte(`{"spec":{"taints":null}}`), metav1.PatchOptions{})
		return err
	})
}

// WaitNodesReady waits until n fake nodes are Ready.
func (c *Cluster) WaitNodesReady(ctx context.Context, n int) error {
	return poll(ctx, 10*time.Minute, func(ctx context.Context) (bool, error) {
		nodes, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: NodeLabel, ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		ready := 0
		for i := range nodes.Items {
			for _, cond := range nodes.Items[i].Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready >= n, nil
	})
}

func poll(ctx context.Context, timeout time.Duration, f wait.ConditionWithContextFunc) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, f)
}

// parallel runs f(0..n-1) on w workers, stopping at the first error.
func parallel(ctx context.Context, n, w int, f func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	errs := make(chan error, w)
	for k := 0; k < w; k++ {
		go func() {
			for i := range next {
				if err := f(ctx, i); err != nil {
					errs <- err
					cancel()
					for range next {
					}
					return
				}
			}
			errs <- nil
		}()
	}
	for i := 0; i < n; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	var first error
	for k := 0; k < w; k++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// LogVerbosity is the --v of the schedulers and controller managers: 1, or SCALEBENCH_V to see
// why something happened in a kept run (SCALEBENCH_KEEP=1; e.g. 4 for the schedulers' per-pod
// decisions and the controllers' deletions). Figures measured with it are not comparable.
func LogVerbosity() string {
	if v := os.Getenv("SCALEBENCH_V"); v != "" {
		return "--v=" + v
	}
	return "--v=1"
}

// controllerLimits are the client-limit flags both controller managers run with.
func (c *Cluster) controllerLimits() []string {
	return []string{"--kube-api-qps=" + strconv.FormatFloat(float64(c.controllerQPS), 'f', -1, 32), "--kube-api-burst=" + strconv.Itoa(c.controllerBurst)}
}
