package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/staticip/staticip/controllers/pkg/manager"
	"github.com/staticip/staticip/tools/testenv"
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

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a self-signed serving certificate
	get := func(url, bearer string) (int, string, error) {
		req, _ := http.NewRequestWithContext(f.ctx, http.MethodGet, url, nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	scraper, stranger := token(f.ns, "scraper"), token(f.ns, "stranger")
	var code int
	var body string
	var err error
	// Up (health) first; RBAC of the new binding may take a moment: poll the allowed case.
	f.eventually(time.Minute, "the scraper reads /metrics", func() (bool, error) {
		code, body, err = get("https://"+metricsAddr+"/metrics", scraper)
		if err != nil {
			return false, err
		}
		if code != http.StatusOK || !strings.Contains(body, "# TYPE ") {
			return false, fmt.Errorf("HTTP %d: %.200s", code, body)
		}
		return true, nil
	})
	for _, c := range []struct {
		who, token string
		want       int
	}{{"no token (system:anonymous, not authorized)", "", http.StatusForbidden}, {"a token the API server does not know", "not-a-token", http.StatusUnauthorized},
		{"a service account without staticip-metrics-reader", stranger, http.StatusForbidden}} {
		code, body, err = get("https://"+metricsAddr+"/metrics", c.token)
		if err != nil || code != c.want {
			t.Errorf("/metrics with %s: HTTP %d (%v), want %d: %.200s", c.who, code, err, c.want, body)
		}
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		f.eventually(time.Minute, p+" open without credentials", func() (bool, error) {
			code, body, err = get("http://"+healthAddr+p, "")
			if err != nil || code != http.StatusOK {
				return false, fmt.Errorf("HTTP %d %v: %.200s", code, err, body)
			}
			return true, nil
		})
	}
}
