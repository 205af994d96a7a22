package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// fakeKube is a fake clientset holding objs that answers TokenRequests (the fake's object
// tracker does not), and the path of an admin kubeconfig naming an unreachable server.
func fakeKube(t *testing.T, objs ...runtime.Object) (*fake.Clientset, string) {
	t.Helper()
	client := fake.NewClientset(objs...)
	client.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "token" {
			return false, nil, nil
		}
		return true, &authenticationv1.TokenRequest{Status: authenticationv1.TokenRequestStatus{Token: "token"}}, nil
	})
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: "admin"}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "admin"}
	kc.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return client, path
}

// fakeManager writes an executable script that stands in for the manager binary.
func fakeManager(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "manager")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func managerObjects(holder string) (*appsv1.Deployment, *coordinationv1.Lease) {
	two := int32(2)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: managerDeployment, Namespace: managerNamespace},
		Spec: appsv1.DeploymentSpec{Replicas: &two,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": managerDeployment}}},
	}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: managerLease, Namespace: managerNamespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
	return d, l
}

func deploymentReplicas(t *testing.T, client *fake.Clientset) int32 {
	t.Helper()
	d, err := client.AppsV1().Deployments(managerNamespace).Get(context.Background(), managerDeployment, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return *d.Spec.Replicas
}

// TestHostManagerReplacesTheDeployment: while the host process runs the Deployment is at 0;
// stop ends the process and puts the Deployment back at its replicas.
func TestHostManagerReplacesTheDeployment(t *testing.T) {
	host, _ := os.Hostname()
	d, l := managerObjects(host + "_1234")
	client, kubeconfig := fakeKube(t, d, l)
	pidFile := filepath.Join(t.TempDir(), "pid")
	hm := &HostManager{Kube: client, Binary: fakeManager(t, "echo $$ > "+pidFile+"; exec sleep 60"), Kubeconfig: kubeconfig,
		Log: func(string, ...any) {}}
	stop, err := hm.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n := deploymentReplicas(t, client); n != 0 {
		t.Errorf("Deployment at %d replicas while the host manager runs, want 0", n)
	}
	var pid []byte
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		pid, _ = os.ReadFile(pidFile)
		return len(pid) > 0, nil
	}); err != nil {
		t.Fatalf("host manager wrote no pid: %v", err)
	}
	proc := "/proc/" + strings.TrimSpace(string(pid))
	if _, err := os.Stat(proc); err != nil {
		t.Fatalf("host manager not running: %v", err)
	}
	stop()
	stop() // twice is harmless
	if _, err := os.Stat(proc); err == nil {
		t.Errorf("host manager %s still running after stop", proc)
	}
	if n := deploymentReplicas(t, client); n != 2 {
		t.Errorf("Deployment at %d replicas after stop, want 2", n)
	}
}

// TestHostManagerThatExitsIsAnError: a binary that exits before it takes the Lease fails
// Start, and the Deployment is put back.
func TestHostManagerThatExitsIsAnError(t *testing.T) {
	d, l := managerObjects("someone-else_1")
	client, kubeconfig := fakeKube(t, d, l)
	hm := &HostManager{Kube: client, Binary: fakeManager(t, "exit 3"), Kubeconfig: kubeconfig, Log: func(string, ...any) {}}
	if _, err := hm.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Errorf("Start = %v, want an error saying the manager exited", err)
	}
	if n := deploymentReplicas(t, client); n != 2 {
		t.Errorf("Deployment at %d replicas after a failed start, want 2", n)
	}
}
