//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/e2e/framework"
)

const (
	// testServerV2Image is the same testserver as another image (tools/images/imagebuilder).
	testServerV2Image = "localhost/staticip/testserver:v2"
	// brokenImage is never imported; with imagePullPolicy Never its pods stay
	// ErrImageNeverPull, i.e. a new revision that never becomes ready.
	brokenImage = "localhost/staticip/testserver:broken"

	estsReplicas       = 6
	estsMaxUnavailable = 2
	// managerNamespace and managerLease are where manifests/controller-manager runs and
	// elects its leader.
	managerNamespace  = "staticip-system"
	managerLease      = "staticip-controller-manager"
	managerDeployment = "staticip-controller-manager"
	rolloutTimeout    = 3 * time.Minute
)

// estsTest drives one EnhancedStatefulSet and remembers what must not change: each pod's
// IP from the first time all pods ran.
type estsTest struct {
	t    *testing.T
	ns   string
	name string
	// selector finds the set's pods (app=<name> unless the set says otherwise).
	selector string
	cs       versioned.Interface
	mon      *framework.AvailabilityMonitor
	ips      map[string]string // pod name -> IP at the start
}

func newESTSTest(t *testing.T, prefix, name string) *estsTest {
	t.Helper()
	cs := versioned.NewForConfigOrDie(f.Config)
	requireManager(t)
	ns := f.Namespace(t, prefix)
	e := &estsTest{t: t, ns: ns, name: name, selector: "app=" + name, cs: cs}
	e.mon = f.MonitorAvailability(t, ns, e.podNames(), estsMaxUnavailable)
	return e
}

// requireManager skips when the cluster does not run staticip-controller-manager (the local
// cluster always does: `localcluster up` installs it).
func requireManager(t *testing.T) {
	t.Helper()
	_, err := f.Client.AppsV1().Deployments(managerNamespace).Get(context.Background(), managerDeployment, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		t.Skipf("no %s/%s on this cluster (kubectl apply -k manifests/controller-manager)", managerNamespace, managerDeployment)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func (e *estsTest) podNames() []string {
	var names []string
	for i := 0; i < estsReplicas; i++ {
		names = append(names, fmt.Sprintf("%s-%d", e.name, i))
	}
	return names
}

// create makes the set: the published scenario's shape — 6 replicas, Parallel, RollingUpdate
// with maxUnavailable 2 and podUpdatePolicy ReCreate, static IPs enabled — running image.
func (e *estsTest) create(ctx context.Context, image string, partition int32) {
	e.t.Helper()
	labels := map[string]string{"app": e.name}
	spec := testServerPod("", "", nil).Spec
	spec.NodeSelector = nil
	spec.Containers[0].Image = image
	spec.Containers[0].ImagePullPolicy = corev1.PullNever
	spec.Containers[0].ReadinessProbe.TimeoutSeconds = 2
	maxUnavailable := intstr.FromInt32(estsMaxUnavailable)
	set := &jkev1alpha1.EnhancedStatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: e.name, Labels: labels,
			Annotations: map[string]string{jkev1.AnnotationEnable: "true"}},
		Spec: jkev1alpha1.EnhancedStatefulSetSpec{
			Replicas:            ptr(int32(estsReplicas)),
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			ServiceName:         e.name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template:            corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
			UpdateStrategy: jkev1alpha1.EnhancedStatefulSetUpdateStrategy{
				Type: appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &jkev1alpha1.RollingUpdateEnhancedStatefulSetStrategy{
					Partition:       ptr(partition),
					MaxUnavailable:  &maxUnavailable,
					PodUpdatePolicy: jkev1alpha1.RecreatePodUpdatePolicy,
				},
			},
		},
	}
	if _, err := e.cs.JkeV1alpha1().EnhancedStatefulSets(e.ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create EnhancedStatefulSet: %v", err)
	}
}

func (e *estsTest) get(ctx context.Context) (*jkev1alpha1.EnhancedStatefulSet, error) {
	return e.cs.JkeV1alpha1().EnhancedStatefulSets(e.ns).Get(ctx, e.name, metav1.GetOptions{})
}

// pods returns the set's live pods by name.
func (e *estsTest) pods(ctx context.Context) (map[string]*corev1.Pod, error) {
	list, err := f.Client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: e.selector})
	if err != nil {
		return nil, err
	}
	out := map[string]*corev1.Pod{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out, nil
}

func revisionOf(p *corev1.Pod) string { return p.Labels[appsv1.ControllerRevisionHashLabelKey] }

// observed waits until the controller has seen the set's latest generation and returns it.
func (e *estsTest) observed(ctx context.Context) *jkev1alpha1.EnhancedStatefulSet {
	e.t.Helper()
	var set *jkev1alpha1.EnhancedStatefulSet
	if err := framework.WaitFor(ctx, time.Minute, "status.observedGeneration", func(ctx context.Context) (bool, error) {
		s, err := e.get(ctx)
		if err != nil {
			return false, err
		}
		set = s
		return s.Status.ObservedGeneration == s.Generation && s.Status.UpdateRevision != "", nil
	}); err != nil {
		e.t.Fatal(err)
	}
	return set
}

// want says, per ordinal, which revision a settled pod must run.
type want func(ordinal int) string

func allAt(rev string) want { return func(int) string { return rev } }

// waitSettled waits until every ordinal runs Ready at the revision want gives it, and
// returns the pods. The availability monitor fails the test early if it saw a violation.
func (e *estsTest) waitSettled(ctx context.Context, what string, w want) map[string]*corev1.Pod {
	e.t.Helper()
	var pods map[string]*corev1.Pod
	err := framework.WaitFor(ctx, rolloutTimeout, what, func(ctx context.Context) (bool, error) {
		if v := e.mon.Violations(); len(v) > 0 {
			return false, fmt.Errorf("budget exceeded: %s", v[0])
		}
		ps, err := e.pods(ctx)
		if err != nil {
			return false, err
		}
		pods = ps
		for i, name := range e.podNames() {
			p := ps[name]
			if p == nil || p.DeletionTimestamp != nil || !framework.PodReady(p) || revisionOf(p) != w(i) {
				return false, nil
			}
		}
		return true, nil
	})
	e.mon.Check(e.t, what)
	if err != nil {
		e.t.Fatalf("%v\n%s", err, e.describe(ctx))
	}
	return pods
}

// describe is one line per pod for failure messages.
func (e *estsTest) describe(ctx context.Context) string {
	ps, err := e.pods(ctx)
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, p := range ps {
		lines = append(lines, fmt.Sprintf("  %s rev=%s ready=%v terminating=%v ip=%s node=%s image=%s",
			p.Name, revisionOf(p), framework.PodReady(p), p.DeletionTimestamp != nil, p.Status.PodIP, p.Spec.NodeName, p.Spec.Containers[0].Image))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// rememberIPs records every pod's IP once all pods ran for the first time.
func (e *estsTest) rememberIPs(pods map[string]*corev1.Pod) {
	e.ips = map[string]string{}
	for _, name := range e.podNames() {
		e.ips[name] = pods[name].Status.PodIP
	}
	e.mon.ExpectIPs(e.ips)
	e.t.Logf("pod IPs at the start: %v", e.ips)
}

// assertIPsKept: every pod, however often recreated, runs with the IP it started with —
// now, and at every pod event seen since the start (the monitor checks each one).
func (e *estsTest) assertIPsKept(phase string, pods map[string]*corev1.Pod) {
	e.t.Helper()
	for _, name := range e.podNames() {
		if got := pods[name].Status.PodIP; got != e.ips[name] {
			e.t.Errorf("%s: pod %s has IP %s, had %s (UID %s)", phase, name, got, e.ips[name], pods[name].UID)
		}
	}
	if errs := e.mon.IPErrors(); len(errs) > 0 {
		e.t.Errorf("%s: pods seen with another IP:\n%s", phase, strings.Join(errs, "\n"))
	}
}

// assertStaticIPs: a StaticIP per ordinal, Bound, recording the pod's IP and node.
func (e *estsTest) assertStaticIPs(ctx context.Context, phase string, pods map[string]*corev1.Pod) {
	e.t.Helper()
	var last string
	err := framework.WaitFor(ctx, time.Minute, phase+": StaticIPs Bound", func(ctx context.Context) (bool, error) {
		for _, name := range e.podNames() {
			sip, err := e.cs.JkeV1().StaticIPs(e.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			p := pods[name]
			if sip.Status.Phase != jkev1.StaticIPBound || sip.Spec.IP != p.Status.PodIP || sip.Spec.Node != p.Spec.NodeName {
				last = fmt.Sprintf("StaticIP %s: phase %s ip %s node %s; pod ip %s node %s",
					name, sip.Status.Phase, sip.Spec.IP, sip.Spec.Node, p.Status.PodIP, p.Spec.NodeName)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		e.t.Errorf("%v (%s)", err, last)
	}
}

// patchTemplateImage changes the container image (a new revision).
func (e *estsTest) patchTemplateImage(ctx context.Context, image string) {
	e.t.Helper()
	patch := fmt.Sprintf(`[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":%q}]`, image)
	if _, err := e.cs.JkeV1alpha1().EnhancedStatefulSets(e.ns).Patch(ctx, e.name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatalf("set image %s: %v", image, err)
	}
}

func (e *estsTest) kubectl(args ...string) string {
	e.t.Helper()
	out, err := f.RunKubectl(append([]string{"-n", e.ns}, args...)...)
	if err != nil {
		e.t.Fatalf("%v\n%s", err, out)
	}
	return out
}

// holdStill checks for a while that no pod of the set is replaced or changes revision.
func (e *estsTest) holdStill(ctx context.Context, what string, before map[string]*corev1.Pod, d time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		now, err := e.pods(ctx)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, name := range e.podNames() {
			b, n := before[name], now[name]
			if n == nil || n.UID != b.UID || revisionOf(n) != revisionOf(b) || n.DeletionTimestamp != nil {
				e.t.Fatalf("%s: pod %s changed (was UID %s rev %s)\n%s", what, name, b.UID, revisionOf(b), e.describe(ctx))
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestEnhancedStatefulSetRollingUpdate is the published scenario on real pods: 6 replicas,
// partition 3, maxUnavailable 2, ReCreate, image v1 -> v2. Ordinals 3-5 update, two at a
// time, 0-2 stay; partition 0 finishes; a broken image stops at the budget; paused holds
// (scaling still works); the documented kubectl rollback brings v1 back under the same
// budget. A watch counts unavailable pods after every pod event: more than 2 fails the test.
// Every pod keeps its IP throughout (staticip CNI + scheduler), and each ordinal has a Bound
// StaticIP.
func TestEnhancedStatefulSetRollingUpdate(t *testing.T) {
	ctx := context.Background()
	e := newESTSTest(t, "e2e-ests", "web")
	start := time.Now()
	phase := func(name string) func() {
		t0 := time.Now()
		e.mon.ResetPeak()
		return func() { t.Logf("%s: %.1fs, peak unavailable %d", name, time.Since(t0).Seconds(), e.mon.Peak()) }
	}

	e.create(ctx, testServerImage, 3)
	rev1 := e.observed(ctx).Status.UpdateRevision
	pods := e.waitSettled(ctx, "6 pods Ready at v1", allAt(rev1))
	e.rememberIPs(pods)
	e.assertStaticIPs(ctx, "v1", pods)
	e.mon.Arm(t)
	t.Logf("v1 up in %.1fs (revision %s)", time.Since(start).Seconds(), rev1)
	v1Pods := pods

	// v1 -> v2 with partition 3: ordinals 5 and 4 first (together), then 3; 0-2 untouched.
	done := phase("partition 3")
	e.patchTemplateImage(ctx, testServerV2Image)
	rev2 := e.observed(ctx).Status.UpdateRevision
	if rev2 == rev1 {
		t.Fatalf("a new image kept revision %s", rev1)
	}
	pods = e.waitSettled(ctx, "ordinals 3-5 at v2, 0-2 at v1", func(i int) string {
		if i >= 3 {
			return rev2
		}
		return rev1
	})
	for i := 0; i < 3; i++ {
		name := e.podNames()[i]
		if pods[name].UID != v1Pods[name].UID {
			t.Errorf("pod %s below the partition was recreated", name)
		}
	}
	if p := e.mon.Peak(); p != estsMaxUnavailable {
		t.Errorf("partition 3: peak unavailable %d, want %d (ordinals 5 and 4 updated together)", p, estsMaxUnavailable)
	}
	if set, _ := e.get(ctx); set.Status.CurrentRevision != rev1 || set.Status.UpdatedReplicas != 3 {
		t.Errorf("status current %s updated %d, want %s and 3", set.Status.CurrentRevision, set.Status.UpdatedReplicas, rev1)
	}
	e.assertIPsKept("partition 3", pods)
	done()

	// Partition 0 finishes the rest.
	done = phase("partition 0")
	e.kubectl("patch", "ests", e.name, "--type", "merge", "-p", `{"spec":{"updateStrategy":{"rollingUpdate":{"partition":0}}}}`)
	pods = e.waitSettled(ctx, "all ordinals at v2", allAt(rev2))
	if err := framework.WaitFor(ctx, time.Minute, "status.currentRevision = v2", func(ctx context.Context) (bool, error) {
		set, err := e.get(ctx)
		return err == nil && set.Status.CurrentRevision == rev2 && set.Status.UpdatedReplicas == estsReplicas, err
	}); err != nil {
		t.Fatal(err)
	}
	e.assertIPsKept("partition 0", pods)
	e.assertStaticIPs(ctx, "v2", pods)
	done()
	v2Pods := pods

	// A broken image: two pods go down to it, and there it stops.
	done = phase("broken image")
	e.patchTemplateImage(ctx, brokenImage)
	rev3 := e.observed(ctx).Status.UpdateRevision
	var broken map[string]*corev1.Pod
	if err := framework.WaitFor(ctx, rolloutTimeout, "two pods stuck on the broken image", func(ctx context.Context) (bool, error) {
		ps, err := e.pods(ctx)
		if err != nil {
			return false, err
		}
		broken = ps
		stuck := 0
		for i, name := range e.podNames() {
			p := ps[name]
			if p == nil {
				return false, nil
			}
			if i >= estsReplicas-estsMaxUnavailable {
				if revisionOf(p) != rev3 || !waitingOn(p, "ErrImageNeverPull") {
					return false, nil
				}
				stuck++
			} else if p.UID != v2Pods[name].UID || !framework.PodReady(p) {
				return false, fmt.Errorf("pod %s (not among the budget's two) was touched or is not ready", name)
			}
		}
		return stuck == estsMaxUnavailable, nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, e.describe(ctx))
	}
	e.holdStill(ctx, "broken rollout at the budget", broken, 4*time.Second)
	e.mon.Check(t, "broken image")
	e.assertIPsKept("broken image", broken)
	done()

	// Stop the bad rollout, roll back while paused: nothing moves.
	done = phase("paused + rollback")
	e.kubectl("patch", "ests", e.name, "--type", "merge", "-p", `{"spec":{"updateStrategy":{"rollingUpdate":{"paused":true}}}}`)
	if got := e.rollbackWithKubectl(ctx, rev1); got != rev1 {
		t.Fatalf("after the rollback, updateRevision %s, want the v1 revision %s again", got, rev1)
	}
	e.holdStill(ctx, "paused", broken, 4*time.Second)
	// Scaling still works while paused (the new ordinal runs the update revision).
	e.kubectl("scale", "ests", e.name, "--replicas=7")
	extra := fmt.Sprintf("%s-%d", e.name, estsReplicas)
	p, err := f.WaitForPodRunning(ctx, e.ns, extra, 2*time.Minute)
	if err != nil {
		t.Fatalf("scale up while paused: %v", err)
	}
	if revisionOf(p) != rev1 {
		t.Errorf("pod %s created while paused at revision %s, want the update revision %s", extra, revisionOf(p), rev1)
	}
	e.kubectl("scale", "ests", e.name, "--replicas=6")
	if err := framework.WaitFor(ctx, 2*time.Minute, extra+" and its StaticIP gone", func(ctx context.Context) (bool, error) {
		_, perr := f.Client.CoreV1().Pods(e.ns).Get(ctx, extra, metav1.GetOptions{})
		_, serr := e.cs.JkeV1().StaticIPs(e.ns).Get(ctx, extra, metav1.GetOptions{})
		return apierrors.IsNotFound(perr) && apierrors.IsNotFound(serr), nil
	}); err != nil {
		t.Fatal(err)
	}
	e.holdStill(ctx, "paused after scaling", broken, time.Second)
	done()

	// Resume: the rollback runs under the same budget, broken pods first.
	done = phase("rollback")
	e.kubectl("patch", "ests", e.name, "--type", "merge", "-p", `{"spec":{"updateStrategy":{"rollingUpdate":{"paused":false}}}}`)
	pods = e.waitSettled(ctx, "all ordinals back at v1", allAt(rev1))
	if err := framework.WaitFor(ctx, time.Minute, "status.currentRevision = v1", func(ctx context.Context) (bool, error) {
		set, err := e.get(ctx)
		return err == nil && set.Status.CurrentRevision == rev1, err
	}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.Spec.Containers[0].Image != testServerImage {
			t.Errorf("pod %s runs %s after the rollback", p.Name, p.Spec.Containers[0].Image)
		}
	}
	e.assertIPsKept("rollback", pods)
	e.assertStaticIPs(ctx, "rollback", pods)
	done()

	e.mon.Check(t, "whole scenario")
	t.Logf("scenario done in %.1fs; %d pod events watched, never more than %d unavailable",
		time.Since(start).Seconds(), e.mon.Events(), estsMaxUnavailable)
}

// waitingOn reports a container waiting for reason (e.g. ErrImageNeverPull).
func waitingOn(p *corev1.Pod, reason string) bool {
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Waiting != nil && s.State.Waiting.Reason == reason {
			return true
		}
	}
	return false
}

// rollbackWithKubectl runs the steps of "Rollback with kubectl" in controllers/README.md
// (the docs are tested here): list the revisions, take the template stored in the wanted
// one with jq, put it back with a JSON patch, read the update revision.
func (e *estsTest) rollbackWithKubectl(ctx context.Context, revision string) string {
	e.t.Helper()
	out := e.kubectl("get", "controllerrevisions", "-l", "app="+e.name, "-o", "custom-columns=NAME:.metadata.name,REVISION:.revision")
	if !strings.Contains(out, revision) {
		e.t.Fatalf("revision %s not listed:\n%s", revision, out)
	}
	e.t.Logf("kubectl get controllerrevisions:\n%s", out)
	e.t.Logf("current/update revision: %s", e.kubectl("get", "ests", e.name, "-o", `jsonpath={.status.currentRevision} {.status.updateRevision}{"\n"}`))
	stored := e.kubectl("get", "controllerrevision", revision, "-o", "json")
	jq := exec.Command("jq", `.data.spec.template | del(."$patch")`)
	jq.Stdin = strings.NewReader(stored)
	tmpl, err := jq.Output()
	if err != nil {
		e.t.Fatalf("jq (tools/deps/e2e.list): %v", err)
	}
	if !json.Valid(tmpl) {
		e.t.Fatalf("jq gave no JSON: %s", tmpl)
	}
	e.kubectl("patch", "ests", e.name, "--type", "json", "-p",
		fmt.Sprintf(`[{"op":"replace","path":"/spec/template","value":%s}]`, tmpl))
	set := e.observed(ctx)
	return strings.TrimSpace(e.kubectl("get", "ests", set.Name, "-o", `jsonpath={.status.updateRevision}{"\n"}`))
}

// TestEnhancedStatefulSetLeaderFailover crashes the leading manager replica in the middle of
// a rollout (SIGKILL of its process: the lease is not released). The other replica must hold
// the Lease within the lease duration (plus the retry period and a little slack), and the
// rollout must finish without ever exceeding maxUnavailable, pods keeping their IPs.
func TestEnhancedStatefulSetLeaderFailover(t *testing.T) {
	ctx := context.Background()
	e := newESTSTest(t, "e2e-ests-failover", "fo")
	waitManagersReady(t, ctx)

	e.create(ctx, testServerImage, 0)
	rev1 := e.observed(ctx).Status.UpdateRevision
	pods := e.waitSettled(ctx, "6 pods Ready at v1", allAt(rev1))
	e.rememberIPs(pods)
	e.assertStaticIPs(ctx, "v1", pods)
	e.mon.Arm(t)

	lease, err := f.Client.CoordinationV1().Leases(managerNamespace).Get(ctx, managerLease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldHolder := *lease.Spec.HolderIdentity
	leaseDuration := time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	leaderPod, _, _ := strings.Cut(oldHolder, "_") // identity = hostname (the pod name) + "_" + uuid
	leader, err := f.Client.CoreV1().Pods(managerNamespace).Get(ctx, leaderPod, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("leader %s: %v", oldHolder, err)
	}

	e.patchTemplateImage(ctx, testServerV2Image)
	rev2 := e.observed(ctx).Status.UpdateRevision
	// Crash the leader once its first batch is under way.
	if err := framework.WaitFor(ctx, time.Minute, "the rollout to start", func(ctx context.Context) (bool, error) {
		ps, err := e.pods(ctx)
		if err != nil {
			return false, err
		}
		for _, name := range e.podNames() {
			if p := ps[name]; p == nil || p.DeletionTimestamp != nil || revisionOf(p) == rev2 {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	killed, ok, err := f.CrashContainer(ctx, leader, "manager")
	if !ok {
		t.Skip("the manager's processes are not on this machine (neither a local cluster nor kind nodes of this machine's docker)")
	}
	if err != nil {
		t.Fatal(err)
	}
	crashed := time.Now()
	t.Logf("killed leader %s (pids %v) with SIGKILL, lease duration %v", leaderPod, killed, leaseDuration)

	var newHolder string
	if err := framework.WaitFor(ctx, leaseDuration+time.Minute, "a new lease holder", func(ctx context.Context) (bool, error) {
		l, err := f.Client.CoordinationV1().Leases(managerNamespace).Get(ctx, managerLease, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if h := l.Spec.HolderIdentity; h != nil && *h != "" && *h != oldHolder {
			newHolder = *h
			return true, nil
		}
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	takeover := time.Since(crashed)
	newPod, _, _ := strings.Cut(newHolder, "_")
	t.Logf("lease taken over by %s after %.1fs (lease duration %v)", newHolder, takeover.Seconds(), leaseDuration)
	// The standby may take the lease once it expires (lease duration after the last renewal
	// it saw, found at its next retry). How long that takes on a loaded machine is logged,
	// not asserted: a kind run under load 53 saw 20.3 s for a 15 s lease, and a timed
	// assertion there tests the machine. The outcome asserted is that a new holder finishes
	// the rollout within the budget with every IP kept.
	if newPod == leaderPod {
		t.Logf("note: the crashed pod's restarted container won the lease, not the standby")
	}

	pods = e.waitSettled(ctx, "rollout finished by the new leader", allAt(rev2))
	e.assertIPsKept("after failover", pods)
	e.assertStaticIPs(ctx, "after failover", pods)
	e.mon.Check(t, "failover")
	t.Logf("rollout finished; %d pod events watched, peak unavailable %d", e.mon.Events(), e.mon.Peak())
	// Leave two ready replicas for whatever runs next (the crashed container restarts).
	waitManagersReady(t, ctx)
}

// waitManagersReady waits until both manager replicas are ready.
func waitManagersReady(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := framework.WaitFor(ctx, 2*time.Minute, "two ready manager replicas", func(ctx context.Context) (bool, error) {
		d, err := f.Client.AppsV1().Deployments(managerNamespace).Get(ctx, managerDeployment, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return d.Status.ReadyReplicas >= 2 && d.Status.UpdatedReplicas == d.Status.Replicas, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestEnhancedStatefulSetRollbackWithoutManualDeletion: the published example
// (manifests/examples/enhancedstatefulset.yaml exactly as written — no podManagementPolicy,
// so OrderedReady — with only the image made local) and the same set with Parallel: a
// rollout to an image that never starts, paused, the template reverted, resumed: the
// rollback completes with no pod deleted by hand, never more than maxUnavailable down, and
// every pod keeps its IP throughout.
func TestEnhancedStatefulSetRollbackWithoutManualDeletion(t *testing.T) {
	for _, policy := range []appsv1.PodManagementPolicyType{appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement} {
		t.Run(string(policy), func(t *testing.T) { rollbackWithoutManualDeletion(t, policy) })
	}
}

func rollbackWithoutManualDeletion(t *testing.T, policy appsv1.PodManagementPolicyType) {
	ctx := context.Background()
	start := time.Now()
	set := &jkev1alpha1.EnhancedStatefulSet{}
	readExample(t, "enhancedstatefulset.yaml", set)
	if set.Spec.PodManagementPolicy != "" {
		t.Fatalf("the example now sets podManagementPolicy %q; this test runs it as written (OrderedReady)", set.Spec.PodManagementPolicy)
	}
	if policy == appsv1.ParallelPodManagement {
		set.Spec.PodManagementPolicy = policy
	}
	localImage(&set.Spec.Template.Spec, testServerImage)
	e := newESTSTest(t, "e2e-rollback", set.Name)
	e.selector = metav1.FormatLabelSelector(set.Spec.Selector)
	if _, err := e.cs.JkeV1alpha1().EnhancedStatefulSets(e.ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rev1 := e.observed(ctx).Status.UpdateRevision
	pods := e.waitSettled(ctx, "6 pods Ready", allAt(rev1))
	e.rememberIPs(pods)
	e.mon.Arm(t)
	t.Logf("%s: up in %.1fs", policy, time.Since(start).Seconds())

	e.patchTemplateImage(ctx, brokenImage)
	rev2 := e.observed(ctx).Status.UpdateRevision
	if err := framework.WaitFor(ctx, rolloutTimeout, "a pod stuck on the broken image", func(ctx context.Context) (bool, error) {
		ps, err := e.pods(ctx)
		for _, p := range ps {
			if revisionOf(p) == rev2 && waitingOn(p, "ErrImageNeverPull") {
				return true, nil
			}
		}
		return false, err
	}); err != nil {
		t.Fatalf("%v\n%s", err, e.describe(ctx))
	}
	e.kubectl("patch", "ests", e.name, "--type", "merge", "-p", `{"spec":{"updateStrategy":{"rollingUpdate":{"paused":true}}}}`)
	e.patchTemplateImage(ctx, testServerImage)
	if got := e.observed(ctx).Status.UpdateRevision; got != rev1 {
		t.Fatalf("reverted template: update revision %s, want %s again", got, rev1)
	}
	e.kubectl("patch", "ests", e.name, "--type", "merge", "-p", `{"spec":{"updateStrategy":{"rollingUpdate":{"paused":false}}}}`)
	pods = e.waitSettled(ctx, "rolled back to the first revision, no pod deleted by hand", allAt(rev1))
	e.assertIPsKept("rollback", pods)
	e.mon.Check(t, "rollback")
	t.Logf("%s: scenario done in %.1fs, peak unavailable %d", policy, time.Since(start).Seconds(), e.mon.Peak())
}
