package manifests_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/staticip/staticip/internal/testenv"
)

// renderedScheduler is what `kubectl kustomize manifests/scheduler/replace-default` gives (the
// kubectl we build, so the overlay's patch and ConfigMap generator are applied as a user's
// `kubectl apply -k` applies them).
type renderedScheduler struct {
	raw        []byte
	deployment *appsv1.Deployment
	pdb        *policyv1.PodDisruptionBudget
	config     *corev1.ConfigMap
}

func renderReplaceDefault(t *testing.T) renderedScheduler {
	t.Helper()
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(bin, "kubectl"), "kustomize", filepath.Join("scheduler", "replace-default")).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("kubectl kustomize scheduler/replace-default: %v: %s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	r := renderedScheduler{raw: out}
	docs, err := splitYAML(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range docs {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		var into any
		switch meta.Kind {
		case "Deployment":
			r.deployment = &appsv1.Deployment{}
			into = r.deployment
		case "PodDisruptionBudget":
			r.pdb = &policyv1.PodDisruptionBudget{}
			into = r.pdb
		case "ConfigMap":
			r.config = &corev1.ConfigMap{}
			into = r.config
		default:
			continue
		}
		if err := yaml.UnmarshalStrict(doc, into); err != nil {
			t.Fatalf("%s: %v", meta.Kind, err)
		}
	}
	if r.deployment == nil || r.pdb == nil || r.config == nil {
		t.Fatalf("replace-default renders no Deployment, PodDisruptionBudget or ConfigMap:\n%s", out)
	}
	return r
}

// TestSchedulerReplaceDefaultSurvives: in replace-default mode the scheduler schedules its
// own replacements, so the rendered overlay must keep it alive without one: two replicas,
// on different nodes whenever two are eligible (spread, not required anti-affinity: a
// one-control-plane cluster such as kind's must still run both), on the control-plane
// nodes whose taints (and the not-ready/unreachable ones) it tolerates, a PDB that keeps
// one through voluntary disruptions, a hardened container, the same Lease as kube-scheduler. The API server accepts all of it.
func TestSchedulerReplaceDefaultSurvives(t *testing.T) {
	r := renderReplaceDefault(t)
	d := r.deployment
	spec := d.Spec.Template.Spec
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("replicas %v: want at least 2 (a standby)", d.Spec.Replicas)
	}
	if _, ok := spec.NodeSelector["node-role.kubernetes.io/control-plane"]; !ok {
		t.Errorf("nodeSelector %v: want the control-plane nodes", spec.NodeSelector)
	}
	for _, key := range []string{"node-role.kubernetes.io/control-plane", "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"} {
		if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool {
			return tol.Key == key && tol.Operator == corev1.TolerationOpExists
		}) {
			t.Errorf("no toleration of %s: %+v", key, spec.Tolerations)
		}
	}
	podLabels := labels.Set(d.Spec.Template.Labels)
	if !slices.ContainsFunc(spec.TopologySpreadConstraints, func(c corev1.TopologySpreadConstraint) bool {
		sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
		return err == nil && c.TopologyKey == "kubernetes.io/hostname" && c.MaxSkew == 1 &&
			c.WhenUnsatisfiable == corev1.DoNotSchedule && sel.Matches(podLabels)
	}) {
		t.Errorf("replicas not spread per kubernetes.io/hostname (DoNotSchedule, maxSkew 1): %+v", spec.TopologySpreadConstraints)
	}
	if r.pdb.Spec.MinAvailable == nil || r.pdb.Spec.MinAvailable.IntValue() < 1 {
		t.Errorf("PDB minAvailable %v: want 1", r.pdb.Spec.MinAvailable)
	}
	if sel, err := metav1.LabelSelectorAsSelector(r.pdb.Spec.Selector); err != nil || !sel.Matches(podLabels) {
		t.Errorf("the PDB's selector %v does not select the scheduler's pods %v", r.pdb.Spec.Selector, podLabels)
	}
	if spec.PriorityClassName != "system-cluster-critical" {
		t.Errorf("priorityClassName %q: want system-cluster-critical (it may preempt to come back)", spec.PriorityClassName)
	}
	assertHardened(t, spec)

	// The ConfigMap the pods mount carries the profile as shipped, serving default-scheduler
	// under kube-scheduler's own Lease (two of them never schedule at once).
	shipped, err := os.ReadFile(filepath.Join("scheduler", "replace-default", "scheduler-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if r.config.Data["config.yaml"] != string(shipped) {
		t.Errorf("ConfigMap %s does not carry scheduler-config.yaml as shipped", r.config.Name)
	}
	var cfg struct {
		LeaderElection struct {
			LeaderElect       bool   `json:"leaderElect"`
			ResourceNamespace string `json:"resourceNamespace"`
			ResourceName      string `json:"resourceName"`
		} `json:"leaderElection"`
		Profiles []struct {
			SchedulerName string `json:"schedulerName"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal(shipped, &cfg); err != nil {
		t.Fatal(err)
	}
	if le := cfg.LeaderElection; !le.LeaderElect || le.ResourceNamespace != "kube-system" || le.ResourceName != "kube-scheduler" {
		t.Errorf("leaderElection %+v: want kube-scheduler's Lease kube-system/kube-scheduler", le)
	}
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != "default-scheduler" {
		t.Errorf("profiles %+v: want the one default-scheduler profile", cfg.Profiles)
	}
	if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool {
		return v.ConfigMap != nil && v.ConfigMap.Name == r.config.Name
	}) {
		t.Errorf("the pods do not mount the generated ConfigMap %s: %+v", r.config.Name, spec.Volumes)
	}

	// A real API server takes the rendered overlay (schema, PDB, RBAC, generated names).
	env := testenv.Get(t)
	ctx := testenv.Context(t, time.Minute)
	file := filepath.Join(t.TempDir(), "replace-default.yaml")
	if err := os.WriteFile(file, r.raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := testenv.ApplyFiles(ctx, env.Config, []string{file}); err != nil {
		t.Fatalf("the API server rejects the rendered replace-default overlay: %v", err)
	}
}

// TestSchedulerStaticPodVariant: the static pod (run by the kubelet without any scheduler)
// runs the same image as the Deployment, hardened, listening on loopback only, and its RBAC
// lets kubeadm's system:kube-scheduler user read StaticIPs and IPRanges — checked by the API
// server's own authorizer after applying the file.
func TestSchedulerStaticPodVariant(t *testing.T) {
	dir := filepath.Join("scheduler", "replace-default", "static-pod")
	data, err := os.ReadFile(filepath.Join(dir, "staticip-scheduler.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(data, &pod); err != nil {
		t.Fatal(err)
	}
	if pod.Namespace != "kube-system" || !pod.Spec.HostNetwork || pod.Spec.PriorityClassName != "system-node-critical" {
		t.Errorf("static pod %s/%s hostNetwork=%v priority=%q: want kube-system, host network, system-node-critical",
			pod.Namespace, pod.Name, pod.Spec.HostNetwork, pod.Spec.PriorityClassName)
	}
	deployment := renderReplaceDefault(t).deployment
	if got, want := pod.Spec.Containers[0].Image, deployment.Spec.Template.Spec.Containers[0].Image; got != want {
		t.Errorf("static pod image %s, Deployment image %s: one release, one image", got, want)
	}
	args := pod.Spec.Containers[0].Command
	if !slices.Contains(args, "--bind-address=127.0.0.1") {
		t.Errorf("command %v: on the host network it must listen on loopback only", args)
	}
	// Every file the command names lies on a mounted volume.
	mounts := pod.Spec.Containers[0].VolumeMounts
	for _, a := range args {
		_, path, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(path, "/etc/") {
			continue
		}
		if !slices.ContainsFunc(mounts, func(m corev1.VolumeMount) bool {
			return path == m.MountPath || strings.HasPrefix(path, m.MountPath+"/")
		}) {
			t.Errorf("%s: %s is on no volume mount %+v", a, path, mounts)
		}
	}
	assertHardened(t, pod.Spec)

	env := testenv.Get(t)
	ctx := testenv.Context(t, time.Minute)
	if err := testenv.ApplyFiles(ctx, env.Config, []string{filepath.Join(dir, "rbac-static-pod.yaml")}); err != nil {
		t.Fatalf("rbac-static-pod.yaml: %v", err)
	}
	// The Pod itself passes the API server's validation (as the kubelet's mirror pod must).
	kube := kubernetes.NewForConfigOrDie(env.Config)
	if _, err := kube.CoreV1().Pods(pod.Namespace).Create(ctx, &pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("the API server rejects the static pod: %v", err)
	}
	asScheduler := rest.CopyConfig(env.Config)
	asScheduler.Impersonate = rest.ImpersonationConfig{UserName: "system:kube-scheduler"}
	self := kubernetes.NewForConfigOrDie(asScheduler)
	for _, res := range []string{"staticips", "ipranges", "ippools"} {
		for _, verb := range []string{"list", "watch"} {
			review, err := self.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
					Group: "jke.jdcloud.com", Resource: res, Verb: verb}}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !review.Status.Allowed {
				t.Errorf("system:kube-scheduler may not %s %s: %s", verb, res, review.Status.Reason)
			}
		}
	}
	review, err := self.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Group: "jke.jdcloud.com", Resource: "staticips", Verb: "update"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if review.Status.Allowed {
		t.Error("system:kube-scheduler may update staticips: the scheduler only reads them")
	}
}

// assertHardened: no privilege, every capability dropped, read-only root, RuntimeDefault
// seccomp (on the pod or the container).
func assertHardened(t *testing.T, spec corev1.PodSpec) {
	t.Helper()
	podSeccomp := spec.SecurityContext != nil && spec.SecurityContext.SeccompProfile != nil &&
		spec.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault
	for _, c := range spec.Containers {
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("container %s has no securityContext", c.Name)
			continue
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("container %s is privileged", c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("container %s allows privilege escalation", c.Name)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("container %s has a writable root filesystem", c.Name)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
			t.Errorf("container %s: capabilities %+v, want drop ALL and add none", c.Name, sc.Capabilities)
		}
		containerSeccomp := sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault
		if !podSeccomp && !containerSeccomp {
			t.Errorf("container %s has no RuntimeDefault seccomp profile", c.Name)
		}
	}
}
