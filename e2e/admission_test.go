//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// TestIPAddressAdmission: on the cluster under test (manifests/admission installed), a user
// who may create pods in a namespace that has not opted in cannot create one asking for an IP
// and is told why; in an opted-in namespace the same request passes; nobody, not even the
// cluster admin, adds the annotation to an existing pod.
func TestIPAddressAdmission(t *testing.T) {
	ctx := context.Background()
	if _, err := f.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, "staticip-ip-address", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Skip("no ValidatingAdmissionPolicy staticip-ip-address on this cluster (kubectl apply -k manifests/admission)")
	}
	closed, open := f.Namespace(t, "e2e-adm-closed"), f.IPRequestNamespace(t, "e2e-adm-open")
	const user = "e2e-pod-author"
	for _, ns := range []string{closed, open} {
		if _, err := f.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "edit"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(f.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	author := kubernetes.NewForConfigOrDie(cfg)
	asking := func() *corev1.Pod {
		p := testServerPod("asks", "", nil)
		p.Spec.NodeSelector = nil
		p.Annotations = map[string]string{jkev1.AnnotationIPAddress: "10.244.1.250"}
		return p
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

	_, err := author.CoreV1().Pods(closed).Create(ctx, asking(), dryRun)
	want := "staticip.jke.jdcloud.com/ip-address may be set by " + user + " only in a namespace labelled staticip.jke.jdcloud.com/allow-ip-request=true; namespace " + closed + " is not"
	if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("a pod asking for an IP in namespace %s (not opted in): want Forbidden with %q, got %v", closed, want, err)
	} else {
		t.Logf("refused as it should: %v", err)
	}
	if _, err := author.CoreV1().Pods(open).Create(ctx, asking(), dryRun); err != nil {
		t.Errorf("a pod asking for an IP in the opted-in namespace %s was refused: %v", open, err)
	}
	plain := testServerPod("plain", "", nil)
	plain.Spec.NodeSelector = nil
	if _, err := author.CoreV1().Pods(open).Create(ctx, plain, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"metadata":{"annotations":{"` + jkev1.AnnotationIPAddress + `":"10.244.1.251"}}}`)
	_, err = f.Client.CoreV1().Pods(open).Patch(ctx, "plain", types.MergePatchType, patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	if err == nil || !strings.Contains(err.Error(), "cannot be added, changed or removed on an existing pod") {
		t.Errorf("the admin added the ip-address annotation to an existing pod: %v", err)
	}
}

// TestPluginCredentialOnTheNode: the kubeconfig the agent wrote for the plugin on a node
// authenticates as the plugin's own service account, bound to that node, and cannot relabel
// a pod of its node nor annotate a pod of another node. The kubeconfig is read where the
// node keeps it: the local cluster's CNI directory on this machine, or /etc/cni/net.d in a
// kind node's container.
func TestPluginCredentialOnTheNode(t *testing.T) {
	ctx := context.Background()
	requireAgents(t)
	nodes := workloadNodes(t, ctx) // the test's pods run on both
	if len(nodes) < 2 {
		t.Skip("needs two nodes that take ordinary pods")
	}
	mine, other := nodes[0].Name, nodes[1].Name
	cfg := pluginCredential(t, ctx, mine)
	plugin := kubernetes.NewForConfigOrDie(cfg)
	review, err := plugin.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the plugin's kubeconfig on %s does not authenticate: %v", mine, err)
	}
	ui := review.Status.UserInfo
	if ui.Username != "system:serviceaccount:kube-system:staticip-cni" || strings.Join(ui.Extra["authentication.kubernetes.io/node-name"], ",") != mine {
		t.Errorf("the plugin's kubeconfig on %s authenticates as %s with node %v", mine, ui.Username, ui.Extra["authentication.kubernetes.io/node-name"])
	}
	ns := f.Namespace(t, "e2e-cni-cred")
	for _, n := range []string{mine, other} {
		// staticip-enabled without an IP: the plugin picks one and writes it back to the pod
		// with this very credential, through the policy.
		p := testServerPod("on-"+n, n, map[string]string{"app": "web"})
		p.Annotations = map[string]string{jkev1.AnnotationEnable: "true"}
		if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		running, err := f.WaitForPodRunning(ctx, ns, p.Name, rolloutTimeout)
		if err != nil {
			t.Fatal(err)
		}
		if got := running.Annotations[jkev1.AnnotationIPAddress]; got != running.Status.PodIP {
			t.Errorf("pod %s runs with %s; the plugin's write-back left ip-address=%q", p.Name, running.Status.PodIP, got)
		}
	}
	dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	for _, c := range []struct{ what, pod, patch string }{
		{"relabel a pod of its node", "on-" + mine, `{"metadata":{"labels":{"app":"evil"}}}`},
		{"re-image a pod of its node", "on-" + mine, `{"spec":{"containers":[{"name":"testserver","image":"evil:1"}]}}`},
		{"annotate a pod of another node", "on-" + other, `{"metadata":{"annotations":{"` + jkev1.AnnotationIPAddress + `":"10.244.2.251"}}}`},
	} {
		_, err := plugin.CoreV1().Pods(ns).Patch(ctx, c.pod, types.StrategicMergePatchType, []byte(c.patch), dry)
		if err == nil || !apierrors.IsForbidden(err) {
			t.Errorf("the plugin's credential of %s could %s: %v", mine, c.what, err)
		} else {
			t.Logf("refused as it should: %s: %v", c.what, err)
		}
	}
}

// pluginCredential returns the plugin's kubeconfig the agent wrote on the node: on the local
// cluster from <state dir>/cni/<node>/net.d (cni/README.md), on a kind node from the
// container's /etc/cni/net.d. A kind node's copy names the kubernetes Service's ClusterIP,
// which only routes inside the cluster: the same credential is used against the address this
// suite reaches the same API server at. Skips (with the reason) where neither exists.
func pluginCredential(t *testing.T, ctx context.Context, node string) *rest.Config {
	t.Helper()
	path := filepath.Join(filepath.Dir(f.Kubeconfig), "cni", node, "net.d", "staticip-kubeconfig")
	if _, err := os.Stat(path); err == nil {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	shell, reason, err := f.NodeShell(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	if shell == nil {
		t.Skipf("SKIP: the plugin's kubeconfig is neither at %s (local cluster) nor in a node container here: %s", path, reason)
	}
	const inNode = "/etc/cni/net.d/staticip-kubeconfig"
	data, err := shell.Exec("cat", inNode)
	if err != nil {
		t.Fatalf("the agent wrote no plugin kubeconfig on %s: %v", node, err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(data))
	if err != nil {
		t.Fatalf("%s on %s: %v", inNode, node, err)
	}
	t.Logf("plugin kubeconfig %s via %s (server %s, used at %s)", inNode, shell.Where(), cfg.Host, f.Config.Host)
	cfg.Host = f.Config.Host
	return cfg
}
