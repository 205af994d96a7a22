package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Proc is a component the harness runs as its own process, so that its CPU and memory are
// its own (read from /proc).
type Proc struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// StartProc starts bin with args, its output in dir/name.log.
func StartProc(dir, name, bin string, args ...string) (*Proc, error) {
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &Proc{Name: name, cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); _ = logf.Close(); close(p.done) }()
	return p, nil
}

// Exited reports whether the process ended (and how).
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop ends the process (SIGTERM, then SIGKILL after 10 s) and waits for it.
func (p *Proc) Stop() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Usage is a process's CPU time (user+system) and peak resident memory so far.
type Usage struct {
	CPU     time.Duration
	PeakRSS int64 // VmHWM, bytes
	RSS     int64 // VmRSS, bytes
}

// Usage reads /proc/<pid>/stat and /proc/<pid>/status.
func (p *Proc) Usage() (Usage, error) { return ReadUsage(p.cmd.Process.Pid) }

// ReadUsage reads a process's CPU time and memory from /proc.
func ReadUsage(pid int) (Usage, error) {
	var u Usage
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	u.CPU = time.Duration(ut+st) * time.Second / 100 // USER_HZ = 100
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		fs := strings.Fields(line)
		if len(fs) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(fs[1], 10, 64)
		switch fs[0] {
		case "VmHWM:":
			u.PeakRSS = kb << 10
		case "VmRSS:":
			u.RSS = kb << 10
		}
	}
	return u, nil
}
