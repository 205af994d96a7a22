package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// daemon is one long-running process of the cluster. Its pid file and log file live in the
// state directory; its environment carries the marker (see isOurs), which is how `down`
// recognises it and its descendants (and only them), also after a crash.
type daemon struct {
	name  string // e.g. "kube-apiserver", "node-2-kubelet"
	netns string // network namespace to run in ("" = host)
	argv  []string
	env   []string // added to this process's environment
}

func (l *layout) logFile(name string) string { return filepath.Join(l.logDir, name+".log") }
func (l *layout) pidFile(name string) string { return filepath.Join(l.pidDir, name+".pid") }

// start runs d detached from this process (own session, output to its log file) so that
// the cluster outlives `localcluster up`. A daemon in a node's network namespace enters
// only that namespace (nsenter --net): `ip netns exec` would also give it a private mount
// namespace, and then kubelet's volume mounts would be invisible to containerd.
func (l *layout) start(d daemon) (int, error) {
	logf, err := os.OpenFile(l.logFile(d.name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	argv := d.argv
	if d.netns != "" {
		argv = append([]string{"nsenter", "--net=" + l.netnsPath(d.netns), "--"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Dir = l.StateDir
	cmd.Env = append(append(withoutMarker(os.Environ()), d.env...), l.marker())
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", d.name, err)
	}
	pid := cmd.Process.Pid
	// Reap it if it dies while we still run, and keep how it ended: for a process we are the
	// parent of, the wait status is the truth, where /proc can only be read heuristically.
	c := &child{done: make(chan struct{})}
	children.Store(pid, c)
	go func() {
		c.err = cmd.Wait()
		if c.err == nil {
			c.err = errors.New("exited with status 0")
		}
		close(c.done)
	}()
	if err := os.WriteFile(l.pidFile(d.name), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return 0, err
	}
	return pid, nil
}

// child is a daemon this process started: done is closed once it has exited and been
// reaped, err then says how it ended ("signal: killed", "exit status 1").
type child struct {
	done chan struct{}
	err  error
}

// children maps the pid of every daemon started by this process to its child.
var children sync.Map

// exitOf reports whether pid is a daemon this process started that has exited, and how.
func exitOf(pid int) (exited bool, how error) {
	v, ok := children.Load(pid)
	if !ok {
		return false, nil
	}
	c := v.(*child)
	select {
	case <-c.done:
		return true, c.err
	default:
		return false, nil
	}
}

// running reports whether the daemon recorded under name is alive and still ours.
func (l *layout) running(name string) bool {
	pid, ok := l.recordedPid(name)
	if !ok {
		return false
	}
	if v, ok := children.Load(pid); ok {
		// Started by this process: alive until its wait returns. /proc cannot tell: just
		// after cmd.Start returns, the child's environ can still be this process's own
		// (Go learns of a successful exec at the kernel's point of no return, before the new
		// image's environment is in place), so isOurs finds no marker in a healthy daemon.
		select {
		case <-v.(*child).done:
			return false
		default:
			return true
		}
	}
	return l.isOurs(pid, true)
}

// recordedPid reads the daemon's pid file.
func (l *layout) recordedPid(name string) (int, bool) {
	b, err := os.ReadFile(l.pidFile(name))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, err == nil
}

// isOurs reports whether pid is alive (not a zombie) and one of ours: started by `up`
// with the marker variable in its environment, or a descendant that inherited it
// (containerd's shims and runc). Pids are reused, so a pid file alone proves nothing; the
// command line is no proof either (the shell that ran `localcluster up --state-dir=...`
// names the state dir too). duringExec accepts an empty environment, which a process
// shows for a moment while it execs (nsenter becoming kubelet); only for pids we recorded
// ourselves (kernel threads have none either).
func (l *layout) isOurs(pid int, duringExec bool) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return false
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return false
	}
	if duringExec && len(environ) == 0 {
		return true
	}
	for _, kv := range bytes.Split(environ, []byte{0}) {
		if string(kv) == l.marker() {
			return true
		}
	}
	return false
}

// marker is the environment entry that tags this cluster's processes.
func (l *layout) marker() string { return markerVar + "=" + l.StateDir }

const markerVar = "STATICIP_LOCALCLUSTER"

// logTail returns the last lines of a daemon's log for error messages.
func (l *layout) logTail(name string, lines int) string {
	b, err := os.ReadFile(l.logFile(name))
	if err != nil {
		return ""
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// componentError names the failed component, how it ended when this process started it,
// and its log file.
func (l *layout) componentError(name string, err error) error {
	if pid, ok := l.recordedPid(name); ok {
		if exited, how := exitOf(pid); exited {
			err = fmt.Errorf("%w (pid %d: %v)", err, pid, how)
		}
	}
	return fmt.Errorf("%s failed: %w\n  log: %s\n  last lines:\n%s", name, err, l.logFile(name), indent(l.logTail(name, 15), "    "))
}

func indent(s, prefix string) string {
	if s == "" {
		return prefix + "(empty)"
	}
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// run runs a short command and returns its error with the command's output.
func run(argv ...string) error {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// withoutMarker drops an inherited marker (localcluster run from inside a node, say), so
// a daemon carries exactly one.
func withoutMarker(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, markerVar+"=") {
			out = append(out, kv)
		}
	}
	return out
}
