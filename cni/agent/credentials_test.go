package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/internal/testenv"
)

// The plugin's credential, as the agent writes it next to the conflist with manifests/cni
// applied (RBAC and admission policies, unchanged), can write back the ip-address annotation
// of a pod bound to its own node and nothing else: not a label, not an image, not another
// annotation, not a pod of another node, no create or delete. Root on one node holds that
// file; it must not be a key to every pod of the cluster.
func TestPluginCredentialWritesOnlyTheIPAnnotationOfItsNode(t *testing.T) {
	f := newCredFixture(t)
	f.createRanges(t)
	f.checkRefused(t)
	f.checkRoleBoundByMistake(t)
	f.checkWriteBack(t)
	f.checkAgentNodeWrites(t)
	f.checkAgentNodeStatus(t)
}

// credFixture: manifests/cni applied; pods mine and other on node A, theirs on node B; the
// agent of node A (its pod-bound token) and the plugin's credential the agent wrote.
type credFixture struct {
	ctx                      context.Context
	env                      *testenv.Env
	kube, agentKube          kubernetes.Interface
	plugin                   kubernetes.Interface
	agentCfg                 *rest.Config
	suffix, nodeA, nodeB, ns string
	mine, other, theirs      *corev1.Pod
	rangeOf                  map[string]*jkev1.IPRange
}

func newCredFixture(t *testing.T) *credFixture {
	ctx, kube, _, suffix := apiFixture(t, 3*time.Minute)
	env := testenv.Get(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.ApplyKustomization(ctx, env.Config, filepath.Join(root, "manifests", "cni"), "DaemonSet"); err != nil {
		t.Fatal(err)
	}
	nodeA, nodeB, nsName := "cred-a-"+suffix, "cred-b-"+suffix, "cred-"+suffix
	createNode(ctx, t, kube, nodeA, "192.168.78.1")
	createNode(ctx, t, kube, nodeB, "192.168.78.2")
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(ns, name, node, sa string) *corev1.Pod {
		p, err := kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"},
				Annotations: map[string]string{jkev1.AnnotationEnable: "true", "note": "a"}},
			Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa, Containers: []corev1.Container{{Name: "c", Image: "pause:1"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	mine, other, theirs := pod(nsName, "mine", nodeA, ""), pod(nsName, "other", nodeA, ""), pod(nsName, "theirs", nodeB, "")
	// The agent as the DaemonSet runs it: its kubelet-projected token is bound to its pod on
	// node A (and so names node A).
	agentPod := pod("kube-system", "staticip-agent-"+suffix, nodeA, "staticip-agent")
	t.Cleanup(func() {
		_ = kube.CoreV1().Pods("kube-system").Delete(context.Background(), agentPod.Name, metav1.DeleteOptions{})
	})
	tr, err := kube.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "staticip-agent", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{
			Kind: "Pod", APIVersion: "v1", Name: agentPod.Name, UID: agentPod.UID}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	agentCfg := &rest.Config{Host: env.Config.Host, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData}}
	agentKube := kubernetes.NewForConfigOrDie(agentCfg)

	dir := t.TempDir()
	confDir := filepath.Join(dir, "net.d")
	a := New(Config{NodeName: nodeA, CNIBinDir: filepath.Join(dir, "bin"), CNIConfDir: confDir, DataDir: dir,
		PluginKubeconfig:  "/etc/cni/net.d/staticip-kubeconfig",
		PluginCredentials: pluginCredentials(t, dir, agentCfg, agentKube, nodeA)}, agentKube, versioned.NewForConfigOrDie(agentCfg), nil)
	_ = a.SyncOnce(ctx) // caches not started: this pass only installs the plugin's files
	pluginCfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(confDir, "staticip-kubeconfig"))
	if err != nil {
		t.Fatalf("the agent wrote no usable plugin kubeconfig: %v", err)
	}
	plugin := kubernetes.NewForConfigOrDie(pluginCfg)
	review, err := plugin.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ui := review.Status.UserInfo; ui.Username != "system:serviceaccount:kube-system:staticip-cni" || strings.Join(ui.Extra["authentication.kubernetes.io/node-name"], ",") != nodeA {
		t.Errorf("the plugin's kubeconfig authenticates as %s with node-name %v, want kube-system/staticip-cni of %s", ui.Username, ui.Extra["authentication.kubernetes.io/node-name"], nodeA)
	}

	f := &credFixture{ctx: ctx, env: env, kube: kube, agentKube: agentKube, plugin: plugin, agentCfg: agentCfg, suffix: suffix,
		nodeA: nodeA, nodeB: nodeB, ns: nsName, mine: mine, other: other, theirs: theirs, rangeOf: map[string]*jkev1.IPRange{}}
	// A ValidatingAdmissionPolicy takes effect a moment after it is created: wait until a
	// dry run of a forbidden write is refused (at most 20s; without a policy, the checks below
	// say what went through).
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		_, err := plugin.CoreV1().Pods(nsName).Patch(ctx, other.Name, types.MergePatchType, labelPatch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	return f
}

var labelPatch = []byte(`{"metadata":{"labels":{"app":"evil"}}}`)

func ipPatch(ip string) []byte {
	return []byte(`{"metadata":{"annotations":{"` + podip.AnnotationIPAddress + `":"` + ip + `"}}}`)
}

func (f *credFixture) createRanges(t *testing.T) {
	ctx, env, suffix, nodeA, nodeB := f.ctx, f.env, f.suffix, f.nodeA, f.nodeB
	// One IPRange per node: the agent reports (status, Synced) only on its own node's.
	for i, n := range []string{nodeA, nodeB} {
		r, err := versioned.NewForConfigOrDie(env.Config).JkeV1().IPRanges().Create(ctx, &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "cred-" + n},
			Spec: jkev1.IPRangeSpec{CIDR: fmt.Sprintf("10.%d.%d.0/24", 170+i, len(suffix)%200), Node: n}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		f.rangeOf[n] = r
		t.Cleanup(func() {
			_ = versioned.NewForConfigOrDie(env.Config).JkeV1().IPRanges().Delete(context.Background(), r.Name, metav1.DeleteOptions{})
		})
	}
}

// synced writes the Synced condition of node n's IPRange with the agent's token.
func (f *credFixture) synced(n string) error {
	ctx, env, agentSIP := f.ctx, f.env, versioned.NewForConfigOrDie(f.agentCfg)
	rangeOf := f.rangeOf
	r, err := versioned.NewForConfigOrDie(env.Config).JkeV1().IPRanges().Get(ctx, rangeOf[n].Name, metav1.GetOptions{}) // the agent reads through its informer
	if err != nil {
		return err
	}
	r.Status.Conditions = []metav1.Condition{{Type: ConditionSynced, Status: metav1.ConditionTrue, Reason: ReasonServing,
		Message: "node " + n + " allocates from this range", LastTransitionTime: metav1.Now()}}
	_, err = agentSIP.JkeV1().IPRanges().UpdateStatus(ctx, r, metav1.UpdateOptions{})
	return err
}

// checkRefused: every write outside the plugin's one permitted write is Forbidden.
func (f *credFixture) checkRefused(t *testing.T) {
	ctx, plugin, agentKube, nsName, nodeA, nodeB, other, theirs := f.ctx, f.plugin, f.agentKube, f.ns, f.nodeA, f.nodeB, f.other, f.theirs
	synced := f.synced
	refused := []struct {
		what string
		do   func() error
	}{
		{"relabel a pod of its own node", func() error {
			_, err := plugin.CoreV1().Pods(nsName).Patch(ctx, other.Name, types.MergePatchType, labelPatch, metav1.PatchOptions{})
			return err
		}},
		{"re-image a pod of its own node", func() error {
			_, err := plugin.CoreV1().Pods(nsName).Patch(ctx, other.Name, types.StrategicMergePatchType,
				[]byte(`{"spec":{"containers":[{"name":"c","image":"evil:1"}]}}`), metav1.PatchOptions{})
			return err
		}},
		{"change another annotation of a pod of its own node", func() error {
			_, err := plugin.CoreV1().Pods(nsName).Patch(ctx, other.Name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"note":"b"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"set the ip-address annotation together with a label", func() error {
			_, err := plugin.CoreV1().Pods(nsName).Patch(ctx, other.Name, types.MergePatchType,
				[]byte(`{"metadata":{"labels":{"app":"evil"},"annotations":{"`+podip.AnnotationIPAddress+`":"10.1.0.7"}}}`), metav1.PatchOptions{})
			return err
		}},
		{"set the ip-address annotation of a pod on another node", func() error {
			_, err := plugin.CoreV1().Pods(nsName).Patch(ctx, theirs.Name, types.MergePatchType, ipPatch("10.1.0.8"), metav1.PatchOptions{})
			return err
		}},
		{"delete a pod of its own node", func() error {
			return plugin.CoreV1().Pods(nsName).Delete(ctx, other.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		}},
		{"create a pod", func() error {
			_, err := plugin.CoreV1().Pods(nsName).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "new"},
				Spec: corev1.PodSpec{NodeName: nodeA, Containers: []corev1.Container{{Name: "c", Image: "pause:1"}}}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}},
		{"read a secret", func() error {
			_, err := plugin.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"let the agent mint a plugin token bound to another node", func() error {
			_, err := agentKube.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "staticip-cni", &authenticationv1.TokenRequest{
				Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: nodeB}}}, metav1.CreateOptions{})
			return err
		}},
		{"let the agent mint a plugin token bound to no node", func() error {
			_, err := agentKube.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "staticip-cni", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
			return err
		}},
		{"let the agent mint a plugin token that lives longer than an hour", func() error {
			_, err := agentKube.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "staticip-cni", &authenticationv1.TokenRequest{
				Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](48 * 3600),
					BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: nodeA}}}, metav1.CreateOptions{})
			return err
		}},
		{"let the agent report another node's IPRange as Synced", func() error { return synced(nodeB) }},
		{"patch a pod with the agent's own token", func() error {
			_, err := agentKube.CoreV1().Pods(nsName).Patch(ctx, other.Name, types.MergePatchType, ipPatch("10.1.0.9"), metav1.PatchOptions{})
			return err
		}},
	}
	for _, r := range refused {
		// Each policy (staticip-cni-writes, staticip-cni-token, ...) is loaded on its own: the
		// wait above proves only the first one is in force. A write that goes through is
		// retried until the refusal comes or 20 s pass (then it is a real hole).
		err := r.do()
		for retryUntil := time.Now().Add(20 * time.Second); err == nil && time.Now().Before(retryUntil); err = r.do() {
			time.Sleep(200 * time.Millisecond)
		}
		switch {
		case err == nil:
			t.Errorf("the plugin's credential could %s", r.what)
		case !apierrors.IsForbidden(err):
			t.Errorf("%s: want Forbidden, got %v", r.what, err)
		default:
			t.Logf("refused as it should: %s: %v", r.what, err)
		}
	}
	if err := synced(nodeA); err != nil {
		t.Errorf("the agent cannot report its own node's IPRange: %v", err)
	}
}

// checkRoleBoundByMistake: a role bound to the plugin's identity by mistake still gives it
// nothing: the policy matches every write it makes.
func (f *credFixture) checkRoleBoundByMistake(t *testing.T) {
	ctx, kube, plugin, nsName, suffix, other := f.ctx, f.kube, f.plugin, f.ns, f.suffix, f.other
	tooMuch := "staticip-cni-too-much-" + suffix
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: tooMuch},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "configmaps", "pods/status"}, Verbs: []string{"*"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: tooMuch},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: tooMuch},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "staticip-cni", Namespace: "kube-system"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), tooMuch, metav1.DeleteOptions{})
		_ = kube.RbacV1().ClusterRoles().Delete(context.Background(), tooMuch, metav1.DeleteOptions{})
	})
	for what, do := range map[string]func() error{
		"delete a pod": func() error {
			return plugin.CoreV1().Pods(nsName).Delete(ctx, other.Name, metav1.DeleteOptions{})
		},
		"create a configmap": func() error {
			_, err := plugin.CoreV1().ConfigMaps(nsName).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
			return err
		},
		"update a pod's status": func() error {
			p, err := plugin.CoreV1().Pods(nsName).Get(ctx, other.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			p.Status.Message = "evil"
			_, err = plugin.CoreV1().Pods(nsName).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			return err
		},
	} {
		err := eventuallyErr(func() error { return do() })
		if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "staticip-cni-writes") {
			t.Errorf("with a role bound by mistake, the plugin's credential could %s (or was refused by something else): %v", what, err)
		} else {
			t.Logf("refused as it should, whatever RBAC says: %s: %v", what, err)
		}
	}
	if err := kube.RbacV1().ClusterRoleBindings().Delete(ctx, tooMuch, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkWriteBack: the plugin's own write-back (cni/plugin/kube.go annotatePod), a merge patch
// guarded by the UID, goes through; the other pods are unchanged.
func (f *credFixture) checkWriteBack(t *testing.T) {
	ctx, kube, plugin, nsName, mine, other, theirs := f.ctx, f.kube, f.plugin, f.ns, f.mine, f.other, f.theirs
	writeBack := []byte(`{"metadata":{"uid":"` + string(mine.UID) + `","annotations":{"` + podip.AnnotationIPAddress + `":"10.1.0.5"}}}`)
	if _, err := plugin.CoreV1().Pods(nsName).Patch(ctx, mine.Name, types.MergePatchType, writeBack, metav1.PatchOptions{}); err != nil {
		t.Fatalf("the plugin's credential cannot write back the IP of a pod of its own node: %v", err)
	}
	got, err := kube.CoreV1().Pods(nsName).Get(ctx, mine.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations[podip.AnnotationIPAddress] != "10.1.0.5" {
		t.Errorf("annotations after the write-back: %v", got.Annotations)
	}
	for _, p := range []*corev1.Pod{other, theirs} {
		got, err := kube.CoreV1().Pods(nsName).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Labels["app"] != "web" || got.Spec.Containers[0].Image != "pause:1" || got.Annotations[podip.AnnotationIPAddress] != "" || got.Annotations["note"] != "a" {
			t.Errorf("pod %s changed: labels %v, image %s, annotations %v", p.Name, got.Labels, got.Spec.Containers[0].Image, got.Annotations)
		}
	}
}

// checkAgentNodeWrites: the agent's own token (rbac.yaml: nodes patch, for node failover)
// reports what it programmed on its own Node and can do nothing else to Nodes (admission.yaml,
// staticip-agent-node-writes).
func (f *credFixture) checkAgentNodeWrites(t *testing.T) {
	ctx, agentKube, nodeA, nodeB := f.ctx, f.agentKube, f.nodeA, f.nodeB
	observed := []byte(`{"metadata":{"annotations":{"` + ObservedAnnotation + `":"{}"},"labels":{"` + jkev1.LabelClaimsInStatus + `":"true"}}}`)
	// RBAC and the policy take effect a moment after they are created (dry runs until then).
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		_, err := agentKube.CoreV1().Nodes().Patch(ctx, nodeB, types.MergePatchType, observed, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && !strings.Contains(err.Error(), "cannot ") {
			break
		}
	}
	if _, err := agentKube.CoreV1().Nodes().Patch(ctx, nodeB, types.MergePatchType, observed, metav1.PatchOptions{}); err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "staticip-agent-node-writes") {
		t.Errorf("the agent could report on another node (or was refused by something else): %v", err)
	}
	if _, err := agentKube.CoreV1().Nodes().Patch(ctx, nodeA, types.MergePatchType, observed, metav1.PatchOptions{}); err != nil {
		t.Errorf("the agent cannot report on its own node: %v", err)
	}
	for what, patch := range map[string]string{
		"label its own node":                    `{"metadata":{"labels":{"evil":"x"}}}`,
		"annotate its own node otherwise":       `{"metadata":{"annotations":{"evil":"x"}}}`,
		"make its own node unschedulable":       `{"spec":{"unschedulable":true}}`,
		"report and label in one patch":         `{"metadata":{"labels":{"evil":"x"},"annotations":{"` + ObservedAnnotation + `":"{\"a\":\"b/1\"}"}}}`,
		"set claims-in-status to another value": `{"metadata":{"labels":{"` + jkev1.LabelClaimsInStatus + `":"false"}}}`,
		"remove claims-in-status":               `{"metadata":{"labels":{"` + jkev1.LabelClaimsInStatus + `":null}}}`,
		"claims-in-status as an annotation":     `{"metadata":{"annotations":{"` + jkev1.LabelClaimsInStatus + `":"true"}}}`,
	} {
		_, err := agentKube.CoreV1().Nodes().Patch(ctx, nodeA, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err == nil || !apierrors.IsForbidden(err) {
			t.Errorf("the agent could %s: %v", what, err)
		}
	}
}

// checkAgentNodeStatus: its Node's NetworkUnavailable condition (rbac.yaml: nodes/status
// patch), and nothing else of any Node's status.
func (f *credFixture) checkAgentNodeStatus(t *testing.T) {
	ctx, agentKube, nodeA, nodeB := f.ctx, f.agentKube, f.nodeA, f.nodeB
	cond := func(typ, status, reason string) string {
		return `{"status":{"conditions":[{"type":"` + typ + `","status":"` + status + `","reason":"` + reason + `","message":"m","lastHeartbeatTime":"2026-01-01T00:00:00Z","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`
	}
	statusPatch := func(node, patch string) error {
		_, err := agentKube.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		return err
	}
	if err := statusPatch(nodeA, cond("NetworkUnavailable", "True", ReasonNoRange)); err != nil {
		t.Errorf("the agent cannot set its own node's NetworkUnavailable condition: %v", err)
	}
	if err := statusPatch(nodeA, cond("NetworkUnavailable", "False", ReasonRangeReady)); err != nil {
		t.Errorf("the agent cannot clear its own node's NetworkUnavailable condition: %v", err)
	}
	for what, do := range map[string]func() error{
		"set another node's NetworkUnavailable": func() error { return statusPatch(nodeB, cond("NetworkUnavailable", "True", ReasonNoRange)) },
		"set its own node's Ready condition":    func() error { return statusPatch(nodeA, cond("Ready", "False", "StaticIPNoRange")) },
		"set NetworkUnavailable with another CNI's reason": func() error {
			return statusPatch(nodeA, cond("NetworkUnavailable", "False", "CalicoIsUp"))
		},
		"set NetworkUnavailable and MemoryPressure in one patch": func() error {
			return statusPatch(nodeA, `{"status":{"conditions":[{"type":"NetworkUnavailable","status":"True","reason":"StaticIPNoRange","message":"m"},{"type":"MemoryPressure","status":"True","reason":"x","message":"m"}]}}`)
		},
		"change its own node's capacity": func() error { return statusPatch(nodeA, `{"status":{"capacity":{"pods":"500"}}}`) },
		"change its own node's addresses": func() error {
			return statusPatch(nodeA, `{"status":{"addresses":[{"type":"InternalIP","address":"10.9.9.9"}]}}`)
		},
	} {
		if err := do(); err == nil || !apierrors.IsForbidden(err) {
			t.Errorf("the agent could %s: %v", what, err)
		}
	}
}

// pluginCredentials are the agent's credentials for the plugin, as main builds them in-cluster.
func pluginCredentials(t *testing.T, dir string, agentCfg *rest.Config, agentKube kubernetes.Interface, node string) *Credentials {
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, agentCfg.CAData, 0o644); err != nil {
		t.Fatal(err)
	}
	return &Credentials{Server: agentCfg.Host, CAFile: caFile,
		Tokens: &NodeBoundTokens{Kube: agentKube, Namespace: "kube-system", ServiceAccount: "staticip-cni", Node: node}}
}

// The plugin's token is renewed once 80% of its lifetime has passed, not before; each token
// authenticates as the plugin's service account with the node's name; while the API server
// cannot be asked, the held token is kept (with the error) until it expires.
func TestNodeBoundTokensRenewBeforeExpiry(t *testing.T) {
	ctx, kube, _, suffix := apiFixture(t, 2*time.Minute)
	env := testenv.Get(t)
	node, nsName := "tok-"+suffix, "tok-"+suffix
	createNode(ctx, t, kube, node, "192.168.79.1")
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ServiceAccounts(nsName).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "cni"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	src := &NodeBoundTokens{Kube: kube, Namespace: nsName, ServiceAccount: "cni", Node: node, Lifetime: time.Hour, Now: func() time.Time { return now }}
	whoami := func(token string) authenticationv1.UserInfo {
		t.Helper()
		cfg := &rest.Config{Host: env.Config.Host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData}}
		r, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("the minted token does not authenticate: %v", err)
		}
		return r.Status.UserInfo
	}
	first, err := src.Token()
	if err != nil {
		t.Fatal(err)
	}
	ui := whoami(first)
	if ui.Username != "system:serviceaccount:"+nsName+":cni" || strings.Join(ui.Extra["authentication.kubernetes.io/node-name"], ",") != node {
		t.Errorf("token authenticates as %s with node-name %v, want the cni service account of node %s", ui.Username, ui.Extra["authentication.kubernetes.io/node-name"], node)
	}
	now = now.Add(47 * time.Minute)
	if tok, err := src.Token(); err != nil || tok != first {
		t.Errorf("after 47 of 60 minutes: renewed (or failed: %v); want the same token until 48 minutes", err)
	}
	now = now.Add(2 * time.Minute)
	second, err := src.Token()
	if err != nil || second == first {
		t.Fatalf("after 49 of 60 minutes: not renewed (err %v)", err)
	}
	whoami(second)

	// The API server cannot be asked: the held token stays until it expires.
	src.Kube = kubernetes.NewForConfigOrDie(&rest.Config{Host: "https://127.0.0.1:1", Timeout: time.Second})
	now = now.Add(50 * time.Minute) // past renewal, before expiry
	if tok, err := src.Token(); tok != second || err == nil {
		t.Errorf("renewal impossible: got token %v and error %v; want the held token and the error", tok == second, err)
	}
	now = now.Add(11 * time.Minute) // expired
	if tok, err := src.Token(); tok != "" || err == nil {
		t.Errorf("expired and not renewable: got a token (%v) or no error (%v)", tok != "", err)
	}
}

// eventuallyErr retries do while RBAC has not caught up with a new binding (a Forbidden that
// is RBAC's, not the policy's), at most 10s, and returns its last error.
func eventuallyErr(do func() error) error {
	var err error
	_ = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		err = do()
		return err == nil || !strings.Contains(err.Error(), "cannot "), nil
	})
	return err
}
