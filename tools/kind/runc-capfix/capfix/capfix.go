// Package capfix finds the capabilities missing from a bounding set and removes them from
// OCI runtime specs and process files.
package capfix

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// capNames are the capability names by number (linux/capability.h, up to
// CAP_CHECKPOINT_RESTORE = 40).
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK",
	"CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
	"CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE",
	"CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE",
	"CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG",
	"CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

// MissingFromBoundingSet returns the names of the known capabilities that the CapBnd line
// of a /proc/<pid>/status text does not hold (nil for a full set).
func MissingFromBoundingSet(status string) (map[string]bool, error) {
	sc := bufio.NewScanner(strings.NewReader(status))
	for sc.Scan() {
		value, ok := strings.CutPrefix(sc.Text(), "CapBnd:")
		if !ok {
			continue
		}
		bnd, err := strconv.ParseUint(strings.TrimSpace(value), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("CapBnd %q: %w", value, err)
		}
		var missing map[string]bool
		for bit, name := range capNames {
			if bnd&(1<<uint(bit)) == 0 {
				if missing == nil {
					missing = map[string]bool{}
				}
				missing[name] = true
			}
		}
		return missing, nil
	}
	return nil, fmt.Errorf("no CapBnd line in status")
}

// SpecFiles returns the files of a runc command line that carry capabilities: the bundle's
// config.json (--bundle/-b, default the working directory, for create and run) and the
// process file of an exec (--process/-p).
func SpecFiles(args []string) []string {
	cmd, bundle, process := "", "", ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(a, "=")
		takeValue := func() string {
			if hasValue {
				return value
			}
			if i+1 < len(args) {
				i++
				return args[i]
			}
			return ""
		}
		switch name {
		case "--bundle", "-b":
			bundle = takeValue()
		case "--process", "-p":
			process = takeValue()
		case "--root", "--log", "--log-format", "--criu", "--pid-file", "--console-socket", "--rootless", "--preserve-fds", "--cwd", "--user", "-u", "--env", "-e", "--cap", "-c", "--apparmor", "--process-label", "--cgroup":
			takeValue() // flags with a value that is not a file of interest
		default:
			if cmd == "" && !strings.HasPrefix(a, "-") {
				cmd = a
			}
		}
	}
	switch cmd {
	case "create", "run":
		if bundle == "" {
			bundle = "."
		}
		return []string{filepath.Join(bundle, "config.json")}
	case "exec":
		if process != "" {
			return []string{process}
		}
	}
	return nil
}

// RewriteFile removes the missing capabilities from a spec (config.json, whose process
// holds them) or a process file, in place; a file without capabilities stays untouched.
func RewriteFile(path string, missing map[string]bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, changed, err := Rewrite(data, missing)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if !changed {
		return nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, st.Mode().Perm())
}

// Rewrite returns data without the missing capabilities in any of the five sets, and
// whether anything changed. Numbers are kept verbatim (json.Number), so limits above 2^53
// survive.
func Rewrite(data []byte, missing map[string]bool) ([]byte, bool, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return nil, false, err
	}
	process := doc
	if p, ok := doc["process"].(map[string]any); ok {
		process = p // a bundle's config.json; a process file is the process itself
	}
	caps, ok := process["capabilities"].(map[string]any)
	if !ok {
		return data, false, nil
	}
	changed := false
	for _, set := range []string{"bounding", "effective", "inheritable", "permitted", "ambient"} {
		list, ok := caps[set].([]any)
		if !ok {
			continue
		}
		kept := make([]any, 0, len(list))
		for _, c := range list {
			if name, _ := c.(string); missing[name] {
				changed = true
				continue
			}
			kept = append(kept, c)
		}
		caps[set] = kept
	}
	if !changed {
		return data, false, nil
	}
	out, err := json.Marshal(doc)
	return out, true, err
}
