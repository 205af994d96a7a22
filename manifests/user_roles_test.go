package manifests_test

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/kubernetes/pkg/controller/clusterroleaggregation"
	"k8s.io/utils/ptr"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/apis/podip"
	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
	"github.com/staticip/staticip/internal/testenv"
)

// runRoleAggregation runs kube-controller-manager's clusterrole-aggregation controller (the
// real one, in-process: testenv runs no kube-controller-manager) until ctx ends, so that
// ClusterRoles labelled aggregate-to-* are folded into admin, edit and view as in a cluster.
func runRoleAggregation(ctx context.Context, cfg *rest.Config) {
	client := kubernetes.NewForConfigOrDie(cfg)
	factory := informers.NewSharedInformerFactory(client, 0)
	c := clusterroleaggregation.NewClusterRoleAggregation(factory.Rbac().V1().ClusterRoles(), client.RbacV1())
	factory.Start(ctx.Done())
	go c.Run(ctx, 1)
}

// clusterScoped are staticip's cluster-scoped resources (asked about without a namespace).
var clusterScoped = map[string]bool{"ipranges": true, "ippools": true, "nodefailovers": true}

// access is one request a role must allow or refuse (SelfSubjectAccessReview as the user).
type access struct {
	verb, group, resource, subresource string
}

// userRoleTable is what manifests/user-roles gives each built-in role in a namespace, beside
// what it must not give: EnhancedStatefulSets and grids like Deployments (view reads, edit
// and admin write and scale), StaticIPs read-only for all three, and none of the
// cluster-scoped kinds. Pure data: TestAppTeamRoles checks it on a real API server.
func userRoleTable() (allowed, refused map[string][]access) {
	const jke, edge = "jke.jdcloud.com", "superedge.io"
	read := func(group, resource, sub string) []access {
		return []access{{"get", group, resource, sub}, {"list", group, resource, sub}, {"watch", group, resource, sub}}
	}
	write := func(group, resource, sub string) []access {
		var out []access
		for _, v := range []string{"create", "update", "patch", "delete", "deletecollection"} {
			out = append(out, access{v, group, resource, sub})
		}
		return out
	}
	var views, writes []access
	views = append(views, read(jke, "enhancedstatefulsets", "")...)
	views = append(views, read(jke, "enhancedstatefulsets", "scale")...)
	views = append(views, read(jke, "enhancedstatefulsets", "status")...)
	views = append(views, read(jke, "staticips", "")...)
	views = append(views, read(jke, "staticips", "status")...)
	writes = append(writes, write(jke, "enhancedstatefulsets", "")...)
	writes = append(writes, access{"update", jke, "enhancedstatefulsets", "scale"}, access{"patch", jke, "enhancedstatefulsets", "scale"})
	for _, g := range []string{"deploymentgrids", "statefulsetgrids", "servicegrids"} {
		views = append(views, read(edge, g, "")...)
		views = append(views, read(edge, g, "status")...)
		writes = append(writes, write(edge, g, "")...)
	}
	// Never, for any user role: writing StaticIPs (records the controllers keep), the
	// controllers' status, and anything about the cluster-scoped kinds.
	var never []access
	never = append(never, write(jke, "staticips", "")...)
	never = append(never, access{"update", jke, "staticips", "status"}, access{"update", jke, "enhancedstatefulsets", "status"},
		access{"update", edge, "deploymentgrids", "status"})
	for r := range clusterScoped {
		never = append(never, read(jke, r, "")...)
		never = append(never, write(jke, r, "")...)
	}
	allowed = map[string][]access{"view": views, "edit": append(append([]access{}, views...), writes...)}
	allowed["admin"] = allowed["edit"]
	refused = map[string][]access{"view": append(append([]access{}, writes...), never...), "edit": never, "admin": never}
	return allowed, refused
}

// TestAppTeamRoles: manifests/user-roles on a real API server with the aggregation controller
// and manifests/admission. A user bound to the built-in edit role in a namespace manages
// EnhancedStatefulSets and DeploymentGrids there (create, scale, delete), reads StaticIPs and
// the status of both, cannot touch IPRanges, and may put the ip-address annotation in a
// template only where the namespace opted in; view and admin get what the table says.
func TestAppTeamRoles(t *testing.T) {
	env := testenv.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	runRoleAggregation(ctx, env.Config)
	admin, closed, open, suffix := admissionNamespaces(ctx, t, env, "roles-")
	if err := testenv.ApplyKustomization(ctx, env.Config, "user-roles"); err != nil {
		t.Fatal(err)
	}
	users := map[string]string{"view": "viewer-" + suffix, "edit": "dev-" + suffix, "admin": "lead-" + suffix}
	for role, user := range users {
		for _, ns := range []string{closed, open} {
			if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role + "-" + user},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
				Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	as := func(user string) (kubernetes.Interface, versioned.Interface) {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		return kubernetes.NewForConfigOrDie(cfg), versioned.NewForConfigOrDie(cfg)
	}
	can := func(kube kubernetes.Interface, a access) bool {
		ns := closed
		if clusterScoped[a.resource] {
			ns = ""
		}
		review, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return review.Status.Allowed
	}
	// Aggregation and the authorizer's cache take a moment: wait (at most 60 s) until edit may
	// create EnhancedStatefulSets; everything below then says what the roles allow.
	devKube, dev := as(users["edit"])
	probe := access{"create", "jke.jdcloud.com", "enhancedstatefulsets", ""}
	for deadline := time.Now().Add(60 * time.Second); !can(devKube, probe) && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
	}

	allowed, refused := userRoleTable()
	for role, user := range users {
		kube, _ := as(user)
		for _, a := range allowed[role] {
			if !can(kube, a) {
				t.Errorf("%s (bound to %s in %s) may not %s %s/%s %s", user, role, closed, a.verb, a.group, a.resource, a.subresource)
			}
		}
		for _, a := range refused[role] {
			if can(kube, a) {
				t.Errorf("%s (bound to %s in %s) may %s %s/%s %s", user, role, closed, a.verb, a.group, a.resource, a.subresource)
			}
		}
	}

	// The edit user, for real.
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	template := func(ip string) corev1.PodTemplateSpec {
		tpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause:1"}}}}
		if ip != "" {
			tpl.Annotations = map[string]string{podip.AnnotationIPAddress: ip}
		}
		return tpl
	}
	ests := func(name, ip string) *jkev1alpha1.EnhancedStatefulSet {
		return &jkev1alpha1.EnhancedStatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{jkev1.AnnotationEnable: "true"}},
			Spec: jkev1alpha1.EnhancedStatefulSetSpec{Replicas: ptr.To[int32](1), Selector: sel, ServiceName: "web", Template: template(ip)}}
	}
	create := metav1.CreateOptions{}
	if _, err := dev.JkeV1alpha1().EnhancedStatefulSets(closed).Create(ctx, ests("web", ""), create); err != nil {
		t.Fatalf("edit user creating an EnhancedStatefulSet with static IPs enabled: %v", err)
	}
	scale, err := dev.JkeV1alpha1().EnhancedStatefulSets(closed).GetScale(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("edit user reading the scale subresource: %v", err)
	}
	scale.Spec.Replicas = 3
	if _, err := dev.JkeV1alpha1().EnhancedStatefulSets(closed).UpdateScale(ctx, "web", scale, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("edit user scaling an EnhancedStatefulSet: %v", err)
	}
	if got, err := clusterAdmin(env).JkeV1alpha1().EnhancedStatefulSets(closed).Get(ctx, "web", metav1.GetOptions{}); err != nil || *got.Spec.Replicas != 3 {
		t.Fatalf("after the edit user's scale: %v, %v (want 3 replicas)", err, got)
	}
	dg := &superedgev1.DeploymentGrid{ObjectMeta: metav1.ObjectMeta{Name: "grid"},
		Spec: superedgev1.DeploymentGridSpec{GridUniqKey: "zone", Template: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: sel, Template: template("")}}}
	if _, err := dev.SuperedgeV1().DeploymentGrids(closed).Create(ctx, dg, create); err != nil {
		t.Fatalf("edit user creating a DeploymentGrid: %v", err)
	}
	if _, err := dev.SuperedgeV1().DeploymentGrids(closed).Patch(ctx, "grid", types.MergePatchType, []byte(`{"spec":{"template":{"replicas":2}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("edit user scaling a DeploymentGrid: %v", err)
	}
	if got, err := dev.SuperedgeV1().DeploymentGrids(closed).Get(ctx, "grid", metav1.GetOptions{}); err != nil || *got.Spec.Template.Replicas != 2 {
		t.Fatalf("edit user reading the scaled DeploymentGrid: %v, %v (want 2 replicas)", err, got)
	}

	// StaticIPs: the controller's records are readable, not writable.
	// The record as the controller-manager writes it (the identity the policies trust).
	controllerCfg := rest.CopyConfig(env.Config)
	controllerCfg.Impersonate = rest.ImpersonationConfig{UserName: controllerUser, Groups: []string{"system:masters"}}
	if _, err := versioned.NewForConfigOrDie(controllerCfg).JkeV1().StaticIPs(closed).Create(ctx, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: "web-0"},
		Spec: jkev1.StaticIPSpec{Pod: "web-0", Kind: "EnhancedStatefulSet", Ref: "web", IP: "10.9.7.10"}}, create); err != nil {
		t.Fatal(err)
	}
	if list, err := dev.JkeV1().StaticIPs(closed).List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 1 || list.Items[0].Spec.IP != "10.9.7.10" {
		t.Fatalf("edit user listing StaticIPs: %v, %v", err, list)
	}
	if err := dev.JkeV1().StaticIPs(closed).Delete(ctx, "web-0", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("edit user deleting a StaticIP (handing its reserved IP to another pod): %v, want Forbidden", err)
	}
	if _, err := dev.JkeV1().StaticIPs(open).Create(ctx, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: "web-9"},
		Spec: jkev1.StaticIPSpec{Pod: "web-9", Kind: "EnhancedStatefulSet", Ref: "web", IP: "10.9.7.11"}}, create); !apierrors.IsForbidden(err) {
		t.Errorf("edit user creating a StaticIP with an IP, even in an opted-in namespace: %v, want Forbidden", err)
	}

	// IPRanges: the cluster's address plan.
	if _, err := clusterAdmin(env).JkeV1().IPRanges().Create(ctx, &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "roles-" + suffix},
		Spec: jkev1.IPRangeSpec{CIDR: "10.9.7.0/24", Node: "node-1"}}, create); err != nil {
		t.Fatal(err)
	}
	if err := dev.JkeV1().IPRanges().Delete(ctx, "roles-"+suffix, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("edit user deleting an IPRange: %v, want Forbidden", err)
	}
	if _, err := clusterAdmin(env).JkeV1().IPRanges().Get(ctx, "roles-"+suffix, metav1.GetOptions{}); err != nil {
		t.Errorf("the IPRange after the edit user's delete: %v", err)
	}

	// Picking an IP: RBAC lets edit write templates; admission decides, by the namespace.
	_, err = dev.JkeV1alpha1().EnhancedStatefulSets(closed).Create(ctx, ests("pick", "10.9.7.20"), create)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "allow-ip-request=true; namespace "+closed+" is not") {
		t.Errorf("edit user asking for an IP in a template in %s (not opted in): %v, want the admission policy's refusal", closed, err)
	}
	_, err = dev.JkeV1alpha1().EnhancedStatefulSets(closed).Patch(ctx, "web", types.MergePatchType,
		[]byte(`{"spec":{"template":{"metadata":{"annotations":{"`+podip.AnnotationIPAddress+`":"10.9.7.21"}}}}}`), metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "allow-ip-request=true") {
		t.Errorf("edit user adding an IP to an existing template in %s: %v, want the admission policy's refusal", closed, err)
	}
	if _, err := dev.JkeV1alpha1().EnhancedStatefulSets(open).Create(ctx, ests("pick", "10.9.7.22"), create); err != nil {
		t.Errorf("edit user asking for an IP in a template in %s (opted in): %v", open, err)
	}
	if err := dev.JkeV1alpha1().EnhancedStatefulSets(closed).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Errorf("edit user deleting an EnhancedStatefulSet: %v", err)
	}
	if err := dev.SuperedgeV1().DeploymentGrids(closed).Delete(ctx, "grid", metav1.DeleteOptions{}); err != nil {
		t.Errorf("edit user deleting a DeploymentGrid: %v", err)
	}
}

// clusterAdmin is the test's cluster-admin client of staticip's kinds.
func clusterAdmin(env *testenv.Env) versioned.Interface {
	return versioned.NewForConfigOrDie(env.Config)
}
