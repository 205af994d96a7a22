package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Node power and link control for failover tests (`localcluster node stop|start|partition|heal
// NAME`). A node is a network namespace joined to the host bridge by one veth: cutting that
// veth's host end isolates the node completely (API server, other nodes, the host), and killing
// every process of the node is a power-off as far as the cluster can tell.

// nodeByName finds a node of the cluster recorded in o's state dir.
func nodeByName(o Options, name string) (layout, nodeLayout, error) {
	if err := o.validate(); err != nil {
		return layout{}, nodeLayout{}, err
	}
	l := newLayout(o)
	rec, err := l.readRecord()
	if err != nil {
		return layout{}, nodeLayout{}, fmt.Errorf("no cluster recorded in %s (run `up`): %w", o.StateDir, err)
	}
	l = newLayout(rec.options(o))
	for _, n := range l.nodes {
		if n.name == name {
			return l, n, nil
		}
	}
	var names []string
	for _, n := range l.nodes {
		names = append(names, n.name)
	}
	return layout{}, nodeLayout{}, fmt.Errorf("no node %q in the cluster in %s (nodes: %s)", name, o.StateDir, strings.Join(names, ", "))
}

// NodeStop powers a node off: its link goes down first (nothing it still sends reaches anyone
// while it dies), then every process of the node is SIGKILLed — kubelet, containerd,
// kube-proxy, containerd's shims and runc, and every container, host-network or not — with no
// chance to clean up, as in a power cut. What a power cut would also lose but this keeps: the
// node's files (containerd's and the kubelet's state, the CNI database) and the pods'
// network namespaces, now without processes; `node start` brings the node back on that state,
// like a machine that boots with its disk. The Node object stays (NotReady once the node
// lifecycle controller notices the silent kubelet).
func NodeStop(o Options, name string) error {
	l, n, err := nodeByName(o, name)
	if err != nil {
		return err
	}
	if err := run("ip", "link", "set", n.hostVeth, "down"); err != nil {
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		pids := l.nodePids(n)
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: processes still running after SIGKILL: %v", name, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := os.WriteFile(l.stoppedFile(n), []byte(time.Now().Format(time.RFC3339)), 0o644); err != nil {
		return err
	}
	l.Logf("%s stopped: every process killed, link %s down", name, n.hostVeth)
	return nil
}

// NodeStart boots a stopped node: link up, then containerd (on its old root and state), the
// kubelet and kube-proxy, and waits until the new kubelet has reported the Node Ready.
func NodeStart(ctx context.Context, o Options, name string, timeout time.Duration) error {
	l, n, err := nodeByName(o, name)
	if err != nil {
		return err
	}
	if err := run("ip", "link", "set", n.hostVeth, "up"); err != nil {
		return err
	}
	// Heartbeats carry whole seconds: a Ready condition from before the stop is not proof.
	booted := time.Now().Truncate(time.Second)
	for _, d := range []daemon{l.containerd(n), l.kubelet(n), l.kubeProxy(n)} {
		if l.running(d.name) {
			continue
		}
		if d.name == n.name+"-kubelet" {
			if err := l.startKubelet(ctx, n); err != nil {
				return err
			}
			continue
		}
		if _, err := l.start(d); err != nil {
			return l.componentError(d.name, err)
		}
		if d.name == n.name+"-containerd" {
			// The socket file outlives the killed containerd: wait until its CRI service answers.
			// (`ctr version` answers earlier, while CRI still says "server is not initialized
			// yet" — and a kubelet started then exits: failoverbench's 5th round hit that.)
			if err := l.waitFor(ctx, 60*time.Second, []string{d.name}, n.name+" containerd", func() (bool, error) {
				return criReady(ctx, n.containerdSocket) == nil, nil
			}); err != nil {
				return err
			}
		}
	}
	_ = os.Remove(l.stoppedFile(n))
	client, err := l.client()
	if err != nil {
		return err
	}
	if err := l.waitFor(ctx, timeout, []string{n.name + "-containerd", n.name + "-kubelet", n.name + "-kube-proxy"}, n.name+" Ready", func() (bool, error) {
		node, err := client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		// Ready, and usable again: the node lifecycle controller lifts the not-ready and
		// unreachable taints a moment after the Ready heartbeat; until then the scheduler and
		// a test choosing nodes by taint would still see the node as down.
		for _, t := range node.Spec.Taints {
			if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
				return false, nil
			}
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue && !c.LastHeartbeatTime.Time.Before(booted), nil
			}
		}
		return false, nil
	}); err != nil {
		return err
	}
	l.Logf("%s started, Ready and untainted", name)
	return nil
}

// NodePartition cuts the node's link (the host end of its veth goes down) while everything on
// it keeps running: it loses the API server, the other nodes and the host, and they lose it.
func NodePartition(o Options, name string) error {
	l, n, err := nodeByName(o, name)
	if err != nil {
		return err
	}
	if err := run("ip", "link", "set", n.hostVeth, "down"); err != nil {
		return err
	}
	l.Logf("%s partitioned: link %s down, its processes keep running", name, n.hostVeth)
	return nil
}

// NodeHeal restores a partitioned node's link.
func NodeHeal(o Options, name string) error {
	l, n, err := nodeByName(o, name)
	if err != nil {
		return err
	}
	if _, err := os.Stat(l.stoppedFile(n)); err == nil {
		return fmt.Errorf("%s is stopped, not partitioned: use `node start %s`", name, name)
	}
	if err := run("ip", "link", "set", n.hostVeth, "up"); err != nil {
		return err
	}
	l.Logf("%s healed: link %s up", name, n.hostVeth)
	return nil
}

// stoppedFile marks a node that `node stop` powered off.
func (l *layout) stoppedFile(n nodeLayout) string { return n.dir + "/stopped" }

// nodePids are the processes of one node: the cluster's processes (the marker) whose command
// line names the node's directory (its containerd, kubelet and kube-proxy, containerd's shims
// and runc: all take paths under it), and every process inside the node's network namespace
// (host-network containers) or one of its pods' network namespaces (mounted under the node's
// containerd state), and every process in the cgroup of one of its containerd's tasks.
func (l *layout) nodePids(n nodeLayout) []int {
	netns := map[uint64]bool{}
	if ino, ok := inode(l.netnsPath(n.netns)); ok {
		netns[ino] = true
	}
	for _, m := range l.ourMounts() {
		if m.fstype == "nsfs" && strings.HasPrefix(m.point, n.dir+"/") {
			if ino, ok := inode(m.point); ok {
				netns[ino] = true
			}
		}
	}
	tasks := map[string]bool{}
	entries, _ := os.ReadDir(n.containerdState + "/io.containerd.runtime.v2.task/k8s.io")
	for _, e := range entries {
		tasks[e.Name()] = true
	}
	self := os.Getpid()
	procs, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || zombie(pid) {
			continue
		}
		if l.isOurs(pid, false) {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if strings.Contains(string(cmdline), n.dir+"/") || strings.Contains(string(cmdline), "/"+n.netns+"\x00") {
				pids = append(pids, pid)
				continue
			}
		}
		if ino, ok := netnsOf(pid); ok && netns[ino] {
			pids = append(pids, pid)
			continue
		}
		if cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err == nil && len(tasks) > 0 {
			for _, line := range strings.Split(string(cg), "\n") {
				if i := strings.LastIndex(line, "/k8s.io/"); i >= 0 && tasks[line[i+len("/k8s.io/"):]] {
					pids = append(pids, pid)
					break
				}
			}
		}
	}
	return pids
}

// criReady asks the runtime's CRI service for its version, as the kubelet does first.
func criReady(ctx context.Context, socket string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{})
	return err
}

// deviceManagerSocket is the one path every kubelet's device manager binds, whatever its
// --root-dir (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1.KubeletSocket).
const deviceManagerSocket = "/var/lib/kubelet/device-plugins/kubelet.sock"

// startKubelet starts n's kubelet and returns once it has bound the device manager's socket,
// holding a lock so that no other kubelet of this cluster starts meanwhile (also from another
// `localcluster node start`). A starting kubelet removes the sockets in that shared directory
// and then listens: two kubelets starting together can both remove, and the slower one then
// finds the faster one's fresh socket — "bind: address already in use", "Failed to start
// ContainerManager", and the kubelet exits (CI's `make e2e-upgrade` on ba4afa6: node-4).
func (l *layout) startKubelet(ctx context.Context, n nodeLayout) error {
	unlock, err := lockFile(filepath.Join(l.StateDir, "kubelet-start.lock"))
	if err != nil {
		return err
	}
	defer unlock()
	before, _ := socketIdentity(deviceManagerSocket)
	d := l.kubelet(n)
	if _, err := l.start(d); err != nil {
		return l.componentError(d.name, err)
	}
	return l.waitFor(ctx, 90*time.Second, []string{d.name}, d.name+" bound "+deviceManagerSocket, func() (bool, error) {
		now, ok := socketIdentity(deviceManagerSocket)
		return ok && now != before, nil
	})
}

// socketIdentity tells one socket file from its successor at the same path: the inode number
// alone can be reused once the old socket is unlinked, the inode and its change time together
// are not in practice.
func socketIdentity(path string) (string, bool) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		return "", false
	}
	return fmt.Sprintf("%d/%d/%d.%09d", st.Dev, st.Ino, st.Ctim.Sec, st.Ctim.Nsec), true
}

// lockFile takes an exclusive flock on path (created if missing), waiting for it.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
