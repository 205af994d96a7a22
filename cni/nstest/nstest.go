// Package nstest is the network namespace of the CNI tests: containernetworking's
// testutils.NewNS (a bind mount under /var/run/netns, named cnitest-<random>) with what our
// tests add to it — loopback up, and the name that `ip -n` and `nsenter --net` take. Close
// removes it again.
package nstest

import (
	"fmt"
	"path/filepath"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
)

// NetNS is a named network namespace.
type NetNS struct {
	ns.NetNS
	// Name is the namespace's name under /var/run/netns.
	Name string
}

// New creates a namespace with loopback up. tag names its use in errors.
func New(tag string) (*NetNS, error) {
	n, err := testutils.NewNS()
	if err != nil {
		return nil, fmt.Errorf("netns for %s: %w", tag, err)
	}
	nn := &NetNS{NetNS: n, Name: filepath.Base(n.Path())}
	if err := n.Do(func(ns.NetNS) error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	}); err != nil {
		nn.Close()
		return nil, fmt.Errorf("netns for %s: loopback up in %s: %w", tag, nn.Name, err)
	}
	return nn, nil
}

// Close closes and deletes the namespace.
func (n *NetNS) Close() error {
	n.NetNS.Close()
	return testutils.UnmountNS(n.NetNS)
}
