//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
	"github.com/staticip/staticip/e2e/framework"
)

const gridTimeout = 3 * time.Minute

// readExample decodes manifests/examples/<file> (the published shapes) into obj.
func readExample(t *testing.T, file string, obj any) {
	t.Helper()
	wd, _ := os.Getwd()
	data, err := os.ReadFile(filepath.Join(wd, "..", "manifests", "examples", file))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, obj); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// localImage swaps a published example's container for the local testserver (no registry here).
func localImage(spec *corev1.PodSpec, image string) {
	ts := testServerPod("", "", nil).Spec.Containers[0]
	c := &spec.Containers[0]
	c.Image, c.ImagePullPolicy, c.Args, c.ReadinessProbe = image, corev1.PullNever, ts.Args, ts.ReadinessProbe
	spec.TerminationGracePeriodSeconds = ptr(int64(1))
}

// unitNodes maps each value of key to its nodes.
func unitNodes(t *testing.T, ctx context.Context, key string) map[string]map[string]bool {
	t.Helper()
	nodes, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]bool{}
	for _, n := range nodes.Items {
		// A node the test pods cannot run on (a failover spare's NoSchedule taint) is no
		// place for a unit's pods or for a client pod pinned there. The node lifecycle taints
		// (node.kubernetes.io/not-ready, ...) are passing states, not a reason to leave a node
		// out: a node just restarted by an earlier test is still its unit's.
		if taint := untoleratedTaint(n); taint != "" && !strings.HasPrefix(taint, "node.kubernetes.io/") {
			t.Logf("node %s left out of its unit: tainted %s (test pods do not tolerate it)", n.Name, taint)
			continue
		}
		if v, ok := n.Labels[key]; ok {
			if out[v] == nil {
				out[v] = map[string]bool{}
			}
			out[v][n.Name] = true
		}
	}
	return out
}

// waitUnitPods waits until the pods of each workload (selected by its controller's name
// prefix and owner) are `replicas` Ready pods, every one on a node of its unit, and returns
// pod name -> IP.
func waitUnitPods(t *testing.T, ctx context.Context, ns string, workloads map[string]string, replicas int, units map[string]map[string]bool) map[string]string {
	t.Helper()
	ips := map[string]string{}
	err := framework.WaitFor(ctx, gridTimeout, fmt.Sprintf("%d Ready pods for each of %v", replicas, workloads), func(ctx context.Context) (bool, error) {
		pods, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		clear(ips)
		ready := map[string]int{}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || !framework.PodReady(&p) {
				continue
			}
			for name, value := range workloads {
				if !strings.HasPrefix(p.Name, name+"-") {
					continue
				}
				if !units[value][p.Spec.NodeName] {
					return false, fmt.Errorf("pod %s of unit %s runs on %s, not in %v", p.Name, value, p.Spec.NodeName, units[value])
				}
				ready[name]++
				ips[p.Name] = p.Status.PodIP
			}
		}
		for name := range workloads {
			if ready[name] != replicas {
				return false, fmt.Errorf("%s: %d Ready pods", name, ready[name])
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ips
}

// TestGrids: the published StatefulSetGrid + ServiceGrid and a DeploymentGrid on the local
// cluster's zones; node-3 relabelled into zone-2 gets its own unit; deleting a grid lets the
// garbage collector remove its workloads; a StatefulSetGrid with static IPs keeps every pod's
// IP through a rolling update.
func TestGrids(t *testing.T) {
	requireManager(t)
	ctx := context.Background()
	cs := versioned.NewForConfigOrDie(f.Config)
	ns := f.Namespace(t, "grids")
	units := unitNodes(t, ctx, "zone")
	if len(units["zone-0"]) == 0 || len(units["zone-1"]) == 0 {
		t.Skipf("needs nodes labelled zone=zone-0 and zone=zone-1 (the local cluster's), have %v", units)
	}

	var ssg superedgev1.StatefulSetGrid
	var sg superedgev1.ServiceGrid
	var dg superedgev1.DeploymentGrid
	readExample(t, "statefulsetgrid.yaml", &ssg)
	readExample(t, "servicegrid.yaml", &sg)
	readExample(t, "deploymentgrid.yaml", &dg)
	ssg.Namespace, sg.Namespace, dg.Namespace = ns, ns, ns
	localImage(&ssg.Spec.Template.Template.Spec, testServerImage)
	localImage(&dg.Spec.Template.Template.Spec, testServerImage)
	dg.Spec.GridUniqKey = "zone" // the published one uses "zone1", which the local nodes do not carry
	if _, err := cs.SuperedgeV1().ServiceGrids(ns).Create(ctx, &sg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.SuperedgeV1().StatefulSetGrids(ns).Create(ctx, &ssg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.SuperedgeV1().DeploymentGrids(ns).Create(ctx, &dg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitUnitPods(t, ctx, ns, map[string]string{
		"statefulsetgrid-demo-zone-0": "zone-0", "statefulsetgrid-demo-zone-1": "zone-1",
	}, 3, units)
	waitUnitPods(t, ctx, ns, map[string]string{"deploymentgrid-demo-zone-0": "zone-0", "deploymentgrid-demo-zone-1": "zone-1"}, 2, units)
	t.Logf("published grids: 3 Ready pods per StatefulSet unit, 2 per Deployment unit, on the unit's nodes after %v", time.Since(start).Round(time.Second))
	svc, err := f.Client.CoreV1().Services(ns).Get(ctx, "servicegrid-demo-svc", metav1.GetOptions{})
	if err != nil || svc.Annotations[superedgev1.AnnotationTopologyKeys] != `["zone"]` {
		t.Fatalf("Service servicegrid-demo-svc: %v %v", err, svc)
	}
	waitGridReady(t, ctx, func() ([]metav1.Condition, error) {
		g, err := cs.SuperedgeV1().StatefulSetGrids(ns).Get(ctx, ssg.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return g.Status.Conditions, nil
	})
	out, _ := f.RunKubectl("get", "ssg,dg,sg,sts,deploy", "-o", "wide", "-n", ns)
	t.Logf("kubectl get ssg,dg,sg,sts,deploy -o wide:\n%s", out)

	// A node moves into zone-2 (put back at the end): the third unit's workloads appear there.
	// On the local cluster that is node-3, a second node of zone-0. Where zone-0 has only one
	// node that takes pods (kind: 1 control plane + 2 workers, the control plane tainted), the
	// only node of zone-1 moves instead: zone-1's unit vanishes, so its workloads must go too.
	moved, from := pickNode(units["zone-0"], "node-3"), "zone-0"
	if moved == "" {
		moved, from = pickNode(units["zone-1"], ""), "zone-1"
		t.Logf("zone-0 has one node that takes pods (%v): moving zone-1's node %s into zone-2 instead", units["zone-0"], moved)
	}
	setZone(t, ctx, moved, "zone-2")
	t.Cleanup(func() { setZone(t, context.Background(), moved, from) })
	units = unitNodes(t, ctx, "zone")
	waitUnitPods(t, ctx, ns, map[string]string{"statefulsetgrid-demo-zone-2": "zone-2"}, 3, units)
	waitUnitPods(t, ctx, ns, map[string]string{"deploymentgrid-demo-zone-2": "zone-2"}, 2, units)
	if len(units[from]) == 0 {
		// The unit vanished: its StatefulSet and Deployment are deleted.
		if err := framework.WaitFor(ctx, gridTimeout, from+"'s workloads deleted", func(ctx context.Context) (bool, error) {
			_, errS := f.Client.AppsV1().StatefulSets(ns).Get(ctx, "statefulsetgrid-demo-"+from, metav1.GetOptions{})
			_, errD := f.Client.AppsV1().Deployments(ns).Get(ctx, "deploymentgrid-demo-"+from, metav1.GetOptions{})
			return holds(apierrors.IsNotFound(errS) && apierrors.IsNotFound(errD), fmt.Errorf("StatefulSet: %v, Deployment: %v", errS, errD))
		}); err != nil {
			t.Fatal(err)
		}
	}

	// Deleting the DeploymentGrid: the garbage collector removes its Deployments (owner references).
	if err := cs.SuperedgeV1().DeploymentGrids(ns).Delete(ctx, dg.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(ctx, gridTimeout, "the DeploymentGrid's Deployments garbage-collected", func(ctx context.Context) (bool, error) {
		l, err := f.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{superedgev1.LabelGridSelector: dg.Name}.String()})
		if err != nil {
			return false, err
		}
		return holds(len(l.Items) == 0, fmt.Errorf("%d left", len(l.Items)))
	}); err != nil {
		t.Fatal(err)
	}
}

// TestStatefulSetGridStaticIPs: a StatefulSetGrid with staticip.jke.jdcloud.com/enable keeps
// every pod's IP (and node) through a rolling update of its unit StatefulSets (the native
// StatefulSet support of the StaticIP controller, scheduler and CNI).
func TestStatefulSetGridStaticIPs(t *testing.T) {
	requireManager(t)
	ctx := context.Background()
	cs := versioned.NewForConfigOrDie(f.Config)
	ns := f.Namespace(t, "grid-sip")
	units := unitNodes(t, ctx, "zone")
	if len(units["zone-0"]) == 0 || len(units["zone-1"]) == 0 {
		t.Skipf("needs nodes labelled zone=zone-0 and zone=zone-1, have %v", units)
	}
	var ssg superedgev1.StatefulSetGrid
	readExample(t, "statefulsetgrid.yaml", &ssg)
	ssg.Name, ssg.Namespace = "sip", ns
	ssg.Annotations = map[string]string{jkev1.AnnotationEnable: "true"}
	ssg.Spec.Template.Replicas = ptr(int32(2))
	ssg.Spec.Template.ServiceName = "sip-svc"
	localImage(&ssg.Spec.Template.Template.Spec, testServerImage)
	if _, err := cs.SuperedgeV1().StatefulSetGrids(ns).Create(ctx, &ssg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sets := map[string]string{"sip-zone-0": "zone-0", "sip-zone-1": "zone-1"}
	before := waitUnitPods(t, ctx, ns, sets, 2, units)
	nodesBefore := podNodes(t, ctx, ns)
	t.Logf("IPs before the update: %v", before)
	// Where the edge DNS runs (statefulset-grid-daemon + a CoreDNS per unit), the unit's name
	// for ordinal 0 is watched from a pod of zone-0 through the update: with static IPs it
	// answers the same IP throughout (or nothing while the pod is being replaced), never another.
	var dnsName string
	var watcher *dnsWatcher
	if edgeDNS(ctx) {
		var clientNode string
		for n := range units["zone-0"] {
			clientNode = n
			break
		}
		if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, testServerPod("client", clientNode, map[string]string{"role": "client"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WaitForPodRunning(ctx, ns, "client", gridTimeout); err != nil {
			t.Fatal(err)
		}
		dnsName = fmt.Sprintf("%s-0.%s.%s.svc.cluster.local", ssg.Name, ssg.Spec.Template.ServiceName, ns)
		waitLookup(t, ns, "client", dnsName, func(a string) bool { return a == before["sip-zone-0-0"] }, time.Minute)
		watcher = startDNSWatch(t, ns, "client", dnsName)
	} else {
		t.Logf("no edge DNS here (statefulset-grid-daemon or kube-system/%s missing): the DNS name is not watched", edgeDNSGrid)
	}

	start := time.Now()
	patch := []byte(fmt.Sprintf(`[{"op":"replace","path":"/spec/template/template/spec/containers/0/image","value":%q}]`, testServerV2Image))
	if _, err := cs.SuperedgeV1().StatefulSetGrids(ns).Patch(ctx, "sip", types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(ctx, gridTimeout, "every pod at v2", func(ctx context.Context) (bool, error) {
		pods, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		n := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && framework.PodReady(&p) && p.Spec.Containers[0].Image == testServerV2Image {
				n++
			}
		}
		return holds(n == len(before), fmt.Errorf("%d of %d at v2", n, len(before)))
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("rolling update of 2 units x 2 pods: %v", time.Since(start).Round(time.Second))
	after := waitUnitPods(t, ctx, ns, sets, 2, units)
	nodesAfter := podNodes(t, ctx, ns)
	for pod, ip := range before {
		if after[pod] != ip || nodesAfter[pod] != nodesBefore[pod] {
			t.Errorf("pod %s: IP %s -> %s, node %s -> %s", pod, ip, after[pod], nodesBefore[pod], nodesAfter[pod])
		}
		sip, err := cs.JkeV1().StaticIPs(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil || sip.Spec.IP != ip || sip.Spec.Kind != "StatefulSet" {
			t.Errorf("StaticIP %s: %v %+v", pod, err, sip)
		}
	}
	if watcher != nil {
		want := before["sip-zone-0-0"]
		waitLookup(t, ns, "client", dnsName, func(a string) bool { return a == want }, time.Minute)
		changes := watcher.changes()
		for _, c := range changes {
			if c.answer != want && c.answer != "-" {
				t.Errorf("%s answered %s during the update, want only %s (or nothing while the pod was replaced): %v", dnsName, c.answer, want, changes)
			}
		}
		t.Logf("%s from a zone-0 pod through the update: %v", dnsName, changes)
	}
}

// edgeDNS tells whether the edge DNS runs here: the statefulset-grid-daemon and the per-unit
// CoreDNS DeploymentGrid (manifests/edge).
func edgeDNS(ctx context.Context) bool {
	if _, err := f.Client.AppsV1().DaemonSets("kube-system").Get(ctx, ssgDaemonName, metav1.GetOptions{}); err != nil {
		return false
	}
	_, err := versioned.NewForConfigOrDie(f.Config).SuperedgeV1().DeploymentGrids("kube-system").Get(ctx, edgeDNSGrid, metav1.GetOptions{})
	return err == nil
}

func podNodes(t *testing.T, ctx context.Context, ns string) map[string]string {
	t.Helper()
	pods, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range pods.Items {
		out[p.Name] = p.Spec.NodeName
	}
	return out
}

// pickNode returns the node of a unit to move into another: the one named want (or ending
// in it) when the unit has it, else — when the unit keeps another node — the last by name;
// "" when the unit has at most one node. With want "", the unit's only or last node.
func pickNode(nodes map[string]bool, want string) string {
	var names []string
	for n := range nodes {
		if want != "" && (n == want || strings.HasSuffix(n, "-"+want)) {
			return n
		}
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) == 0 || (want != "" && len(names) < 2) {
		return ""
	}
	return names[len(names)-1]
}

// setZone sets a node's zone label.
func setZone(t *testing.T, ctx context.Context, node, zone string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{"zone": zone}}})
	if _, err := f.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Errorf("relabel %s zone=%s: %v", node, zone, err)
	}
}

// waitGridReady waits for the grid's Ready condition.
func waitGridReady(t *testing.T, ctx context.Context, conditions func() ([]metav1.Condition, error)) {
	t.Helper()
	if err := framework.WaitFor(ctx, gridTimeout, "grid Ready", func(ctx context.Context) (bool, error) {
		conds, err := conditions()
		if err != nil {
			return false, err
		}
		for _, c := range conds {
			if c.Type == superedgev1.ConditionReady {
				return holds(c.Status == metav1.ConditionTrue, fmt.Errorf("%s: %s", c.Reason, c.Message))
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// holds turns a condition and the error that explains it when false into a poll result (an
// error makes the poll retry, so it is returned only while the condition does not hold).
func holds(ok bool, why error) (bool, error) {
	if ok {
		return true, nil
	}
	return false, why
}
