package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/apis/workloadref"
	"github.com/staticip/staticip/controllers/pkg/manager"
	"github.com/staticip/staticip/controllers/pkg/staticip"
	"github.com/staticip/staticip/internal/testenv"
)

// kruiseOnce builds OpenKruise's Advanced StatefulSet controller (tools/kruise, v1.8.0, its
// own module) and finds its CRD in the module cache, once per test binary.
var kruiseOnce struct {
	sync.Once
	bin, crd string
	err      error
}

func kruiseController(t *testing.T) (bin, crd string) {
	t.Helper()
	kruiseOnce.Do(func() {
		root, err := testenv.RepoRoot()
		if err != nil {
			kruiseOnce.err = err
			return
		}
		binDir, err := testenv.BinDir()
		if err != nil {
			kruiseOnce.err = err
			return
		}
		kruiseOnce.bin = filepath.Join(binDir, "kruise-asts")
		if _, err := os.Stat(kruiseOnce.bin); err != nil {
			fmt.Fprintf(os.Stderr, "kruise: %s missing; building it (make kruise-asts)\n", kruiseOnce.bin)
			cmd := exec.Command("go", "build", "-o", kruiseOnce.bin, ".")
			cmd.Dir, cmd.Stdout, cmd.Stderr = filepath.Join(root, "tools", "kruise"), os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				kruiseOnce.err = fmt.Errorf("build kruise-asts: %w", err)
				return
			}
		}
		out, err := exec.Command("go", "-C", filepath.Join(root, "tools", "kruise"), "list", "-m", "-f", "{{.Dir}}", "github.com/openkruise/kruise").Output()
		if err != nil {
			kruiseOnce.err = fmt.Errorf("find the OpenKruise module: %w", err)
			return
		}
		kruiseOnce.crd = filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "bases", "apps.kruise.io_statefulsets.yaml")
	})
	if kruiseOnce.err != nil {
		t.Fatal(kruiseOnce.err)
	}
	return kruiseOnce.bin, kruiseOnce.crd
}

var kruiseSets = staticip.KruiseStatefulSetKind.GroupVersion().WithResource("statefulsets")

// TestStaticIPOpenKruiseStatefulSet: the pods of an OpenKruise Advanced StatefulSet, created
// and deleted by the real Kruise controller, keep their IPs like a native StatefulSet's —
// records made for them, a recreated pod told its IP, a reserved ordinal's and a scaled-away
// ordinal's record released (whenScaled Delete) — with the controller-manager running as its
// ServiceAccount under manifests/controller-manager/rbac.yaml, and Kruise installed after the
// controller-manager started (it finds the resource through discovery).
func TestStaticIPOpenKruiseStatefulSet(t *testing.T) {
	bin, crd := kruiseController(t)
	f := newFixture(t)
	f.applyRBAC()
	defer func(d time.Duration) { staticip.KruiseDiscoveryInterval = d }(staticip.KruiseDiscoveryInterval)
	staticip.KruiseDiscoveryInterval = 200 * time.Millisecond

	f.startManagerAsServiceAccount(func(o *manager.Options) {
		o.LeaderElect = false
		o.Controllers = []string{staticip.Name}
	})

	// Kruise arrives after staticip: its CRD, then its controller.
	if err := testenv.ApplyFiles(f.ctx, f.cfg, []string{crd}); err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(f.cfg)
	f.eventually(30*time.Second, "apps.kruise.io/v1beta1 statefulsets served", func() (bool, error) {
		_, err := dyn.Resource(kruiseSets).Namespace(f.ns).List(f.ctx, metav1.ListOptions{})
		return err == nil, nil
	})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testenv.WriteKubeconfig(f.cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	kctx, stopKruise := context.WithCancel(context.Background())
	logPath := filepath.Join(t.TempDir(), "kruise-asts.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	kruise := exec.CommandContext(kctx, bin, "--kubeconfig="+kubeconfig)
	kruise.Stdout, kruise.Stderr = logFile, logFile
	if err := kruise.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopKruise()
		_ = kruise.Wait()
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("kruise-asts log (tail):\n%s", tail(string(b), 3000))
		}
	})

	// The node side: pods are bound to node-k and get an address of its range — the one their
	// ip-address annotation names once the controller has told them (as the CNI would); pods
	// being deleted are removed (as a kubelet would after the grace period).
	// IPs are cluster-wide and records of earlier runs stay (no namespace controller): a subnet
	// of its own per run.
	subnet := subnets.Add(1)
	nodeRange := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-node-k"}, Spec: jkev1.IPRangeSpec{CIDR: fmt.Sprintf("10.89.%d.0/24", subnet), Node: "node-k"}}
	if _, err := f.client.JkeV1().IPRanges().Create(f.ctx, nodeRange, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.client.JkeV1().IPRanges().Delete(context.Background(), nodeRange.Name, metav1.DeleteOptions{})
	})
	ip := func(host int) string { return fmt.Sprintf("10.89.%d.%d", subnet, host) }
	fresh := map[string]string{"kr-0": ip(10), "kr-1": ip(11), "kr-2": ip(12)}
	// node finishes deletions, binds a pod that is new (fresh names its address) or has been
	// told its address (a recreated pod stays unscheduled until then: the controller annotates
	// only unscheduled pods, and the scheduler plugin would pin it by the record meanwhile), and
	// gives a bound pod without an IP the address its annotation names, else its fresh one.
	node := func(fresh map[string]string) {
		for name, p := range f.pods() {
			switch {
			case p.DeletionTimestamp != nil:
				_ = f.kube.CoreV1().Pods(f.ns).Delete(f.ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0)), Preconditions: &metav1.Preconditions{UID: &p.UID}})
			case p.Spec.NodeName == "":
				if fresh[name] == "" && p.Annotations[podip.AnnotationIPAddress] == "" {
					continue
				}
				_ = f.kube.CoreV1().Pods(f.ns).Bind(f.ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name, UID: p.UID},
					Target: corev1.ObjectReference{Kind: "Node", Name: "node-k"}}, metav1.CreateOptions{})
			case p.Status.PodIP == "":
				ip := p.Annotations[podip.AnnotationIPAddress]
				if ip == "" {
					ip = fresh[name]
				}
				if ip == "" {
					continue
				}
				p.Status.Phase, p.Status.PodIP, p.Status.PodIPs = corev1.PodRunning, ip, []corev1.PodIP{{IP: ip}}
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
				_, _ = f.kube.CoreV1().Pods(f.ns).UpdateStatus(f.ctx, p, metav1.UpdateOptions{})
			}
		}
	}
	recorded := func(name, ip string) func() (bool, error) {
		return func() (bool, error) {
			node(fresh)
			rec, err := f.staticIP(name)
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil && rec.Spec.IP == ip && rec.Spec.Node == "node-k" && rec.Status.Phase == jkev1.StaticIPBound &&
				rec.Spec.APIGroup == workloadref.KruiseGroup && rec.Spec.Kind == "StatefulSet" && rec.Spec.Ref == "kr", err
		}
	}

	set := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kruiseSets.GroupVersion().String(), "kind": "StatefulSet",
		"metadata": map[string]any{"name": "kr"},
		"spec": map[string]any{
			"replicas":            int64(2),
			"selector":            map[string]any{"matchLabels": map[string]any{"app": "kr"}},
			"serviceName":         "kr",
			"podManagementPolicy": "Parallel",
			// Without Kruise's webhook nothing defaults the fields its controller reads.
			"revisionHistoryLimit": int64(10),
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "kr"}, "annotations": map[string]any{jkev1.AnnotationEnable: "true"}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "app", "image": "app:v1"}}},
			},
			"updateStrategy": map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{
				"partition": int64(0), "maxUnavailable": int64(1), "podUpdatePolicy": "ReCreate", "paused": false}},
		},
	}}
	created, err := dyn.Resource(kruiseSets).Namespace(f.ns).Create(f.ctx, set, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.eventually(time.Minute, "kr-0 recorded with its IP (Kruise created the pod, staticip its record)", recorded("kr-0", ip(10)))
	f.eventually(30*time.Second, "kr-1 recorded with its IP", recorded("kr-1", ip(11)))
	if rec, _ := f.staticIP("kr-0"); len(rec.OwnerReferences) != 1 || rec.OwnerReferences[0].UID != created.GetUID() ||
		rec.OwnerReferences[0].APIVersion != "apps.kruise.io/v1beta1" {
		t.Fatalf("kr-0's record: owner references %+v, want the Advanced StatefulSet %s", rec.OwnerReferences, created.GetUID())
	}

	// A pod deleted: Kruise recreates it, staticip tells it its IP, it gets that IP back.
	old, err := f.kube.CoreV1().Pods(f.ns).Get(f.ctx, "kr-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.kube.CoreV1().Pods(f.ns).Delete(f.ctx, "kr-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	f.eventually(time.Minute, "kr-0 recreated by Kruise and told its IP", func() (bool, error) {
		node(nil) // no fresh address: a recreated pod must be given its recorded one
		p, err := f.kube.CoreV1().Pods(f.ns).Get(f.ctx, "kr-0", metav1.GetOptions{})
		return err == nil && p.UID != old.UID && p.Annotations[podip.AnnotationIPAddress] == ip(10), nil
	})
	f.eventually(30*time.Second, "the new kr-0 recorded with the same IP", recorded("kr-0", ip(10)))

	// Ordinal 1 reserved: Kruise deletes kr-1 and creates kr-2; kr-1's record is released,
	// kr-2 gets its own.
	if _, err := dyn.Resource(kruiseSets).Namespace(f.ns).Patch(f.ctx, "kr", types.MergePatchType,
		[]byte(`{"spec":{"reserveOrdinals":[1]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(time.Minute, "kr-2 recorded", recorded("kr-2", ip(12)))
	f.eventually(30*time.Second, "kr-1's record released (its ordinal is reserved)", func() (bool, error) {
		node(nil)
		_, err := f.staticIP("kr-1")
		return apierrors.IsNotFound(err), nil
	})

	// Scaled to 1: kr-2 goes, and its record with it; kr-0 keeps its IP.
	if _, err := dyn.Resource(kruiseSets).Namespace(f.ns).Patch(f.ctx, "kr", types.MergePatchType,
		[]byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually(time.Minute, "kr-2's record released after the scale-down", func() (bool, error) {
		node(nil)
		_, err := f.staticIP("kr-2")
		return apierrors.IsNotFound(err), nil
	})
	if rec, err := f.staticIP("kr-0"); err != nil || rec.Spec.IP != ip(10) {
		t.Fatalf("kr-0's record after the scale-down: %+v, %v", rec, err)
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
