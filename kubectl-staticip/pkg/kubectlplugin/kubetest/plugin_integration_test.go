// Package kubetest runs kubectl-staticip's commands (cobra, in-process, through a kubeconfig)
// against a real etcd + kube-apiserver with the staticip CRDs (internal/testenv), with the real
// EnhancedStatefulSet controller making the ControllerRevisions.
package kubetest

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/enhancedstatefulset"
	"github.com/staticip/staticip/controllers/pkg/manager"
	"github.com/staticip/staticip/internal/testenv"
	"github.com/staticip/staticip/kubectl-staticip/pkg/kubectlplugin"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type fixture struct {
	t          *testing.T
	ctx        context.Context
	kube       kubernetes.Interface
	sip        versioned.Interface
	kubeconfig string
}

// plugin runs `kubectl staticip args...` in-process and returns its output and exit code.
func (f *fixture) plugin(args ...string) (string, int) {
	f.t.Helper()
	var out, errOut bytes.Buffer
	cmd := kubectlplugin.NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append([]string{"--kubeconfig", f.kubeconfig}, args...))
	code := kubectlplugin.HandleError(&errOut, cmd.ExecuteContext(f.ctx))
	return out.String() + errOut.String(), code
}

func (f *fixture) namespace(name string) {
	f.t.Helper()
	if _, err := f.kube.CoreV1().Namespaces().Create(f.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	// No kube-controller-manager creates the default ServiceAccount.
	if _, err := f.kube.CoreV1().ServiceAccounts(name).Create(f.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		f.t.Fatal(err)
	}
}

func (f *fixture) eventually(what string, cond func() (bool, error)) {
	f.t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(f.ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		ok, err := cond()
		last = err
		return ok && err == nil, nil
	})
	if err != nil {
		f.t.Fatalf("timed out waiting for %s: %v (last error: %v)", what, err, last)
	}
}

// startManager runs the controller-manager with the controllers named, until the test ends.
func (f *fixture) startManager(controllers ...string) {
	t := f.t
	o := manager.NewOptions()
	o.LeaderElect = false
	o.Serving.MetricsBindAddress, o.Serving.HealthBindAddress = "0", "0"
	o.Controllers = controllers
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- manager.Run(ctx, o, rest.CopyConfig(testenv.Get(t).Config)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

func newFixture(t *testing.T) *fixture {
	env := testenv.Get(t)
	cfg := rest.CopyConfig(env.Config)
	f := &fixture{t: t, ctx: testenv.Context(t, 5*time.Minute), kube: kubernetes.NewForConfigOrDie(cfg), sip: versioned.NewForConfigOrDie(cfg),
		kubeconfig: filepath.Join(t.TempDir(), "kubeconfig")}
	if err := testenv.WriteKubeconfig(cfg, f.kubeconfig); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestIPsAndCheck: one node's range with a pod holding an IP and a StaticIP keeping another;
// ips lists both and the range's counts; check is clean (exit 0) until a second StaticIP in
// another namespace claims the pod's IP (exit 1, both records named).
func TestIPsAndCheck(t *testing.T) {
	f := newFixture(t)
	f.namespace("shop")
	f.namespace("other")
	r, err := f.sip.JkeV1().IPRanges().Create(f.ctx, &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "node-1-a"},
		Spec: jkev1.IPRangeSpec{CIDR: "10.50.0.0/24", Node: "node-1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.Status = jkev1.IPRangeStatus{Total: 254, Used: 1, Reserved: 1, Free: 252,
		Conditions: []metav1.Condition{{Type: "Synced", Status: metav1.ConditionTrue, Reason: "Synced", LastTransitionTime: metav1.Now()}}}
	if _, err := f.sip.JkeV1().IPRanges().UpdateStatus(f.ctx, r, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := f.kube.CoreV1().Pods("shop").Create(f.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0"},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.50.0.5", PodIPs: []corev1.PodIP{{IP: "10.50.0.5"}}}
	if _, err := f.kube.CoreV1().Pods("shop").UpdateStatus(f.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct{ ns, name, ip string }{{"shop", "web-0", "10.50.0.5"}, {"shop", "web-1", "10.50.0.6"}} {
		if _, err := f.sip.JkeV1().StaticIPs(s.ns).Create(f.ctx, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: s.name},
			Spec: jkev1.StaticIPSpec{Ref: "web", Kind: "EnhancedStatefulSet", Node: "node-1", IP: s.ip, Pod: s.name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	out, code := f.plugin("ips")
	t.Logf("$ kubectl staticip ips  (exit %d)\n%s", code, out)
	for _, want := range []string{"node-1-a", "10.50.0.0/24", "254", "10.50.0.5", "Allocated", "shop/web-0", "10.50.0.6", "Reserved", "shop/web-1"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("ips: exit %d, output lacks %q", code, want)
		}
	}
	out, code = f.plugin("ips", "--node", "node-2")
	if code != 0 || strings.Contains(out, "10.50.0.5") {
		t.Errorf("ips --node node-2 lists node-1's addresses: exit %d\n%s", code, out)
	}

	out, code = f.plugin("check")
	t.Logf("$ kubectl staticip check  (exit %d)\n%s", code, out)
	if code != 0 || !strings.Contains(out, "No problems found") {
		t.Fatalf("check on a clean cluster: exit %d", code)
	}

	if _, err := f.sip.JkeV1().StaticIPs("other").Create(f.ctx, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: "db-0"},
		Spec: jkev1.StaticIPSpec{Node: "node-1", IP: "10.50.0.5", Pod: "db-0"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, code = f.plugin("check")
	t.Logf("$ kubectl staticip check  (exit %d)\n%s", code, out)
	if code != 1 || !strings.Contains(out, "DuplicateStaticIP") || !strings.Contains(out, "other/db-0") || !strings.Contains(out, "shop/web-0") {
		t.Fatalf("check with a duplicate StaticIP: exit %d, want 1 naming other/db-0 and shop/web-0", code)
	}
}

// TestRolloutHistoryUndo: the real EnhancedStatefulSet controller keeps revisions of web
// (image v1, then v2); history lists them; undo puts v1's template back, the controller
// renumbers that revision 3, and undo --to-revision=2 goes forward to v2 again.
func TestRolloutHistoryUndo(t *testing.T) {
	f := newFixture(t)
	f.namespace("roll")
	f.startManager(enhancedstatefulset.Name)

	labels := map[string]string{"app": "web"}
	set := &jkev1alpha1.EnhancedStatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: jkev1alpha1.EnhancedStatefulSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx:v1"}}}}}}
	ests := f.sip.JkeV1alpha1().EnhancedStatefulSets("roll")
	if _, err := ests.Create(f.ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	revisions := func(n int) func() (bool, error) {
		return func() (bool, error) {
			l, err := f.kube.AppsV1().ControllerRevisions("roll").List(f.ctx, metav1.ListOptions{})
			return err == nil && len(l.Items) == n, err
		}
	}
	f.eventually("revision 1", revisions(1))
	if _, err := ests.Patch(f.ctx, "web", types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"nginx:v2"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("revision 2", revisions(2))

	out, code := f.plugin("rollout", "history", "ests/web", "-n", "roll")
	t.Logf("$ kubectl staticip rollout history ests/web -n roll  (exit %d)\n%s", code, out)
	if code != 0 || !strings.Contains(out, "REVISION") || !strings.Contains(out, "1 ") || !strings.Contains(out, "2 ") {
		t.Fatalf("history: exit %d", code)
	}

	out, code = f.plugin("rollout", "undo", "ests/web", "-n", "roll")
	t.Logf("$ kubectl staticip rollout undo ests/web -n roll  (exit %d)\n%s", code, out)
	if code != 0 || !strings.Contains(out, "rolled back") {
		t.Fatalf("undo: exit %d", code)
	}
	got, err := ests.Get(f.ctx, "web", metav1.GetOptions{})
	if err != nil || got.Spec.Template.Spec.Containers[0].Image != "nginx:v1" {
		t.Fatalf("after undo the template is %v (%v), want nginx:v1", got.Spec.Template.Spec.Containers, err)
	}
	// The controller reuses revision 1's ControllerRevision as revision 3.
	f.eventually("revision 1 renumbered 3", func() (bool, error) {
		l, err := f.kube.AppsV1().ControllerRevisions("roll").List(f.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, r := range l.Items {
			if r.Revision == 3 {
				set, err := ests.Get(f.ctx, "web", metav1.GetOptions{})
				return len(l.Items) == 2 && set.Status.UpdateRevision == r.Name, err
			}
		}
		return false, nil
	})
	out, code = f.plugin("rollout", "history", "ests/web", "-n", "roll", "-o", "wide")
	t.Logf("$ kubectl staticip rollout history ests/web -n roll -o wide  (exit %d)\n%s", code, out)
	if code != 0 || !strings.Contains(out, "nginx:v1") || !strings.Contains(out, "nginx:v2") {
		t.Fatalf("history -o wide: exit %d", code)
	}
	out, code = f.plugin("rollout", "undo", "ests/web", "-n", "roll", "--to-revision=3")
	if code != 0 || !strings.Contains(out, "skipped rollback") {
		t.Errorf("undo to the running revision: exit %d\n%s", code, out)
	}
	out, code = f.plugin("rollout", "undo", "ests/web", "-n", "roll", "--to-revision=2")
	got, err = ests.Get(f.ctx, "web", metav1.GetOptions{})
	if code != 0 || err != nil || got.Spec.Template.Spec.Containers[0].Image != "nginx:v2" {
		t.Fatalf("undo --to-revision=2: exit %d %s, image %v (%v)", code, out, got.Spec.Template.Spec.Containers, err)
	}
	// No kubelet: the pod never turns Ready, so status reports it and --timeout ends the wait.
	f.eventually("the controller observes the undo", func() (bool, error) {
		set, err := ests.Get(f.ctx, "web", metav1.GetOptions{})
		return err == nil && set.Status.ObservedGeneration == set.Generation, err
	})
	out, code = f.plugin("rollout", "status", "ests/web", "-n", "roll", "--watch=false")
	t.Logf("$ kubectl staticip rollout status ests/web -n roll --watch=false  (exit %d)\n%s", code, out)
	if code != 0 || !strings.Contains(out, "Waiting for 1 pods to be ready") {
		t.Errorf("status --watch=false: exit %d", code)
	}
	if out, code = f.plugin("rollout", "status", "ests/web", "-n", "roll", "--timeout=2s"); code != 1 {
		t.Errorf("status --timeout=2s of a rollout that cannot finish: exit %d, want 1\n%s", code, out)
	}
	out, code = f.plugin("rollout", "pause", "ests/web", "-n", "roll")
	got, _ = ests.Get(f.ctx, "web", metav1.GetOptions{})
	if code != 0 || got.Spec.UpdateStrategy.RollingUpdate == nil || !got.Spec.UpdateStrategy.RollingUpdate.Paused {
		t.Fatalf("pause: exit %d\n%s", code, out)
	}
	if out, code = f.plugin("rollout", "resume", "ests/web", "-n", "roll"); code != 0 || !strings.Contains(out, "resumed") {
		t.Fatalf("resume: exit %d\n%s", code, out)
	}
}

// TestUndoPatchSurvivesAStatusWrite: the undo patch is guarded by the set's generation, not its
// resourceVersion — a status write by the controller between the plugin's read and its patch
// (which the controller does on every pod change) must not fail `rollout undo` ("the server
// rejected our request"; seen as a flaky TestRolloutHistoryUndo), while a spec change must.
func TestUndoPatchSurvivesAStatusWrite(t *testing.T) {
	f := newFixture(t)
	f.namespace("guard")
	tpl := func(image string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "g"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}}}
	}
	set := &jkev1alpha1.EnhancedStatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: "guard"},
		Spec: jkev1alpha1.EnhancedStatefulSetSpec{ServiceName: "g", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "g"}}, Template: tpl("img:v2")}}
	ests := f.sip.JkeV1alpha1().EnhancedStatefulSets("guard")
	read, err := ests.Create(f.ctx, set, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := &appsv1.ControllerRevision{Revision: 1}
	data, err := json.Marshal(map[string]any{"spec": map[string]any{"template": tpl("img:v1")}})
	if err != nil {
		t.Fatal(err)
	}
	old.Data.Raw = data
	patch, done, err := kubectlplugin.UndoPatch(read, old)
	if err != nil || done {
		t.Fatalf("UndoPatch: done=%v err=%v", done, err)
	}
	// The controller writes status after the plugin read the set.
	st := read.DeepCopy()
	st.Status.ObservedGeneration = read.Generation
	st.Status.Replicas = 1
	if _, err := ests.UpdateStatus(f.ctx, st, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := ests.Patch(f.ctx, "g", types.JSONPatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("undo patch after a status write: %v", err)
	}
	if img := got.Spec.Template.Spec.Containers[0].Image; img != "img:v1" {
		t.Fatalf("after undo the image is %s, want img:v1", img)
	}
	// A spec change after the read: the stale patch must be refused.
	if _, err := ests.Patch(f.ctx, "g", types.JSONPatchType, patch, metav1.PatchOptions{}); err == nil {
		t.Fatal("a patch computed before a spec change was applied; want it refused")
	}
}
