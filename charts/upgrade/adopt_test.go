// Package upgrade tests the move from a kustomize install to the chart on a real API server
// (internal/testenv): charts/staticip/scripts/adopt.sh and `helm upgrade --install` take over the
// objects `kubectl apply -k manifests/...` made without changing any workload's pod template
// (so no pod would restart), a second upgrade changes nothing, agent.cleanup rolls the agents
// into --cleanup, and `helm uninstall` removes what the release owns. The whole path with
// running pods, static IPs and the node cleanup is e2e/upgrade_test.go.
package upgrade_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/staticip/staticip/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// the kustomize install of README's "Without Helm" steps, as the chart's defaults render it.
var kustomizeDirs = []string{"manifests/cni", "manifests/scheduler/replace-default", "manifests/admission", "manifests/controller-manager"}

const readmePool = `apiVersion: jke.jdcloud.com/v1
kind: IPPool
metadata: {name: default}
spec:
  cidrs: [10.244.0.0/16]
  blockSize: 24
`

func TestAdoptKustomizeInstallIntoRelease(t *testing.T) {
	env := testenv.Get(t)
	ctx := testenv.Context(t, 5*time.Minute)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(bin, "kubectl")
	helm := filepath.Join(root, "_output", "bin", "helm")
	for _, b := range []string{kubectl, helm} {
		if _, err := os.Stat(b); err != nil {
			t.Skipf("no %s (make helm, make k8s-bins): %v", b, err)
		}
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testenv.WriteKubeconfig(env.Config, kubeconfig); err != nil {
		t.Fatal(err)
	}
	run := func(stdin, name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "HELM="+helm, "KUBECTL="+kubectl)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	kube := kubernetes.NewForConfigOrDie(env.Config)

	for _, d := range kustomizeDirs {
		run("", kubectl, "apply", "-k", d)
	}
	run(readmePool, kubectl, "apply", "-f", "-")
	before := workloads(ctx, t, kube)

	t.Log(lastLine(run("", "charts/staticip/scripts/adopt.sh", "staticip", "kube-system")))
	run("", helm, "upgrade", "--install", "staticip", "charts/staticip", "-n", "kube-system")
	after := workloads(ctx, t, kube)
	for name, w := range before {
		a := after[name]
		switch {
		case name == "deployment kube-system/staticip-scheduler":
			// Its ConfigMap loses kustomize's hash suffix: the one workload that rolls.
			if a.template == w.template {
				t.Errorf("%s: the pod template still names kustomize's ConfigMap", name)
			}
		// The pod template is what restarts pods (a new ReplicaSet or ControllerRevision); a
		// Deployment's generation also counts annotation changes (the API server copies its
		// annotations to the ReplicaSet), so adoption's meta.helm.sh annotations bump it.
		case a.template != w.template:
			t.Errorf("%s: the upgrade changed its pod template (generation %d -> %d): its pods would restart:\n%s",
				name, w.generation, a.generation, lineDiff(w.spec, a.spec))
		}
	}
	out := run("", "bash", "-c", helm+" get manifest staticip -n kube-system | "+kubectl+
		` get -f - --no-headers -o 'custom-columns=KIND:.kind,NAME:.metadata.name,BY:.metadata.labels.app\.kubernetes\.io/managed-by,REL:.metadata.annotations.meta\.helm\.sh/release-name'`)
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		n++
		if len(f) != 4 || f[2] != "Helm" || f[3] != "staticip" {
			t.Errorf("not the release's: %s", line)
		}
	}
	t.Logf("%d objects of the release, all Helm's", n)

	// Upgrading again changes nothing.
	run("", helm, "upgrade", "staticip", "charts/staticip", "-n", "kube-system")
	if again := workloads(ctx, t, kube); !sameWorkloads(again, after) {
		t.Errorf("a second upgrade with the same values changed a workload:\nbefore %v\nafter  %v", after, again)
	}

	// Uninstall: the agents' cleanup mode, then the release gone.
	run("", helm, "upgrade", "staticip", "charts/staticip", "-n", "kube-system", "--reuse-values", "--set", "agent.cleanup=true", "--set", "ipPools=null")
	ds, err := kube.AppsV1().DaemonSets("kube-system").Get(ctx, "staticip-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if args := ds.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--cleanup") {
		t.Errorf("agent.cleanup=true: the agent's args have no --cleanup: %v", args)
	}
	run("", helm, "uninstall", "staticip", "-n", "kube-system")
	for name := range before {
		kind, key, _ := strings.Cut(name, " ")
		ns, obj, _ := strings.Cut(key, "/")
		var err error
		if kind == "daemonset" {
			_, err = kube.AppsV1().DaemonSets(ns).Get(ctx, obj, metav1.GetOptions{})
		} else {
			_, err = kube.AppsV1().Deployments(ns).Get(ctx, obj, metav1.GetOptions{})
		}
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s after helm uninstall: %v", name, errors.Join(err, errors.New("still there")))
		}
	}
}

type workload struct {
	generation int64
	template   string
	spec       string // indented JSON, for the failure message
}

// lineDiff lists the lines of a and b that the other lacks.
func lineDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	for _, l := range al {
		if !slices.Contains(bl, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range bl {
		if !slices.Contains(al, l) {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

func specJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func workloads(ctx context.Context, t *testing.T, kube kubernetes.Interface) map[string]workload {
	t.Helper()
	out := map[string]workload{}
	ds, err := kube.AppsV1().DaemonSets("kube-system").Get(ctx, "staticip-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out["daemonset kube-system/staticip-agent"] = workload{ds.Generation, ds.Spec.Template.String(), specJSON(t, ds.Spec)}
	for _, key := range []string{"staticip-system/staticip-controller-manager", "kube-system/staticip-scheduler"} {
		ns, name, _ := strings.Cut(key, "/")
		d, err := kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out["deployment "+key] = workload{d.Generation, d.Spec.Template.String(), specJSON(t, d.Spec)}
	}
	return out
}

func sameWorkloads(a, b map[string]workload) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
