//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/staticip/staticip/e2e/framework"
	"github.com/staticip/staticip/tools/images/imagebuilder"
)

// pinnedComponent is one of staticip's workloads the upgrade test runs from the pinned
// commit's own build: its binaries (go build in the pinned worktree, as that commit's
// `make build` does) packed into an image of its own tag, the pinned commit's image layout.
type pinnedComponent struct {
	// Kind and Name of the workload in the pinned commit's manifests.
	Kind, Name string
	// Binary is the workload's binary (its main package under Package), Extra more binaries
	// the image carries at /<name> (the agent's image carries the CNI plugin it installs).
	Binary, Package string
	Extra           map[string]string // name -> main package
	// NodeLayout: the workload's volumes and mounts are the cluster's (where the node's CNI
	// directories are), as the pinned commit's localcluster overlay sets them.
	NodeLayout bool
	// Ref is the image, localhost/staticip/<binary>:<commit>, set by buildPinnedImages.
	Ref string
	// Flags are the flags the pinned binary knows (from its -help), set by buildPinnedImages.
	Flags map[string]bool
}

// pinnedComponents are the workloads the upgrade replaces: the agent DaemonSet and the
// controller-manager Deployment. (The scheduler runs as a control-plane process on the
// local cluster; on kind it keeps its live template. The edge components stay out of the
// chart's release: valuesFromCluster.)
func pinnedComponents() []*pinnedComponent {
	return []*pinnedComponent{
		{Kind: "DaemonSet", Name: agentDaemonSet, Binary: "staticip-agent", Package: "./cni/cmd/staticip-agent",
			Extra: map[string]string{"staticip": "./cni/cmd/staticip"}, NodeLayout: true},
		{Kind: "Deployment", Name: managerDeployment, Binary: "staticip-controller-manager", Package: "./controllers/cmd/staticip-controller-manager"},
	}
}

// pinnedWorktree checks out commit into a temporary git worktree (removed when the test ends).
// A clone that lacks the commit (a shallow CI checkout) fails here with what to do about it.
func pinnedWorktree(t *testing.T, root, commit string) string {
	t.Helper()
	if err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		shallow, _ := exec.Command("git", "-C", root, "rev-parse", "--is-shallow-repository").Output()
		t.Fatalf("commit %s (-upgrade-from, UPGRADE_FROM) is not in the clone at %s (shallow clone: %s): the upgrade test installs that commit of main; "+
			"clone with full history (git fetch --unshallow, or actions/checkout fetch-depth: 0) or set UPGRADE_FROM to a commit the clone has",
			commit, root, strings.TrimSpace(string(shallow)))
	}
	dir := filepath.Join(t.TempDir(), "pinned")
	if out, err := exec.Command("git", "-C", root, "worktree", "add", "--detach", dir, commit).CombinedOutput(); err != nil {
		t.Fatalf("git worktree add %s: %v\n%s", commit, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("git", "-C", root, "worktree", "remove", "--force", dir).Run() })
	return dir
}

// buildPinnedImages builds the components' binaries in the pinned worktree with its own
// go.mod and sources (as its `make build`: CGO_ENABLED=0 go build -trimpath, into its own
// _output/bin; the Go build cache makes a second run cheap), packs each into an image tagged
// localhost/staticip/<binary>:<commit> (the layout of the pinned commit's
// imagebuilder.Defaults: the binary at /<binary>, the agent's CNI plugin at /staticip; its
// tag is the commit's, so the working tree's :v1 images stay as they are), imports the
// images into every node's containerd and reads each binary's flags.
func buildPinnedImages(t *testing.T, ctx context.Context, pinned, commit string, comps []*pinnedComponent) {
	t.Helper()
	start := time.Now()
	bin := filepath.Join(pinned, "_output", "bin")
	var pkgs []string
	for _, c := range comps {
		pkgs = append(pkgs, c.Package)
		for _, p := range c.Extra {
			pkgs = append(pkgs, p)
		}
	}
	cmd := exec.Command("go", append([]string{"build", "-trimpath", "-o", bin + "/"}, pkgs...)...)
	cmd.Dir = pinned
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the pinned commit's build (go build %s in %s): %v\n%s", strings.Join(pkgs, " "), pinned, err, out)
	}
	t.Logf("built %s of %s in %.1fs", strings.Join(pkgs, " "), commit, time.Since(start).Seconds())

	imageDir := filepath.Join(pinned, "_output", "images")
	var tarballs []string
	for _, c := range comps {
		c.Ref = fmt.Sprintf("localhost/staticip/%s:%s", c.Binary, commit)
		im := imagebuilder.Image{Ref: c.Ref, Binary: filepath.Join(bin, c.Binary), Path: "/" + c.Binary}
		for name := range c.Extra {
			if im.Extra == nil {
				im.Extra = map[string]string{}
			}
			im.Extra["/"+name] = filepath.Join(bin, name)
		}
		tar, err := imagebuilder.Build(pinned, imageDir, im)
		if err != nil {
			t.Fatal(err)
		}
		tarballs = append(tarballs, tar)
		// The flags the old binary knows: std flag's and pflag's -help both list them.
		help, _ := exec.Command(filepath.Join(bin, c.Binary), "-help").CombinedOutput()
		c.Flags = helpFlags(string(help))
		if len(c.Flags) == 0 {
			t.Fatalf("%s -help of %s lists no flags:\n%s", c.Binary, commit, help)
		}
	}
	importImages(t, ctx, tarballs)
}

var helpFlagLine = regexp.MustCompile(`(?m)^\s+(?:-\w, )?--?([A-Za-z0-9][A-Za-z0-9._-]*)`)

// helpFlags are the flag names a Go binary's -help lists (std flag's "  -name type" and
// pflag's "      --name type" / "  -v, --v Level").
func helpFlags(help string) map[string]bool {
	out := map[string]bool{}
	for _, m := range helpFlagLine.FindAllStringSubmatch(help, -1) {
		out[m[1]] = true
	}
	return out
}

// argsFor keeps the args whose flag the binary knows, and says which it dropped (flags the
// working tree's components gained after the pinned commit, e.g. the agent's
// --metrics-bind-address, which the pinned agent's --listen default covers).
func argsFor(args []string, known map[string]bool) (kept, dropped []string) {
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || known[name] {
			kept = append(kept, a)
		} else {
			dropped = append(dropped, a)
		}
	}
	return kept, dropped
}

// importImages loads image tarballs into every node's containerd (namespace k8s.io, the
// kubelet's): a local-cluster node's socket is <state dir>/<node>/containerd/containerd.sock
// (the state dir holds the kubeconfig), a kind node's ctr runs in its container.
func importImages(t *testing.T, ctx context.Context, tarballs []string) {
	t.Helper()
	nodes, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		sock := filepath.Join(filepath.Dir(f.Kubeconfig), n.Name, "containerd", "containerd.sock")
		_, statErr := os.Stat(sock)
		container, kind := framework.KindContainer(&n)
		for _, tar := range tarballs {
			switch {
			case statErr == nil:
				if err := imagebuilder.Import(sock, tar); err != nil {
					t.Fatal(err)
				}
			case kind:
				cmd := exec.Command("docker", "exec", "-i", container, "ctr", "--namespace", "k8s.io", "images", "import", "--all-platforms", "-")
				in, err := os.Open(tar)
				if err != nil {
					t.Fatal(err)
				}
				cmd.Stdin = in
				out, err := cmd.CombinedOutput()
				in.Close()
				if err != nil {
					t.Fatalf("import %s into kind node %s: %v\n%s", tar, container, err, out)
				}
			default:
				t.Fatalf("node %s: no containerd to import the pinned images into (neither %s nor a kind node)", n.Name, sock)
			}
		}
	}
	t.Logf("imported %d images into %d nodes", len(tarballs), len(nodes.Items))
}

// pinnedTemplate turns the pinned manifest's pod template into the one the pinned commit's
// localcluster overlay installs: its image, never pulled; the live args the pinned binary
// knows; on the agent the cluster's node layout (volumes and mounts).
func pinnedTemplate(t *testing.T, c *pinnedComponent, template, live map[string]any) {
	t.Helper()
	spec := template["spec"].(map[string]any)
	liveSpec := live["spec"].(map[string]any)
	ctr := spec["containers"].([]any)[0].(map[string]any)
	liveCtr := liveSpec["containers"].([]any)[0].(map[string]any)
	ctr["image"] = c.Ref
	ctr["imagePullPolicy"] = "Never"
	var liveArgs []string
	for _, a := range liveCtr["args"].([]any) {
		liveArgs = append(liveArgs, a.(string))
	}
	kept, dropped := argsFor(liveArgs, c.Flags)
	ctr["args"] = kept
	t.Logf("%s %s of the pinned commit: image %s, args %v (the working tree's %v dropped: the pinned binary has no such flag)",
		c.Kind, c.Name, c.Ref, kept, dropped)
	if c.NodeLayout {
		ctr["volumeMounts"] = liveCtr["volumeMounts"]
		spec["volumes"] = liveSpec["volumes"]
	}
}

// waitRunningImage waits until the workload has rolled out and every one of its pods runs
// the image (and no pod of another image is left), and returns the pods' images.
func waitRunningImage(t *testing.T, ctx context.Context, kind, ns, name, image string) []string {
	t.Helper()
	if _, err := f.RunKubectl("-n", ns, "rollout", "status", strings.ToLower(kind)+"/"+name, "--timeout=300s"); err != nil {
		t.Fatal(err)
	}
	var selector *metav1.LabelSelector
	switch kind {
	case "DaemonSet":
		ds, err := f.Client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		selector = ds.Spec.Selector
	default:
		d, err := f.Client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		selector = d.Spec.Selector
	}
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		t.Fatal(err)
	}
	var images []string
	if err := framework.WaitFor(ctx, 3*time.Minute, fmt.Sprintf("every pod of %s %s/%s Ready with %s", kind, ns, name, image), func(ctx context.Context) (bool, error) {
		pods, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			return false, err
		}
		images = images[:0]
		for _, p := range pods.Items {
			if len(p.Status.ContainerStatuses) == 0 {
				return false, nil
			}
			cs := p.Status.ContainerStatuses[0]
			images = append(images, fmt.Sprintf("%s=%s", p.Name, cs.Image))
			if p.Spec.Containers[0].Image != image || cs.Image != image || !cs.Ready || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
				return false, nil
			}
		}
		return len(pods.Items) > 0, nil
	}); err != nil {
		t.Fatalf("%v (pods: %v)", err, images)
	}
	sort.Strings(images)
	return images
}
