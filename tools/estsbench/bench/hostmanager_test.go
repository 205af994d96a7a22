package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
)

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
	client := fake.NewClientset(managerObjects(host + "_1234"))
	pidFile := filepath.Join(t.TempDir(), "pid")
	hm := &HostManager{Kube: client, Binary: fakeManager(t, "echo $$ > "+pidFile+"; exec sleep 60"), Kubeconfig: "/nonexistent",
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
	client := fake.NewClientset(managerObjects("someone-else_1"))
	hm := &HostManager{Kube: client, Binary: fakeManager(t, "exit 3"), Kubeconfig: "/nonexistent", Log: func(string, ...any) {}}
	if _, err := hm.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Errorf("Start = %v, want an error saying the manager exited", err)
	}
	if n := deploymentReplicas(t, client); n != 2 {
		t.Errorf("Deployment at %d replicas after a failed start, want 2", n)
	}
}
