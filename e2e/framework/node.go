package framework

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kindProviderPrefix starts a kind node's spec.providerID: kind://docker/<cluster>/<node>,
// the node's container name last.
const kindProviderPrefix = "kind://docker/"

// NodeShell runs commands in a node's network namespace: on a local-cluster node with
// nsenter into its netns, on a kind node with `docker exec` into its container (the docker
// CLI with the environment's DOCKER_HOST, which make e2e-kind sets).
type NodeShell struct {
	Node string
	// Netns is the local cluster's network namespace, Container the kind node's container;
	// exactly one is set.
	Netns, Container string
	f                *Framework
}

// Where says how commands reach the node, for logs.
func (s *NodeShell) Where() string {
	if s.Container != "" {
		return "docker exec " + s.Container
	}
	return "netns " + s.Netns
}

// NodeShell returns the way into a node's network namespace, or nil when this machine has
// none (a remote cluster), with the reason.
func (f *Framework) NodeShell(ctx context.Context, node string) (*NodeShell, string, error) {
	netns, err := f.NodeNetns(ctx, node)
	if err != nil {
		return nil, "", err
	}
	if netns != "" {
		return &NodeShell{Node: node, Netns: netns, f: f}, "", nil
	}
	n, err := f.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, "", err
	}
	container, ok := KindContainer(n)
	if !ok {
		return nil, fmt.Sprintf("node %s is neither a local-cluster node (no %s annotation) nor a kind node (providerID %q)", node, NetnsAnnotation, n.Spec.ProviderID), nil
	}
	if out, err := exec.Command("docker", "inspect", "-f", "{{.State.Running}}", container).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "true" {
		return nil, fmt.Sprintf("kind node %s: its container is not running on this machine's docker (%v: %s)", node, err, strings.TrimSpace(string(out))), nil
	}
	return &NodeShell{Node: node, Container: container, f: f}, "", nil
}

// KindContainer is the container of a kind node (the last part of its providerID
// kind://docker/<cluster>/<node>); false for any other node.
func KindContainer(n *corev1.Node) (string, bool) {
	rest, ok := strings.CutPrefix(n.Spec.ProviderID, kindProviderPrefix)
	if !ok {
		return "", false
	}
	return rest[strings.LastIndex(rest, "/")+1:], true
}

// Exec runs a command on the node.
func (s *NodeShell) Exec(command ...string) (string, error) {
	if s.Netns != "" {
		return s.f.ExecOnNode(s.Netns, command...)
	}
	out, err := exec.Command("docker", append([]string{"exec", s.Container}, command...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("on %s: %s: %w: %s", s.Where(), strings.Join(command, " "), err, out)
	}
	return string(out), nil
}

var copiedTool sync.Map // container -> path of the node tool inside it

// ExecTool runs the framework's NodeTool (the testserver) on the node; on a kind node it
// is copied into the container first.
func (s *NodeShell) ExecTool(args ...string) (string, error) {
	if s.f.NodeTool == "" {
		return "", fmt.Errorf("no node tool built")
	}
	if s.Netns != "" {
		return s.Exec(append([]string{s.f.NodeTool}, args...)...)
	}
	const inNode = "/usr/local/bin/staticip-e2e-testserver"
	if _, done := copiedTool.Load(s.Container); !done {
		if out, err := exec.Command("docker", "cp", s.f.NodeTool, s.Container+":"+inNode).CombinedOutput(); err != nil {
			return "", fmt.Errorf("docker cp %s into %s: %w: %s", filepath.Base(s.f.NodeTool), s.Container, err, out)
		}
		copiedTool.Store(s.Container, inNode)
	}
	return s.Exec(append([]string{inNode}, args...)...)
}
