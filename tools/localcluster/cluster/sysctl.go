package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// kubeletSysctls are the machine-global kernel settings every kubelet rewrites at start
// (pkg/kubelet/cm setupKernelTunables: overcommit, panic on oops, reboot 10 s after a
// panic, key quotas) unless protectKernelDefaults — which instead refuses to start when
// they differ. A network namespace does not scope them, so `up` records the machine's
// values before the first kubelet starts and teardown puts them back.
var kubeletSysctls = []string{
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

func (l *layout) sysctlFile() string { return filepath.Join(l.StateDir, "host-sysctls.json") }

// saveHostSysctls records the current values; it runs after stale state was torn down
// (which restored any earlier record), so the record is the machine's own.
func (l *layout) saveHostSysctls() error {
	values := map[string]string{}
	for _, name := range kubeletSysctls {
		b, err := os.ReadFile(filepath.Join("/proc/sys", name))
		if err != nil {
			return fmt.Errorf("read sysctl %s: %w", name, err)
		}
		values[name] = strings.TrimSpace(string(b))
	}
	b, err := json.MarshalIndent(values, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(l.sysctlFile(), b, 0o644)
}

// restoreHostSysctls writes the recorded values back (kubelets must be stopped first).
func (l *layout) restoreHostSysctls() error {
	b, err := os.ReadFile(l.sysctlFile())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	values := map[string]string{}
	if err := json.Unmarshal(b, &values); err != nil {
		return fmt.Errorf("%s: %w", l.sysctlFile(), err)
	}
	var errs []error
	for _, name := range kubeletSysctls {
		v, ok := values[name]
		if !ok {
			continue
		}
		if err := os.WriteFile(filepath.Join("/proc/sys", name), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s=%s: %w", name, v, err))
		}
	}
	return errors.Join(errs...)
}

// kubeletGlobalDirs are paths every kubelet uses whatever its --root-dir: the device
// manager's socket is hard-wired to /var/lib/kubelet/device-plugins/kubelet.sock (each
// kubelet replaces the previous one's — harmless without device plugins), and container
// log symlinks go to /var/log/containers. `up` records which of them did not exist; teardown
// removes those whole, and otherwise only the symlinks that point into our state dir.
var kubeletGlobalDirs = []string{"/var/lib/kubelet", "/var/log/containers"}

// sharedRuntimeDirs are created by containerd's shims (/run/containerd/s) and libcni's
// cache (/var/lib/cni/results) and may be shared with other containerds: when they did not
// exist before `up`, teardown removes them only if empty (children first).
var sharedRuntimeDirs = []string{"/run/containerd/s", "/run/containerd", "/var/lib/cni/results", "/var/lib/cni"}

func (l *layout) hostDirsFile() string { return filepath.Join(l.StateDir, "host-dirs-created.json") }

func (l *layout) saveHostDirs() error {
	var absent []string
	for _, d := range append(append([]string{}, kubeletGlobalDirs...), sharedRuntimeDirs...) {
		if _, err := os.Lstat(d); errors.Is(err, os.ErrNotExist) {
			absent = append(absent, d)
		}
	}
	b, err := json.Marshal(absent)
	if err != nil {
		return err
	}
	return os.WriteFile(l.hostDirsFile(), b, 0o644)
}

func (l *layout) cleanHostDirs() error {
	var created []string
	if b, err := os.ReadFile(l.hostDirsFile()); err == nil {
		if err := json.Unmarshal(b, &created); err != nil {
			return fmt.Errorf("%s: %w", l.hostDirsFile(), err)
		}
	}
	wasCreated := map[string]bool{}
	for _, d := range created {
		wasCreated[d] = true
	}
	for _, d := range kubeletGlobalDirs {
		if wasCreated[d] {
			if err := os.RemoveAll(d); err != nil {
				return err
			}
		}
	}
	for _, d := range sharedRuntimeDirs {
		if wasCreated[d] {
			_ = os.Remove(d) // fails, as it should, while not empty
		}
	}
	for _, link := range l.ourContainerLogLinks() {
		_ = os.Remove(link)
	}
	return nil
}

// ourContainerLogLinks lists /var/log/containers symlinks that point into our state dir.
func (l *layout) ourContainerLogLinks() []string {
	entries, _ := os.ReadDir("/var/log/containers")
	var out []string
	for _, e := range entries {
		path := filepath.Join("/var/log/containers", e.Name())
		if target, err := os.Readlink(path); err == nil && strings.HasPrefix(target, l.StateDir+"/") {
			out = append(out, path)
		}
	}
	return out
}
