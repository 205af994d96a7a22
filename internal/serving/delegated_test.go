package serving

import (
	"context"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/staticip/staticip/internal/serving/servingtest"
	"github.com/staticip/staticip/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestMetricsBehindDelegatedAuth, for each binary's service account with exactly the RBAC of
// the shipped manifests: the status server authenticates callers with a TokenReview and
// authorizes GET /metrics with a SubjectAccessReview, as that service account. No token is
// refused (403: system:anonymous), an unknown token 401, a service account without
// staticip-metrics-reader 403; one bound to it reads the series (200). Health is open on its
// own plain-HTTP port.
func TestMetricsBehindDelegatedAuth(t *testing.T) {
	env := testenv.Get(t)
	ctx := testenv.Context(t, 5*time.Minute)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	m := func(p ...string) string { return filepath.Join(append([]string{root, "manifests"}, p...)...) }
	if err := testenv.ApplyFiles(ctx, env.Config, []string{m("controller-manager", "namespace.yaml"), m("controller-manager", "rbac.yaml"),
		m("cni", "rbac.yaml"), m("edge", "rbac.yaml"), m("edge", "statefulset-grid-daemon.yaml")}, "DaemonSet", "Deployment"); err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(env.Config)
	token := func(ns, sa string) string {
		t.Helper()
		tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	for _, sa := range []string{"scraper", "stranger"} {
		if _, err := kube.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "serving-test-scraper"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "staticip-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: "default"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scraper, stranger := token("default", "scraper"), token("default", "stranger")

	for _, id := range []struct{ ns, sa string }{
		{"kube-system", "staticip-agent"}, {"kube-system", "application-grid-wrapper"},
		{"kube-system", "statefulset-grid-daemon"}, {"staticip-system", "staticip-controller-manager"},
	} {
		t.Run(id.sa, func(t *testing.T) {
			// The binary's identity, as in the cluster: its service account's token.
			kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
			if err := testenv.WriteKubeconfig(&rest.Config{Host: env.Config.Host, BearerToken: token(id.ns, id.sa),
				TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData}}, kubeconfig); err != nil {
				t.Fatal(err)
			}
			o := NewOptions("127.0.0.1:0", "127.0.0.1:0")
			if err := o.Validate(); err != nil {
				t.Fatal(err)
			}
			o.Complete(kubeconfig)
			var ready atomic.Bool
			sctx, cancel := context.WithCancel(ctx)
			s, err := o.Start(sctx, testEndpoints(&ready))
			if err != nil {
				cancel()
				t.Fatalf("start as %s/%s: %v", id.ns, id.sa, err)
			}
			t.Cleanup(func() { cancel(); <-s.Stopped() })
			checkDelegated(ctx, t, s, scraper, stranger, &ready)
		})
	}
}

func checkDelegated(ctx context.Context, t *testing.T, s *Server, scraper, stranger string, ready *atomic.Bool) {
	servingtest.CheckMetricsAuth(ctx, t, s.MetricsAddr, scraper, stranger, "serving_test_total 1", `staticip_build_info{component="serving-test"`)
	if code, body, err := servingtest.Get(ctx, "http://"+s.HealthAddr+"/readyz", ""); err != nil || code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before ready: HTTP %d (%v) %q, want 503", code, err, body)
	}
	ready.Store(true)
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body, err := servingtest.Get(ctx, "http://"+s.HealthAddr+p, ""); err != nil || code != http.StatusOK {
			t.Errorf("%s without credentials: HTTP %d (%v) %q, want 200", p, code, err, body)
		}
	}
}
