// Package manifests_test checks the shipped manifests: static properties of the files, and
// (against a real kube-apiserver from internal/testenv) what their admission policies let
// through.
package manifests_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"k8s.io/apimachinery/pkg/util/intstr"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/staticip/staticip/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// yamlDocs returns every YAML document under manifests/ (CRDs excluded: generated, no images).
func yamlDocs(t *testing.T) map[string][][]byte {
	t.Helper()
	docs := map[string][][]byte{}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") || strings.HasPrefix(path, "crds"+string(filepath.Separator)) {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		docs[path], err = splitYAML(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// splitYAML returns the documents of a multi-document YAML stream.
func splitYAML(data []byte) ([][]byte, error) {
	var docs [][]byte
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, doc)
	}
}

// Every image in manifests/ names a version: a `:latest` (or untagged) image is whatever was
// pushed last, so two nodes can run different agents and a rollback rolls back nothing.
func TestImagesAreVersioned(t *testing.T) {
	found := 0
	for path, docs := range yamlDocs(t) {
		for _, doc := range docs {
			for _, line := range strings.Split(string(doc), "\n") {
				line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "- "))
				image, ok := strings.CutPrefix(line, "image:")
				if !ok {
					continue
				}
				image = strings.Trim(strings.TrimSpace(image), `"'`)
				found++
				_, tag, tagged := strings.Cut(image[strings.LastIndex(image, "/")+1:], ":")
				if !tagged || tag == "" || tag == "latest" {
					t.Errorf("%s: image %q has no version tag", path, image)
				}
			}
		}
	}
	if found == 0 {
		t.Fatal("no image found under manifests/: the test reads the wrong directory")
	}
}

// The node agent is not privileged: CAP_NET_ADMIN (its host routes) is the one capability
// it adds, all others are dropped (verified on the local cluster by the whole e2e suite,
// which runs on these agents).
func TestAgentIsNotPrivileged(t *testing.T) {
	var ds *appsv1.DaemonSet
	for _, doc := range yamlDocs(t)[filepath.Join("cni", "daemonset.yaml")] {
		var d appsv1.DaemonSet
		if err := yaml.Unmarshal(doc, &d); err != nil {
			t.Fatal(err)
		}
		if d.Kind == "DaemonSet" {
			ds = &d
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet in cni/daemonset.yaml")
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		sc := c.SecurityContext
		if sc == nil {
			t.Fatalf("container %s has no securityContext", c.Name)
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("container %s is privileged", c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("container %s allows privilege escalation", c.Name)
		}
		if sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
			t.Errorf("container %s does not drop all capabilities: %+v", c.Name, sc.Capabilities)
		} else if add := sc.Capabilities.Add; len(add) != 1 || add[0] != corev1.Capability("NET_ADMIN") {
			t.Errorf("container %s adds %v, want only NET_ADMIN", c.Name, add)
		}
	}
}

// Every Deployment can run all its replicas on a cluster where one node is eligible for
// it: replace-default's scheduler is pinned to the control-plane nodes, and a kubeadm or
// kind cluster usually has one. A required pod anti-affinity of a Deployment against its
// own pods on kubernetes.io/hostname leaves the second replica Pending there forever (and
// `kubectl rollout status` never returns; make e2e-kind's install failed on it). Spread
// with a topologySpreadConstraint instead: DoNotSchedule over the eligible nodes puts the
// standby on another node whenever there is one, and beside the leader when there is not.
// A Deployment on the host network that listens on fixed ports (staticip-controller-manager,
// which must run before any node has a pod network: its IPPool allocator gives nodes their
// ranges) cannot put two replicas on one node whatever its affinity says — the second could
// not bind — so it is exempt, as Cilium's operator is; its README says to run one replica on a
// one-node cluster.
func TestReplicasFitOnOneEligibleNode(t *testing.T) {
	found := 0
	for path, docs := range yamlDocs(t) {
		for _, doc := range docs {
			var d appsv1.Deployment
			if err := yaml.Unmarshal(doc, &d); err != nil || d.Kind != "Deployment" {
				continue
			}
			found++
			spec := d.Spec.Template.Spec
			if spec.Affinity == nil || spec.Affinity.PodAntiAffinity == nil {
				continue
			}
			if hostPorts(spec) {
				t.Logf("%s: Deployment %s is on the host network with fixed ports: one replica per node by construction", path, d.Name)
				continue
			}
			for _, term := range spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
				if term.TopologyKey != corev1.LabelHostname || term.LabelSelector == nil {
					continue
				}
				own := true
				for k, v := range term.LabelSelector.MatchLabels {
					own = own && d.Spec.Template.Labels[k] == v
				}
				if own && len(term.LabelSelector.MatchExpressions) == 0 {
					t.Errorf("%s: Deployment %s requires its replicas on different nodes (required pod anti-affinity on %s): with one eligible node (one control plane) the second stays Pending; use a topologySpreadConstraint", path, d.Name, term.TopologyKey)
				}
			}
		}
	}
	if found == 0 {
		t.Fatal("no Deployment under manifests/: the test reads the wrong directory")
	}
}

// A Deployment on the host network with fixed ports can never surge: the new pod needs a node
// where no old replica holds the ports, and on a cluster with as many eligible nodes as
// replicas (kind: two workers, the spare tainted) there is none — `helm upgrade` that changes
// the pod template (or `kubectl rollout restart`) then hangs with the new pod Pending
// ("didn't have free ports") and the old ones never replaced (seen on kind). Such a Deployment
// rolls by taking one replica down first (maxSurge 0, maxUnavailable ≥ 1); with Lease
// election the other replica leads meanwhile.
func TestHostPortDeploymentsRollWithoutSurge(t *testing.T) {
	checked := 0
	for path, docs := range yamlDocs(t) {
		for _, doc := range docs {
			var d appsv1.Deployment
			if err := yaml.Unmarshal(doc, &d); err != nil || d.Kind != "Deployment" || !hostPorts(d.Spec.Template.Spec) {
				continue
			}
			checked++
			ru := d.Spec.Strategy.RollingUpdate
			if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
				continue
			}
			if ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0 || ru.MaxSurge.Type != intstr.Int ||
				ru.MaxUnavailable == nil || ru.MaxUnavailable.Type != intstr.Int || ru.MaxUnavailable.IntValue() < 1 {
				t.Errorf("%s: Deployment %s listens on host ports but its rolling update may surge (strategy %+v): want maxSurge: 0, maxUnavailable: 1", path, d.Name, d.Spec.Strategy)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no host-network Deployment with fixed ports under manifests/: the test reads the wrong directory")
	}
}

// Every port a host-network workload listens on lies below Linux's ephemeral port range
// (32768-60999 by default): a port inside it can already be the source port of any outgoing
// connection of the host — on kind's control plane kube-apiserver's connection to etcd held
// 127.0.0.1:51006, the wrapper's old listen port, and the wrapper crash-looped on "address
// already in use".
func TestHostNetworkPortsOutsideTheEphemeralRange(t *testing.T) {
	checked := 0
	for path, docs := range yamlDocs(t) {
		for _, doc := range docs {
			var obj struct {
				Kind string `json:"kind"`
				Spec struct {
					corev1.PodSpec `json:",inline"`
					Template       struct {
						Spec corev1.PodSpec `json:"spec"`
					} `json:"template"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal(doc, &obj); err != nil {
				continue // not a workload this test reads
			}
			spec := obj.Spec.Template.Spec
			if obj.Kind == "Pod" {
				spec = obj.Spec.PodSpec
			}
			if !spec.HostNetwork {
				continue
			}
			for _, c := range spec.Containers {
				var ports []int
				for _, a := range append(append([]string{}, c.Command...), c.Args...) {
					if _, value, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "--") &&
						(strings.Contains(a, "address=") || strings.HasPrefix(a, "--listen=") || strings.Contains(a, "-port=")) {
						if i := strings.LastIndex(value, ":"); i >= 0 {
							value = value[i+1:]
						}
						if p, err := strconv.Atoi(value); err == nil {
							ports = append(ports, p)
						}
					}
				}
				for _, probe := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
					if probe != nil && probe.HTTPGet != nil {
						ports = append(ports, probe.HTTPGet.Port.IntValue())
					}
				}
				for _, p := range ports {
					checked++
					if p >= 32768 && p <= 60999 {
						t.Errorf("%s: container %s on the host network uses port %d, inside the ephemeral range 32768-60999", path, c.Name, p)
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no host-network port found under manifests/: the test reads the wrong fields")
	}
	t.Logf("%d host-network ports checked", checked)
}

// hostPorts: the pod is on the host network and a container declares a port (the scheduler's
// NodePorts filter then never puts two such pods on one node).
func hostPorts(spec corev1.PodSpec) bool {
	if !spec.HostNetwork {
		return false
	}
	for _, c := range spec.Containers {
		if len(c.Ports) > 0 {
			return true
		}
	}
	return false
}
