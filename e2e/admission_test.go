//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/apis/podip"
	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
	"github.com/staticip/staticip/e2e/framework"
)

// TestIPAddressAdmission: on the cluster under test (manifests/admission installed), a user
// who may create pods in a namespace that has not opted in cannot create one asking for an IP
// and is told why; in an opted-in namespace the same request passes; nobody, not even the
// cluster admin, adds the annotation to an existing pod; and the same user cannot get an IP
// through an EnhancedStatefulSet or grid template or a StaticIP there either.
func TestIPAddressAdmission(t *testing.T) {
	ctx := context.Background()
	if _, err := f.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, "staticip-ip-address", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Skip("no ValidatingAdmissionPolicy staticip-ip-address on this cluster (kubectl apply -k manifests/admission)")
	}
	closed, open := f.Namespace(t, "e2e-adm-closed"), f.IPRequestNamespace(t, "e2e-adm-open")
	const user = "e2e-pod-author"
	cfg := editUser(t, ctx, user, closed, open)
	author := kubernetes.NewForConfigOrDie(cfg)
	asking := func() *corev1.Pod {
		p := testServerPod("asks", "", nil)
		p.Spec.NodeSelector = nil
		p.Annotations = map[string]string{podip.AnnotationIPAddress: "10.244.1.250"}
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
	patch := []byte(`{"metadata":{"annotations":{"` + podip.AnnotationIPAddress + `":"10.244.1.251"}}}`)
	_, err = f.Client.CoreV1().Pods(open).Patch(ctx, "plain", types.MergePatchType, patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	if err == nil || !strings.Contains(err.Error(), "cannot be added, changed or removed on an existing pod") {
		t.Errorf("the admin added the ip-address annotation to an existing pod: %v", err)
	}

	workloadTemplatesAskingForAnIP(t, ctx, closed, open, user)
}

// workloadTemplatesAskingForAnIP: the same user, in the namespace that has not opted in,
// cannot get an IP through a workload whose pods a trusted identity creates — an
// EnhancedStatefulSet's template (staticip-controller-manager creates its pods), a grid's
// template (the unit workloads) — nor through a StaticIP's spec.ip; in the opted-in namespace
// the EnhancedStatefulSet passes. All dry runs: nothing runs.
func workloadTemplatesAskingForAnIP(t *testing.T, ctx context.Context, closed, open, user string) {
	if _, err := f.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, "staticip-ip-address-sources", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Skip("no ValidatingAdmissionPolicy staticip-ip-address-sources on this cluster (kubectl apply -k manifests/admission)")
	}
	for _, ns := range []string{closed, open} {
		if _, err := f.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "staticip-workloads"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"jke.jdcloud.com", "superedge.io"}, Resources: []string{"*"}, Verbs: []string{"*"}}}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "staticip-workloads"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "staticip-workloads"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(f.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	author := versioned.NewForConfigOrDie(cfg)
	const ip = "10.244.1.201"
	tpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "sneaky"}, Annotations: map[string]string{podip.AnnotationIPAddress: ip}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "sneaky"}}
	set := &jkev1alpha1.EnhancedStatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "sneaky", Annotations: map[string]string{jkev1.AnnotationEnable: "true"}},
		Spec: jkev1alpha1.EnhancedStatefulSetSpec{Replicas: ptr[int32](1), Selector: sel, ServiceName: "sneaky", Template: tpl}}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	want := "may be set by " + user + " only in a namespace labelled staticip.jke.jdcloud.com/allow-ip-request=true; namespace " + closed + " is not"
	for _, c := range []struct {
		what string
		err  error
	}{
		{"an EnhancedStatefulSet whose template asks for " + ip, func() error {
			_, err := author.JkeV1alpha1().EnhancedStatefulSets(closed).Create(ctx, set, dryRun)
			return err
		}()},
		{"a StatefulSetGrid whose template asks for " + ip, func() error {
			_, err := author.SuperedgeV1().StatefulSetGrids(closed).Create(ctx, &superedgev1.StatefulSetGrid{ObjectMeta: metav1.ObjectMeta{Name: "sneaky"},
				Spec: superedgev1.StatefulSetGridSpec{GridUniqKey: "zone", Template: appsv1.StatefulSetSpec{Selector: sel, ServiceName: "sneaky", Template: tpl}}}, dryRun)
			return err
		}()},
		{"a DeploymentGrid whose template asks for " + ip, func() error {
			_, err := author.SuperedgeV1().DeploymentGrids(closed).Create(ctx, &superedgev1.DeploymentGrid{ObjectMeta: metav1.ObjectMeta{Name: "sneaky"},
				Spec: superedgev1.DeploymentGridSpec{GridUniqKey: "zone", Template: appsv1.DeploymentSpec{Selector: sel, Template: tpl}}}, dryRun)
			return err
		}()},
		{"a StaticIP naming " + ip, func() error {
			_, err := author.JkeV1().StaticIPs(closed).Create(ctx, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: "sneaky-0"},
				Spec: jkev1.StaticIPSpec{Pod: "sneaky-0", Kind: "EnhancedStatefulSet", Ref: "sneaky", IP: ip}}, dryRun)
			return err
		}()},
	} {
		if c.err == nil || !apierrors.IsForbidden(c.err) || !strings.Contains(c.err.Error(), want) {
			t.Errorf("%s in namespace %s (not opted in): want Forbidden with %q, got %v", c.what, closed, want, c.err)
		} else {
			t.Logf("refused as it should: %v", c.err)
		}
	}
	if _, err := author.JkeV1alpha1().EnhancedStatefulSets(open).Create(ctx, set, dryRun); err != nil {
		t.Errorf("an EnhancedStatefulSet asking for an IP in the opted-in namespace %s was refused: %v", open, err)
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
		if got := running.Annotations[podip.AnnotationIPAddress]; got != running.Status.PodIP {
			t.Errorf("pod %s runs with %s; the plugin's write-back left ip-address=%q", p.Name, running.Status.PodIP, got)
		}
	}
	dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	for _, c := range []struct{ what, pod, patch string }{
		{"relabel a pod of its node", "on-" + mine, `{"metadata":{"labels":{"app":"evil"}}}`},
		{"re-image a pod of its node", "on-" + mine, `{"spec":{"containers":[{"name":"testserver","image":"evil:1"}]}}`},
		{"annotate a pod of another node", "on-" + other, `{"metadata":{"annotations":{"` + podip.AnnotationIPAddress + `":"10.244.2.251"}}}`},
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

// TestEditUserManagesStaticIPWorkloads: on the cluster under test (manifests/user-roles
// installed), a user bound to nothing but Kubernetes' built-in edit ClusterRole in a namespace
// creates an EnhancedStatefulSet with static IPs, scales it through its scale subresource,
// reads the StaticIP the controller records for its pod — and cannot delete that record, cannot
// delete an IPRange, and cannot pick an IP in the template in a namespace that did not opt in.
func TestEditUserManagesStaticIPWorkloads(t *testing.T) {
	ctx := context.Background()
	if _, err := f.Client.RbacV1().ClusterRoles().Get(ctx, "staticip-aggregate-to-edit", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Skip("no ClusterRole staticip-aggregate-to-edit on this cluster (kubectl apply -k manifests/user-roles)")
	}
	requireManager(t)
	ns := f.Namespace(t, "e2e-edit")
	const user = "e2e-app-developer"
	dev := versioned.NewForConfigOrDie(editUser(t, ctx, user, ns))
	pod := testServerPod("web", "", map[string]string{"app": "web"})
	pod.Spec.NodeSelector = nil
	set := &jkev1alpha1.EnhancedStatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: map[string]string{jkev1.AnnotationEnable: "true"}},
		Spec: jkev1alpha1.EnhancedStatefulSetSpec{Replicas: ptr[int32](1), ServiceName: "web",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: pod.Labels}, Spec: pod.Spec}}}
	// The aggregation controller may still be folding the roles in on a cluster just up.
	var err error
	if werr := framework.WaitFor(ctx, time.Minute, "the edit user to create an EnhancedStatefulSet", func(ctx context.Context) (bool, error) {
		_, err = dev.JkeV1alpha1().EnhancedStatefulSets(ns).Create(ctx, set, metav1.CreateOptions{})
		return err == nil, nil
	}); werr != nil {
		t.Fatalf("%v: %v", werr, err)
	}
	var sip *jkev1.StaticIP
	if werr := framework.WaitFor(ctx, rolloutTimeout, "the edit user to read StaticIP web-0 with its IP", func(ctx context.Context) (bool, error) {
		sip, err = dev.JkeV1().StaticIPs(ns).Get(ctx, "web-0", metav1.GetOptions{})
		return err == nil && sip.Spec.IP != "", nil
	}); werr != nil {
		t.Fatalf("%v: %v", werr, err)
	}
	t.Logf("the edit user reads StaticIP %s/web-0: %s on %s", ns, sip.Spec.IP, sip.Spec.Node)
	// Read-modify-write of the scale subresource, retried on a conflict as kubectl scale's
	// users do: the controller writes the set's status between the read and the write (kind:
	// "the object has been modified" once), which says nothing about the edit user's rights.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		scale, err := dev.JkeV1alpha1().EnhancedStatefulSets(ns).GetScale(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading the scale subresource: %w", err)
		}
		scale.Spec.Replicas = 2
		_, err = dev.JkeV1alpha1().EnhancedStatefulSets(ns).UpdateScale(ctx, "web", scale, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("the edit user scaling the EnhancedStatefulSet: %v", err)
	}
	if got, err := dev.JkeV1alpha1().EnhancedStatefulSets(ns).Get(ctx, "web", metav1.GetOptions{}); err != nil || *got.Spec.Replicas != 2 {
		t.Fatalf("after the scale: %v, %v", err, got)
	}
	if err := dev.JkeV1().StaticIPs(ns).Delete(ctx, "web-0", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
		t.Errorf("the edit user deleting StaticIP web-0 (freeing its reserved IP): %v, want Forbidden", err)
	}
	if err := dev.JkeV1().IPRanges().DeleteCollection(ctx, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the edit user deleting IPRanges: %v, want Forbidden", err)
	}
	asking := set.DeepCopy()
	asking.Name = "asks"
	asking.Spec.Template.Annotations = map[string]string{podip.AnnotationIPAddress: sip.Spec.IP}
	_, err = dev.JkeV1alpha1().EnhancedStatefulSets(ns).Create(ctx, asking, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if want := "only in a namespace labelled staticip.jke.jdcloud.com/allow-ip-request=true; namespace " + ns + " is not"; !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("the edit user asking for %s in a template in %s: %v, want Forbidden with %q", sip.Spec.IP, ns, err, want)
	}
}

// editUser binds user to the built-in edit ClusterRole in each namespace and returns a client
// configuration that impersonates it.
func editUser(t *testing.T, ctx context.Context, user string, namespaces ...string) *rest.Config {
	t.Helper()
	for _, ns := range namespaces {
		if _, err := f.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "edit"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(f.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return cfg
}
