// Command coordinatorns runs Spiderpool's coordinator CNI plugin against its own node's
// spiderpool-agent on a machine where several nodes share one mount namespace (the local
// cluster: every node is a network namespace, not a machine).
//
// The coordinator asks the agent for its configuration over a unix socket whose path is
// hard-coded (constant.DefaultIPAMUnixSocketPath, /var/run/spidernet/spiderpool.sock), unlike
// the spiderpool IPAM plugin, whose conflist sets ipam_unix_socket_path. Each node's agent
// listens in <node dir>/spidernet instead (the agent DaemonSet's socket directory is a
// per-node subPathExpr). This program is installed as the node's `coordinator` plugin at
// <node dir>/bin/coordinator; it enters a private mount namespace, binds
// <node dir>/spidernet over /var/run/spidernet there, and execs the real coordinator
// (<node dir>/spiderpool/coordinator, copied there by the agent as the chart does), with
// the CNI environment, stdin and stdout untouched. Nothing outside this one process tree
// sees the bind mount.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// socketDir is the directory of the coordinator's hard-coded socket path.
const socketDir = "/var/run/spidernet"

func main() {
	if err := run(); err != nil {
		// A CNI plugin reports errors as JSON on stdout (CNI spec, "Error").
		fmt.Printf(`{"cniVersion":"0.3.1","code":999,"msg":%q}`+"\n", "coordinatorns: "+err.Error())
		os.Exit(1)
	}
}

func run() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	self, err = filepath.EvalSymlinks(self)
	if err != nil {
		return err
	}
	nodeDir := filepath.Dir(filepath.Dir(self)) // <node dir>/bin/coordinator
	real := filepath.Join(nodeDir, "spiderpool", "coordinator")
	// The namespace belongs to the thread that unshares; exec replaces the process from it.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare mount namespace: %w", err)
	}
	// Slave: mounts made here never propagate back to the machine.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make / rslave: %w", err)
	}
	// The mount point itself must exist; an empty directory, as the chart's hostPath
	// (DirectoryOrCreate) would leave it on a node of its own.
	if err := os.MkdirAll(socketDir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(filepath.Join(nodeDir, "spidernet"), socketDir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s/spidernet over %s: %w", nodeDir, socketDir, err)
	}
	return syscall.Exec(real, append([]string{real}, os.Args[1:]...), os.Environ())
}
