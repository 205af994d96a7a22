package kubetest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/kubectl-staticip/pkg/kubectlplugin"
)

// pluginIn runs `kubectl staticip args...` in-process with stdin.
func (f *fixture) pluginIn(stdin string, args ...string) (string, int) {
	f.t.Helper()
	var out bytes.Buffer
	cmd := kubectlplugin.NewCommand(genericiooptions.IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &out})
	cmd.SetArgs(append([]string{"--kubeconfig", f.kubeconfig}, args...))
	code := kubectlplugin.HandleError(&out, cmd.ExecuteContext(f.ctx))
	return out.String(), code
}

// runningPod creates a pod on node with ip as its status (no kubelet runs here).
func (f *fixture) runningPod(ns, name, node, ip string) *corev1.Pod {
	f.t.Helper()
	p, err := f.kube.CoreV1().Pods(ns).Create(f.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	now := metav1.Now()
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &now, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	if p, err = f.kube.CoreV1().Pods(ns).UpdateStatus(f.ctx, p, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fixture) staticIPOf(ns, name, set, ip string) *jkev1.StaticIP {
	f.t.Helper()
	s, err := f.sip.JkeV1().StaticIPs(ns).Create(f.ctx, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: jkev1.StaticIPSpec{Ref: set, Kind: "EnhancedStatefulSet", APIGroup: "jke.jdcloud.com", Node: "node-1", IP: ip, Pod: name}}, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

// TestIPAndLeakRelease, on a real API server: ips --ip names the pod, its StaticIP, range and
// node of an address; check -o json reports the StaticIP kept for a pod and an
// EnhancedStatefulSet that are both gone, and nothing for one whose set exists;
// release --from-report refuses while a live pod holds that address, and once it is gone
// deletes the orphaned StaticIP (after "y") and nothing else.
func TestIPAndLeakRelease(t *testing.T) {
	f := newFixture(t)
	f.namespace("leak")
	f.namespace("elsewhere")
	if _, err := f.sip.JkeV1().IPRanges().Create(f.ctx, &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "node-1-b"},
		Spec: jkev1.IPRangeSpec{CIDR: "10.60.0.0/24", Node: "node-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.runningPod("leak", "app-0", "node-1", "10.60.0.5")
	f.staticIPOf("leak", "app-0", "app", "10.60.0.5")
	orphan := f.staticIPOf("leak", "cache-0", "cache", "10.60.0.6")
	f.staticIPOf("leak", "kept-0", "kept", "10.60.0.7")
	labels := map[string]string{"app": "kept"}
	if _, err := f.sip.JkeV1alpha1().EnhancedStatefulSets("leak").Create(f.ctx, &jkev1alpha1.EnhancedStatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "kept"},
		Spec: jkev1alpha1.EnhancedStatefulSetSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	out, code := f.plugin("ips", "--ip", "10.60.0.5")
	t.Logf("$ kubectl staticip ips --ip 10.60.0.5  (exit %d)\n%s", code, out)
	flat := regexp.MustCompile(`[ \t]+`).ReplaceAllString(out, " ")
	for _, want := range []string{"State: Allocated", "Range: node-1-b (10.60.0.0/24, pool <none>, owned by node node-1)", "Node: node-1",
		"Pod: leak/app-0, Running since ", "StaticIP: leak/app-0, <none>, created "} {
		if code != 0 || !strings.Contains(flat, want) {
			t.Errorf("ips --ip 10.60.0.5: exit %d, no %q", code, want)
		}
	}
	out, code = f.plugin("ips", "--ip", "10.60.0.6")
	t.Logf("$ kubectl staticip ips --ip 10.60.0.6  (exit %d)\n%s", code, out)
	if code != 0 || !strings.Contains(out, "Reserved") || !strings.Contains(out, "leak/cache-0") {
		t.Errorf("ips --ip 10.60.0.6: exit %d", code)
	}

	// Completion from the cluster (what kubectl_complete-staticip runs on TAB).
	out, code = f.plugin("__complete", "ips", "--ip", "10.60.")
	t.Logf("$ kubectl-staticip __complete ips --ip 10.60.  (exit %d)\n%s", code, out)
	if code != 0 || !strings.Contains(out, "10.60.0.5\tStaticIP leak/app-0") || !strings.Contains(out, "10.60.0.7\tStaticIP leak/kept-0") {
		t.Errorf("completion of --ip: exit %d", code)
	}
	out, code = f.plugin("__complete", "rollout", "status", "-n", "leak", "ests/")
	t.Logf("$ kubectl-staticip __complete rollout status -n leak ests/  (exit %d)\n%s", code, out)
	if code != 0 || !strings.Contains(out, "ests/kept\n") {
		t.Errorf("completion of a rollout target: exit %d", code)
	}

	out, code = f.plugin("check")
	t.Logf("$ kubectl staticip check  (exit %d)\n%s", code, out)
	report, code := f.plugin("check", "-o", "json")
	t.Logf("$ kubectl staticip check -o json  (exit %d)\n%s", code, report)
	var rep kubectlplugin.AuditResult
	if err := json.Unmarshal([]byte(report), &rep); err != nil {
		t.Fatalf("check -o json: exit %d, %v", code, err)
	}
	// The package's tests share one API server (check is cluster-wide): keep this test's
	// problems, those of its range, as a user trims a report to what they mean to release.
	var mine []kubectlplugin.Problem
	for _, p := range rep.Problems {
		if strings.HasPrefix(p.IP, "10.60.") {
			mine = append(mine, p)
		}
	}
	rep.Problems = mine
	if len(rep.Problems) != 1 || rep.Problems[0].Kind != kubectlplugin.ProblemOrphanedStaticIP || rep.Problems[0].StaticIP != "leak/cache-0" ||
		rep.Problems[0].StaticIPUID != string(orphan.UID) || rep.Problems[0].IP != "10.60.0.6" || !rep.Problems[0].Releasable {
		t.Fatalf("check -o json: want one releasable OrphanedStaticIP leak/cache-0 (uid %s, 10.60.0.6), got %+v", orphan.UID, rep.Problems)
	}
	trimmed, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "report.json")
	if err := os.WriteFile(file, trimmed, 0o644); err != nil {
		t.Fatal(err)
	}
	exists := func(name string) bool {
		_, err := f.sip.JkeV1().StaticIPs("leak").Get(f.ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}

	// Since the report, a pod took the address: refused, nothing deleted.
	f.runningPod("elsewhere", "squatter", "node-1", "10.60.0.6")
	out, code = f.pluginIn("", "release", "--from-report", file, "--yes")
	t.Logf("$ kubectl staticip release --from-report report.json --yes  (exit %d)\n%s", code, out)
	if code != 1 || !strings.Contains(out, "refused 10.60.0.6: pod elsewhere/squatter holds 10.60.0.6") || !exists("cache-0") {
		t.Fatalf("release while a live pod holds the address: exit %d, cache-0 exists %v", code, exists("cache-0"))
	}
	if err := f.kube.CoreV1().Pods("elsewhere").Delete(f.ctx, "squatter", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	f.eventually("squatter gone", func() (bool, error) {
		_, err := f.kube.CoreV1().Pods("elsewhere").Get(f.ctx, "squatter", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})

	out, code = f.pluginIn("n\n", "release", "--from-report", file)
	t.Logf("$ kubectl staticip release --from-report report.json  (answered n; exit %d)\n%s", code, out)
	if code != 1 || !exists("cache-0") {
		t.Fatalf("release answered n: exit %d, cache-0 exists %v", code, exists("cache-0"))
	}
	out, code = f.pluginIn("y\n", "release", "--from-report", file)
	t.Logf("$ kubectl staticip release --from-report report.json  (answered y; exit %d)\n%s", code, out)
	if code != 0 || exists("cache-0") || !exists("kept-0") || !exists("app-0") {
		t.Fatalf("release answered y: exit %d; cache-0 %v (want deleted), kept-0 %v, app-0 %v (want kept)", code, exists("cache-0"), exists("kept-0"), exists("app-0"))
	}
	out, code = f.plugin("check")
	t.Logf("$ kubectl staticip check  (exit %d)\n%s", code, out)
	if strings.Contains(out, "10.60.") {
		t.Errorf("check after the release still reports 10.60.0.0/24: exit %d", code)
	}
	out, code = f.plugin("ips", "--ip", "10.60.0.6")
	t.Logf("$ kubectl staticip ips --ip 10.60.0.6  (exit %d)\n%s", code, out)
	if code != 0 || !strings.Contains(out, "Free") {
		t.Errorf("ips --ip 10.60.0.6 after the release: exit %d, not Free", code)
	}
}
