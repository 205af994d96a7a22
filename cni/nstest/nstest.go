// Package nstest is the network namespace of the CNI tests: containernetworking's
// testutils.NewNS (a bind mount under /var/run/netns, named cnitest-<random>) with what our
// tests add to it — loopback up, and the name that `ip -n` and `nsenter --net` take. Close
// removes it again.
package nstest

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

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

// ForTest is New for a test: it fails the test when the namespace cannot be made and deletes it
// when the test ends.
func ForTest(t testing.TB, tag string) *NetNS {
	t.Helper()
	n, err := New(tag)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// Talk has the pod in from connect to ip:port over TCP, the pod in to listening on it; the test
// fails when it cannot.
func Talk(t testing.TB, from, to *NetNS, ip netip.Addr, port int) {
	t.Helper()
	addr := net.JoinHostPort(ip.String(), fmt.Sprint(port))
	var ln net.Listener
	if err := to.Do(func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	if err := from.Do(func(ns.NetNS) error {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		t.Errorf("pod -> %s: %v", addr, err)
	}
}
