package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CrashContainer kills every process of one container of a pod with SIGKILL, the way a
// crash (or the OOM killer) ends it: no SIGTERM, no shutdown hooks, nothing released. The
// kubelet then restarts the container as after any crash. It works where the container
// runs on this machine (the local cluster, or kind nodes of this machine's docker); ok is
// false elsewhere, so callers can skip.
//
// The processes are found through their cgroup: containerd puts each container in a cgroup
// whose path ends with the container's ID (cgroupfs driver: .../<id>; systemd driver, as in
// kind nodes: .../cri-containerd-<id>.scope).
func (f *Framework) CrashContainer(ctx context.Context, pod *corev1.Pod, container string) (killed []int, ok bool, err error) {
	shell, _, err := f.NodeShell(ctx, pod.Spec.NodeName)
	if err != nil || shell == nil {
		return nil, false, err
	}
	var id string
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == container {
			_, id, _ = strings.Cut(s.ContainerID, "://")
		}
	}
	if id == "" || !containerRunning(pod, container) {
		return nil, true, fmt.Errorf("pod %s/%s: container %s has no running container ID", pod.Namespace, pod.Name, container)
	}
	killed, err = signalContainer(id, syscall.SIGKILL)
	if err != nil {
		return nil, true, err
	}
	if len(killed) == 0 {
		return nil, true, fmt.Errorf("no process in the cgroup of container %s (%s) of %s/%s", container, id, pod.Namespace, pod.Name)
	}
	return killed, true, nil
}

// containerPIDs are the processes on this machine in the cgroup of the container with this
// ID (cgroupfs driver: .../<id>; systemd driver, as in kind nodes: .../cri-containerd-<id>.scope).
func containerPIDs(id string) ([]int, error) {
	procs, err := filepath.Glob("/proc/[0-9]*/cgroup")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, path := range procs {
		b, err := os.ReadFile(path)
		if err != nil || !(strings.Contains(string(b), "/"+id+"\n") || strings.Contains(string(b), "-"+id+".scope")) {
			continue // gone, or not the container
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(path))); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// signalContainer sends sig to every process of the container; returns those it reached.
func signalContainer(id string, sig syscall.Signal) ([]int, error) {
	pids, err := containerPIDs(id)
	if err != nil {
		return nil, err
	}
	var reached []int
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err == nil {
			reached = append(reached, pid)
		}
	}
	return reached, nil
}

func containerRunning(pod *corev1.Pod, container string) bool {
	for _, st := range pod.Status.ContainerStatuses {
		if st.Name == container {
			return st.State.Running != nil
		}
	}
	return false
}

// localClusterMarker is the environment entry tools/localcluster gives every process of the
// cluster whose state directory is dir (cluster/proc.go): it tells our kube-apiserver from
// any other on the machine.
func localClusterMarker(dir string) string { return "STATICIP_LOCALCLUSTER=" + dir }

// StopAPIServer stops the cluster's kube-apiserver with SIGSTOP: every request and watch to
// it hangs (no answer, no error) until resume sends SIGCONT — an API server that is down for
// everyone, while etcd and every other component keep running. On the local cluster the
// process is the one recorded in <state dir>/pids/kube-apiserver.pid, the state dir being the
// directory of the kubeconfig (as localcluster writes it), and must carry that cluster's
// marker. On kind (nodes are containers of this machine's docker) it is every process of the
// control plane's kube-apiserver static pod container, found through its cgroup as
// CrashContainer does. ok is false on any other cluster, so callers can skip. Callers must
// resume (t.Cleanup) even when the test fails.
func (f *Framework) StopAPIServer() (resume func() error, ok bool, err error) {
	if resume, ok, err := f.stopLocalAPIServer(); ok || err != nil {
		return resume, ok, err
	}
	return f.stopKindAPIServer()
}

func (f *Framework) stopLocalAPIServer() (resume func() error, ok bool, err error) {
	stateDir := filepath.Dir(f.Kubeconfig)
	b, err := os.ReadFile(filepath.Join(stateDir, "pids", "kube-apiserver.pid"))
	if err != nil {
		return nil, false, nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, false, nil
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil || !strings.Contains("\x00"+string(environ)+"\x00", "\x00"+localClusterMarker(stateDir)+"\x00") {
		return nil, false, nil
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return nil, true, fmt.Errorf("SIGSTOP kube-apiserver (pid %d): %w", pid, err)
	}
	return func() error { return syscall.Kill(pid, syscall.SIGCONT) }, true, nil
}

// stopKindAPIServer: kubeadm's kube-apiserver static pod (label component=kube-apiserver)
// on a kind control-plane node of this machine. The pod is read before the stop (nothing
// answers after it); its processes are stopped and later continued by pid.
func (f *Framework) stopKindAPIServer() (resume func() error, ok bool, err error) {
	ctx := context.Background()
	if typ, _, err := f.ClusterType(ctx); err != nil || typ != KindCluster {
		return nil, false, nil
	}
	pods, err := f.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "component=kube-apiserver"})
	if err != nil {
		return nil, true, err
	}
	if len(pods.Items) != 1 {
		return nil, true, fmt.Errorf("kind: %d kube-apiserver pods (want the one control plane's)", len(pods.Items))
	}
	pod := &pods.Items[0]
	var id string
	for _, st := range pod.Status.ContainerStatuses {
		if st.Name == "kube-apiserver" && st.State.Running != nil {
			_, id, _ = strings.Cut(st.ContainerID, "://")
		}
	}
	if id == "" {
		return nil, true, fmt.Errorf("kind: %s has no running kube-apiserver container", pod.Name)
	}
	stopped, err := signalContainer(id, syscall.SIGSTOP)
	if err != nil {
		return nil, true, err
	}
	if len(stopped) == 0 {
		return nil, true, fmt.Errorf("kind: no process of %s's container %s on this machine", pod.Name, id)
	}
	return func() error {
		var errs []error
		for _, pid := range stopped {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				errs = append(errs, fmt.Errorf("SIGCONT kube-apiserver pid %d: %w", pid, err))
			}
		}
		return errors.Join(errs...)
	}, true, nil
}
