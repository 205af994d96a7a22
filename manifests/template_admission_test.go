package manifests_test

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/apis/podip"
	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
	"github.com/staticip/staticip/internal/testenv"
)

// Every other way to pick a pod's IP is held to the pod's rule (manifests/admission): the
// template of a workload whose pods a trusted identity creates (an EnhancedStatefulSet, whose
// pods staticip-controller-manager creates; the grids, whose unit workloads it creates) and a
// StaticIP record's spec.ip (which that controller copies into the pod). A user may set them
// only in a namespace that opted in. Pods that kube-controller-manager creates (the grids'
// Deployments and StatefulSets) stay under the pod policy: its identities are not trusted.
func TestIPAddressTemplatePolicy(t *testing.T) {
	env := testenv.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin, closed, open, suffix := admissionNamespaces(ctx, t, env, "t")
	role := "workload-writer-" + suffix
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"jke.jdcloud.com", "superedge.io"}, Resources: []string{"*"}, Verbs: []string{"*"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"*"}},
		}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const kcm = "system:kube-controller-manager"
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "alice"}, {Kind: rbacv1.UserKind, Name: kcm},
			{Kind: rbacv1.ServiceAccountKind, Name: "statefulset-controller", Namespace: "kube-system"},
			{Kind: rbacv1.ServiceAccountKind, Name: "staticip-controller-manager", Namespace: "staticip-system"}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	as := func(user string) (kubernetes.Interface, versioned.Interface) {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		return kubernetes.NewForConfigOrDie(cfg), versioned.NewForConfigOrDie(cfg)
	}
	_, alice := as("alice")
	_, controller := as(controllerUser)
	const ipKey = podip.AnnotationIPAddress
	template := func(ip string) corev1.PodTemplateSpec {
		tpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause:1"}}}}
		if ip != "" {
			tpl.Annotations = map[string]string{ipKey: ip}
		}
		return tpl
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	ests := func(name, ip string) *jkev1alpha1.EnhancedStatefulSet {
		return &jkev1alpha1.EnhancedStatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: jkev1alpha1.EnhancedStatefulSetSpec{Replicas: ptr.To[int32](1), Selector: sel, ServiceName: "web", Template: template(ip)}}
	}
	ssg := func(name, ip string) *superedgev1.StatefulSetGrid {
		return &superedgev1.StatefulSetGrid{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: superedgev1.StatefulSetGridSpec{GridUniqKey: "zone", Template: appsv1.StatefulSetSpec{Selector: sel, ServiceName: "web", Template: template(ip)}}}
	}
	dg := func(name, ip string) *superedgev1.DeploymentGrid {
		return &superedgev1.DeploymentGrid{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: superedgev1.DeploymentGridSpec{GridUniqKey: "zone", Template: appsv1.DeploymentSpec{Selector: sel, Template: template(ip)}}}
	}
	sip := func(name, ip string) *jkev1.StaticIP {
		return &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: jkev1.StaticIPSpec{Pod: name, Kind: "EnhancedStatefulSet", Ref: "web", IP: ip}}
	}
	create := metav1.CreateOptions{}
	// The policy takes effect a moment after it is created: wait (at most 20s) until a dry run
	// it refuses is refused; the checks below say what went through.
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, err := alice.JkeV1alpha1().EnhancedStatefulSets(closed).Create(ctx, ests("probe", "10.9.1.1"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			break
		}
	}

	// Allowed: no IP anywhere; an IP in the opted-in namespace; the controller-manager's
	// records; a change that leaves an existing annotation alone.
	for _, c := range []struct {
		what string
		do   func() error
	}{
		{"an EnhancedStatefulSet without an IP", func() error {
			_, err := alice.JkeV1alpha1().EnhancedStatefulSets(closed).Create(ctx, ests("plain", ""), create)
			return err
		}},
		{"an EnhancedStatefulSet asking for an IP in an opted-in namespace", func() error {
			_, err := alice.JkeV1alpha1().EnhancedStatefulSets(open).Create(ctx, ests("asks", "10.9.1.2"), create)
			return err
		}},
		{"a StaticIP without an IP", func() error {
			_, err := alice.JkeV1().StaticIPs(closed).Create(ctx, sip("web-0", ""), create)
			return err
		}},
		{"the controller-manager recording an IP", func() error {
			_, err := controller.JkeV1().StaticIPs(closed).Create(ctx, sip("web-1", "10.9.1.3"), create)
			return err
		}},
		{"a label change of a StaticIP whose IP the controller recorded", func() error {
			_, err := alice.JkeV1().StaticIPs(closed).Patch(ctx, "web-1", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		}},
	} {
		if err := c.do(); err != nil {
			t.Errorf("%s was refused: %v", c.what, err)
		}
	}

	msg := "may be set by alice only in a namespace labelled staticip.jke.jdcloud.com/allow-ip-request=true; namespace " + closed + " is not"
	for _, c := range []struct {
		what string
		do   func() error
	}{
		{"create an EnhancedStatefulSet whose template asks for an IP", func() error {
			_, err := alice.JkeV1alpha1().EnhancedStatefulSets(closed).Create(ctx, ests("sneaky", "10.9.1.4"), create)
			return err
		}},
		{"add an IP to the template of an existing EnhancedStatefulSet", func() error {
			_, err := alice.JkeV1alpha1().EnhancedStatefulSets(closed).Patch(ctx, "plain", types.MergePatchType,
				[]byte(`{"spec":{"template":{"metadata":{"annotations":{"`+ipKey+`":"10.9.1.5"}}}}}`), metav1.PatchOptions{})
			return err
		}},
		{"create a StatefulSetGrid whose template asks for an IP", func() error {
			_, err := alice.SuperedgeV1().StatefulSetGrids(closed).Create(ctx, ssg("sneaky", "10.9.1.6"), create)
			return err
		}},
		{"create a DeploymentGrid whose template asks for an IP", func() error {
			_, err := alice.SuperedgeV1().DeploymentGrids(closed).Create(ctx, dg("sneaky", "10.9.1.7"), create)
			return err
		}},
		{"create a StaticIP naming an IP", func() error {
			_, err := alice.JkeV1().StaticIPs(closed).Create(ctx, sip("web-2", "10.9.1.8"), create)
			return err
		}},
		{"retarget a StaticIP whose IP the controller recorded to another workload", func() error {
			_, err := alice.JkeV1().StaticIPs(closed).Patch(ctx, "web-1", types.MergePatchType, []byte(`{"spec":{"ref":"mine"}}`), metav1.PatchOptions{})
			return err
		}},
		{"set the IP of an existing StaticIP", func() error {
			_, err := alice.JkeV1().StaticIPs(closed).Patch(ctx, "web-0", types.MergePatchType, []byte(`{"spec":{"ip":"10.9.1.9"}}`), metav1.PatchOptions{})
			return err
		}},
	} {
		err := c.do()
		switch {
		case err == nil:
			t.Errorf("alice could %s in namespace %s (not opted in)", c.what, closed)
		case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), msg):
			t.Errorf("%s: want Forbidden with %q, got %v", c.what, msg, err)
		default:
			t.Logf("refused as it should: %s: %v", c.what, err)
		}
	}

	// The pods of the grids' Deployments and StatefulSets are created by kube-controller-manager
	// (its own user, or a controller's service account with --use-service-account-credentials):
	// not trusted, so the pod policy refuses them the annotation in that namespace.
	for _, user := range []string{kcm, "system:serviceaccount:kube-system:statefulset-controller"} {
		kube, _ := as(user)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "unit-0", Annotations: map[string]string{ipKey: "10.9.1.10"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause:1"}}}}
		if _, err := kube.CoreV1().Pods(closed).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil || !apierrors.IsForbidden(err) {
			t.Errorf("%s could create a pod asking for an IP in namespace %s: %v", user, closed, err)
		}
	}
}
