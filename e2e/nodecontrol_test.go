//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/staticip/staticip/e2e/framework"
	"github.com/staticip/staticip/tools/localcluster/cluster"
)

// nodeControl is a node's power and link, for the failover tests (issue 16, 25):
//   - stop: power off — every process of the node gone at once, no goodbye to the API server;
//   - start: boot on the old state (its disk: containerd's and the kubelet's state, the staticip
//     agent's IPAM database; not its memory: no process, sandbox network or veth survives) and
//     wait until the Node is Ready again and no longer tainted not-ready/unreachable;
//   - partition: cut its link while everything on it keeps running; heal: put it back.
//
// The local cluster does this through tools/localcluster (`localcluster node stop|start|
// partition|heal`), kind through the docker CLI (docker kill/start, network disconnect/connect).
type nodeControl interface {
	stop(t *testing.T, node string)
	start(t *testing.T, node string)
	partition(node string) error
	heal(node string) error
}

// requireNodeControl returns the node control of the cluster under test, or skips saying why:
// the local cluster (its kubeconfig lies in a localcluster state dir) or kind (every node a
// container of the docker engine DOCKER_HOST names, as make e2e-kind sets it).
func requireNodeControl(t *testing.T) nodeControl {
	t.Helper()
	dir := filepath.Dir(f.Kubeconfig)
	if _, err := os.Stat(filepath.Join(dir, "cluster.json")); err == nil {
		root, err := filepath.Abs("..")
		if err != nil {
			t.Fatal(err)
		}
		o := cluster.DefaultOptions()
		o.StateDir, o.BinDir, o.RepoRoot = dir, filepath.Join(root, "_output", "bin"), root
		o.Logf = t.Logf
		return &localNodes{o: o}
	}
	typ, what, err := f.ClusterType(context.Background())
	if err != nil {
		t.Fatalf("which cluster: %v", err)
	}
	if typ != framework.KindCluster {
		t.Skipf("powering off or partitioning a node needs the local cluster (tools/localcluster) or kind (docker kill/start, network disconnect/connect); this is a %s", what)
	}
	if out, err := exec.Command("docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		t.Skipf("kind, but no docker engine answers here (DOCKER_HOST=%q; make e2e-kind sets it): %v: %s", os.Getenv("DOCKER_HOST"), err, strings.TrimSpace(string(out)))
	}
	return &kindNodes{t: t, links: map[string]kindLink{}}
}

// localNodes drives the local cluster's node power and links.
type localNodes struct{ o cluster.Options }

func (c *localNodes) stop(t *testing.T, node string) {
	t.Helper()
	if err := cluster.NodeStop(c.o, node); err != nil {
		t.Fatal(err)
	}
}

func (c *localNodes) partition(node string) error { return cluster.NodePartition(c.o, node) }
func (c *localNodes) heal(node string) error      { return cluster.NodeHeal(c.o, node) }

func (c *localNodes) start(t *testing.T, node string) {
	t.Helper()
	if err := cluster.NodeStart(context.Background(), c.o, node, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
}

// kindNodes drives kind nodes, which are containers:
//   - power off is `docker kill` (SIGKILL to the container's init, so every process of the node
//     dies at once and its network namespace with its veths and routes goes; docker disables
//     the restart policy of a killed container until it is started again). `docker pause`
//     would freeze the processes but keep the node's network namespace answering (the kernel
//     still replies for the pods' addresses) and, unpaused, resume the same processes — a
//     stalled machine, not a failed one that boots again;
//   - power on is `docker start`: kind's entrypoint and systemd boot the node on its old
//     disk (the container's /var volume: containerd's and the kubelet's state, the agent's
//     IPAM database) with a fresh network namespace, as a machine reboots;
//   - partition is `docker network disconnect` from the node's one network (kind's,
//     staticip-kind under make e2e-kind): the node keeps running with no link to the API
//     server, the other nodes or the host; heal is `docker network connect --ip <its address>`
//     (and `--ip6` on a dual-stack network) with the aliases it had, so the node keeps its
//     InternalIPs. The disconnect removes the
//     node's eth0 and with it every route through it (the agent's routes to the other nodes'
//     ranges); the agent puts them back on its next pass after the heal.
type kindNodes struct {
	t     *testing.T
	mu    sync.Mutex
	links map[string]kindLink // partitioned node -> how it was connected
}

var shortID = regexp.MustCompile(`^[0-9a-f]{12}$`)

// kindLink is a node container's attachment to its network.
type kindLink struct {
	network, ip string
	// ip6 is the node's IPv6 address on a dual-stack network (KIND_IP_FAMILY=dual): kind gave
	// the kubelet both as --node-ip, so heal gives both back.
	ip6     string
	aliases []string
}

func docker(args ...string) (string, error) {
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// container is the kind node's container name.
func (c *kindNodes) container(node string) (string, error) {
	n, err := f.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	name, ok := framework.KindContainer(n)
	if !ok {
		return "", fmt.Errorf("node %s is not a kind node (providerID %q)", node, n.Spec.ProviderID)
	}
	return name, nil
}

// link reads the container's one network attachment.
func (c *kindNodes) link(container string) (kindLink, error) {
	out, err := docker("inspect", "-f", "{{json .NetworkSettings.Networks}}", container)
	if err != nil {
		return kindLink{}, err
	}
	var nets map[string]struct {
		IPAddress         string
		GlobalIPv6Address string
		Aliases           []string
	}
	if err := json.Unmarshal([]byte(out), &nets); err != nil {
		return kindLink{}, fmt.Errorf("docker inspect %s: networks %q: %w", container, out, err)
	}
	for name, n := range nets {
		if len(nets) != 1 || n.IPAddress == "" {
			break
		}
		l := kindLink{network: name, ip: n.IPAddress, ip6: n.GlobalIPv6Address}
		for _, a := range n.Aliases {
			// Docker lists the container's own name and short ID among the aliases (kind
			// sets none of its own); it adds those by itself on every connect.
			if a != "" && a != container && !shortID.MatchString(a) {
				l.aliases = append(l.aliases, a)
			}
		}
		return l, nil
	}
	return kindLink{}, fmt.Errorf("kind node %s: want one network with an address, has %s", container, strings.TrimSpace(out))
}

func (c *kindNodes) stop(t *testing.T, node string) {
	t.Helper()
	ctr, err := c.container(node)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := c.link(ctr)
	if _, err := docker("kill", ctr); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(context.Background(), time.Minute, ctr+" stopped", func(context.Context) (bool, error) {
		out, err := docker("inspect", "-f", "{{.State.Running}}", ctr)
		return err == nil && strings.TrimSpace(out) == "false", nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s powered off: docker kill %s (it had %s on %s)", node, ctr, l.ip, l.network)
}

func (c *kindNodes) start(t *testing.T, node string) {
	t.Helper()
	ctr, err := c.container(node)
	if err != nil {
		t.Fatal(err)
	}
	// Still off: docker must not have restarted it by kind's restart policy (on-failure:1,
	// which docker disables for a killed container until it is started again).
	if out, err := docker("inspect", "-f", "{{.State.Status}} restarts={{.RestartCount}}", ctr); err != nil || !strings.HasPrefix(out, "exited") {
		t.Fatalf("%s should still be powered off before docker start: %s %v", ctr, strings.TrimSpace(out), err)
	}
	// Heartbeats carry whole seconds: a Ready condition from before the boot is no proof.
	booted := time.Now().Truncate(time.Second)
	if _, err := docker("start", ctr); err != nil {
		t.Fatal(err)
	}
	l, _ := c.link(ctr)
	t.Logf("%s powered on: docker start %s (%s on %s); waiting for it to boot and report Ready", node, ctr, l.ip, l.network)
	if err := waitNodeBack(context.Background(), node, booted, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s booted, Ready and untainted in %s", node, time.Since(booted).Round(time.Second))
}

func (c *kindNodes) partition(node string) error {
	ctr, err := c.container(node)
	if err != nil {
		return err
	}
	l, err := c.link(ctr)
	if err != nil {
		return err
	}
	if _, err := docker("network", "disconnect", l.network, ctr); err != nil {
		return err
	}
	c.mu.Lock()
	c.links[node] = l
	c.mu.Unlock()
	c.t.Logf("%s partitioned: docker network disconnect %s %s (it had %s); its processes keep running", node, l.network, ctr, l.ip)
	return nil
}

func (c *kindNodes) heal(node string) error {
	c.mu.Lock()
	l, ok := c.links[node]
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("%s was not partitioned by this test", node)
	}
	ctr, err := c.container(node)
	if err != nil {
		return err
	}
	args := []string{"network", "connect", "--ip", l.ip}
	if l.ip6 != "" {
		args = append(args, "--ip6", l.ip6)
	}
	for _, a := range l.aliases {
		args = append(args, "--alias", a)
	}
	if _, err := docker(append(args, l.network, ctr)...); err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.links, node)
	c.mu.Unlock()
	c.t.Logf("%s healed: docker %s", node, strings.Join(append(args, l.network, ctr), " "))
	return nil
}

// waitNodeBack waits until a booted node is Ready with a heartbeat since the boot and the
// node lifecycle controller has lifted its not-ready and unreachable taints (until then the
// scheduler and a test choosing nodes by taint still see it as down).
func waitNodeBack(ctx context.Context, node string, booted time.Time, timeout time.Duration) error {
	var last string
	err := framework.WaitFor(ctx, timeout, node+" Ready and untainted after its boot", func(ctx context.Context) (bool, error) {
		n, err := f.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, t := range n.Spec.Taints {
			if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
				last = "tainted " + t.ToString()
				return false, nil
			}
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				last = fmt.Sprintf("Ready=%s (%s) heartbeat %s", c.Status, c.Reason, c.LastHeartbeatTime.Format(time.RFC3339))
				return c.Status == corev1.ConditionTrue && !c.LastHeartbeatTime.Time.Before(booted), nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("%w (last: %s)", err, last)
	}
	return nil
}
