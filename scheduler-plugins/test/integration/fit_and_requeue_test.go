package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/component-base/metrics/legacyregistry"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/utils/ptr"

	"github.com/staticip/staticip/apis/podip"
)

// podRequesting creates a pod with the given requests (limits equal for extended
// resources, as the API requires).
func (f *fixture) podRequesting(name string, req v1.ResourceList, annotations map[string]string) {
	f.t.Helper()
	limits := v1.ResourceList{}
	for n, q := range req {
		if n != v1.ResourceCPU && n != v1.ResourceMemory {
			limits[n] = q
		}
	}
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, Annotations: annotations},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
			Resources: v1.ResourceRequirements{Requests: req, Limits: limits}}}}}
	if _, err := f.kube.CoreV1().Pods(f.ns).Create(f.ctx, p, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// withFitArgs returns profiles whose NodeResourcesFit ignores the given resources.
func withFitArgs(t *testing.T, profiles []schedconfig.KubeSchedulerProfile, ignored, groups []string) []schedconfig.KubeSchedulerProfile {
	t.Helper()
	found := false
	for i := range profiles {
		for j := range profiles[i].PluginConfig {
			if args, ok := profiles[i].PluginConfig[j].Args.(*schedconfig.NodeResourcesFitArgs); ok {
				args.IgnoredResources, args.IgnoredResourceGroups = ignored, groups
				found = true
			}
		}
	}
	if !found {
		t.Fatal("the profile has no NodeResourcesFit args to set")
	}
	return profiles
}

// TestIgnoredResourcesAsKubeScheduler: in replace-default mode a pod requesting resources
// NodeResourcesFit is told to ignore (ignoredResources, ignoredResourceGroups) is placed
// exactly as kube-scheduler would place it, also on a node holding a reservation.
func TestIgnoredResourcesAsKubeScheduler(t *testing.T) {
	f := newFixture(t)
	f.node("sched-ign-n1", "4", 110)
	f.ipRange("sched-ign-r1", "10.64.1.0/24", "sched-ign-n1")
	f.staticIP("held", "sched-ign-n1", "10.64.1.9", "1")
	sched := StartScheduler(t, f.cfg, withFitArgs(t, LoadProfiles(t, replaceDefault),
		[]string{"example.com/ignored"}, []string{"ignored.example.org"}))
	defer sched.Stop()
	sched.WaitForStaticIP(t, f.ns, "held")

	f.podRequesting("ignored", v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"),
		"example.com/ignored": resource.MustParse("1"), "ignored.example.org/widget": resource.MustParse("2")}, nil)
	if got := f.waitScheduled("ignored"); got != "sched-ign-n1" {
		t.Fatalf("ignored on %s", got)
	}
}

// TestDRAExtendedResourceAsKubeScheduler: an extended resource served by DRA (a DeviceClass
// with extendedResourceName, devices in a ResourceSlice; no node advertises it) is placed
// by DynamicResources as kube-scheduler would place it.
func TestDRAExtendedResourceAsKubeScheduler(t *testing.T) {
	f := newFixture(t)
	f.node("sched-dra-n1", "4", 110)
	f.ipRange("sched-dra-r1", "10.65.1.0/24", "sched-dra-n1")
	dc := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "sched-dra-gpu-" + rand.String(4)},
		Spec: resourcev1.DeviceClassSpec{
			Selectors:            []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "dra.example.com"`}}},
			ExtendedResourceName: ptr.To("example.com/dra-gpu"),
		}}
	if _, err := f.kube.ResourceV1().DeviceClasses().Create(f.ctx, dc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.kube.ResourceV1().DeviceClasses().Delete(f.ctx, dc.Name, metav1.DeleteOptions{}) })
	if got, err := f.kube.ResourceV1().DeviceClasses().Get(f.ctx, dc.Name, metav1.GetOptions{}); err != nil || got.Spec.ExtendedResourceName == nil {
		t.Skipf("this kube-apiserver drops DeviceClass.spec.extendedResourceName (DRAExtendedResource off): %v", err)
	}
	slice := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "sched-dra-n1-" + rand.String(4)},
		Spec: resourcev1.ResourceSliceSpec{Driver: "dra.example.com", NodeName: ptr.To("sched-dra-n1"),
			Pool:    resourcev1.ResourcePool{Name: "sched-dra-n1", ResourceSliceCount: 1},
			Devices: []resourcev1.Device{{Name: "gpu-0"}, {Name: "gpu-1"}}}}
	if _, err := f.kube.ResourceV1().ResourceSlices().Create(f.ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.kube.ResourceV1().ResourceSlices().Delete(f.ctx, slice.Name, metav1.DeleteOptions{}) })
	sched := StartScheduler(t, f.cfg, LoadProfiles(t, replaceDefault))
	defer sched.Stop()

	f.podRequesting("dra", v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), "example.com/dra-gpu": resource.MustParse("1")}, nil)
	if got := f.waitScheduled("dra"); got != "sched-dra-n1" {
		t.Fatalf("dra on %s", got)
	}
}

// TestRequeueOnIPRangeDeletion: a pod rejected for want of an IP is retried when the node
// loses its last range (nodesWithoutIPRange: Allow), well before the 5-minute flush.
func TestRequeueOnIPRangeDeletion(t *testing.T) {
	f := newFixture(t)
	f.node("sched-rdel-n1", "64", 110)
	f.ipRange("sched-rdel-r1", "10.66.1.0/30", "sched-rdel-n1") // 2 usable addresses
	sched := StartScheduler(t, f.cfg, LoadProfiles(t, replaceDefault))
	defer sched.Stop()
	f.pod("a", "100m", "")
	f.pod("b", "100m", "")
	f.waitScheduled("a")
	f.waitScheduled("b")
	f.pod("c", "100m", "")
	f.waitUnschedulable("c", "no free IP in node's ranges 10.66.1.0/30")
	if err := f.sip.JkeV1().IPRanges().Delete(f.ctx, "sched-rdel-r1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := f.waitScheduled("c"); got != "sched-rdel-n1" {
		t.Fatalf("c on %s", got)
	}
}

// TestRequeueOnAnnotationCorrection: a pending pod whose annotated IP lies in no range is
// retried as soon as its annotation is corrected.
func TestRequeueOnAnnotationCorrection(t *testing.T) {
	f := newFixture(t)
	f.node("sched-ann-n1", "8", 110)
	f.ipRange("sched-ann-r1", "10.67.1.0/24", "sched-ann-n1")
	sched := StartScheduler(t, f.cfg, LoadProfiles(t, replaceDefault))
	defer sched.Stop()
	f.pod("typo", "100m", "10.76.1.5")
	f.waitUnschedulable("typo", "the pod's IP 10.76.1.5 (annotation staticip.jke.jdcloud.com/ip-address) lies in no IPRange")
	p, err := f.kube.CoreV1().Pods(f.ns).Get(f.ctx, "typo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations[podip.AnnotationIPAddress] = "10.67.1.5"
	if _, err := f.kube.CoreV1().Pods(f.ns).Update(f.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := f.waitScheduled("typo"); got != "sched-ann-n1" {
		t.Fatalf("typo on %s", got)
	}
}

// TestRequeueOnPodScaleDown: a pod rejected because a reservation takes the room it would
// have is retried when a bound pod on that node is resized down.
func TestRequeueOnPodScaleDown(t *testing.T) {
	f := newFixture(t)
	f.node("sched-down-n1", "4", 110)
	f.ipRange("sched-down-r1", "10.68.1.0/24", "sched-down-n1")
	sched := StartScheduler(t, f.cfg, LoadProfiles(t, replaceDefault))
	defer sched.Stop()
	f.pod("big", "2", "")
	f.waitScheduled("big")
	f.staticIP("held", "sched-down-n1", "10.68.1.9", "1")
	sched.WaitForStaticIP(t, f.ns, "held")
	f.pod("waiting", "2", "")
	f.waitUnschedulable("waiting", "reserved for absent static-IP pods")
	p, err := f.kube.CoreV1().Pods(f.ns).Get(f.ctx, "big", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse("1")
	if _, err := f.kube.CoreV1().Pods(f.ns).UpdateResize(f.ctx, "big", p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := f.waitScheduled("waiting"); got != "sched-down-n1" {
		t.Fatalf("waiting on %s", got)
	}
}

// TestRequeueOnNominatedPodDeletion: a pod rejected because a higher-priority pod is
// nominated to the node (it preempted a victim that is still terminating) and the
// reservations take the rest is retried as soon as the nominated pod is deleted, as
// kube-scheduler's NodeResourcesFit requeues on such a delete.
//
// Node 10 CPU, 3 reserved for the absent static-IP pod "held". The victim (4 CPU, priority 0)
// is bound; "preemptor" (4 CPU, high priority) does not fit net of the reservation, so the
// scheduler preempts the victim and nominates the node — the victim never finishes
// terminating (no kubelet), so the nomination stays. "waiting" (2 CPU) fits by
// NodeResourcesFit (4 + 4 + 2 = 10) but not net of the reservation (13 > 10): only
// PodFitsResourcesWithStaticIP rejects it, so only its queueing hints can bring it back.
func TestRequeueOnNominatedPodDeletion(t *testing.T) {
	f := newFixture(t)
	f.node("sched-nom-n1", "10", 110)
	f.ipRange("sched-nom-r1", "10.69.1.0/24", "sched-nom-n1")
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "sched-nom-high-" + rand.String(4)}, Value: 1000}
	if _, err := f.kube.SchedulingV1().PriorityClasses().Create(f.ctx, pc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.kube.SchedulingV1().PriorityClasses().Delete(f.ctx, pc.Name, metav1.DeleteOptions{}) })
	sched := StartScheduler(t, f.cfg, LoadProfiles(t, replaceDefault))
	defer sched.Stop()
	f.staticIP("held", "sched-nom-n1", "10.69.1.9", "3")
	sched.WaitForStaticIP(t, f.ns, "held")
	f.pod("victim", "4", "")
	f.waitScheduled("victim")

	preemptor := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "preemptor"},
		Spec: v1.PodSpec{PriorityClassName: pc.Name, Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("4")}}}}}}
	if _, err := f.kube.CoreV1().Pods(f.ns).Create(f.ctx, preemptor, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(f.ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := f.kube.CoreV1().Pods(f.ns).Get(ctx, "preemptor", metav1.GetOptions{})
		return err == nil && p.Status.NominatedNodeName == "sched-nom-n1" && p.Spec.NodeName == "", nil
	}); err != nil {
		t.Fatalf("preemptor not nominated to sched-nom-n1: %v", err)
	}

	f.pod("waiting", "2", "")
	f.waitUnschedulable("waiting", "reserved for absent static-IP pods")
	if err := f.kube.CoreV1().Pods(f.ns).Delete(f.ctx, "preemptor", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	// Retried by the delete's hint, not by the unschedulable pods' 5-minute flush:
	// waitScheduled gives up after 60 s.
	if got := f.waitScheduled("waiting"); got != "sched-nom-n1" {
		t.Fatalf("waiting on %s", got)
	}
}

// setNetwork sets the node's NetworkUnavailable condition as the staticip agent does
// (cni/agent, network.go).
func (f *fixture) setNetwork(node string, status v1.ConditionStatus, reason string) {
	f.t.Helper()
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"NetworkUnavailable","status":%q,"reason":%q,"message":"set by the test as staticip-agent does"}]}}`, status, reason)
	if _, err := f.kube.CoreV1().Nodes().Patch(f.ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		f.t.Fatal(err)
	}
}

// podOn creates a pod that may run only on node (a nodeSelector, as a DaemonSet pod's
// affinity pins it), tolerating every taint.
func (f *fixture) podOn(name, node string) {
	f.t.Helper()
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec: v1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": node},
			Tolerations: []v1.Toleration{{Operator: v1.TolerationOpExists}},
			Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
				Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}}}}}}
	if _, err := f.kube.CoreV1().Pods(f.ns).Create(f.ctx, p, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// TestStaticIPNodeWithoutRangeTakesNoPods (issue 24, item 4): a node whose staticip agent
// reports no usable range (NetworkUnavailable=True, StaticIPNoRange) takes no pod that needs an
// IP, even one that tolerates every taint (there is no node lifecycle controller here to taint
// it: the plugin alone refuses), with a reason FailedScheduling shows; an ordinary node without
// any range or agent still takes pods (nodesWithoutIPRange: Allow). Once the node has a range
// and its agent reports it, the pod is retried and placed there.
func TestStaticIPNodeWithoutRangeTakesNoPods(t *testing.T) {
	f := newFixture(t)
	f.node("sched-norange-sip", "8", 110)
	f.node("sched-norange-plain", "8", 110)
	f.setNetwork("sched-norange-sip", v1.ConditionTrue, "StaticIPNoRange")
	sched := StartScheduler(t, f.cfg, LoadProfiles(t, replaceDefault))
	defer sched.Stop()

	f.podOn("ordinary", "sched-norange-plain")
	if got := f.waitScheduled("ordinary"); got != "sched-norange-plain" {
		t.Fatalf("ordinary on %s", got)
	}
	hostNet := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "hostnet"},
		Spec: v1.PodSpec{HostNetwork: true, NodeSelector: map[string]string{"kubernetes.io/hostname": "sched-norange-sip"},
			Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	if _, err := f.kube.CoreV1().Pods(f.ns).Create(f.ctx, hostNet, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := f.waitScheduled("hostnet"); got != "sched-norange-sip" {
		t.Fatalf("hostnet on %s", got)
	}

	f.podOn("daemon", "sched-norange-sip")
	f.waitUnschedulable("daemon", "staticip node has no usable IP range for pod IPs")
	// A range names the node, but its agent has not served it yet (it waits, say): still not.
	f.ipRange("sched-norange-r1", "10.71.1.0/24", "sched-norange-sip")
	f.waitUnschedulable("daemon", "staticip node has no usable IP range for pod IPs")
	f.setNetwork("sched-norange-sip", v1.ConditionFalse, "StaticIPRangeReady")
	if got := f.waitScheduled("daemon"); got != "sched-norange-sip" {
		t.Fatalf("daemon on %s", got)
	}
}

// filterEvaluations is how many times the scheduler's framework called plugin's Filter
// (scheduler_plugin_evaluation_total, every profile): a Filter that PreFilter skipped is not
// called, and not counted.
func filterEvaluations(t *testing.T, plugin string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != "scheduler_plugin_evaluation_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabel(m, "plugin", plugin) && hasLabel(m, "extension_point", "Filter") {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// TestFilterSkippedWithoutActiveStaticIPs: with no active StaticIP anywhere and nodes whose
// ranges give more IPs than they have pod slots, PodFitsResourcesWithStaticIP's PreFilter
// skips its Filter (the framework never calls it: the shipped profile runs NodeResourcesFit
// first, whose answer is then the same); once a StaticIP holds a reservation, Filter runs
// again and the reservation keeps a pod off its node.
func TestFilterSkippedWithoutActiveStaticIPs(t *testing.T) {
	f := newFixture(t)
	f.node("sched-skip-a", "8", 110)
	f.node("sched-skip-b", "8", 110)
	f.ipRange("sched-skip-ra", "10.72.1.0/24", "sched-skip-a")
	f.ipRange("sched-skip-rb", "10.72.2.0/24", "sched-skip-b")
	sched := StartScheduler(t, f.cfg, LoadProfiles(t, replaceDefault))
	defer sched.Stop()

	ours, fit := filterEvaluations(t, "PodFitsResourcesWithStaticIP"), filterEvaluations(t, "NodeResourcesFit")
	f.pod("plain", "100m", "")
	f.waitScheduled("plain")
	if got := filterEvaluations(t, "NodeResourcesFit"); got <= fit {
		t.Fatalf("NodeResourcesFit's Filter evaluations %v -> %v: the metric does not count this scheduler's Filters", fit, got)
	}
	if got := filterEvaluations(t, "PodFitsResourcesWithStaticIP"); got != ours {
		t.Fatalf("PodFitsResourcesWithStaticIP's Filter ran %v times without any StaticIP, want it skipped", got-ours)
	}

	// web-0 is absent and its StaticIP holds 7 of node a's 8 cores.
	f.staticIP("web-0", "sched-skip-a", "10.72.1.10", "7")
	sched.WaitForStaticIP(t, f.ns, "web-0")
	ours = filterEvaluations(t, "PodFitsResourcesWithStaticIP")
	f.pod("big", "2", "")
	if got := f.waitScheduled("big"); got != "sched-skip-b" {
		t.Fatalf("big on %s, want sched-skip-b (node a's cores are reserved for web-0)", got)
	}
	if got := filterEvaluations(t, "PodFitsResourcesWithStaticIP"); got <= ours {
		t.Fatalf("PodFitsResourcesWithStaticIP's Filter did not run with a StaticIP active")
	}
}
