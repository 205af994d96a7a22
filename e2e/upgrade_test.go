//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/e2e/framework"
)

var (
	upgradeE2E = flag.Bool("upgrade", false, "run TestUpgradeFromKustomizeInstallToChart: it re-applies the kustomize install of -upgrade-from, "+
		"upgrades it to charts/staticip with helm, then UNINSTALLS staticip from the cluster (run it last and alone: make e2e-upgrade)")
	upgradeFrom = flag.String("upgrade-from", "ae99143", "the commit of main whose kustomize install (its manifests/, its binaries built from a git worktree of it) the upgrade starts from")
	helmFlag    = flag.String("helm", "", "helm binary (default <repo>/_output/bin/helm: make helm)")
)

const (
	// upgradeRelease is the release the test installs into, in kube-system (the chart's
	// objects live in kube-system and staticip-system whatever the release namespace; the
	// release records must not live in staticip-system, which the chart itself deletes).
	upgradeRelease   = "staticip"
	upgradeReleaseNS = "kube-system"
	agentDaemonSet   = "staticip-agent"
	schedulerDeploy  = "staticip-scheduler"
)

// TestUpgradeFromKustomizeInstallToChart is README's upgrade path from a kustomize install
// (charts/staticip/README.md, "Upgrading from a kustomize install", and "Uninstall"):
//
//  1. the install of the pinned commit -upgrade-from, with its own binaries: a git worktree
//     of that commit, its agent, CNI plugin and controller-manager built there (its go.mod,
//     its sources) into images localhost/staticip/<binary>:<commit> imported into every node,
//     its CRDs and its manifests/ (rendered with its own kustomizations) applied, the agent's
//     and controller-manager's pod templates the commit's own with its localcluster overlay's
//     changes (its image; the cluster's flags the old binary knows; the agent's node layout);
//     every agent and controller-manager pod runs the pinned image before the workload starts;
//  2. an EnhancedStatefulSet with static IPs, every pod Ready; its pods' UIDs, IPs and
//     restart counts and every StaticIP of the cluster recorded;
//  3. the upgrade: CRDs applied server-side from charts/staticip/crds, the existing objects
//     adopted (charts/staticip/scripts/adopt.sh), `helm upgrade --install` with values that
//     restore the working tree's install as the cluster's installer made it (its images, node
//     layout and flags, read before step 1: valuesFromCluster); the agent DaemonSet and the
//     controller-manager Deployment roll to the working tree's images (asserted, pod by pod);
//  4. no pod of the set was recreated or restarted or lost its IP, no StaticIP was dropped or
//     recreated, and every object of the chart now belongs to the release;
//  5. the set deleted, charts/staticip/scripts/uninstall.sh --delete-crds, and the leftover
//     check: no staticip CRD and no instance of one, and on every node none of the agent's
//     routes (protocol 90), NAT table (nftables inet staticip) or files (plugin, conflist,
//     plugin kubeconfig, database).
//
// Destructive for the cluster under test (staticip is gone at its end): off unless -upgrade.
func TestUpgradeFromKustomizeInstallToChart(t *testing.T) {
	if !*upgradeE2E {
		t.Skip("-upgrade not set: this test replaces the cluster's staticip install by a Helm release and uninstalls it at its end (make e2e-upgrade runs it alone, last)")
	}
	requireManager(t)
	ctx := context.Background()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm := helmBinary(t, root)
	chart := filepath.Join(root, "charts", "staticip")
	agent, err := f.Client.AppsV1().DaemonSets("kube-system").Get(ctx, agentDaemonSet, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the cluster has no staticip agent DaemonSet: %v", err)
	}
	if agent.Labels["app.kubernetes.io/managed-by"] == "Helm" {
		t.Skipf("staticip on this cluster is a Helm release already (%s): nothing to upgrade from kustomize", agent.Annotations["meta.helm.sh/release-name"])
	}

	// The chart's values keep the cluster's install as the working tree's installer made it
	// (its images, flags, node layout), read before the pinned commit's install replaces it.
	values := valuesFromCluster(t, ctx)
	newImages := map[string]string{
		"DaemonSet/" + agentDaemonSet:     values["agent"].(map[string]any)["image"].(map[string]any)["ref"].(string),
		"Deployment/" + managerDeployment: values["controllerManager"].(map[string]any)["image"].(map[string]any)["ref"].(string),
	}

	// 1. The pinned commit's install, its own binaries in its own images.
	pinned := pinnedWorktree(t, root, *upgradeFrom)
	comps := pinnedComponents()
	buildPinnedImages(t, ctx, pinned, *upgradeFrom, comps)
	applyPinnedInstall(t, ctx, pinned, comps)
	for _, c := range comps {
		ns := "kube-system"
		if c.Name == managerDeployment {
			ns = managerNamespace
		}
		t.Logf("before the upgrade: %s %s/%s runs %s: %v", c.Kind, ns, c.Name, c.Ref, waitRunningImage(t, ctx, c.Kind, ns, c.Name, c.Ref))
	}

	// 2. Static-IP workload.
	w := startUpgradeWorkload(t, ctx, "e2e-upgrade")
	e := w.e

	// 3. The upgrade.
	valuesFile := filepath.Join(t.TempDir(), "values.yaml")
	b, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(valuesFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("values from the cluster's install:\n%s", b)
	env := append(os.Environ(), "KUBECONFIG="+f.Kubeconfig, "HELM="+helm, "KUBECTL="+f.Kubectl)
	run := func(what string, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Env = env
		cmd.Dir = root
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %s %s: %v\n%s", what, name, strings.Join(args, " "), err, out)
		}
		t.Logf("%s (%.1fs): %s", what, time.Since(start).Seconds(), lastLines(string(out), 15))
		return string(out)
	}
	if _, err := f.RunKubectl("apply", "--server-side", "--force-conflicts", "-f", filepath.Join(chart, "crds")); err != nil {
		t.Fatal(err)
	}
	run("adopt", filepath.Join(chart, "scripts", "adopt.sh"), upgradeRelease, upgradeReleaseNS, "-f", valuesFile)
	run("helm upgrade --install", helm, "upgrade", "--install", upgradeRelease, chart, "-n", upgradeReleaseNS,
		"-f", valuesFile, "--wait", "--timeout", "10m")
	deleteHashedSchedulerConfig(t, ctx)

	// 4. The binaries are the working tree's now, and nothing of the workload moved.
	for _, c := range comps {
		ns := "kube-system"
		if c.Name == managerDeployment {
			ns = managerNamespace
		}
		image := newImages[c.Kind+"/"+c.Name]
		if image == c.Ref {
			t.Fatalf("%s %s: the working tree's image %s is the pinned one", c.Kind, c.Name, image)
		}
		t.Logf("after the upgrade: %s %s/%s runs %s: %v", c.Kind, ns, c.Name, image, waitRunningImage(t, ctx, c.Kind, ns, c.Name, image))
	}
	w.assertNothingMoved(t, ctx)
	assertRouteReportLeases(t, ctx)
	notAdopted := run("objects of the release", "bash", "-c",
		fmt.Sprintf(`%q get manifest %s -n %s | %q get -f - --no-headers -o 'custom-columns=KIND:.kind,NAME:.metadata.name,BY:.metadata.labels.app\.kubernetes\.io/managed-by' | awk '$3 != "Helm"'`,
			helm, upgradeRelease, upgradeReleaseNS, f.Kubectl))
	if strings.TrimSpace(notAdopted) != "" {
		t.Errorf("objects of the release not managed by Helm:\n%s", notAdopted)
	}
	if t.Failed() {
		t.FailNow()
	}

	// 5. Uninstall and the leftover check.
	if err := e.cs.JkeV1alpha1().EnhancedStatefulSets(e.ns).Delete(ctx, e.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := framework.WaitFor(ctx, 3*time.Minute, "the set's pods gone", func(ctx context.Context) (bool, error) {
		ps, err := e.pods(ctx)
		return len(ps) == 0, err
	}); err != nil {
		t.Fatal(err)
	}
	uninstallAndCheckLeftovers(t, ctx, chart, func() {
		run("uninstall", filepath.Join(chart, "scripts", "uninstall.sh"), upgradeRelease, upgradeReleaseNS, "--delete-crds")
	})
}

// assertRouteReportLeases: after the upgrade every Ready node's agent reports its routes in
// its own Lease (staticip-node-routes/<node>, holderIdentity the node; the pinned release wrote
// them into its Node annotation): the chart's namespace, the agent's Role there and the
// admission policy staticip-agent-route-report let the new agents write them, and node failover
// reads them (cni/README.md, "Node failover: the node side").
func assertRouteReportLeases(t *testing.T, ctx context.Context) {
	t.Helper()
	nodes, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if !slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}) {
			continue
		}
		var holder string
		err := framework.WaitFor(ctx, 2*time.Minute, "node "+n.Name+"'s route-report Lease", func(ctx context.Context) (bool, error) {
			l, err := f.Client.CoordinationV1().Leases(jkev1.NamespaceRouteReports).Get(ctx, n.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			} else if err != nil {
				return false, err
			}
			if l.Spec.HolderIdentity != nil {
				holder = *l.Spec.HolderIdentity
			}
			_, reported := l.Annotations[jkev1.AnnotationRoutesObserved]
			return holder == n.Name && reported && l.Labels[jkev1.LabelRouteReport] == "true", nil
		})
		if err != nil {
			t.Errorf("after the upgrade node %s's agent reports no routes in its Lease %s/%s (holder %q): %v", n.Name, jkev1.NamespaceRouteReports, n.Name, holder, err)
		}
	}
	t.Logf("after the upgrade: every Ready node's agent reports its routes in its Lease in %s", jkev1.NamespaceRouteReports)
}

// applyPinnedInstall applies the pinned commit's install over the cluster's: its CRDs, and
// every manifests/ kustomization the cluster runs (README's kubectl apply -k steps). The
// agent's and the controller-manager's pod templates are the pinned commit's, with its
// images (comps, buildPinnedImages) as its localcluster overlay sets them (pinnedTemplate);
// any other workload (kind's scheduler Deployment) keeps the cluster's pod template.
func applyPinnedInstall(t *testing.T, ctx context.Context, pinned string, comps []*pinnedComponent) {
	t.Helper()
	if _, err := f.RunKubectl("apply", "--server-side", "--force-conflicts", "-f", filepath.Join(pinned, "manifests", "crds")); err != nil {
		t.Fatal(err)
	}
	dirs := []string{"manifests/cni", "manifests/admission", "manifests/controller-manager"}
	if _, err := f.Client.AppsV1().Deployments("kube-system").Get(ctx, schedulerDeploy, metav1.GetOptions{}); err == nil {
		dirs = append(dirs, "manifests/scheduler/"+schedulerMode(t, ctx))
	}
	replaced := map[string]bool{}
	for _, d := range dirs {
		out, err := f.RunKubectl("kustomize", filepath.Join(pinned, d))
		if err != nil {
			t.Fatal(err)
		}
		var docs []string
		for _, doc := range strings.Split(out, "\n---\n") {
			var obj map[string]any
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				t.Fatalf("%s: %v", d, err)
			}
			if obj == nil {
				continue
			}
			kind, _ := obj["kind"].(string)
			md, _ := obj["metadata"].(map[string]any)
			name, _ := md["name"].(string)
			ns, _ := md["namespace"].(string)
			switch kind {
			case "DaemonSet", "Deployment":
				live, err := f.RunKubectl("-n", ns, "get", strings.ToLower(kind), name, "-o", "json")
				if err != nil {
					t.Fatal(err)
				}
				var lo map[string]any
				if err := json.Unmarshal([]byte(live), &lo); err != nil {
					t.Fatal(err)
				}
				spec := obj["spec"].(map[string]any)
				liveSpec := lo["spec"].(map[string]any)
				var comp *pinnedComponent
				for _, c := range comps {
					if c.Kind == kind && c.Name == name {
						comp = c
					}
				}
				if comp != nil {
					pinnedTemplate(t, comp, spec["template"].(map[string]any), liveSpec["template"].(map[string]any))
					replaced[kind+"/"+name] = true
				} else {
					spec["template"] = liveSpec["template"]
				}
				if r, ok := liveSpec["replicas"]; ok {
					spec["replicas"] = r
				}
			case "ConfigMap":
				if strings.HasPrefix(name, "staticip-scheduler-config") {
					continue // the scheduler's pod template names the live one
				}
			}
			b, err := yaml.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, string(b))
		}
		file := filepath.Join(t.TempDir(), "pinned.yaml")
		if err := os.WriteFile(file, []byte(strings.Join(docs, "\n---\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := f.RunKubectl("apply", "-f", file); err != nil {
			t.Fatalf("the pinned commit's %s: %v", d, err)
		}
		t.Logf("applied %s of %s (%d objects)", d, *upgradeFrom, len(docs))
	}
	for _, c := range comps {
		if !replaced[c.Kind+"/"+c.Name] {
			t.Fatalf("the pinned commit's manifests have no %s %s", c.Kind, c.Name)
		}
	}
}

// schedulerMode tells replace-default from second-scheduler by the running configuration.
func schedulerMode(t *testing.T, ctx context.Context) string {
	t.Helper()
	cms, err := f.Client.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms.Items {
		if strings.HasPrefix(cm.Name, "staticip-scheduler-config") && strings.Contains(cm.Data["config.yaml"], "schedulerName: staticip-scheduler") {
			return "second-scheduler"
		}
	}
	return "replace-default"
}

// valuesFromCluster are the chart's values that keep the cluster's install as it runs: each
// component's image, pull policy, flags and (the agent's) node layout, the controller-manager's
// replicas, the IPPools as they are. The edge components stay out (their installers
// configure kube-proxy around them); the chart leaves them alone.
func valuesFromCluster(t *testing.T, ctx context.Context) map[string]any {
	t.Helper()
	ds, err := f.Client.AppsV1().DaemonSets("kube-system").Get(ctx, agentDaemonSet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ac := ds.Spec.Template.Spec.Containers[0]
	values := map[string]any{
		"image": map[string]any{"pullPolicy": string(ac.ImagePullPolicy)},
		"agent": map[string]any{
			"image":        map[string]any{"ref": ac.Image},
			"args":         ac.Args,
			"volumeMounts": ac.VolumeMounts,
			"volumes":      ds.Spec.Template.Spec.Volumes,
		},
		"edge": map[string]any{"enabled": false},
	}
	cm, err := f.Client.AppsV1().Deployments(managerNamespace).Get(ctx, managerDeployment, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	values["controllerManager"] = map[string]any{
		"image":    map[string]any{"ref": cm.Spec.Template.Spec.Containers[0].Image},
		"args":     cm.Spec.Template.Spec.Containers[0].Args,
		"replicas": *cm.Spec.Replicas,
	}
	sched, err := f.Client.AppsV1().Deployments("kube-system").Get(ctx, schedulerDeploy, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		// The local cluster runs staticip-scheduler as the control plane's scheduler process.
		values["scheduler"] = map[string]any{"enabled": false}
	case err != nil:
		t.Fatal(err)
	default:
		values["scheduler"] = map[string]any{
			"mode":     schedulerMode(t, ctx),
			"image":    map[string]any{"ref": sched.Spec.Template.Spec.Containers[0].Image},
			"replicas": *sched.Spec.Replicas,
		}
	}
	if _, err := f.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, "staticip-ip-address", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		values["admissionPolicies"] = map[string]any{"enabled": false}
	}
	pools, err := dynamic.NewForConfigOrDie(f.Config).Resource(schema.GroupVersionResource{Group: "jke.jdcloud.com", Version: "v1", Resource: "ippools"}).
		List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ipPools []map[string]any
	for _, p := range pools.Items {
		spec, _ := p.Object["spec"].(map[string]any)
		v := map[string]any{"name": p.GetName()}
		for k, x := range spec {
			v[k] = x
		}
		ipPools = append(ipPools, v)
	}
	values["ipPools"] = ipPools
	return values
}

// deleteHashedSchedulerConfig removes kustomize's staticip-scheduler-config-<hash> ConfigMaps
// the chart replaced by staticip-scheduler-config (README's upgrade step).
func deleteHashedSchedulerConfig(t *testing.T, ctx context.Context) {
	t.Helper()
	cms, err := f.Client.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms.Items {
		if strings.HasPrefix(cm.Name, "staticip-scheduler-config-") && cm.Labels["app.kubernetes.io/managed-by"] != "Helm" {
			if err := f.Client.CoreV1().ConfigMaps("kube-system").Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			t.Logf("deleted kustomize's %s (the chart's is staticip-scheduler-config)", cm.Name)
		}
	}
}

type podRecord struct {
	UID      string
	IP, Node string
	Restarts int32
}

func podRecords(pods map[string]*corev1.Pod) map[string]podRecord {
	out := map[string]podRecord{}
	for name, p := range pods {
		r := podRecord{UID: string(p.UID), IP: p.Status.PodIP, Node: p.Spec.NodeName}
		for _, c := range p.Status.ContainerStatuses {
			r.Restarts += c.RestartCount
		}
		out[name] = r
	}
	return out
}

// staticIPRecords is every StaticIP of the cluster: namespace/name -> "uid ip node".
func staticIPRecords(t *testing.T, ctx context.Context, e *estsTest) map[string]string {
	t.Helper()
	list, err := e.cs.JkeV1().StaticIPs("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range list.Items {
		out[s.Namespace+"/"+s.Name] = fmt.Sprintf("uid=%s ip=%s node=%s", s.UID, s.Spec.IP, s.Spec.Node)
	}
	return out
}

// agentNodeFiles are the host paths of what the agent installs (cni/agent.CleanupPaths): the
// plugin, the conflist, the plugin's kubeconfig and the database directory, from its flags,
// mapped through its hostPath volumes to where the node sees them. $(NODE_NAME) stays for
// the caller to expand per node.
func agentNodeFiles(ds *appsv1.DaemonSet) []string {
	c := ds.Spec.Template.Spec.Containers[0]
	flags := map[string]string{"cni-bin-dir": "/opt/cni/bin", "cni-conf-dir": "/etc/cni/net.d", "data-dir": "/var/lib/staticip",
		"conf-name": "10-staticip.conflist"}
	for _, a := range c.Args {
		if k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); ok {
			flags[k] = v
		}
	}
	paths := []string{filepath.Join(flags["cni-bin-dir"], "staticip"), filepath.Join(flags["cni-conf-dir"], flags["conf-name"]), flags["data-dir"]}
	if k := flags["plugin-kubeconfig"]; k != "" {
		paths = append(paths, filepath.Join(flags["cni-conf-dir"], filepath.Base(k)))
	}
	hostPaths := map[string]string{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	var out []string
	for _, p := range paths {
		host := p
		best := ""
		for _, m := range c.VolumeMounts {
			hp, ok := hostPaths[m.Name]
			if !ok || m.SubPath != "" || m.SubPathExpr != "" {
				continue
			}
			if (p == m.MountPath || strings.HasPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/")) && len(m.MountPath) > len(best) {
				best = m.MountPath
				host = filepath.Join(hp, strings.TrimPrefix(p, m.MountPath))
			}
		}
		out = append(out, host)
	}
	sort.Strings(out)
	return out
}

// assertNoStaticIPObjects: no staticip CRD is left, nor (were one left) any instance of it.
func assertNoStaticIPObjects(t *testing.T, ctx context.Context, chart string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chart, "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in %s: %v", chart, err)
	}
	dyn := dynamic.NewForConfigOrDie(f.Config)
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var crd struct {
			Metadata struct{ Name string } `json:"metadata"`
			Spec     struct {
				Group    string                  `json:"group"`
				Names    struct{ Plural string } `json:"names"`
				Versions []struct {
					Name    string `json:"name"`
					Storage bool   `json:"storage"`
				} `json:"versions"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(bytes.TrimSpace(b), &crd); err != nil {
			t.Fatal(err)
		}
		for _, v := range crd.Spec.Versions {
			if !v.Storage {
				continue
			}
			gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: v.Name, Resource: crd.Spec.Names.Plural}
			list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
			switch {
			case apierrors.IsNotFound(err):
				// The CRD is gone, and its objects with it.
			case err != nil:
				t.Errorf("list %s: %v", gvr.Resource, err)
			case len(list.Items) > 0:
				var names []string
				for _, o := range list.Items {
					names = append(names, o.GetNamespace()+"/"+o.GetName())
				}
				t.Errorf("%d %s left after the uninstall: %v", len(names), gvr.Resource, names)
			}
		}
		if _, err := f.RunKubectl("get", "crd", crd.Metadata.Name); err == nil {
			t.Errorf("CRD %s is left after uninstall.sh --delete-crds", crd.Metadata.Name)
		}
	}
}

// deleteStaticIPWorkloads deletes every EnhancedStatefulSet and grid of the cluster and
// waits until none is left, with their workloads and pods (foreground deletion).
func deleteStaticIPWorkloads(t *testing.T, ctx context.Context) {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(f.Config)
	for _, gvr := range []schema.GroupVersionResource{
		{Group: "jke.jdcloud.com", Version: "v1alpha1", Resource: "enhancedstatefulsets"},
		{Group: "superedge.io", Version: "v1", Resource: "statefulsetgrids"},
		{Group: "superedge.io", Version: "v1", Resource: "deploymentgrids"},
		{Group: "superedge.io", Version: "v1", Resource: "servicegrids"},
	} {
		list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			t.Fatalf("list %s: %v", gvr.Resource, err)
		}
		for _, o := range list.Items {
			t.Logf("deleting %s %s/%s before the uninstall", gvr.Resource, o.GetNamespace(), o.GetName())
			// Foreground: the object goes once its workloads and their pods are gone (the
			// uninstall then removes the CNI no pod of theirs still needs for its teardown).
			fg := metav1.DeletePropagationForeground
			if err := dyn.Resource(gvr).Namespace(o.GetNamespace()).Delete(ctx, o.GetName(), metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
		if err := framework.WaitFor(ctx, 3*time.Minute, gvr.Resource+" gone", func(ctx context.Context) (bool, error) {
			l, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
			return err == nil && len(l.Items) == 0, err
		}); err != nil {
			t.Fatal(err)
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
