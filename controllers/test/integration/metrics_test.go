package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/staticip/staticip/controllers/pkg/manager"
	"github.com/staticip/staticip/internal/serving/servingtest"
	"github.com/staticip/staticip/internal/testenv"
)

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestMetricsNeedAuthorizedCaller: the manager serves /metrics over HTTPS behind the API
// server's delegated authentication and authorization, checking callers with its own
// credentials and RBAC (manifests/controller-manager/rbac.yaml: tokenreviews,
// subjectaccessreviews, the extension-apiserver-authentication ConfigMap). A caller without a
// token is refused, a service account without the staticip-metrics-reader role is refused,
// one bound to it reads the metrics; /healthz and /readyz stay open for the kubelet's probes.
func TestMetricsNeedAuthorizedCaller(t *testing.T) {
	f := newFixture(t)
	f.applyRBAC()
	token := func(ns, sa string) string {
		t.Helper()
		tr, err := f.kube.CoreV1().ServiceAccounts(ns).CreateToken(f.ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	// The manager's own identity, as in the cluster: its service account's token.
	managerCfg := &rest.Config{Host: f.cfg.Host, BearerToken: token("staticip-system", "staticip-controller-manager"),
		TLSClientConfig: rest.TLSClientConfig{CAData: f.cfg.CAData}}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testenv.WriteKubeconfig(managerCfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{"scraper", "stranger"} {
		if _, err := f.kube.CoreV1().ServiceAccounts(f.ns).Create(f.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	binding := "metrics-" + f.ns
	if _, err := f.kube.RbacV1().ClusterRoleBindings().Create(f.ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: binding},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "staticip-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: f.ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding, metav1.DeleteOptions{})
	})

	metricsAddr, healthAddr := freePort(t), freePort(t)
	f.startManagerWith(func(o *manager.Options) {
		o.Serving.MetricsBindAddress, o.Serving.HealthBindAddress = metricsAddr, healthAddr
		o.Serving.Complete(kubeconfig)
	}, "staticip")

	scraper, stranger := token(f.ns, "scraper"), token(f.ns, "stranger")
	servingtest.CheckMetricsAuth(f.ctx, t, metricsAddr, scraper, stranger, "# TYPE ", "staticip_build_info{")
	for _, p := range []string{"/healthz", "/readyz"} {
		f.eventually(time.Minute, p+" open without credentials", func() (bool, error) {
			code, body, err := servingtest.Get(f.ctx, "http://"+healthAddr+p, "")
			if err != nil || code != http.StatusOK {
				return false, fmt.Errorf("HTTP %d %v: %.200s", code, err, body)
			}
			return true, nil
		})
	}
}
