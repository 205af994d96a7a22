package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
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
	procs, err := filepath.Glob("/proc/[0-9]*/cgroup")
	if err != nil {
		return nil, true, err
	}
	for _, path := range procs {
		b, err := os.ReadFile(path)
		if err != nil || !(strings.Contains(string(b), "/"+id+"\n") || strings.Contains(string(b), "-"+id+".scope")) {
			continue // gone, or not the container
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		if err != nil {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			killed = append(killed, pid)
		}
	}
	if len(killed) == 0 {
		return nil, true, fmt.Errorf("no process in the cgroup of container %s (%s) of %s/%s", container, id, pod.Namespace, pod.Name)
	}
	return killed, true, nil
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

// StopAPIServer stops the local cluster's kube-apiserver with SIGSTOP: every request and
// watch to it hangs (no answer, no error) until resume sends SIGCONT — an API server that
// is down for everyone, while etcd and every other component keep running. The process is
// the one recorded in <state dir>/pids/kube-apiserver.pid, the state dir being the directory
// of the kubeconfig (as localcluster writes it), and must carry that cluster's marker; ok is
// false on any other cluster, so callers can skip. Callers must resume (t.Cleanup) even when
// the test fails.
func (f *Framework) StopAPIServer() (resume func() error, ok bool, err error) {
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
