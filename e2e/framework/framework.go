// Package framework is the e2e suite's toolbox: a client for the cluster under test (any
// kubeconfig), namespaces that clean up after themselves and dump events and logs when a
// test fails, waiting, and running commands in pods and in nodes' network namespaces.
package framework

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/staticip/staticip/internal/reporoot"
	"github.com/staticip/staticip/internal/testsupport"
)

// NetnsAnnotation matches tools/localcluster: the node's network namespace name.
const NetnsAnnotation = "localcluster.staticip.io/netns"

var (
	kubeconfig = flag.String("kubeconfig", "", "kubeconfig of the cluster under test (default $KUBECONFIG)")
	kubectl    = flag.String("kubectl", "", "kubectl binary (default <repo>/_output/bin/kubectl, then PATH)")
)

// Framework is shared by all tests of one run.
type Framework struct {
	Kubeconfig string
	Config     *rest.Config
	Client     kubernetes.Interface
	Kubectl    string
	// NodeTool is a static binary runnable inside a node's network namespace
	// (the testserver, built by the suite); empty when not built.
	NodeTool string
}

// New connects to the cluster named by -kubeconfig or $KUBECONFIG.
func New() (*Framework, error) {
	path := *kubeconfig
	if path == "" {
		path = os.Getenv("KUBECONFIG")
	}
	if path == "" {
		return nil, fmt.Errorf("no cluster: pass -kubeconfig or set KUBECONFIG (make e2e brings up the local cluster)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 50, 100
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	k := *kubectl
	if k == "" {
		if root, err := repoRoot(); err == nil {
			if _, err := os.Stat(filepath.Join(root, "_output", "bin", "kubectl")); err == nil {
				k = filepath.Join(root, "_output", "bin", "kubectl")
			}
		}
	}
	if k == "" {
		if k, err = exec.LookPath("kubectl"); err != nil {
			return nil, fmt.Errorf("no kubectl: pass -kubectl")
		}
	}
	return &Framework{Kubeconfig: path, Config: cfg, Client: client, Kubectl: k}, nil
}

// RepoRoot is the checkout the suite runs from (the product module's go.mod above the working
// directory; e2e/ is a module of its own inside it).
func RepoRoot() (string, error) { return repoRoot() }

func repoRoot() (string, error) { return reporoot.Find() }

// BuildNodeTool builds the testserver statically into dir so that it can run inside a
// node's network namespace.
func (f *Framework) BuildNodeTool(dir string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	out := filepath.Join(dir, "testserver")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = filepath.Join(root, "e2e", "testserver") // the e2e module's own directory
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build testserver: %w: %s", err, b)
	}
	f.NodeTool = out
	return nil
}

// Namespace creates a namespace for one test; it is deleted when the test ends, and its
// events, pods and logs are printed first if the test failed.
func (f *Framework) Namespace(t *testing.T, prefix string) string {
	t.Helper()
	return f.NamespaceWithLabels(t, prefix, nil)
}

// IPRequestNamespace is a Namespace that opted in to pods asking for an IP themselves
// (label staticip.jke.jdcloud.com/allow-ip-request=true, manifests/admission): the tests that
// create pods carrying the ip-address annotation run in one.
func (f *Framework) IPRequestNamespace(t *testing.T, prefix string) string {
	t.Helper()
	return f.NamespaceWithLabels(t, prefix, map[string]string{"staticip.jke.jdcloud.com/allow-ip-request": "true"})
}

// NamespaceWithLabels is Namespace with labels on the namespace.
func (f *Framework) NamespaceWithLabels(t *testing.T, prefix string, labels map[string]string) string {
	t.Helper()
	ns, err := f.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Labels: labels},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			f.Dump(t, ns.Name)
		}
		_ = f.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// Dump logs the namespace's pods, events and container logs.
func (f *Framework) Dump(t *testing.T, ns string) {
	t.Helper()
	for _, args := range [][]string{
		{"get", "pods", "-o", "wide", "-n", ns},
		{"get", "events", "--sort-by=.lastTimestamp", "-n", ns},
		{"get", "nodes", "-o", "wide"},
	} {
		out, _ := f.RunKubectl(args...)
		t.Logf("kubectl %s:\n%s", strings.Join(args, " "), out)
	}
	pods, err := f.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, p := range pods.Items {
		out, _ := f.RunKubectl("logs", "-n", ns, p.Name, "--all-containers", "--tail=50")
		t.Logf("logs of %s/%s:\n%s", ns, p.Name, out)
	}
}

// RunKubectl runs kubectl against the cluster under test.
func (f *Framework) RunKubectl(args ...string) (string, error) {
	cmd := exec.Command(f.Kubectl, append([]string{"--kubeconfig=" + f.Kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String() + stderr.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// ExecInPod runs a command in a pod's container through the API server and the kubelet
// (kubectl exec).
func (f *Framework) ExecInPod(ns, pod string, command ...string) (string, error) {
	return f.RunKubectl(append([]string{"exec", "-n", ns, pod, "--"}, command...)...)
}

// NodeNetns returns the network namespace of a node of the local cluster, or "" when the
// cluster is not a local cluster (kind, a real cluster).
func (f *Framework) NodeNetns(ctx context.Context, node string) (string, error) {
	n, err := f.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	ns := n.Annotations[NetnsAnnotation]
	if ns == "" {
		return "", nil
	}
	if _, err := os.Stat(filepath.Join("/run/netns", ns)); err != nil {
		return "", nil
	}
	return ns, nil
}

// ExecOnNode runs a command inside a node's network namespace (only the network
// namespace, like the node's own daemons).
func (f *Framework) ExecOnNode(netns string, command ...string) (string, error) {
	args := append([]string{"--net=/run/netns/" + netns, "--"}, command...)
	out, err := exec.Command("nsenter", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("on %s: %s: %w: %s", netns, strings.Join(command, " "), err, out)
	}
	return string(out), nil
}

// WaitFor polls cond every 250 ms until it is true or timeout passes (testsupport.WaitFor: an
// error from cond is kept for the timeout's message, not returned at once).
func WaitFor(ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) error {
	return testsupport.WaitFor(ctx, 250*time.Millisecond, timeout, what, cond)
}

// WaitForPodRunning waits until the pod runs, is Ready and has an IP.
func (f *Framework) WaitForPodRunning(ctx context.Context, ns, name string, timeout time.Duration) (*corev1.Pod, error) {
	var pod *corev1.Pod
	err := WaitFor(ctx, timeout, "pod "+ns+"/"+name+" Running and Ready", func(ctx context.Context) (bool, error) {
		p, err := f.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("pod ended in phase %s", p.Status.Phase)
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return false, nil
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	return pod, err
}
