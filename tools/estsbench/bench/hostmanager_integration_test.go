package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestHostManagerActsAsTheControllerManager, on a real API server with the shipped
// manifests/admission and manifests/controller-manager: the host manager reaches the API
// server as the Deployment's ServiceAccount, so the ip-address policy lets it do what the
// controller does on every static-IP pod's restart — create the pod with its StaticIP's IP in
// a namespace that did not opt in to IP requests. With the benchmark's admin kubeconfig the
// policy refuses exactly that, and a restart waits for a successor that never comes.
func TestHostManagerActsAsTheControllerManager(t *testing.T) {
	env := testenv.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"admission", "controller-manager"} {
		if err := testenv.ApplyKustomization(ctx, env.Config, filepath.Join(root, "manifests", dir)); err != nil {
			t.Fatalf("apply manifests/%s: %v", dir, err)
		}
	}
	admin := kubernetes.NewForConfigOrDie(env.Config)
	// No kube-controller-manager runs here, so the Deployment has no pods; a Lease held under
	// this host's name stands for the started manager taking it.
	host, _ := os.Hostname()
	holder := host + "_test"
	if _, err := admin.CoordinationV1().Leases(managerNamespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: managerLease, Namespace: managerNamespace},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	adminKubeconfig := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := testenv.WriteKubeconfig(env.Config, adminKubeconfig); err != nil {
		t.Fatal(err)
	}
	argsFile := filepath.Join(t.TempDir(), "args")
	hm := &HostManager{Kube: admin, Binary: fakeManager(t, `echo "$@" > `+argsFile+`; exec sleep 60`), Kubeconfig: adminKubeconfig, Log: t.Logf}
	stop, err := hm.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	var args string
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		b, _ := os.ReadFile(argsFile)
		args = string(b)
		return len(b) > 0, nil
	}); err != nil {
		t.Fatalf("the host manager wrote no arguments: %v", err)
	}
	kubeconfig := ""
	for _, a := range strings.Fields(args) {
		if v, ok := strings.CutPrefix(a, "--kubeconfig="); ok {
			kubeconfig = v
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("the host manager's kubeconfig %q: %v", kubeconfig, err)
	}
	manager := kubernetes.NewForConfigOrDie(cfg)

	ns := "restart-" + strings.ToLower(rand8())
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ests-staticip-0", Annotations: map[string]string{podip.AnnotationIPAddress: "10.246.1.7"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause:1"}}}}
	if _, err := manager.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Errorf("the host manager cannot recreate a static-IP pod: %v", err)
	}

	stop()
	if _, err := os.Stat(kubeconfig); !os.IsNotExist(err) {
		t.Errorf("the host manager's credentials %s are still there after stop (stat: %v)", kubeconfig, err)
	}
}

func rand8() string { return strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "") }
