package kubeclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// The built-in clientset sends protobuf and asks for it (JSON accepted too), as
// kube-controller-manager's does; the config it was made from is left as it is (the custom
// resources' clients, which have no protobuf, are made from it).
func TestKubernetesSpeaksProtobuf(t *testing.T) {
	type seen struct{ contentType, accept string }
	requests := make(chan seen, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests <- seen{r.Header.Get("Content-Type"), r.Header.Get("Accept")}
		w.Header().Set("Content-Type", "application/json") // an answer in JSON is still read
		_, _ = w.Write([]byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c","namespace":"default"}}`))
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL}
	kube, err := Kubernetes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := kube.CoreV1().ConfigMaps("default").Create(context.Background(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}, metav1.CreateOptions{})
	if err != nil || got.Name != "c" {
		t.Fatalf("create: %v, %v", got, err)
	}
	r := <-requests
	if r.contentType != "application/vnd.kubernetes.protobuf" {
		t.Errorf("Content-Type %q, want protobuf", r.contentType)
	}
	if !strings.HasPrefix(r.accept, "application/vnd.kubernetes.protobuf") || !strings.Contains(r.accept, "application/json") {
		t.Errorf("Accept %q, want protobuf first, JSON accepted", r.accept)
	}
	if cfg.ContentType != "" || cfg.AcceptContentTypes != "" {
		t.Errorf("the config given was changed: %q, %q", cfg.ContentType, cfg.AcceptContentTypes)
	}
}
