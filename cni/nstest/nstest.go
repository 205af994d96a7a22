// Package nstest creates named network namespaces for tests and benchmarks of the CNI
// plugin. Names start with "cni-" (the area prefix) and carry the process ID, so parallel
// runs and other helpers on the machine never collide; every namespace is deleted again.
package nstest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
)

// RunDir is where `ip netns` keeps named namespaces.
const RunDir = "/var/run/netns"

// NetNS is a named network namespace.
type NetNS struct {
	ns.NetNS
	Name string
}

// New creates namespace "cni-<tag>-<pid>-<random>" with loopback up.
func New(tag string) (*NetNS, error) {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	name := fmt.Sprintf("cni-%s-%d-%s", tag, os.Getpid(), hex.EncodeToString(b))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		Delete(name)
		return nil, fmt.Errorf("lo up in %s: %v: %s", name, err, out)
	}
	n, err := ns.GetNS(filepath.Join(RunDir, name))
	if err != nil {
		Delete(name)
		return nil, err
	}
	return &NetNS{NetNS: n, Name: name}, nil
}

// Close closes and deletes the namespace.
func (n *NetNS) Close() error {
	n.NetNS.Close()
	return Delete(n.Name)
}

// Delete removes a named namespace.
func Delete(name string) error {
	if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns delete %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}
