package cluster

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// anythingLeft reports whether any trace of a cluster with this state dir and prefix
// exists: the state dir, processes, namespaces or links.
func (l *layout) anythingLeft() bool {
	if _, err := os.Stat(l.StateDir); err == nil {
		return true
	}
	return len(l.ourNetns()) > 0 || len(l.ourLinks()) > 0 || len(l.ourPids()) > 0 || len(l.ourCNICache()) > 0 ||
		len(l.ourContainerLogLinks()) > 0
}

// cniCacheDir is libcni's machine-global result cache; containerd's CRI cannot move it.
const cniCacheDir = "/var/lib/cni/results"

// ourCNICache lists cache entries of our pods: those of our network (named after the
// prefix) and containerd's "cni-loopback" ones, which record the pod's netns path — under
// our state dir. A killed cluster never ran CNI DEL, so nobody else removes them.
func (l *layout) ourCNICache() []string {
	entries, _ := os.ReadDir(cniCacheDir)
	var out []string
	for _, e := range entries {
		path := filepath.Join(cniCacheDir, e.Name())
		if strings.HasPrefix(e.Name(), l.cniNetworkName()+"-") {
			out = append(out, path)
			continue
		}
		if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), l.StateDir+"/") {
			out = append(out, path)
		}
	}
	return out
}

// teardown removes everything, in an order that works after any crash: processes first
// (so nothing recreates what we remove), then mounts, cgroups, network, files.
func (l *layout) teardown() error {
	var errs []error
	l.Logf("stopping processes")
	if err := l.killAll(); err != nil {
		errs = append(errs, err)
	}
	if err := l.restoreHostSysctls(); err != nil {
		errs = append(errs, err)
	}
	taskIDs := l.containerTaskIDs()
	l.Logf("unmounting")
	if err := l.unmountAll(); err != nil {
		errs = append(errs, err)
	}
	l.removeContainerCgroups(taskIDs)
	l.removeShimSockets(taskIDs)
	l.Logf("removing network namespaces, veths and bridge")
	if err := l.teardownNetwork(); err != nil {
		errs = append(errs, err)
	}
	for _, f := range l.ourCNICache() {
		_ = os.Remove(f)
	}
	// After shim sockets and CNI cache entries are gone, so that emptied dirs can go.
	if err := l.cleanHostDirs(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		l.Logf("removing %s", l.StateDir)
		if err := os.RemoveAll(l.StateDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ourPids: processes carrying the marker (every daemon, containerd's shims), and
// processes inside our network namespaces (containers, including those whose shim is gone).
func (l *layout) ourPids() []int {
	netns := map[uint64]bool{}
	for _, ns := range l.ourNetns() {
		if ino, ok := inode(l.netnsPath(ns)); ok {
			netns[ino] = true
		}
	}
	for _, m := range l.ourMounts() {
		if m.fstype == "nsfs" {
			if ino, ok := inode(m.point); ok {
				netns[ino] = true
			}
		}
	}
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if l.isOurs(pid, false) {
			pids = append(pids, pid)
			continue
		}
		if ino, ok := netnsOf(pid); ok && netns[ino] && !zombie(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// netnsOf is the inode of pid's network namespace.
func netnsOf(pid int) (uint64, bool) {
	link, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return 0, false
	}
	// "net:[4026532345]"
	i := strings.IndexByte(link, '[')
	if i < 0 {
		return 0, false
	}
	ino, err := strconv.ParseUint(strings.TrimSuffix(link[i+1:], "]"), 10, 64)
	return ino, err == nil
}

func zombie(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z'
}

func inode(path string) (uint64, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, false
	}
	return st.Ino, true
}

// killAll sends SIGTERM, gives processes a few seconds, then SIGKILLs what is left until
// nothing of ours runs.
func (l *layout) killAll() error {
	pids := l.ourPids()
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(3 * time.Second)
	for len(pids) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		pids = l.ourPids()
	}
	deadline = time.Now().Add(20 * time.Second)
	for len(pids) > 0 {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
		pids = l.ourPids()
		if time.Now().After(deadline) {
			return fmt.Errorf("processes still running after SIGKILL: %v", pids)
		}
	}
	return nil
}

type mount struct{ point, fstype string }

// ourMounts lists mounts under the state dir (kubelet volumes, containerd rootfs and shm,
// pod network namespaces), deepest first.
func (l *layout) ourMounts() []mount {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		point := unescapeMount(fields[4])
		fstype := ""
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) {
				fstype = fields[i+1]
				break
			}
		}
		if point == l.StateDir || strings.HasPrefix(point, l.StateDir+"/") {
			out = append(out, mount{point: point, fstype: fstype})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].point) > len(out[j].point) })
	return out
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func (l *layout) unmountAll() error {
	for range 5 {
		ms := l.ourMounts()
		if len(ms) == 0 {
			return nil
		}
		for _, m := range ms {
			_ = unix.Unmount(m.point, unix.MNT_DETACH)
		}
	}
	if ms := l.ourMounts(); len(ms) > 0 {
		return fmt.Errorf("%d mounts under %s remain, e.g. %s", len(ms), l.StateDir, ms[0].point)
	}
	return nil
}

// containerTaskIDs lists the ids of containers our containerds ran (their task bundles
// outlive a killed containerd).
func (l *layout) containerTaskIDs() map[string][]string {
	ids := map[string][]string{}
	nodeDirs, _ := filepath.Glob(filepath.Join(l.StateDir, "node-*"))
	for _, dir := range nodeDirs {
		sock := filepath.Join(dir, "containerd", "containerd.sock")
		entries, _ := os.ReadDir(filepath.Join(dir, "containerd", "state", "io.containerd.runtime.v2.task", "k8s.io"))
		for _, e := range entries {
			ids[sock] = append(ids[sock], e.Name())
		}
	}
	return ids
}

// removeContainerCgroups removes the cgroups runc made for our containers. With
// cgroupsPerQOS=false the kubelet gives no cgroup parent and containerd puts each container
// at /k8s.io/<id> in every hierarchy; the id is ours, so only our cgroups go.
func (l *layout) removeContainerCgroups(ids map[string][]string) {
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, list := range ids {
		for _, id := range list {
			for _, h := range hierarchies {
				_ = os.Remove(filepath.Join(h, "k8s.io", id))
			}
			_ = os.Remove(filepath.Join("/sys/fs/cgroup/k8s.io", id)) // cgroup v2
		}
	}
	// The shared parent goes too once empty (rmdir of a cgroup fails while it has
	// children, so another containerd's containers keep it).
	if len(ids) > 0 {
		for _, h := range hierarchies {
			_ = os.Remove(filepath.Join(h, "k8s.io"))
		}
	}
}

// removeShimSockets removes the sockets containerd-shim-runc-v2 keeps in the
// machine-global /run/containerd/s, named sha256(<containerd address>/<namespace>/<id>).
func (l *layout) removeShimSockets(ids map[string][]string) {
	for sock, list := range ids {
		for _, id := range list {
			sum := sha256.Sum256([]byte(filepath.Join(sock, "k8s.io", id)))
			_ = os.Remove(fmt.Sprintf("/run/containerd/s/%x", sum))
		}
	}
}

// Leftovers lists everything of a cluster with these options that still exists: after
// `down` it must be empty. It looks for the state dir, processes naming it, network
// namespaces and links with the prefix, mounts under the state dir, host routes through the
// bridge, host iptables rules naming the bridge or the node subnet, and libcni cache entries.
func Leftovers(o Options) []string {
	l := newLayout(o)
	var left []string
	if _, err := os.Stat(l.StateDir); err == nil {
		left = append(left, "state dir "+l.StateDir)
	}
	for _, pid := range l.ourPids() {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		left = append(left, fmt.Sprintf("process %d: %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " ")))
	}
	for _, ns := range l.ourNetns() {
		left = append(left, "netns "+ns)
	}
	for _, link := range l.ourLinks() {
		left = append(left, "link "+link)
	}
	for _, m := range l.ourMounts() {
		left = append(left, "mount "+m.point+" ("+m.fstype+")")
	}
	if out, err := exec.Command("ip", "route", "show").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "dev "+l.bridge+" ") || strings.HasSuffix(line, "dev "+l.bridge) {
				left = append(left, "route "+line)
			}
		}
	}
	subnet := strings.TrimSuffix(l.NodeSubnet, "0/24")
	for _, tool := range []string{"iptables-save", "ip6tables-save"} {
		out, err := exec.Command(tool).Output()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, l.bridge) || strings.Contains(line, subnet) || strings.Contains(line, strings.ToUpper(l.Prefix)+"-") {
				left = append(left, tool+": "+line)
			}
		}
	}
	for _, link := range l.ourContainerLogLinks() {
		left = append(left, "container log link "+link)
	}
	if m := l.ourCNICache(); len(m) > 0 {
		left = append(left, fmt.Sprintf("%d libcni cache entries, e.g. %s", len(m), m[0]))
	}
	return left
}
