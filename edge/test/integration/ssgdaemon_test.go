package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
	"github.com/staticip/staticip/controllers/pkg/grid"
	"github.com/staticip/staticip/controllers/pkg/manager"
	"github.com/staticip/staticip/edge/pkg/ssgdaemon"
	"github.com/staticip/staticip/internal/serving"
	"github.com/staticip/staticip/internal/testenv"
)

const daemonSA = "system:serviceaccount:kube-system:statefulset-grid-daemon"

// ssgFixture: a real kube-apiserver, the real grid controllers (manager.Run), two node units
// (one node each), and one statefulset-grid-daemon per node running as the shipped RBAC
// allows (impersonated ServiceAccount), each writing into its own directory. There is no
// kube-controller-manager: the test makes the StatefulSets' pods (and their status) the way the
// StatefulSet controller and the kubelet would.
type ssgFixture struct {
	t      *testing.T
	ctx    context.Context
	kube   kubernetes.Interface
	grids  versioned.Interface
	ns     string
	key    string
	nodes  map[string]string // unit -> node name
	dirs   map[string]string // node -> hosts dir
	metric map[string]string // node -> metrics address
	// scraper reads the daemons' /metrics as the admin.
	scraper *http.Client
}

func TestStatefulSetGridDaemonTwoUnits(t *testing.T) {
	f := startSSGDaemons(t)
	ctx := f.ctx
	sets := f.createGrid()
	name := func(i int) string { return fmt.Sprintf("db-%d.db-svc.%s.svc.cluster.local", i, f.ns) }
	ip := map[string]string{"a": "10.10.1.", "b": "10.10.2."}
	for _, unit := range []string{"a", "b"} {
		for i := range 2 {
			f.createPod(sets[unit], i, f.nodes[unit], fmt.Sprintf("%s%d", ip[unit], 10+i), true)
		}
	}
	want := func(unit string, ips ...string) []string {
		var out []string
		for i, a := range ips {
			if a != "" {
				out = append(out, a+" "+name(i))
			}
		}
		sort.Strings(out)
		return out
	}
	// 1. Each node's file: its own unit's pods, nothing of the other unit.
	f.waitRecords(f.nodes["a"], want("a", "10.10.1.10", "10.10.1.11"), "unit a's pods")
	f.waitRecords(f.nodes["b"], want("b", "10.10.2.10", "10.10.2.11"), "unit b's pods")

	// 2. A pod replaced with another IP: the name follows.
	start := time.Now()
	f.deletePod("db-a-0")
	f.waitRecords(f.nodes["a"], []string{"10.10.1.11 " + name(1)}, "db-a-0 gone")
	f.createPod(sets["a"], 0, f.nodes["a"], "10.10.1.20", true)
	f.waitRecords(f.nodes["a"], want("a", "10.10.1.20", "10.10.1.11"), "db-a-0 replaced")
	t.Logf("pod replaced -> file updated (delete, recreate, status, both polled): %v", time.Since(start).Round(time.Millisecond))

	// 3. Not ready: not published (no publishNotReadyAddresses).
	f.setReady("db-a-1", false)
	f.waitRecords(f.nodes["a"], want("a", "10.10.1.20"), "db-a-1 not ready")
	f.setReady("db-a-1", true)
	f.waitRecords(f.nodes["a"], want("a", "10.10.1.20", "10.10.1.11"), "db-a-1 ready again")

	// 4. The directory disappears: a clear error, metric and Event; the file comes back when
	// the directory does, and the previous file was never touched.
	dirA := f.dirs[f.nodes["a"]]
	moved := dirA + ".away"
	if err := os.Rename(dirA, moved); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(moved, "hosts"))
	f.setReady("db-a-1", false)
	f.waitEvent(f.nodes["a"], ssgdaemon.ReasonWriteFailed, "does not exist")
	f.waitMetric(f.nodes["a"], `staticip_statefulset_grid_daemon_write_errors_total{reason="DirMissing"}`)
	if after, _ := os.ReadFile(filepath.Join(moved, "hosts")); string(after) != string(before) {
		t.Errorf("the previous file changed while the directory was away")
	}
	if err := os.Rename(moved, dirA); err != nil {
		t.Fatal(err)
	}
	f.waitRecords(f.nodes["a"], want("a", "10.10.1.20"), "written again once the directory is back (retried)")
	f.setReady("db-a-1", true)

	// 5. Node b moves into unit a: its file now holds unit a's records.
	if _, err := f.kube.CoreV1().Nodes().Patch(ctx, f.nodes["b"], types.MergePatchType,
		[]byte(fmt.Sprintf(`{"metadata":{"labels":{%q:"a"}}}`, f.key)), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitRecords(f.nodes["b"], want("a", "10.10.1.20", "10.10.1.11"), "node b relabelled into unit a")

	// 6. The grid is deleted: its names go from every file (the StatefulSets stay here, no
	// garbage collector runs; their owner is gone), and the files stay.
	if err := f.grids.SuperedgeV1().StatefulSetGrids(f.ns).Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitRecords(f.nodes["a"], nil, "grid deleted")
	f.waitRecords(f.nodes["b"], nil, "grid deleted")
	f.waitMetric(f.nodes["a"], "staticip_statefulset_grid_daemon_writes_total")
}

// startSSGDaemons starts, against the shared API server, the StatefulSetGrid controller (as
// in the controller-manager) and one statefulset-grid-daemon with the shipped RBAC for each of
// two nodes, a (unit a) and b (unit b), in a new namespace.
func startSSGDaemons(t *testing.T) *ssgFixture {
	env := testenv.Get(t)
	ctx := testenv.Context(t, 4*time.Minute)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.ApplyFiles(ctx, env.Config, []string{filepath.Join(root, "manifests", "edge", "statefulset-grid-daemon.yaml")}, "DaemonSet"); err != nil {
		t.Fatal(err)
	}
	f := &ssgFixture{t: t, ctx: ctx, kube: kubernetes.NewForConfigOrDie(env.Config), grids: versioned.NewForConfigOrDie(env.Config),
		ns: "ssgd-" + rand.String(5), nodes: map[string]string{}, dirs: map[string]string{}, metric: map[string]string{}}
	if f.scraper, err = serving.Client(env.Config); err != nil {
		t.Fatal(err)
	}
	f.key = "ssgd.test/unit-" + f.ns
	if _, err := f.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, unit := range []string{"a", "b"} {
		name := f.ns + "-node-" + unit
		f.nodes[unit] = name
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{f.key: unit}}}
		if _, err := f.kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}

	// The grid controllers, as in the controller-manager.
	o := manager.NewOptions()
	o.LeaderElect = false
	o.Controllers = []string{grid.StatefulSetGridName}
	o.Serving.MetricsBindAddress, o.Serving.HealthBindAddress = "0", "0"
	mctx, mcancel := context.WithCancel(ctx)
	mdone := make(chan error, 1)
	go func() { mdone <- manager.Run(mctx, o, env.Config) }()
	t.Cleanup(func() { mcancel(); <-mdone })

	// One daemon per node, with the shipped RBAC.
	dcfg := rest.CopyConfig(env.Config)
	dcfg.Impersonate = rest.ImpersonationConfig{UserName: daemonSA}
	// /metrics (HTTPS) authenticates and authorizes callers with the admin's kubeconfig here;
	// the test scrapes as the admin (internal/serving tests the shipped RBAC).
	adminKubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testenv.WriteKubeconfig(env.Config, adminKubeconfig); err != nil {
		t.Fatal(err)
	}
	for _, unit := range []string{"a", "b"} {
		node := f.nodes[unit]
		f.dirs[node] = t.TempDir()
		do := ssgdaemon.NewOptions()
		do.NodeName, do.HostsDir, do.Resync = node, f.dirs[node], 0
		do.Serving.MetricsBindAddress, do.Serving.HealthBindAddress = "127.0.0.1:0", "0"
		do.Serving.Complete(adminKubeconfig)
		addr := make(chan string, 1)
		dctx, dcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		dc := &ssgdaemon.Config{Options: do, Rest: dcfg, Ready: func(s *serving.Server) { addr <- s.MetricsAddr }}
		go func() { done <- ssgdaemon.Run(dctx, dc) }()
		t.Cleanup(func() {
			dcancel()
			if err := <-done; err != nil {
				t.Errorf("daemon on %s: %v", node, err)
			}
		})
		f.metric[node] = <-addr
	}
	return f
}

// createGrid creates StatefulSetGrid db (2 replicas per unit, Service db-svc) and returns the
// unit StatefulSets db-a and db-b the controller makes, by unit.
func (f *ssgFixture) createGrid() map[string]*appsv1.StatefulSet {
	t, ctx := f.t, f.ctx
	// The grid: 2 replicas per unit, Service db-svc.
	g := &superedgev1.StatefulSetGrid{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: f.ns},
		Spec: superedgev1.StatefulSetGridSpec{GridUniqKey: f.key, Template: appsv1.StatefulSetSpec{
			Replicas: ptr.To(int32(2)), ServiceName: "db-svc",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x:v1"}}}},
		}},
	}
	if _, err := f.grids.SuperedgeV1().StatefulSetGrids(f.ns).Create(ctx, g, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sets := map[string]*appsv1.StatefulSet{}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, unit := range []string{"a", "b"} {
			s, err := f.kube.AppsV1().StatefulSets(f.ns).Get(ctx, "db-"+unit, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			sets[unit] = s
		}
		return true, nil
	}); err != nil {
		t.Fatalf("grid controller made no StatefulSets db-a, db-b: %v", err)
	}
	return sets
}

func (f *ssgFixture) createPod(s *appsv1.StatefulSet, ordinal int, node, ip string, ready bool) {
	f.t.Helper()
	labels := map[string]string{appsv1.PodIndexLabel: fmt.Sprint(ordinal), appsv1.StatefulSetPodNameLabel: fmt.Sprintf("%s-%d", s.Name, ordinal)}
	for k, v := range s.Spec.Template.Labels {
		labels[k] = v
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", s.Name, ordinal), Namespace: s.Namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(s, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}},
		Spec: *s.Spec.Template.Spec.DeepCopy(),
	}
	p.Spec.NodeName = node
	p, err := f.kube.CoreV1().Pods(s.Namespace).Create(f.ctx, p, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: cond(ready)}}}
	if _, err := f.kube.CoreV1().Pods(s.Namespace).UpdateStatus(f.ctx, p, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func cond(b bool) corev1.ConditionStatus {
	if b {
		return corev1.ConditionTrue
	}
	return corev1.ConditionFalse
}

func (f *ssgFixture) setReady(pod string, ready bool) {
	f.t.Helper()
	p, err := f.kube.CoreV1().Pods(f.ns).Get(f.ctx, pod, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: cond(ready)}}
	if _, err := f.kube.CoreV1().Pods(f.ns).UpdateStatus(f.ctx, p, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *ssgFixture) deletePod(pod string) {
	f.t.Helper()
	if err := f.kube.CoreV1().Pods(f.ns).Delete(f.ctx, pod, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		f.t.Fatal(err)
	}
}

// records reads node's hosts file: "IP name" lines, comments left out, sorted.
func (f *ssgFixture) records(node string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(f.dirs[node], "hosts"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return out, nil
}

func (f *ssgFixture) waitRecords(node string, want []string, what string) {
	f.t.Helper()
	var got []string
	var err error
	start := time.Now()
	perr := wait.PollUntilContextTimeout(f.ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		got, err = f.records(node)
		return err == nil && strings.Join(got, "\n") == strings.Join(want, "\n"), nil
	})
	if perr != nil {
		f.t.Fatalf("%s: %s's hosts file: got %q (err %v), want %q", what, node, got, err, want)
	}
	f.t.Logf("%s: %s's file as expected after %v", what, node, time.Since(start).Round(time.Millisecond))
}

func (f *ssgFixture) waitEvent(node, reason, text string) {
	f.t.Helper()
	if err := wait.PollUntilContextTimeout(f.ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := f.kube.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.Regarding.Kind == "Node" && e.Regarding.Name == node && e.Reason == reason && strings.Contains(e.Note, text) {
				f.t.Logf("Event on %s: %s %s", node, e.Reason, e.Note)
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		f.t.Fatalf("no %s Event with %q on Node %s: %v", reason, text, node, err)
	}
}

func (f *ssgFixture) waitMetric(node, series string) {
	f.t.Helper()
	var last string
	if err := wait.PollUntilContextTimeout(f.ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		resp, err := f.scraper.Get("https://" + f.metric[node] + "/metrics")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, series+" ") && !strings.HasSuffix(l, " 0") {
				last = l
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		f.t.Fatalf("metric %s of %s's daemon not above 0: %v", series, node, err)
	}
	f.t.Logf("%s: %s", node, last)
}
