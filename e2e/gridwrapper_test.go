//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/staticip/staticip/e2e/framework"
)

const (
	gridWrapperNamespace = "kube-system"
	gridWrapperLabel     = "app.kubernetes.io/name=application-grid-wrapper"
)

// TestGridWrapperTopology: what a ServiceGrid produces (per-zone Deployments pinned by
// nodeSelector, one Service with topologyKeys) served through application-grid-wrapper
// and the real kube-proxy on every node: callers stay in their zone; "*" falls back when
// the zone has no pod, no "*" means no answer; a Service without the annotation balances
// over all pods; restarting a wrapper pod keeps kube-proxy's rules and kube-proxy resyncs
// through the new one.
func TestGridWrapperTopology(t *testing.T) {
	ctx := context.Background()
	if _, err := f.Client.AppsV1().DaemonSets(gridWrapperNamespace).Get(ctx, "application-grid-wrapper", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Skip("SKIP: kube-system/application-grid-wrapper does not run here (cluster up with --kube-proxy-direct?)")
	}
	start := time.Now()
	ns := f.Namespace(t, "e2e-grid")
	zoneNode := map[string]string{} // zone -> one node of it
	nodes, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if taint := untoleratedTaint(n); taint != "" {
			continue // a kind/kubeadm control plane: the client pods would not schedule there
		}
		if z := n.Labels["zone"]; z != "" && zoneNode[z] == "" {
			zoneNode[z] = n.Name
		}
	}
	if zoneNode["zone-0"] == "" || zoneNode["zone-1"] == "" {
		t.Skipf("SKIP: needs nodes labelled zone=zone-0 and zone=zone-1, have %v", zoneNode)
	}

	// The grid's unit workloads and its Service, as the ServiceGrid controller writes them.
	for _, zone := range []string{"zone-0", "zone-1"} {
		gwCreateZoneDeployment(t, ctx, ns, zone, 2)
	}
	grid := gwCreateService(t, ctx, ns, "grid-svc", `["zone"]`)
	plain := gwCreateService(t, ctx, ns, "plain-svc", "")
	client := map[string]string{}
	for _, zone := range []string{"zone-0", "zone-1"} {
		client[zone] = "client-" + zone
		pod := testServerPod(client[zone], zoneNode[zone], map[string]string{"role": "client"})
		if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, zone := range []string{"zone-0", "zone-1"} {
		gwWaitDeploymentReady(t, ctx, ns, "web-"+zone, 2)
		if _, err := f.WaitForPodRunning(ctx, ns, client[zone], 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	podZone := func() map[string]string {
		pods, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, p := range pods.Items {
			m[p.Name] = p.Labels["zone"]
		}
		return m
	}()

	// 30 requests from each zone's client: every answer from its own zone.
	for _, zone := range []string{"zone-0", "zone-1"} {
		got := gwRequests(t, ns, client[zone], grid, 30, true)
		for pod, n := range got {
			if podZone[pod] != zone {
				t.Errorf("%s: %d of 30 answers to %s from %s (%s)", client[zone], n, grid.Name, pod, podZone[pod])
			}
		}
		t.Logf("%s -> %s: %v", client[zone], grid.Name, got)
	}
	// Without the annotation: balanced over both zones.
	got := gwRequests(t, ns, client["zone-0"], plain, 30, true)
	zones := map[string]int{}
	for pod, n := range got {
		zones[podZone[pod]] += n
	}
	if zones["zone-0"] == 0 || zones["zone-1"] == 0 {
		t.Errorf("%s (no topologyKeys) from zone-0: answers by zone %v, want both zones", plain.Name, zones)
	}
	t.Logf("%s -> %s: by zone %v", client["zone-0"], plain.Name, zones)

	// ["zone","*"] and zone-1 empty: zone-1's caller falls back to zone-0.
	gwAnnotate(t, ctx, ns, grid.Name, `["zone","*"]`)
	gwScale(t, ctx, ns, "web-zone-1", 0)
	got = gwRequests(t, ns, client["zone-1"], grid, 30, true)
	for pod, n := range got {
		if podZone[pod] != "zone-0" {
			t.Errorf(`["zone","*"], zone-1 empty: %d answers from %s (%s), want zone-0`, n, pod, podZone[pod])
		}
	}
	t.Logf(`["zone","*"], zone-1 scaled to 0: %s -> %v`, client["zone-1"], got)

	// ["zone"] without "*": no answer for zone-1's caller.
	gwAnnotate(t, ctx, ns, grid.Name, `["zone"]`)
	err = framework.WaitFor(ctx, time.Minute, "zone-1 caller gets no answer", func(ctx context.Context) (bool, error) {
		out, err := f.ExecInPod(ns, client["zone-1"], "/testserver", "get", "--timeout=1s", url(grid.Spec.ClusterIP, 80))
		if err == nil {
			return false, fmt.Errorf("still answered: %s", strings.TrimSpace(out))
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := f.ExecInPod(ns, client["zone-1"], "/testserver", "get", "--timeout=1s", "--count=5", url(grid.Spec.ClusterIP, 80)); err == nil || strings.Contains(out, `"pod"`) {
		t.Errorf(`["zone"], zone-1 empty: zone-1 caller was answered: %s`, out)
	}

	// Restart zone-0's wrapper pod: kube-proxy keeps its rules while it is away, and
	// resyncs through the new one (zone-1 back to 2 pods must reach zone-1's caller).
	old := gwWrapperPod(t, ctx, zoneNode["zone-0"])
	if err := f.Client.CoreV1().Pods(gridWrapperNamespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	got = gwRequests(t, ns, client["zone-0"], grid, 10, false)
	for pod := range got {
		if podZone[pod] != "zone-0" {
			t.Errorf("during the wrapper restart: answer from %s (%s)", pod, podZone[pod])
		}
	}
	err = framework.WaitFor(ctx, 2*time.Minute, "a new wrapper pod Ready on "+zoneNode["zone-0"], func(ctx context.Context) (bool, error) {
		p := gwWrapperPod(t, ctx, zoneNode["zone-0"])
		if p == nil || p.UID == old.UID || !framework.PodReady(p) {
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// kube-proxy on the restarted wrapper's node follows a change made after the restart:
	// zone-1's pods come back, and zone-0's caller reaches them through the plain Service.
	gwScale(t, ctx, ns, "web-zone-1", 2)
	gwWaitDeploymentReady(t, ctx, ns, "web-zone-1", 2)
	zone1 := map[string]bool{}
	pods, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web,zone=zone-1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		zone1[p.Name] = true
	}
	err = framework.WaitFor(ctx, 2*time.Minute, "zone-0 caller reaches a new zone-1 pod through "+plain.Name+" after the wrapper restart", func(ctx context.Context) (bool, error) {
		got := gwRequests(t, ns, client["zone-0"], plain, 10, false)
		for pod := range got {
			if zone1[pod] {
				return true, nil
			}
		}
		return false, fmt.Errorf("answers %v", got)
	})
	if err != nil {
		t.Fatal(err)
	}
	got = gwRequests(t, ns, client["zone-0"], grid, 10, true)
	for pod := range got {
		if podZone[pod] != "zone-0" {
			t.Errorf("after the wrapper restart: zone-0 caller answered by %s (%s)", pod, podZone[pod])
		}
	}
	t.Logf("TestGridWrapperTopology took %v", time.Since(start).Round(time.Second))
}

// requests waits (when wait) until the Service answers the client, then makes n requests
// and counts the answering pods. Any failed request fails the test.
func gwRequests(t *testing.T, ns, client string, svc *corev1.Service, n int, wait bool) map[string]int {
	t.Helper()
	ctx := context.Background()
	target := url(svc.Spec.ClusterIP, 80)
	if wait {
		err := framework.WaitFor(ctx, 2*time.Minute, svc.Name+" answers "+client, func(ctx context.Context) (bool, error) {
			_, err := f.ExecInPod(ns, client, "/testserver", "get", "--timeout=1s", target)
			return err == nil, err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	out, err := f.ExecInPod(ns, client, "/testserver", "get", "--timeout=2s", fmt.Sprintf("--count=%d", n), target)
	if err != nil {
		t.Fatalf("%d requests from %s to %s: %v\n%s", n, client, svc.Name, err, out)
	}
	got := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r reply
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Pod == "" {
			t.Fatalf("answer %q from %s to %s", line, client, svc.Name)
		}
		got[r.Pod]++
	}
	return got
}

func gwCreateZoneDeployment(t *testing.T, ctx context.Context, ns, zone string, replicas int32) {
	t.Helper()
	labels := map[string]string{"app": "web", "zone": zone}
	spec := testServerPod("", "", labels).Spec
	spec.NodeSelector = map[string]string{"zone": zone}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web-" + zone},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
	if _, err := f.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func gwCreateService(t *testing.T, ctx context.Context, ns, name, keys string) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if keys != "" {
		svc.Annotations = map[string]string{"topologyKeys": keys}
	}
	out, err := f.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func gwAnnotate(t *testing.T, ctx context.Context, ns, svc, keys string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"topologyKeys":%q}}}`, keys)
	if _, err := f.Client.CoreV1().Services(ns).Patch(ctx, svc, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func gwScale(t *testing.T, ctx context.Context, ns, name string, replicas int32) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if _, err := f.Client.AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if replicas == 0 {
		err := framework.WaitFor(ctx, 2*time.Minute, name+" has no pods", func(ctx context.Context) (bool, error) {
			pods, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web,zone=" + strings.TrimPrefix(name, "web-")})
			return err == nil && len(pods.Items) == 0, err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func gwWaitDeploymentReady(t *testing.T, ctx context.Context, ns, name string, replicas int32) {
	t.Helper()
	err := framework.WaitFor(ctx, 3*time.Minute, name+" ready", func(ctx context.Context) (bool, error) {
		d, err := f.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && d.Status.ReadyReplicas == replicas && d.Status.UpdatedReplicas == replicas, err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func gwWrapperPod(t *testing.T, ctx context.Context, node string) *corev1.Pod {
	t.Helper()
	pods, err := f.Client.CoreV1().Pods(gridWrapperNamespace).List(ctx, metav1.ListOptions{LabelSelector: gridWrapperLabel,
		FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if pods.Items[i].DeletionTimestamp == nil {
			return &pods.Items[i]
		}
	}
	return nil
}
