//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/staticip/staticip/e2e/framework"
)

const testServerImage = "localhost/staticip/testserver:v1"

// reply mirrors e2e/testserver's answer.
type reply struct {
	Pod   string `json:"pod"`
	Node  string `json:"node"`
	PodIP string `json:"podIP"`
}

func parseReply(t *testing.T, out string) reply {
	t.Helper()
	var r reply
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
		t.Fatalf("testserver answer %q: %v", out, err)
	}
	return r
}

func readyNodes(t *testing.T, ctx context.Context) []corev1.Node {
	t.Helper()
	var ready []corev1.Node
	err := framework.WaitFor(ctx, 2*time.Minute, "every node Ready", func(ctx context.Context) (bool, error) {
		nodes, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		ready = ready[:0]
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready = append(ready, n)
				}
			}
		}
		if len(nodes.Items) == 0 || len(ready) != len(nodes.Items) {
			return false, fmt.Errorf("%d of %d nodes Ready", len(ready), len(nodes.Items))
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ready
}

// workloadNodes are the Ready nodes that take ordinary pods: a node tainted NoSchedule or
// NoExecute (a kind or kubeadm control plane) is left out, with the reason logged.
func workloadNodes(t *testing.T, ctx context.Context) []corev1.Node {
	t.Helper()
	var out []corev1.Node
	for _, n := range readyNodes(t, ctx) {
		if taint := untoleratedTaint(n); taint != "" {
			t.Logf("node %s left out: tainted %s (test pods do not tolerate it)", n.Name, taint)
			continue
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		t.Fatal("no Ready node takes ordinary pods")
	}
	return out
}

func untoleratedTaint(n corev1.Node) string {
	for _, taint := range n.Spec.Taints {
		if taint.Effect == corev1.TaintEffectNoSchedule || taint.Effect == corev1.TaintEffectNoExecute {
			return taint.ToString()
		}
	}
	return ""
}

func TestNodesReady(t *testing.T) {
	nodes := readyNodes(t, context.Background())
	for _, n := range nodes {
		var ip string
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				ip = a.Address
			}
		}
		if ip == "" {
			t.Errorf("node %s has no InternalIP", n.Name)
		}
		t.Logf("node %s Ready, InternalIP %s, podCIDR %s, zone %q", n.Name, ip, n.Spec.PodCIDR, n.Labels["zone"])
	}
}

// testServerPod is a testserver pinned to a node (through the scheduler, by hostname).
func testServerPod(name, node string, labels map[string]string) *corev1.Pod {
	env := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name:            "testserver",
				Image:           testServerImage,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Args:            []string{"serve", "--listen=:8080"},
				Env:             []corev1.EnvVar{env("POD_NAME", "metadata.name"), env("NODE_NAME", "spec.nodeName"), env("POD_IP", "status.podIP")},
				Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
}

func ptr[T any](v T) *T { return &v }

// podPerNode starts one testserver on every node and waits until each runs with an IP.
func podPerNode(t *testing.T, ctx context.Context, ns string, labels map[string]string) []*corev1.Pod {
	t.Helper()
	nodes := workloadNodes(t, ctx)
	for _, n := range nodes {
		if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, testServerPod("ts-"+n.Name, n.Name, labels), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod on %s: %v", n.Name, err)
		}
	}
	var pods []*corev1.Pod
	for _, n := range nodes {
		p, err := f.WaitForPodRunning(ctx, ns, "ts-"+n.Name, 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != n.Name {
			t.Fatalf("pod %s runs on %s, want %s", p.Name, p.Spec.NodeName, n.Name)
		}
		if n.Spec.PodCIDR != "" {
			_, cidr, err := net.ParseCIDR(n.Spec.PodCIDR)
			if err != nil || !cidr.Contains(net.ParseIP(p.Status.PodIP)) {
				t.Errorf("pod %s IP %s is outside node %s's podCIDR %s", p.Name, p.Status.PodIP, n.Name, n.Spec.PodCIDR)
			}
		}
		pods = append(pods, p)
	}
	return pods
}

func url(ip string, port int) string {
	return fmt.Sprintf("http://%s/", net.JoinHostPort(ip, fmt.Sprint(port)))
}

// TestPodsAnswerOnEveryNode: a pod on every node gets an IP and answers HTTP on it, from
// its own node's network namespace (local cluster) and from a pod on every node
// (pod-to-pod, across nodes).
func TestPodsAnswerOnEveryNode(t *testing.T) {
	ctx := context.Background()
	ns := f.Namespace(t, "e2e-pods")
	pods := podPerNode(t, ctx, ns, map[string]string{"app": "ts"})

	for _, p := range pods {
		shell, why, err := f.NodeShell(ctx, p.Spec.NodeName)
		if err != nil {
			t.Fatal(err)
		}
		if shell == nil {
			t.Logf("skipping the from-node check: %s", why)
			continue
		}
		out, err := shell.ExecTool("get", url(p.Status.PodIP, 8080))
		if err != nil {
			t.Errorf("from node %s to its pod %s: %v", p.Spec.NodeName, p.Status.PodIP, err)
			continue
		}
		if r := parseReply(t, out); r.Pod != p.Name || r.Node != p.Spec.NodeName || r.PodIP != p.Status.PodIP {
			t.Errorf("pod %s on %s answered %+v", p.Name, p.Spec.NodeName, r)
		}
	}

	for _, from := range pods {
		for _, to := range pods {
			out, err := f.ExecInPod(ns, from.Name, "/testserver", "get", url(to.Status.PodIP, 8080))
			if err != nil {
				t.Errorf("pod %s (%s) -> pod %s (%s): %v", from.Name, from.Spec.NodeName, to.Name, to.Spec.NodeName, err)
				continue
			}
			r := parseReply(t, out)
			if r.Pod != to.Name || r.Node != to.Spec.NodeName {
				t.Errorf("pod %s -> %s: answered by %+v", from.Name, to.Name, r)
			}
		}
	}
}

// TestServiceAndDNS: a ClusterIP Service reaches its pods from a pod (through kube-proxy),
// and its name resolves through CoreDNS.
func TestServiceAndDNS(t *testing.T) {
	ctx := context.Background()
	ns := f.Namespace(t, "e2e-svc")
	pods := podPerNode(t, ctx, ns, map[string]string{"app": "web"})
	svc, err := f.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	backends := map[string]bool{}
	for _, p := range pods {
		backends[p.Name] = true
	}
	client := pods[0]
	name := fmt.Sprintf("web.%s.svc.cluster.local", ns)

	// kube-proxy programs the Service asynchronously; the first answer may take a moment.
	var seen = map[string]bool{}
	err = framework.WaitFor(ctx, time.Minute, "Service "+svc.Spec.ClusterIP+" answers", func(ctx context.Context) (bool, error) {
		out, err := f.ExecInPod(ns, client.Name, "/testserver", "get", "--timeout=2s", url(svc.Spec.ClusterIP, 80))
		if err != nil {
			return false, err
		}
		r := parseReply(t, out)
		if !backends[r.Pod] {
			return false, fmt.Errorf("answered by %q, not a backend", r.Pod)
		}
		seen[r.Pod] = true
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	out, err := f.ExecInPod(ns, client.Name, "/testserver", "lookup", name)
	if err != nil {
		t.Fatalf("resolve %s: %v", name, err)
	}
	if got := strings.TrimSpace(out); got != svc.Spec.ClusterIP {
		t.Fatalf("%s resolved to %q, want %s", name, got, svc.Spec.ClusterIP)
	}
	// By name, from a pod on every node, several times: each answer comes from a backend.
	for _, from := range pods {
		for range 3 {
			out, err := f.ExecInPod(ns, from.Name, "/testserver", "get", "http://"+name+"/")
			if err != nil {
				t.Fatalf("from %s (%s) to http://%s/: %v", from.Name, from.Spec.NodeName, name, err)
			}
			r := parseReply(t, out)
			if !backends[r.Pod] {
				t.Fatalf("answered by %q, not a backend", r.Pod)
			}
			seen[r.Pod] = true
		}
	}
	t.Logf("Service %s (%s) answered by %d of %d backends", name, svc.Spec.ClusterIP, len(seen), len(backends))
}

// TestLogsAndExec: kubectl logs and kubectl exec stream through the API server from the
// kubelet.
func TestLogsAndExec(t *testing.T) {
	ctx := context.Background()
	ns := f.Namespace(t, "e2e-stream")
	nodes := workloadNodes(t, ctx)
	node := nodes[len(nodes)-1].Name
	if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, testServerPod("stream", node, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := f.WaitForPodRunning(ctx, ns, "stream", 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	logs, err := f.RunKubectl("logs", "-n", ns, "stream")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("testserver: pod=stream node=%s ip=%s listening on :8080", node, p.Status.PodIP)
	if !strings.Contains(logs, want) {
		t.Fatalf("kubectl logs = %q, want it to contain %q", logs, want)
	}
	out, err := f.ExecInPod(ns, "stream", "/testserver", "get", "http://127.0.0.1:8080/from-exec")
	if err != nil {
		t.Fatal(err)
	}
	if r := parseReply(t, out); r.Pod != "stream" || r.Node != node {
		t.Fatalf("kubectl exec answered %+v", r)
	}
	// A failing command's exit code comes back through the stream too.
	if _, err := f.ExecInPod(ns, "stream", "/testserver", "lookup", "no-such-name.invalid."); err == nil {
		t.Fatal("kubectl exec of a failing command succeeded")
	}
}
