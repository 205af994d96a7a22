package manifests_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/internal/testenv"
)

const (
	optInLabel     = "staticip.jke.jdcloud.com/allow-ip-request"
	controllerUser = "system:serviceaccount:staticip-system:staticip-controller-manager"
)

// admissionNamespaces applies manifests/admission and creates two namespaces, one that did not
// opt in to IP requests (closed) and one that did (open), named with prefix and a suffix.
func admissionNamespaces(ctx context.Context, t *testing.T, env *testenv.Env, prefix string) (admin kubernetes.Interface, closed, open, suffix string) {
	t.Helper()
	admin = kubernetes.NewForConfigOrDie(env.Config)
	if err := testenv.ApplyKustomization(ctx, env.Config, "admission"); err != nil {
		t.Fatal(err)
	}
	suffix = fmt.Sprint(time.Now().UnixNano() % 1000000)
	closed, open = prefix+"closed-"+suffix, prefix+"open-"+suffix
	for ns, labels := range map[string]map[string]string{closed: nil, open: {optInLabel: "true"}} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return admin, closed, open, suffix
}

// manifests/admission on a real API server: who may set the ip-address annotation. A user
// may ask for an IP only when creating a pod in a namespace that opted in; nobody but the
// staticip controller-manager (and the CNI, see cni/agent) adds, changes or removes it on an
// existing pod — by update, status update or binding.
func TestIPAddressAnnotationPolicy(t *testing.T) {
	env := testenv.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin, closed, open, suffix := admissionNamespaces(ctx, t, env, "")
	// alice may do anything with pods; so may the controller-manager's identity.
	role := "pod-writer-" + suffix
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "pods/status", "pods/binding"}, Verbs: []string{"*"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "alice"}, {Kind: rbacv1.ServiceAccountKind, Name: "staticip-controller-manager", Namespace: "staticip-system"}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	as := func(user string) kubernetes.Interface {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		return kubernetes.NewForConfigOrDie(cfg)
	}
	alice, controller := as("alice"), as(controllerUser)
	newPod := func(name, ip string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause:1"}}}}
		if ip != "" {
			p.Annotations = map[string]string{podip.AnnotationIPAddress: ip}
		}
		return p
	}
	// The policy takes effect a moment after it is created: wait (at most 20s) until a dry
	// run of a request it refuses is refused; the checks below say what went through.
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, err := alice.CoreV1().Pods(closed).Create(ctx, newPod("probe", "10.9.0.1"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			break
		}
	}

	mustCreate := func(c kubernetes.Interface, ns string, p *corev1.Pod) *corev1.Pod {
		t.Helper()
		got, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create %s/%s: %v", ns, p.Name, err)
		}
		return got
	}
	annotate := func(c kubernetes.Interface, ns, name string, value any) error {
		v := "null"
		if s, ok := value.(string); ok {
			v = `"` + s + `"`
		}
		_, err := c.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+podip.AnnotationIPAddress+`":`+v+`}}}`), metav1.PatchOptions{})
		return err
	}
	asked := mustCreate(alice, open, newPod("asked", "10.9.0.2"))                 // opted in: allowed
	plain := mustCreate(alice, closed, newPod("plain", ""))                       // no annotation: allowed anywhere
	native := mustCreate(alice, closed, newPod("native", ""))                     // the controller annotates it later
	if err := annotate(controller, closed, native.Name, "10.9.0.3"); err != nil { // what the StaticIP controller does
		t.Errorf("the controller-manager could not annotate an existing pod: %v", err)
	}
	mustCreate(controller, closed, newPod("by-controller", "10.9.0.4")) // what the EnhancedStatefulSet controller does
	if _, err := alice.CoreV1().Pods(open).Patch(ctx, asked.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"db"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("a label change of an annotated pod was refused: %v", err)
	}

	const createMsg = "staticip.jke.jdcloud.com/ip-address may be set by alice only in a namespace labelled staticip.jke.jdcloud.com/allow-ip-request=true; namespace " // + closed
	const existingMsg = "staticip.jke.jdcloud.com/ip-address cannot be added, changed or removed on an existing pod"
	for _, c := range []struct {
		what, msg string
		do        func() error
	}{
		{"create a pod asking for an IP in a namespace that did not opt in", createMsg + closed + " is not", func() error {
			_, err := alice.CoreV1().Pods(closed).Create(ctx, newPod("asks", "10.9.0.5"), metav1.CreateOptions{})
			return err
		}},
		{"add the annotation to an existing pod", existingMsg, func() error { return annotate(alice, closed, plain.Name, "10.9.0.6") }},
		{"add the annotation to an existing pod of an opted-in namespace", existingMsg, func() error {
			p := mustCreate(alice, open, newPod("later", ""))
			return annotate(alice, open, p.Name, "10.9.0.7")
		}},
		{"change the annotation", existingMsg, func() error { return annotate(alice, open, asked.Name, "10.9.0.8") }},
		{"remove the annotation", existingMsg, func() error { return annotate(alice, open, asked.Name, nil) }},
		{"change the annotation through the status subresource", existingMsg, func() error {
			p, err := alice.CoreV1().Pods(open).Get(ctx, asked.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Annotations == nil {
				p.Annotations = map[string]string{}
			}
			p.Annotations[podip.AnnotationIPAddress] = "10.9.0.9"
			_, err = alice.CoreV1().Pods(open).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			return err
		}},
		{"set the annotation with a binding", existingMsg, func() error {
			return alice.CoreV1().Pods(closed).Bind(ctx, &corev1.Binding{
				ObjectMeta: metav1.ObjectMeta{Name: plain.Name, Annotations: map[string]string{podip.AnnotationIPAddress: "10.9.0.10"}},
				Target:     corev1.ObjectReference{Kind: "Node", Name: "node-x"}}, metav1.CreateOptions{})
		}},
	} {
		err := c.do()
		switch {
		case err == nil:
			t.Errorf("alice could %s", c.what)
		case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), c.msg):
			t.Errorf("%s: want Forbidden with %q, got %v", c.what, c.msg, err)
		default:
			t.Logf("refused as it should: %s: %v", c.what, err)
		}
	}
	for ns, want := range map[string]map[string]string{open: {"asked": "10.9.0.2", "later": ""}, closed: {"plain": "", "native": "10.9.0.3", "by-controller": "10.9.0.4"}} {
		for name, ip := range want {
			p, err := admin.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Annotations[podip.AnnotationIPAddress]; got != ip || p.Spec.NodeName != "" {
				t.Errorf("pod %s/%s: ip-address %q node %q, want %q and unbound", ns, name, got, p.Spec.NodeName, ip)
			}
		}
	}
	_ = filepath.Join
}

// manifests/admission/ip-address-policy.yaml on a real API server: the ip-address annotation is
// one IP address or two of different IP families (a dual-stack pod), whoever sets it — also the
// trusted controller-manager. The Go rule every component reads it with, podip.ParseAddresses,
// accepts whatever admission accepts and refuses whatever admission refuses but one thing:
// IPv4-mapped IPv6 addresses, which admission (CEL's isIP) refuses and Go reads unmapped.
func TestIPAddressAnnotationFormat(t *testing.T) {
	env := testenv.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, _, open, _ := admissionNamespaces(ctx, t, env, "format-")
	pod := func(name, value string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{podip.AnnotationIPAddress: value}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause:1"}}}}
	}
	// Wait until the policy refuses a malformed value (it takes effect a moment after creation).
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, err := admin.CoreV1().Pods(open).Create(ctx, pod("probe", "10.9.0.1,10.9.0.2"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			break
		}
	}
	const msg = "must be one IP address, or two of different IP families separated by a comma (a dual-stack pod: 10.0.0.5,fd00::5)"
	for i, c := range []struct {
		value string
		ok    bool
	}{
		{"10.9.1.1", true},
		{"fd00::9:1", true},
		{"10.9.1.2,fd00::9:2", true},
		{"fd00::9:3, 10.9.1.3", true},
		{"10.9.1.4,10.9.1.5", false},
		{"fd00::9:4,fd00::9:5", false},
		{"10.9.1.6,fd00::9:6,10.9.1.7", false},
		{"10.9.1.8,", false},
		{"10.9.1.300", false},
		{"10.9.1.9/24", false},
		{"fe80::1%eth0", false},
		{"::ffff:10.9.1.10", false}, // Go reads it unmapped; admission refuses it
	} {
		_, err := admin.CoreV1().Pods(open).Create(ctx, pod(fmt.Sprintf("format-%d", i), c.value), metav1.CreateOptions{})
		switch {
		case c.ok && err != nil:
			t.Errorf("annotation %q refused: %v", c.value, err)
		case !c.ok && err == nil:
			t.Errorf("annotation %q accepted", c.value)
		case !c.ok && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), msg)):
			t.Errorf("annotation %q: want Invalid with %q, got %v", c.value, msg, err)
		case !c.ok:
			t.Logf("refused as it should: %v", err)
		}
		if _, perr := podip.ParseAddresses(c.value); (perr == nil) != c.ok && !strings.HasPrefix(c.value, "::ffff:") {
			t.Errorf("podip.ParseAddresses(%q) = %v, admission accepts it: %v", c.value, perr, c.ok)
		}
	}
	// The trusted controller-manager is held to the same format.
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: controllerUser}
	controller := kubernetes.NewForConfigOrDie(cfg)
	if _, err := controller.CoreV1().Pods(open).Create(ctx, pod("by-controller", "10.9.2.1,10.9.2.2"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsInvalid(err) {
		t.Errorf("the controller-manager set two IPv4 addresses: want Invalid, got %v", err)
	}
}
