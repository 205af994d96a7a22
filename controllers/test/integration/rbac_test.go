package integration

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/manager"
	"github.com/staticip/staticip/internal/testenv"
)

// applyRBAC applies manifests/controller-manager/{namespace,rbac}.yaml and manifests/cni/node-routes.yaml unchanged.
func (f *fixture) applyRBAC() {
	f.t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		f.t.Fatal(err)
	}
	dir := filepath.Join(root, "manifests", "controller-manager")
	// node-routes.yaml: the route reports' namespace and the manager's read Role there (shipped
	// with the agents that write them).
	if err := testenv.ApplyFiles(f.ctx, f.cfg, []string{filepath.Join(dir, "namespace.yaml"), filepath.Join(dir, "rbac.yaml"),
		filepath.Join(root, "manifests", "cni", "node-routes.yaml")}); err != nil {
		f.t.Fatal(err)
	}
}

// TestManagerRunsWithItsRBAC runs the manager as its ServiceAccount, with only the
// permissions of manifests/controller-manager/rbac.yaml, through a static-IP rollout and a
// scale-down. A missing permission stalls the rollout (and shows as a Forbidden error).
func TestManagerRunsWithItsRBAC(t *testing.T) {
	f := newFixture(t)
	f.applyRBAC()
	f.startKubelet("node-r", 100*time.Millisecond, nil)

	f.startManagerAsServiceAccount(func(o *manager.Options) {
		o.LeaderElectNamespace = "staticip-system"
		o.LeaderElectLeaseName = "rbac-test-" + f.ns
		o.LeaderElectLeaseDuration, o.LeaderElectRenewDeadline, o.LeaderElectRetryPeriod = 3*time.Second, 2*time.Second, 250*time.Millisecond
	})

	f.createSet(newSet("rbac", 3, enableStaticIP))
	f.waitSettled("rbac", time.Minute)
	f.recordedIPs("rbac", 3)
	f.updateSet("rbac", func(s *jkev1alpha1.EnhancedStatefulSet) {
		s.Spec.Template.Spec.Containers[0].Image = "app:v2"
		s.Spec.Replicas = ptr.To[int32](2)
	})
	f.waitSettled("rbac", time.Minute)
	f.eventually(time.Minute, "StaticIP rbac-2 released", func() (bool, error) {
		_, err := f.staticIP("rbac-2")
		return apierrors.IsNotFound(err), nil
	})
	// In place: the InPlaceUpdateReady readiness gate needs pods/status patch.
	f.createSet(inPlaceSet("rbacip", 2))
	f.waitSettled("rbacip", time.Minute)
	f.updateSet("rbacip", func(s *jkev1alpha1.EnhancedStatefulSet) { s.Spec.Template.Spec.Containers[0].Image = "app:v2" })
	f.eventually(time.Minute, "rbacip updated in place", func() (bool, error) {
		s := f.getSet("rbacip")
		return s.Status.ObservedGeneration == s.Generation && s.Status.UpdatedReplicas == 2 && s.Status.ReadyReplicas == 2, nil
	})
	f.eventually(30*time.Second, "Events written by the manager", func() (bool, error) {
		evs, err := f.kube.CoreV1().Events(f.ns).List(f.ctx, metav1.ListOptions{})
		return err == nil && len(evs.Items) > 0, err
	})
}

// startManagerAsServiceAccount runs the manager, changed by mutate, as the controller-manager's
// ServiceAccount (impersonated: only what manifests/controller-manager/rbac.yaml grants, which
// applyRBAC installed) until the test ends.
func (f *fixture) startManagerAsServiceAccount(mutate func(*manager.Options)) {
	f.t.Helper()
	cfg := rest.CopyConfig(f.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:staticip-system:staticip-controller-manager"}
	// The impersonated identity must not be able to do more than the manifests say.
	if _, err := f.kubeFor(cfg).CoreV1().Secrets(f.ns).List(f.ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		f.t.Fatalf("impersonation is not restricted (listing secrets: %v)", err)
	}
	o := manager.NewOptions()
	o.Serving.MetricsBindAddress, o.Serving.HealthBindAddress = "0", "0"
	mutate(o)
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- manager.Run(ctx, o, cfg) }()
	f.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !strings.Contains(err.Error(), "context canceled") {
			f.t.Errorf("manager: %v", err)
		}
	})
}
