//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/e2e/framework"
)

var (
	upgradeFromRelease = flag.String("upgrade-from-release", "", "run TestUpgradeFromRelease: the commit of main released as the previous version "+
		"(its own make release in a git worktree of it) and installed first; make e2e-kind sets it (UPGRADE_FROM_RELEASE) on its fresh kind cluster")
	upgradeFromReleaseVersion = flag.String("upgrade-from-release-version", "v0.1.0-alpha.0", "the version -upgrade-from-release is released as")
	uninstallRelease          = flag.Bool("uninstall-release", false, "run TestUninstallRelease: charts/staticip/README.md's uninstall of the released chart "+
		"and the leftover check (make e2e-kind runs it after the suite; staticip is gone at its end)")
)

// TestUpgradeFromRelease is the upgrade a user makes from one release to the next, both
// pulled from a registry (RELEASING.md, "Tested"), on kind (tools/kind: the registry the
// nodes pull from, kind.sh):
//
//  1. the previous release: a git worktree of -upgrade-from-release, its own `make release
//     VERSION=-upgrade-from-release-version` (its tools, its sources, linux/amd64) into the
//     registry, installed with that commit's README commands (`helm show crds oci://... |
//     kubectl apply`, `helm upgrade --install staticip oci://...`: kind.sh install-release-of);
//     every component runs an image of that release, pulled by the nodes (its digest);
//  2. an EnhancedStatefulSet with static IPs, every pod Ready; its pods' UIDs, IPs and
//     restart counts and every StaticIP of the cluster recorded;
//  3. the working tree released as the next version into the same registry and installed with
//     this README's commands (kind.sh install: the same `helm upgrade --install`);
//  4. every component of the previous release rolled to the new release's images, pulled
//     from the registry (each pod's image ID is the pushed digest); Helm's history is the two
//     releases; no pod of the set was recreated, restarted or moved, no IP or StaticIP changed.
//
// It installs staticip, so it runs first on a cluster without it (make e2e-kind; the suite
// then runs on the upgraded install) and is off unless -upgrade-from-release is set.
// TestUninstallRelease is its end: the uninstall and the leftover check, after the suite.
func TestUpgradeFromRelease(t *testing.T) {
	if *upgradeFromRelease == "" {
		t.Skip("-upgrade-from-release not set: make e2e-kind runs this test on its fresh kind cluster before the suite (UPGRADE_FROM_RELEASE); it installs staticip")
	}
	ctx := context.Background()
	root, helm := requireKindRelease(t, ctx)
	if out, err := exec.Command(helm, "--kubeconfig", f.Kubeconfig, "status", upgradeRelease, "-n", upgradeReleaseNS).CombinedOutput(); err == nil {
		t.Fatalf("staticip is installed on this cluster already: the upgrade starts from a cluster without it (make kind-down first):\n%s", lastLines(string(out), 8))
	}
	kindSh := filepath.Join(root, "tools", "kind", "kind.sh")
	stateDir := os.Getenv("KIND_STATE_DIR")
	if stateDir == "" {
		stateDir = "/var/lib/staticip-kind"
	}

	// 1. The previous release, by its own tooling, installed as its README says.
	pinned := pinnedWorktree(t, root, *upgradeFromRelease)
	oldVersion := *upgradeFromReleaseVersion
	runLogged(t, root, "the previous release ("+*upgradeFromRelease+" as "+oldVersion+"): its make release, its README's install",
		kindSh, "install-release-of", pinned, oldVersion)
	oldImages := releaseImages(t, filepath.Join(pinned, "_output", "release", oldVersion, "images.txt"))
	repo := releaseRepo(t, oldImages)
	before := waitReleaseRunning(t, ctx, repo, oldImages, "the previous release "+oldVersion)

	// 2. Static-IP workload.
	w := startUpgradeWorkload(t, ctx, "e2e-upgrade-release")

	// 3. The working tree, released as the next version, and README's helm upgrade --install.
	runLogged(t, root, "the working tree's release and README's install (the upgrade)", kindSh, "install")
	b, err := os.ReadFile(filepath.Join(stateDir, "release.version"))
	if err != nil {
		t.Fatal(err)
	}
	newVersion := strings.TrimSpace(string(b))
	if newVersion == oldVersion {
		t.Fatalf("the working tree was released as %s, the previous release's version", newVersion)
	}
	newImages := releaseImages(t, filepath.Join(root, "_output", "release", newVersion, "images.txt"))

	// 4. Every component rolled to the new release; nothing of the workload moved.
	after := waitReleaseRunning(t, ctx, repo, newImages, "the new release "+newVersion)
	for _, c := range before {
		if !contains(after, c) {
			t.Errorf("%s of the previous release is gone after the upgrade (components now: %v)", c, after)
		}
	}
	history := helmHistory(t, helm)
	if len(history) < 2 || history[0].Chart != "staticip-"+strings.TrimPrefix(oldVersion, "v") ||
		history[len(history)-1].Chart != "staticip-"+strings.TrimPrefix(newVersion, "v") ||
		history[len(history)-1].AppVersion != newVersion || history[len(history)-1].Status != "deployed" {
		t.Errorf("helm history of %s is not %s then %s (deployed): %+v", upgradeRelease, oldVersion, newVersion, history)
	} else {
		t.Logf("helm history: %+v", history)
	}
	w.assertNothingMoved(t, ctx)
	// The set goes with the test's namespace; the suite runs on the upgraded install.
}

// TestUninstallRelease is the end of a release's life on the cluster: every workload that
// uses static IPs deleted, charts/staticip/README.md's "Uninstall" commands for a released
// chart verbatim (helm pull of the chart from the registry, its scripts/uninstall.sh
// --delete-crds: kind.sh uninstall), then the leftover check — no release, no staticip CRD
// nor instance of one, and on every node none of the agent's routes or files. make e2e-kind
// runs it after the suite (off unless -uninstall-release).
func TestUninstallRelease(t *testing.T) {
	if !*uninstallRelease {
		t.Skip("-uninstall-release not set: make e2e-kind runs this test after the suite; it uninstalls staticip")
	}
	ctx := context.Background()
	root, helm := requireKindRelease(t, ctx)
	uninstallAndCheckLeftovers(t, ctx, filepath.Join(root, "charts", "staticip"), func() {
		runLogged(t, root, "charts/staticip/README.md's uninstall", filepath.Join(root, "tools", "kind", "kind.sh"), "uninstall")
	})
	if out, err := exec.Command(helm, "--kubeconfig", f.Kubeconfig, "status", upgradeRelease, "-n", upgradeReleaseNS).CombinedOutput(); err == nil {
		t.Errorf("the Helm release %s is left after the uninstall:\n%s", upgradeRelease, lastLines(string(out), 8))
	}
}

// requireKindRelease fails unless the cluster is tools/kind's (its registry, kind.sh), and
// returns the checkout and helm.
func requireKindRelease(t *testing.T, ctx context.Context) (root, helm string) {
	t.Helper()
	if typ, what, err := f.ClusterType(ctx); err != nil {
		t.Fatal(err)
	} else if typ != framework.KindCluster {
		t.Fatalf("needs tools/kind's cluster and registry (make e2e-kind); this is %s", what)
	}
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root, helmBinary(t, root)
}

// upgradeWorkload is the static-IP workload an upgrade must leave alone: a 6-pod
// EnhancedStatefulSet, its pods and every StaticIP of the cluster as they were before.
type upgradeWorkload struct {
	e    *estsTest
	rev  string
	pods map[string]podRecord
	sips map[string]string
}

// startUpgradeWorkload creates the set in a namespace of prefix, waits until its pods are
// Ready with their StaticIPs, and records them.
func startUpgradeWorkload(t *testing.T, ctx context.Context, prefix string) *upgradeWorkload {
	t.Helper()
	e := newESTSTest(t, prefix, "up")
	e.create(ctx, testServerImage, 0)
	rev := e.observed(ctx).Status.UpdateRevision
	pods := e.waitSettled(ctx, "6 pods Ready before the upgrade", allAt(rev))
	e.rememberIPs(pods)
	e.assertStaticIPs(ctx, "before the upgrade", pods)
	w := &upgradeWorkload{e: e, rev: rev, pods: podRecords(pods), sips: staticIPRecords(t, ctx, e)}
	t.Logf("before the upgrade: %d pods, %d StaticIPs in the cluster", len(w.pods), len(w.sips))
	return w
}

// assertNothingMoved waits until the set's pods are Ready at their revision again and fails
// the test for any pod recreated, restarted or moved, any IP changed, any StaticIP of the
// cluster dropped or changed since startUpgradeWorkload.
func (w *upgradeWorkload) assertNothingMoved(t *testing.T, ctx context.Context) {
	t.Helper()
	podsAfter := w.e.waitSettled(ctx, "6 pods Ready after the upgrade", allAt(w.rev))
	w.e.assertIPsKept("after the upgrade", podsAfter)
	recs := podRecords(podsAfter)
	for name, was := range w.pods {
		if now := recs[name]; now != was {
			t.Errorf("pod %s changed across the upgrade: before %+v, after %+v", name, was, now)
		} else {
			t.Logf("pod %s unchanged across the upgrade: %+v", name, now)
		}
	}
	sipsAfter := staticIPRecords(t, ctx, w.e)
	for key, was := range w.sips {
		if now, ok := sipsAfter[key]; !ok {
			t.Errorf("StaticIP %s (%s) was dropped by the upgrade", key, was)
		} else if now != was {
			t.Errorf("StaticIP %s changed across the upgrade: before %s, after %s", key, was, now)
		} else {
			t.Logf("StaticIP %s unchanged across the upgrade: %s", key, now)
		}
	}
	assertClaimsInStatus(t, ctx)
}

// assertClaimsInStatus (issue 37's upgrade): once the agents are upgraded, every assigned
// IPRange carries its owner's claim in status.holders (Serving, at its ownerGeneration), and every
// Node whose agent runs says so with the label staticip.jke.jdcloud.com/claims-in-status=true — the
// previous release's claims in the ipranges-observed annotation are no longer what anyone reads.
func assertClaimsInStatus(t *testing.T, ctx context.Context) {
	t.Helper()
	cs := versioned.NewForConfigOrDie(f.Config)
	var missing []string
	err := framework.WaitFor(ctx, 90*time.Second, "every claim in status.holders", func(ctx context.Context) (bool, error) {
		missing = nil
		ranges, err := cs.JkeV1().IPRanges().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		owners := map[string]bool{}
		for _, r := range ranges.Items {
			if r.Spec.Node == "" {
				continue
			}
			owners[r.Spec.Node] = true
			if !slices.ContainsFunc(r.Status.Holders, func(h jkev1.IPRangeHolder) bool {
				return h.Node == r.Spec.Node && h.Generation == r.Spec.OwnerGeneration && h.State == jkev1.HolderServing
			}) {
				missing = append(missing, fmt.Sprintf("IPRange %s: no Serving claim of %s at generation %d (holders %+v)", r.Name, r.Spec.Node, r.Spec.OwnerGeneration, r.Status.Holders))
			}
		}
		nodes, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, n := range nodes.Items {
			if owners[n.Name] && n.Labels[jkev1.LabelClaimsInStatus] != "true" {
				missing = append(missing, fmt.Sprintf("Node %s: not labelled %s=true", n.Name, jkev1.LabelClaimsInStatus))
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil && len(missing) == 0 {
		t.Fatal(err)
	}
	for _, m := range missing {
		t.Errorf("after the upgrade: %s", m)
	}
	if len(missing) == 0 {
		t.Logf("after the upgrade: every assigned IPRange claimed by its owner in status.holders, every owner labelled %s", jkev1.LabelClaimsInStatus)
	}
}

// helmBinary is -helm, or _output/bin/helm of the checkout.
func helmBinary(t *testing.T, root string) string {
	t.Helper()
	helm := *helmFlag
	if helm == "" {
		helm = filepath.Join(root, "_output", "bin", "helm")
	}
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("no helm at %s (make helm builds it): %v", helm, err)
	}
	return helm
}

// runLogged runs a command in dir with the cluster's kubeconfig, fails the test on error with
// its output, and logs how long it took and its last lines.
func runLogged(t *testing.T, dir, what, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+f.Kubeconfig, "KUBECTL="+f.Kubectl)
	cmd.Dir = dir
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %s %s: %v\n%s", what, name, strings.Join(args, " "), err, lastLines(string(out), 60))
	}
	// kind.sh's and the release tool's own lines say what took how long; the rest is rollout chatter.
	var steps []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "kind: ") || strings.HasPrefix(l, "release: ") || strings.HasPrefix(l, "uninstall: ") {
			steps = append(steps, l)
		}
	}
	t.Logf("%s (%.1fs):\n%s", what, time.Since(start).Seconds(), strings.Join(steps, "\n"))
	return string(out)
}

// releaseImages reads a release's images.txt: every image it pushed, ref -> index digest.
func releaseImages(t *testing.T, file string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the release's list of pushed images: %v", err)
	}
	images, err := framework.ParseImagesTxt(string(b))
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return images
}

// releaseRepo is the repository every image of the release is under, from its agent image
// (<registry>/staticip/staticip-agent:<version> -> <registry>/staticip/).
func releaseRepo(t *testing.T, images map[string]string) string {
	t.Helper()
	for ref := range images {
		if i := strings.Index(ref, "/staticip-agent:"); i > 0 {
			return ref[:i+1]
		}
	}
	t.Fatalf("the release pushed no staticip-agent image: %v", images)
	return ""
}

// waitReleaseRunning waits until every DaemonSet and Deployment whose pods run images of repo
// runs the release's images on all its pods, pulled from the registry
// (framework.ReleaseRollout), and returns those workloads.
func waitReleaseRunning(t *testing.T, ctx context.Context, repo string, images map[string]string, what string) []string {
	t.Helper()
	var components, problems []string
	err := framework.WaitFor(ctx, 5*time.Minute, what+" running everywhere", func(ctx context.Context) (bool, error) {
		ws, err := releaseWorkloads(ctx)
		if err != nil {
			return false, err
		}
		components, problems = framework.ReleaseRollout(repo, images, ws)
		return len(problems) == 0 && len(components) > 0, nil
	})
	if err != nil {
		t.Fatalf("%v; components %v; still: %s", err, components, strings.Join(problems, "; "))
	}
	t.Logf("%s runs on %d workloads, every pod on the pushed digest: %v", what, len(components), components)
	return components
}

// releaseWorkloads are the DaemonSets and Deployments of kube-system and staticip-system with
// their live pods: the pods they own (a Deployment through its ReplicaSets), not those their
// selectors match — selectors overlap (the edge DNS's per-zone Deployments all select
// k8s-app=kube-dns).
func releaseWorkloads(ctx context.Context) ([]framework.ReleaseWorkload, error) {
	var out []framework.ReleaseWorkload
	for _, ns := range []string{"kube-system", managerNamespace} {
		pods, err := f.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		rss, err := f.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		// The owner of every pod: its controller, or its ReplicaSet's controller.
		rsOwner := map[types.UID]types.UID{}
		for _, rs := range rss.Items {
			if c := metav1.GetControllerOf(&rs); c != nil {
				rsOwner[rs.UID] = c.UID
			}
		}
		owned := map[types.UID][]framework.ReleasePod{}
		for i := range pods.Items {
			p := &pods.Items[i]
			c := metav1.GetControllerOf(p)
			if c == nil || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			owner := c.UID
			if o, ok := rsOwner[c.UID]; ok && c.Kind == "ReplicaSet" {
				owner = o
			}
			owned[owner] = append(owned[owner], releasePod(p))
		}
		dss, err := f.Client.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, ds := range dss.Items {
			out = append(out, framework.ReleaseWorkload{Name: "DaemonSet/" + ns + "/" + ds.Name,
				TemplateImages: templateImages(ds.Spec.Template.Spec), Desired: ds.Status.DesiredNumberScheduled, Pods: owned[ds.UID]})
		}
		deps, err := f.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, d := range deps.Items {
			want := int32(1)
			if d.Spec.Replicas != nil {
				want = *d.Spec.Replicas
			}
			out = append(out, framework.ReleaseWorkload{Name: "Deployment/" + ns + "/" + d.Name,
				TemplateImages: templateImages(d.Spec.Template.Spec), Desired: want, Pods: owned[d.UID]})
		}
	}
	return out, nil
}

func templateImages(spec corev1.PodSpec) []string {
	var out []string
	for _, c := range spec.Containers {
		out = append(out, c.Image)
	}
	return out
}

func releasePod(p *corev1.Pod) framework.ReleasePod {
	status := map[string]corev1.ContainerStatus{}
	for _, s := range p.Status.ContainerStatuses {
		status[s.Name] = s
	}
	rp := framework.ReleasePod{Name: p.Name}
	for _, c := range p.Spec.Containers {
		s := status[c.Name]
		rp.Containers = append(rp.Containers, framework.ReleaseContainer{Image: c.Image, ImageID: s.ImageID, Ready: s.Ready})
	}
	return rp
}

type helmRevision struct {
	Revision   int    `json:"revision"`
	Chart      string `json:"chart"`
	AppVersion string `json:"app_version"`
	Status     string `json:"status"`
}

func helmHistory(t *testing.T, helm string) []helmRevision {
	t.Helper()
	out, err := exec.Command(helm, "--kubeconfig", f.Kubeconfig, "history", upgradeRelease, "-n", upgradeReleaseNS, "-o", "json").Output()
	if err != nil {
		t.Fatalf("helm history %s: %v", upgradeRelease, err)
	}
	var h []helmRevision
	if err := json.Unmarshal(out, &h); err != nil {
		t.Fatalf("helm history %s: %v\n%s", upgradeRelease, err, out)
	}
	return h
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// uninstallAndCheckLeftovers deletes every workload that uses static IPs, runs uninstall (the
// README's uninstall of this install), then checks that nothing is left: no staticip CRD nor
// instance of one, and on every node none of the agent's routes (protocol 90) or files
// (plugin, conflist, plugin kubeconfig, database), as the agent's DaemonSet before the
// uninstall names them.
func uninstallAndCheckLeftovers(t *testing.T, ctx context.Context, chart string, uninstall func()) {
	t.Helper()
	agent, err := f.Client.AppsV1().DaemonSets("kube-system").Get(ctx, agentDaemonSet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodeFiles := agentNodeFiles(agent)
	nodes, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The NAT table must be there before the uninstall where the node has nft and the agent
	// runs with NAT (the chart's default): else "is it left?" below would pass without the
	// uninstall having removed anything.
	natOn := !slices.ContainsFunc(agent.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return slices.Contains(c.Args, "--nat=false") })
	natBefore := map[string]bool{}
	for _, n := range nodes.Items {
		sh, _, err := f.NodeShell(ctx, n.Name)
		if err != nil || sh == nil {
			continue
		}
		if out, err := sh.Exec("nft", "list", "tables"); err == nil {
			natBefore[n.Name] = strings.Contains(out, "inet staticip")
			if natOn && !natBefore[n.Name] {
				t.Errorf("node %s (%s): before the uninstall there is no NAT table inet staticip although the agent runs with NAT: the leftover check below would prove nothing\n%s", n.Name, sh.Where(), out)
			}
		}
	}
	// uninstall.sh refuses while workloads use staticip: like a user, delete them all first
	// (here also what the cluster's installer made, e.g. the edge DNS DeploymentGrid).
	deleteStaticIPWorkloads(t, ctx)
	uninstall()
	assertNoStaticIPObjects(t, ctx, chart)
	for _, n := range nodes.Items {
		sh, why, err := f.NodeShell(ctx, n.Name)
		if err != nil {
			t.Fatal(err)
		}
		if sh == nil {
			t.Logf("node %s: files and routes not checked: %s", n.Name, why)
			continue
		}
		// The routes to other nodes' ranges (0x5a) and the BGP blackholes (0x5b, one per
		// announced block: cni/README.md "BGP advertisement").
		for _, proto := range []string{agentRouteProtocol, agentBlackholeProtocol} {
			for _, family := range []string{"-4", "-6"} {
				out, err := sh.Exec("ip", family, "route", "show", "proto", proto)
				if err != nil {
					t.Errorf("node %s: %v", n.Name, err)
				} else if strings.TrimSpace(out) != "" {
					t.Errorf("node %s (%s): the agent's routes (protocol %s) are left:\n%s", n.Name, sh.Where(), proto, out)
				}
			}
		}
		// The agent's outgoing NAT table (cni/README.md, "Outgoing NAT"), where the node has nft
		// (the local cluster's nodes share this machine's; kind's node image has none).
		if out, err := sh.Exec("nft", "list", "tables"); err != nil {
			t.Logf("node %s: NAT table not checked (no nft on the node): %v", n.Name, err)
		} else if strings.Contains(out, "inet staticip") {
			t.Errorf("node %s (%s): the agent's NAT table inet staticip is left", n.Name, sh.Where())
		} else if natBefore[n.Name] {
			t.Logf("node %s: the NAT table inet staticip was there before the uninstall and is gone", n.Name)
		}
		for _, p := range nodeFiles {
			p = strings.ReplaceAll(p, "$(NODE_NAME)", n.Name)
			// A data directory that is a hostPath mount point stays, empty: nothing in it may.
			out, _ := sh.Exec("sh", "-c", fmt.Sprintf("if [ -d %[1]q ]; then ls -A %[1]q; elif [ -e %[1]q ]; then echo %[1]q; fi", p))
			if strings.TrimSpace(out) != "" {
				t.Errorf("node %s (%s): %s is left: %s", n.Name, sh.Where(), p, strings.TrimSpace(out))
			}
		}
		t.Logf("node %s (%s): no route (protocols %s, %s) of the agent, none of %v", n.Name, sh.Where(), agentRouteProtocol, agentBlackholeProtocol, nodeFiles)
	}
}
