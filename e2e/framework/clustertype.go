package framework

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterType is what the suite runs against, told from the nodes.
type ClusterType string

const (
	// LocalCluster is tools/localcluster on this machine: every node is a network
	// namespace named by its NetnsAnnotation, the control plane runs as processes whose
	// pids are in the kubeconfig's directory.
	LocalCluster ClusterType = "local cluster"
	// KindCluster is a kind cluster: every node is a container (spec.providerID
	// kind://docker/<cluster>/<node>), reachable with NodeShell (docker exec).
	KindCluster ClusterType = "kind"
	// OtherCluster is anything else (a remote or real cluster): no way into the nodes.
	OtherCluster ClusterType = "other"
)

var clusterType struct {
	sync.Once
	t    ClusterType
	what string
	err  error
}

// ClusterType tells the local cluster, kind and anything else apart, once per run, with
// a description for logs and skips (e.g. `kind cluster "staticip" (3 nodes, kind://docker/staticip/...)`).
// Tests that need a local-cluster internal (a node's network namespace to cut, the API
// server's process) call RequireLocalCluster; tests that only need to run commands on a
// node use NodeShell, which works on both.
func (f *Framework) ClusterType(ctx context.Context) (ClusterType, string, error) {
	clusterType.Do(func() {
		nodes, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			clusterType.err = err
			return
		}
		local, kind := 0, 0
		kindName := ""
		for _, n := range nodes.Items {
			if ns, err := f.NodeNetns(ctx, n.Name); err == nil && ns != "" {
				local++
			}
			if rest, ok := strings.CutPrefix(n.Spec.ProviderID, kindProviderPrefix); ok {
				kind++
				kindName, _, _ = strings.Cut(rest, "/")
			}
		}
		switch total := len(nodes.Items); {
		case total > 0 && local == total:
			clusterType.t, clusterType.what = LocalCluster, fmt.Sprintf("local cluster (%d nodes, network namespaces on this machine)", total)
		case total > 0 && kind == total:
			clusterType.t, clusterType.what = KindCluster, fmt.Sprintf("kind cluster %q (%d nodes, containers: providerID %s%s/<node>)", kindName, total, kindProviderPrefix, kindName)
		default:
			clusterType.t, clusterType.what = OtherCluster, fmt.Sprintf("neither a local cluster nor kind (%d nodes: %d with a network namespace here, %d kind)", total, local, kind)
		}
	})
	return clusterType.t, clusterType.what, clusterType.err
}

// RequireLocalCluster skips the test, printing why, unless the cluster under test is the
// local cluster; needs says what the test needs of it ("a node's network namespace to cut
// its link"). make e2e-kind lists every such skip with its reason.
func (f *Framework) RequireLocalCluster(t *testing.T, needs string) {
	t.Helper()
	typ, what, err := f.ClusterType(context.Background())
	if err != nil {
		t.Fatalf("which cluster: %v", err)
	}
	if typ != LocalCluster {
		t.Skipf("SKIP: needs the local cluster (tools/localcluster): %s; this is a %s", needs, what)
	}
}
